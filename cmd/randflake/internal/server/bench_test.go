package server

import (
	"encoding/binary"
	"io"
	"math/bits"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/randflake/randflake"
)

// nullWriter is the cheapest http.ResponseWriter: it keeps the header and
// discards the body; it flushes, as net/http's writers do.
type nullWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *nullWriter) Header() http.Header         { return w.h }
func (w *nullWriter) WriteHeader(status int)      { w.status = status }
func (w *nullWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }
func (w *nullWriter) Flush()                      {}

func benchServer(b *testing.B, g Generator) *Server {
	b.Helper()
	now := time.Now().Unix()
	if g == nil {
		var err error
		g, err = randflake.NewSharded(randflake.ShardedConfig{Secret: secret, LastNode: 1023, LeaseStart: now - 1, LeaseEnd: now + 3600})
		if err != nil {
			b.Fatal(err)
		}
	}
	s, err := New(Config{Generator: g, LeaseEnd: func() int64 { return now + 3600 }})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkHandler is the ids handler alone, without net/http: its own
// time and allocations per request.
func BenchmarkHandler(b *testing.B) {
	real, fake := benchServer(b, nil), benchServer(b, &fixed{ids: []int64{1, -2, 3}})
	for _, c := range []struct {
		name, url, accept string
		s                 *Server
	}{
		{"single-JSON", "/v1/ids", "", real},
		{"single-text", "/v1/ids?count=1", "text/plain", real},
		{"single-binary", "/v1/ids?count=1", MediaTypeBinary, real},
		// The handler's own work per ID, without the generator's.
		{"fixed-10000-JSON", "/v1/ids?count=10000", "", fake},
		{"fixed-1048576-binary", "/v1/ids?count=1048576", MediaTypeBinary, fake},
	} {
		s := c.s
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest("GET", c.url, nil)
			if c.accept != "" {
				r.Header.Set("Accept", c.accept)
			}
			w := &nullWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				w.n, w.status = 0, 0
				s.ServeHTTP(w, r)
			}
			if w.status != 0 && w.status != 200 {
				b.Fatalf("status %d", w.status)
			}
		})
	}
}

// BenchmarkLoopback is one request at a time over a real loopback
// connection, against the service and against a bare handler writing a
// body of the same size: the service's cost per request beside net/http's
// own. Both ends run in this process.
func BenchmarkLoopback(b *testing.B) {
	s := benchServer(b, nil)
	body := []byte(`{"ids":["0123456789abc"]}` + "\n")
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})
	for _, c := range []struct {
		name string
		h    http.Handler
		wrap bool // served as randflake serve serves it
	}{{"service", s, true}, {"bare", bare, false}} {
		b.Run(c.name, func(b *testing.B) {
			ts := httptest.NewUnstartedServer(c.h)
			if c.wrap {
				s.Configure(ts.Config)
			}
			ts.Start()
			defer ts.Close()
			hc := ts.Client()
			buf := make([]byte, 4096)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := hc.Get(ts.URL + "/v1/ids")
				if err != nil {
					b.Fatal(err)
				}
				io.CopyBuffer(io.Discard, resp.Body, buf)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatal(resp.Status)
				}
			}
		})
	}
}

// BenchmarkSwap is the binary answer's byte swap of one chunk in place
// (bits.ReverseBytes64, as binaryIDs does) beside encoding it into a byte
// buffer with binary.BigEndian.
func BenchmarkSwap(b *testing.B) {
	ids := make([]int64, binaryChunk)
	for i := range ids {
		ids[i] = int64(uint64(i) * 0x9e3779b97f4a7c15)
	}
	b.Run("ReverseBytes64-in-place", func(b *testing.B) {
		b.SetBytes(8 * binaryChunk)
		for b.Loop() {
			for i, id := range ids {
				ids[i] = int64(bits.ReverseBytes64(uint64(id)))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/binaryChunk, "ns/ID")
	})
	b.Run("BigEndian.PutUint64-copy", func(b *testing.B) {
		out := make([]byte, 8*binaryChunk)
		b.SetBytes(8 * binaryChunk)
		for b.Loop() {
			for i, id := range ids {
				binary.BigEndian.PutUint64(out[8*i:], uint64(id))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/binaryChunk, "ns/ID")
	})
}
