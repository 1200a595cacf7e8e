package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeService hands out consecutive integers, count per request, and can
// be told to fail or to stall.
type fakeService struct {
	next     atomic.Int64
	requests atomic.Int64
	fail     atomic.Bool
	stall    chan struct{} // if non-nil, requests wait for it to close
}

func (f *fakeService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	if f.stall != nil {
		<-f.stall
	}
	if f.fail.Load() {
		http.Error(w, `{"error":"boom"}`, http.StatusServiceUnavailable)
		return
	}
	accept := r.Header.Get("Accept")
	if r.URL.Path != "/v1/ids" || r.URL.Query().Get("format") != "int" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	n, _ := strconv.Atoi(r.URL.Query().Get("count"))
	first := f.next.Add(int64(n)) - int64(n)
	switch accept {
	case "application/octet-stream, text/plain;q=0.5":
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(8*n))
		b := make([]byte, 0, 8*n)
		for i := range int64(n) {
			b = binary.BigEndian.AppendUint64(b, uint64(first+i))
		}
		w.Write(b)
	case "text/plain":
		for i := range int64(n) {
			fmt.Fprintln(w, first+i)
		}
	case "application/json":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ids":[`)
		for i := range int64(n) {
			if i > 0 {
				fmt.Fprint(w, ",")
			}
			fmt.Fprintf(w, "%q", strconv.FormatInt(first+i, 10))
		}
		fmt.Fprintln(w, "]}")
	default:
		http.Error(w, "bad Accept", http.StatusBadRequest)
	}
}

func newTest(t *testing.T, f *fakeService, cfg Config) *Client {
	t.Helper()
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	cfg.URL = ts.URL
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestNextAndPrefetch(t *testing.T) {
	f := &fakeService{}
	c := newTest(t, f, Config{BatchSize: 100, LowWater: 50, MaxAge: time.Minute})
	ctx := context.Background()
	for i := range int64(251) {
		id, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if id != i {
			t.Fatalf("ID %d, want %d", id, i)
		}
	}
	// Prefetch: once below the low-water mark a fetch runs in the
	// background, so the buffer refills without a call waiting.
	deadline := time.Now().Add(5 * time.Second)
	for c.Buffered() != 149 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if b := c.Buffered(); b != 149 {
		t.Fatalf("buffered %d after prefetch, want 49 + 100", b)
	}
	if r := f.requests.Load(); r != 4 {
		t.Fatalf("%d requests for 251 IDs in batches of 100 and one prefetch", r)
	}
}

func TestMaxAgeDiscardsOldIDs(t *testing.T) {
	f := &fakeService{}
	c := newTest(t, f, Config{BatchSize: 10, MaxAge: 50 * time.Millisecond})
	ctx := context.Background()
	if id, err := c.Next(ctx); err != nil || id != 0 {
		t.Fatal(id, err)
	}
	time.Sleep(120 * time.Millisecond)
	id, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id < 10 {
		t.Fatalf("got ID %d from a batch older than MaxAge", id)
	}
}

func TestErrorsAreReturned(t *testing.T) {
	f := &fakeService{}
	f.fail.Store(true)
	c := newTest(t, f, Config{BatchSize: 10})
	_, err := c.Next(context.Background())
	if err == nil || !containsAll(err.Error(), "503", "boom") {
		t.Fatalf("error %v, want the service's 503", err)
	}
	f.fail.Store(false)
	if _, err := c.Next(context.Background()); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !contains(s, sub) {
			return false
		}
	}
	return true
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestContextAndClose(t *testing.T) {
	f := &fakeService{stall: make(chan struct{})}
	c := newTest(t, f, Config{BatchSize: 10})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stalled service: %v", err)
	}
	c.Close()
	close(f.stall)
	if _, err := c.Next(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestConcurrentNextUnique fetches IDs from many goroutines through one
// client spread over two instances of the service, one of which fails
// every third request, and checks that no ID is handed out twice.
func TestConcurrentNextUnique(t *testing.T) {
	t.Parallel()
	// Both instances draw from one counter, as two nodes of one
	// deployment never issue the same ID.
	f := &fakeService{}
	var flaky atomic.Int64
	flakyHandler := func(w http.ResponseWriter, r *http.Request) {
		if flaky.Add(1)%3 == 0 {
			http.Error(w, `{"error":"no valid node-ID lease","kind":"lease"}`, http.StatusServiceUnavailable)
			return
		}
		f.ServeHTTP(w, r)
	}
	c := newClient(t, Config{
		URLs:      []string{serve(t, http.HandlerFunc(flakyHandler)), serve(t, f)},
		BatchSize: 64, MaxAge: time.Minute, MaxAttempts: 10, InitialBackoff: time.Millisecond,
	})
	const goroutines, each = 8, 500
	got := make([][]int64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				id, err := c.Next(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				got[g] = append(got[g], id)
			}
		}()
	}
	wg.Wait()
	seen := map[int64]bool{}
	total, dups := 0, 0
	for _, ids := range got {
		for _, id := range ids {
			total++
			if seen[id] {
				dups++
			}
			seen[id] = true
		}
	}
	if dups > 0 {
		t.Errorf("%d duplicates among %d IDs", dups, total)
	}
	if total != goroutines*each {
		t.Errorf("got %d IDs, want %d", total, goroutines*each)
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{URL: ""}, {URL: "ftp://x"}, {URL: "http://"}, {URL: "http://h", BatchSize: -1},
		{URL: "http://h", BatchSize: 10, LowWater: 11}, {URL: "http://h", MaxAge: -time.Second},
		{URLs: []string{}}, {URLs: []string{"http://h", ""}}, {URLs: []string{"http://h", "h:80"}},
		{URL: "http://h?count=5"}, {URL: "http://h#x"}, {URL: "http://:80"},
		{URL: "http://h", URLs: []string{"http://h/"}}, {URLs: []string{"http://h", "http://h"}},
		{URL: "http://h", InitialBackoff: -1}, {URL: "http://h", MaxBackoff: -1},
		{URL: "http://h", InitialBackoff: time.Second, MaxBackoff: time.Millisecond},
		{URL: "http://h", MaxRetryAfter: -1}, {URL: "http://h", MaxAttempts: -1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}
