package client

import (
	"context"
	"encoding/binary"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// bigEndian is ids in the binary format.
func bigEndian(ids ...int64) []byte {
	var b []byte
	for _, id := range ids {
		b = binary.BigEndian.AppendUint64(b, uint64(id))
	}
	return b
}

// Each format sends its Accept header and decodes its answer, negative
// IDs and the extremes included.
func TestFormats(t *testing.T) {
	t.Parallel()
	for _, f := range []Format{FormatBinary, FormatJSON, FormatText} {
		svc := &fakeService{}
		svc.next.Store(-3)
		c := newTest(t, svc, Config{BatchSize: 5, Format: f, MaxAge: time.Minute})
		ids, err := c.Fetch(context.Background())
		if want := []int64{-3, -2, -1, 0, 1}; err != nil || !slices.Equal(ids, want) {
			t.Errorf("%v: %d, %v; want %d", f, ids, err, want)
		}
	}
	want := []int64{-1 << 63, -1, 0, 1<<63 - 1, 0x0102030405060708}
	h := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(bigEndian(want...))
	}
	c := newClient(t, Config{URL: serve(t, http.HandlerFunc(h)), BatchSize: len(want)})
	if ids, err := c.Fetch(context.Background()); err != nil || !slices.Equal(ids, want) {
		t.Errorf("extremes: %d, %v; want %d", ids, err, want)
	}
	if _, err := New(Config{URL: "http://h", Format: 3}); err == nil || err.Error() != "randflake/client: unknown Format(3)" {
		t.Errorf("Format 3: %v", err)
	}
	if s := FormatBinary.String() + FormatJSON.String() + FormatText.String(); s != "binaryjsontext" {
		t.Errorf("format names %q", s)
	}
}

// A service that does not know the binary format answers the same request
// in decimal text, which the client takes.
func TestBinaryFallsBackToText(t *testing.T) {
	t.Parallel()
	h := func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept"), "text/plain") || r.URL.Query().Get("format") != "int" {
			http.Error(w, "no", 400)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("5\n-6\n7\n"))
	}
	c := newClient(t, Config{URL: serve(t, http.HandlerFunc(h)), BatchSize: 3})
	if ids, err := c.Fetch(context.Background()); err != nil || !slices.Equal(ids, []int64{5, -6, 7}) {
		t.Errorf("text answer: %d, %v", ids, err)
	}
}

// A deliberately broken service: every malformed binary answer is an
// error with a message that says what was wrong, and no IDs.
func TestBinaryBrokenAnswers(t *testing.T) {
	t.Parallel()
	const n = 10
	full := bigEndian(make([]int64, n)...)
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
		want string
	}{
		{"short body", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", "80")
			w.Write(full[:43])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}, "short response: 43 of 80 bytes for 10 IDs"},
		{"short body, chunked", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.(http.Flusher).Flush() // no Content-Length
			w.Write(full[:72])
		}, "short response: 72 of 80 bytes for 10 IDs"},
		{"empty body", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
		}, "binary answer of 0 bytes (Content-Length) for 10 IDs, want 80"},
		{"long Content-Length", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", "88")
			w.Write(append(full, full[:8]...))
		}, "binary answer of 88 bytes (Content-Length) for 10 IDs, want 80"},
		{"long body, chunked", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(full)
			w.(http.Flusher).Flush()
			w.Write([]byte{1})
		}, "binary answer longer than 80 bytes for 10 IDs"},
		{"wrong type", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Write(full)
		}, `unexpected Content-Type "text/html"`},
		{"text with binary body", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Write(full)
		}, "bad ID in response"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, Config{URL: serve(t, tc.h), BatchSize: n})
			ids, err := c.Fetch(context.Background())
			if err == nil || ids != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%d IDs, error %v; want none and %q", len(ids), err, tc.want)
			}
		})
	}
	// A binary answer to a JSON request is refused too.
	h := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(full)
	}
	c := newClient(t, Config{URL: serve(t, http.HandlerFunc(h)), BatchSize: n, Format: FormatJSON})
	if _, err := c.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), `binary answer (Content-Type "application/octet-stream") to a request for json`) {
		t.Errorf("binary answer to JSON: %v", err)
	}
}

// Next hands out binary batches in order, in batches of the configured
// size.
func TestBinaryNext(t *testing.T) {
	t.Parallel()
	f := &fakeService{}
	c := newTest(t, f, Config{BatchSize: 1000, MaxAge: time.Minute})
	for i := range int64(2500) {
		if id, err := c.Next(context.Background()); err != nil || id != i {
			t.Fatalf("Next %d: %d, %v", i, id, err)
		}
	}
	if got := strconv.FormatInt(f.requests.Load(), 10); got != "3" && got != "4" {
		t.Errorf("%s requests for 2,500 IDs in batches of 1,000", got)
	}
}
