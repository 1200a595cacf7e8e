package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/cmd/randflake/internal/server"
)

// loadService is the real service handler on a loopback port, over 64
// node IDs.
func loadService(t *testing.T) string {
	t.Helper()
	now := time.Now().Unix()
	g, err := randflake.NewSharded(randflake.ShardedConfig{Secret: []byte("0123456789abcdef"), LastNode: 63, LeaseStart: now - 1, LeaseEnd: now + 3600})
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Config{Generator: g, LeaseEnd: func() int64 { return now + 3600 }})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(s)
	s.Configure(ts.Config)
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.URL
}

// Every format, verified (decoded, no duplicate) and counted, gets
// exactly the IDs asked for from the real handler.
func TestLoadFormats(t *testing.T) {
	url := loadService(t)
	for _, format := range []string{"json", "text", "binary"} {
		for _, verify := range []bool{true, false} {
			for _, batch := range []int{1, 1000} {
				rep, err := loadTest(context.Background(), loadConfig{URL: url, Format: format, Batch: batch, Concurrency: 2,
					Duration: 10 * time.Second, Requests: 20, Verify: verify})
				if err != nil {
					t.Fatalf("%s, verify %v, batch %d: %v", format, verify, batch, err)
				}
				if rep.Requests != 20 || rep.IDs != 20*batch || rep.Verified != verify || (!verify && rep.Bytes == 0) {
					t.Errorf("%s, verify %v, batch %d: %+v", format, verify, batch, rep)
				}
				if format == "binary" && !verify && rep.Bytes != int64(8*20*batch) {
					t.Errorf("binary: %d bytes for %d IDs", rep.Bytes, rep.IDs)
				}
			}
		}
	}
}

// The bare handler answers with the size and type of the service's
// answer, which the unverified load accepts as the service's.
func TestLoadBare(t *testing.T) {
	for _, c := range []struct {
		format string
		batch  int
		size   int
	}{{"json", 1, 26}, {"json", 3, 8 + 3*15 + 2 + 3}, {"text", 2, 28}, {"binary", 5, 40}} {
		cfg := loadConfig{Format: c.format, Batch: c.batch, Concurrency: 2, Duration: 10 * time.Second, Requests: 10}
		if n := len(bareBody(cfg)); n != c.size {
			t.Errorf("%s batch %d: bare body of %d bytes, want %d", c.format, c.batch, n, c.size)
		}
		rep, err := loadBare(context.Background(), cfg)
		if err != nil || rep.Requests != 10 || rep.IDs != 10*c.batch || rep.Bytes != int64(10*c.size) {
			t.Errorf("%s batch %d: %+v, %v", c.format, c.batch, rep, err)
		}
	}
	// The service's single-ID JSON answer is the bare body's size.
	resp, err := http.Get(loadService(t) + "/v1/ids")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := resp.ContentLength; n != 26 && n != 25 && n != 24 {
		t.Errorf("single-ID answer of %d bytes", n)
	}
}

// An answer that is not what was asked for fails the run with a message
// that says so; a 503 of kind exhausted is counted and waited out.
func TestLoadBadAnswers(t *testing.T) {
	for _, c := range []struct {
		name   string
		format string
		h      http.HandlerFunc
		want   string
	}{
		{"wrong type", "binary", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(make([]byte, 8))
		}, `Content-Type "application/json", want application/octet-stream`},
		{"too few IDs", "binary", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(make([]byte, 16))
		}, "asked for 4 IDs, got 2 (16 bytes)"},
		{"short body", "binary", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", "32")
			w.Write(make([]byte, 20))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}, "reading the answer after 20 bytes: unexpected EOF"},
		{"JSON of 3", "json", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"ids":["a","b","c"]}`))
		}, "asked for 4 IDs, got 3"},
		{"error", "json", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			w.Write([]byte(`{"error":"count must be at most 2","kind":"bad_request"}`))
		}, `400 Bad Request: {"error":"count must be at most 2","kind":"bad_request"}`},
	} {
		ts := httptest.NewServer(c.h)
		_, err := loadTest(context.Background(), loadConfig{URL: ts.URL, Format: c.format, Batch: 4, Concurrency: 1, Duration: 10 * time.Second, Requests: 3})
		ts.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
	var calls atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 2 {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(503)
			w.Write([]byte(`{"error":"unavailable: this second's IDs are used up; retry in a second","kind":"exhausted"}`))
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(make([]byte, 8))
	}))
	defer ts.Close()
	rep, err := loadTest(context.Background(), loadConfig{URL: ts.URL, Format: "binary", Batch: 1, Concurrency: 1, Duration: 10 * time.Second, Requests: 4})
	if err != nil || rep.Requests != 3 || rep.Refused != 1 || !strings.Contains(rep.String(), "1 requests refused: the second's IDs used up") {
		t.Errorf("with one 503 exhausted: %+v, %v", rep, err)
	}
}
