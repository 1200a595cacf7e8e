package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

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
		{"JSON of 3", "json", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"ids":["a","b","c"]}`))
		}, "asked for 4 IDs, got 3"},
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
			w.Write([]byte(`{"error":"unavailable","kind":"exhausted"}`))
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(make([]byte, 8))
	}))
	defer ts.Close()
	rep, err := loadTest(context.Background(), loadConfig{URL: ts.URL, Format: "binary", Batch: 1, Concurrency: 1, Duration: 10 * time.Second, Requests: 4})
	if err != nil || rep.Requests != 3 || rep.Refused != 1 {
		t.Errorf("with one 503 exhausted: %+v, %v", rep, err)
	}
}

// The command line: a bare run prints the benchmark line that benchreport
// reads, and mistakes are usage errors.
func TestRun(t *testing.T) {
	var out, errs strings.Builder
	err := run([]string{"--bare", "--requests", "5", "--duration", "10s", "--benchfmt", "bare-handler"}, &out, &errs)
	if err != nil || !strings.Contains(out.String(), "\nBenchmarkService/bare-handler 5 ") {
		t.Errorf("bare run: %v\n%s%s", err, out.String(), errs.String())
	}
	for _, args := range [][]string{
		{"--url", "http://example.com"},
		{"--concurrency", "1025"},
		{"--suite", "--bare"},
		{"--benchfmt", "single-8"},
		{"extra"},
	} {
		var ue usageError
		if err := run(args, &out, &errs); err == nil || !asUsage(err, &ue) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

func asUsage(err error, ue *usageError) bool {
	u, ok := err.(usageError)
	*ue = u
	return ok
}
