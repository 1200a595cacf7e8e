package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
)

// recorder records when each request arrived and hands it to the handler
// for that request's number (the last handler serves every later one).
type recorder struct {
	mu       sync.Mutex
	times    []time.Time
	handlers []http.HandlerFunc
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	n := len(rec.times)
	rec.times = append(rec.times, time.Now())
	h := rec.handlers[min(n, len(rec.handlers)-1)]
	rec.mu.Unlock()
	h(w, r)
}

func (rec *recorder) arrivals() []time.Time {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]time.Time(nil), rec.times...)
}

// serve starts a test server for h and returns its URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}

func newClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// okIDs answers like fakeService, with IDs counting up from 0.
func okIDs() http.HandlerFunc {
	return (&fakeService{}).ServeHTTP
}

// failWith answers status with the JSON error body of `randflake serve`
// and the given headers.
func failWith(status int, kind, msg string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, "{\"error\":%q,\"kind\":%q}\n", msg, kind)
	}
}

// hang blocks until the request is cancelled or the test ends.
func hang(t *testing.T) http.HandlerFunc {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}
}

// nextWithin calls Next(ctx) and fails the test if it has not returned
// after limit.
func nextWithin(t *testing.T, c *Client, ctx context.Context, limit time.Duration) (int64, time.Duration, error) {
	t.Helper()
	type result struct {
		id  int64
		err error
	}
	start := time.Now()
	ch := make(chan result, 1)
	go func() {
		id, err := c.Next(ctx)
		ch <- result{id, err}
	}()
	select {
	case r := <-ch:
		return r.id, time.Since(start), r.err
	case <-time.After(limit):
		t.Fatalf("Next has not returned after %v", limit)
		return 0, 0, nil
	}
}

func TestSlowServerIsTooSlow(t *testing.T) {
	t.Parallel()
	slow := slowdown.Start()
	// Every answer comes 300ms after the request (longer on a machine
	// that runs the test slowly), six times MaxAge: each batch would be
	// stale on arrival. The client abandons each request at MaxAge,
	// which the handler sees as its request's context ending first.
	var abandoned atomic.Int64
	handler := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(slow.Stretch(300 * time.Millisecond)):
		case <-r.Context().Done():
			abandoned.Add(1)
			return
		}
		okIDs()(w, r)
	}
	rec := &recorder{handlers: []http.HandlerFunc{handler}}
	c := newClient(t, Config{URL: serve(t, rec), BatchSize: 10, MaxAge: 50 * time.Millisecond, InitialBackoff: 10 * time.Millisecond})
	_, took, err := nextWithin(t, c, context.Background(), 10*time.Second)
	if !errors.Is(err, ErrTooSlow) {
		t.Fatalf("error %v, want ErrTooSlow", err)
	}
	if n := len(rec.arrivals()); n != 3 {
		t.Fatalf("%d requests, want MaxAttempts = 3", n)
	}
	// The handlers may still be finding out that their requests are gone.
	for start := time.Now(); abandoned.Load() < 3 && time.Since(start) < slow.Stretch(time.Second); {
		time.Sleep(5 * time.Millisecond)
	}
	if n := abandoned.Load(); n != 3 {
		t.Fatalf("the client abandoned %d of its 3 requests at MaxAge (%s)", n, slow)
	}
	// 3 attempts of 50ms and two short pauses: well under 3s on idle
	// cores.
	if limit := slow.Stretch(3 * time.Second); took > limit {
		t.Fatalf("Next took %v to give up, over %v (%s)", took, limit, slow)
	}
	if !strings.Contains(err.Error(), "MaxAge") {
		t.Fatalf("error %q does not name MaxAge", err)
	}
	t.Logf("%v after %v", err, took)
}

func TestContextHonoured(t *testing.T) {
	t.Parallel()
	const deadline = 100 * time.Millisecond
	check := func(t *testing.T, c *Client, wantLast string) {
		t.Helper()
		slow := slowdown.Start()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		_, _, err := nextWithin(t, c, ctx, 10*time.Second)
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %v, want the context's deadline", err)
		}
		if took < deadline {
			t.Fatalf("Next returned after %v, before its %v deadline", took, deadline)
		}
		// Returning at the deadline, not after the 5 s Retry-After or the
		// 10 s backoff: within 2 s on idle cores.
		if limit := slow.Stretch(2 * time.Second); took > limit {
			t.Fatalf("Next returned after %v with a %v deadline, over %v (%s)", took, deadline, limit, slow)
		}
		if !strings.Contains(err.Error(), wantLast) {
			t.Fatalf("error %q does not mention the last fetch error %q", err, wantLast)
		}
	}
	t.Run("server hangs", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, Config{URL: serve(t, hang(t)), BatchSize: 10, MaxAge: time.Minute})
		check(t, c, "")
	})
	t.Run("prefetch in flight", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{handlers: []http.HandlerFunc{hang(t)}}
		c := newClient(t, Config{URL: serve(t, rec), BatchSize: 10, MaxAge: time.Minute})
		c.Prefetch()
		check(t, c, "")
		if n := len(rec.arrivals()); n != 1 {
			t.Fatalf("%d requests, want the prefetch's one", n)
		}
	})
	t.Run("backoff", func(t *testing.T) {
		t.Parallel()
		h := failWith(http.StatusInternalServerError, "generate", "boom")
		c := newClient(t, Config{URL: serve(t, h), BatchSize: 10, InitialBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second})
		failOnce(t, c)
		check(t, c, "500")
	})
	t.Run("Retry-After", func(t *testing.T) {
		t.Parallel()
		h := failWith(http.StatusServiceUnavailable, "exhausted", "busy", "Retry-After", "5")
		c := newClient(t, Config{URL: serve(t, h), BatchSize: 10, InitialBackoff: time.Millisecond})
		failOnce(t, c)
		check(t, c, "exhausted")
	})
}

// failOnce has c make one fetch, in the background, and waits until it
// has failed: the next fetch then waits for the backoff or Retry-After,
// whatever the time the failed one took. (Had Next made it, a first
// answer slower than Next's deadline would have left no fetch error to
// report.)
func failOnce(t *testing.T, c *Client) {
	t.Helper()
	c.Prefetch()
	slow := slowdown.Start()
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		c.mu.Lock()
		failed := c.lastErr != nil
		c.mu.Unlock()
		if failed {
			return
		}
		if limit := slow.Stretch(5 * time.Second); time.Since(start) > limit {
			t.Fatalf("the prefetch had not failed after %v (%s)", limit, slow)
		}
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		header func(now time.Time) string
		// wait returns the earliest time the second request may come,
		// given the first's arrival and header.
		wait func(first time.Time, header string) time.Time
		cap  time.Duration
	}{
		{
			name:   "seconds",
			header: func(time.Time) string { return "1" },
			wait:   func(first time.Time, _ string) time.Time { return first.Add(time.Second) },
		},
		{
			name:   "HTTP date",
			header: func(now time.Time) string { return now.Add(2 * time.Second).UTC().Format(http.TimeFormat) },
			wait: func(_ time.Time, h string) time.Time {
				at, err := http.ParseTime(h)
				if err != nil {
					panic(err)
				}
				return at
			},
		},
		{
			name:   "capped",
			header: func(time.Time) string { return "3600" },
			wait:   func(first time.Time, _ string) time.Time { return first.Add(100 * time.Millisecond) },
			cap:    100 * time.Millisecond,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var sent atomic.Value // the Retry-After header sent
			first := func(w http.ResponseWriter, r *http.Request) {
				h := tc.header(time.Now())
				sent.Store(h)
				failWith(http.StatusServiceUnavailable, "exhausted", "sequence space used up", "Retry-After", h)(w, r)
			}
			rec := &recorder{handlers: []http.HandlerFunc{first, okIDs()}}
			c := newClient(t, Config{URL: serve(t, rec), BatchSize: 10, InitialBackoff: time.Millisecond, MaxRetryAfter: tc.cap})
			slow := slowdown.Start()
			_, took, err := nextWithin(t, c, context.Background(), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			at := rec.arrivals()
			if len(at) != 2 {
				t.Fatalf("%d requests, want 2", len(at))
			}
			header := sent.Load().(string)
			if earliest := tc.wait(at[0], header); at[1].Before(earliest) {
				t.Fatalf("second request %v after the first, before Retry-After %q allowed (%v)",
					at[1].Sub(at[0]), header, earliest.Sub(at[0]))
			}
			// Capped, rather than the hour asked for: within 3 s on idle
			// cores.
			if limit := slow.Stretch(3 * time.Second); tc.cap > 0 && took > limit {
				t.Fatalf("Retry-After %q capped at %v, but Next took %v, over %v (%s)", header, tc.cap, took, limit, slow)
			}
		})
	}
}

// deadURL is the address of a listener that has been closed.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestRotatesURLs(t *testing.T) {
	t.Parallel()
	dead := deadURL(t)
	live := &recorder{handlers: []http.HandlerFunc{okIDs()}}
	liveURL := serve(t, live)
	for name, cfg := range map[string]Config{
		"URLs":          {URLs: []string{dead, liveURL}},
		"URL then URLs": {URL: dead, URLs: []string{liveURL}},
	} {
		t.Run(name, func(t *testing.T) {
			before := len(live.arrivals())
			cfg.BatchSize, cfg.LowWater, cfg.MaxAge, cfg.InitialBackoff = 10, 1, time.Minute, time.Millisecond
			c := newClient(t, cfg)
			for range 25 {
				if _, _, err := nextWithin(t, c, context.Background(), 10*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			// The dead URL failed once; the client then stays on the live
			// one: 3 batches for 25 IDs.
			if n := len(live.arrivals()) - before; n != 3 {
				t.Fatalf("%d requests to the live URL, want 3", n)
			}
		})
	}
}

func TestRedirects(t *testing.T) {
	t.Parallel()
	t.Run("other host refused", func(t *testing.T) {
		t.Parallel()
		other := &recorder{handlers: []http.HandlerFunc{okIDs()}}
		otherURL := serve(t, other)
		redirect := func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, otherURL+r.URL.RequestURI(), http.StatusFound)
		}
		own := &http.Client{Timeout: 5 * time.Second}
		c := newClient(t, Config{URL: serve(t, http.HandlerFunc(redirect)), HTTPClient: own, BatchSize: 10, InitialBackoff: time.Millisecond})
		_, _, err := nextWithin(t, c, context.Background(), 10*time.Second)
		if !errors.Is(err, ErrRedirect) || !strings.Contains(err.Error(), otherURL) {
			t.Fatalf("error %v, want ErrRedirect naming %s", err, otherURL)
		}
		if n := len(other.arrivals()); n != 0 {
			t.Fatalf("the other host got %d requests", n)
		}
		if own.CheckRedirect != nil {
			t.Fatal("New modified the caller's http.Client")
		}
	})
	t.Run("same host followed", func(t *testing.T) {
		t.Parallel()
		mux := http.NewServeMux()
		mux.HandleFunc("/old/v1/ids", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/v1/ids?"+r.URL.RawQuery, http.StatusMovedPermanently)
		})
		mux.Handle("/v1/ids", okIDs())
		c := newClient(t, Config{URL: serve(t, mux) + "/old", BatchSize: 10})
		if _, _, err := nextWithin(t, c, context.Background(), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("loop refused", func(t *testing.T) {
		t.Parallel()
		var n atomic.Int64
		loop := func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			http.Redirect(w, r, r.URL.RequestURI(), http.StatusFound)
		}
		c := newClient(t, Config{URL: serve(t, http.HandlerFunc(loop)), BatchSize: 10, MaxAttempts: 1})
		_, _, err := nextWithin(t, c, context.Background(), 10*time.Second)
		if !errors.Is(err, ErrRedirect) {
			t.Fatalf("error %v, want ErrRedirect", err)
		}
		if n.Load() != maxRedirects+1 {
			t.Fatalf("%d requests for one fetch, want %d", n.Load(), maxRedirects+1)
		}
	})
}

func TestBackoffGrows(t *testing.T) {
	t.Parallel()
	const initial = 20 * time.Millisecond
	t.Run("doubles", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{handlers: []http.HandlerFunc{failWith(http.StatusInternalServerError, "generate", "boom")}}
		c := newClient(t, Config{URL: serve(t, rec), BatchSize: 10, MaxAttempts: 6, InitialBackoff: initial, MaxBackoff: 10 * time.Second})
		_, _, err := nextWithin(t, c, context.Background(), 20*time.Second)
		var se *ServerError
		if !errors.As(err, &se) || se.StatusCode != 500 {
			t.Fatalf("error %v, want the 500", err)
		}
		at := rec.arrivals()
		if len(at) != 6 {
			t.Fatalf("%d requests, want MaxAttempts = 6", len(at))
		}
		gaps := make([]time.Duration, 5)
		for i := range gaps {
			gaps[i] = at[i+1].Sub(at[i])
			// The pause is drawn from [d/2, d] with d = initial * 2^i;
			// a loaded machine only makes it longer.
			if low := (initial << i) / 2; gaps[i] < low {
				t.Errorf("pause %d: %v, below %v", i+1, gaps[i], low)
			}
		}
		if gaps[4] <= gaps[0] {
			t.Errorf("pauses %v do not grow", gaps)
		}
		t.Logf("pauses %v", gaps)
	})
	t.Run("capped", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{handlers: []http.HandlerFunc{failWith(http.StatusInternalServerError, "generate", "boom")}}
		slow := slowdown.Start()
		c := newClient(t, Config{URL: serve(t, rec), BatchSize: 10, MaxAttempts: 12, InitialBackoff: initial, MaxBackoff: 2 * initial})
		if _, _, err := nextWithin(t, c, context.Background(), 20*time.Second); err == nil {
			t.Fatal("no error from a failing service")
		}
		at := rec.arrivals()
		if len(at) != 12 {
			t.Fatalf("%d requests, want MaxAttempts = 12", len(at))
		}
		// Uncapped, the last pause would be 10.24s to 20.48s (and Next
		// would not have returned); capped, it is at most 40ms, and
		// 500ms on idle cores leaves room for the scheduler.
		if last, limit := at[len(at)-1].Sub(at[len(at)-2]), slow.Stretch(500*time.Millisecond); last > limit {
			t.Fatalf("last pause %v, over %v; MaxBackoff is %v (%s)", last, limit, 2*initial, slow)
		}
	})
}

func TestServerErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		h        http.HandlerFunc
		want     []string // in the error message
		kind     string
		requests int // 1 for errors that retrying cannot fix
	}{
		{
			name:     "kind",
			h:        failWith(http.StatusServiceUnavailable, "lease", "no valid node-ID lease"),
			want:     []string{"503", `kind "lease"`, "no valid node-ID lease"},
			kind:     "lease",
			requests: 3,
		},
		{
			name:     "bad count",
			h:        failWith(http.StatusBadRequest, "bad_count", "count must be at most 5"),
			want:     []string{"400", `kind "bad_count"`, "at most 5"},
			kind:     "bad_count",
			requests: 1,
		},
		{
			name: "not JSON",
			h: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "upstream \x00\x1b[31mgone", http.StatusBadGateway)
			},
			want:     []string{"502", "upstream ??[31mgone"},
			requests: 3,
		},
		{
			name: "huge body",
			h: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusInternalServerError)
				w.Write([]byte(`{"error":"` + strings.Repeat("x", 1<<20)))
			},
			want:     []string{"500", "xxx..."},
			requests: 3,
		},
		{
			name:     "bad ID",
			h:        func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "12\nabc\n") },
			want:     []string{"bad ID", `"abc"`},
			requests: 3,
		},
		{
			name:     "empty",
			h:        func(w http.ResponseWriter, r *http.Request) {},
			want:     []string{"no IDs"},
			requests: 3,
		},
		{
			name: "too many IDs",
			h: func(w http.ResponseWriter, r *http.Request) {
				for i := range 11 {
					fmt.Fprintln(w, i)
				}
			},
			want:     []string{"11 IDs", "10 asked"},
			requests: 3,
		},
		{
			name: "endless body",
			h: func(w http.ResponseWriter, r *http.Request) {
				line := []byte(strings.Repeat("1", 1000) + "\n")
				for range 1000 {
					if _, err := w.Write(line); err != nil {
						return
					}
				}
			},
			want:     []string{"longer than"},
			requests: 3,
		},
		{
			name: "bad JSON",
			h: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, `{"ids":["1",`)
			},
			want:     []string{"bad JSON"},
			requests: 3,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{handlers: []http.HandlerFunc{tc.h}}
			c := newClient(t, Config{URL: serve(t, rec), BatchSize: 10, InitialBackoff: time.Millisecond})
			_, _, err := nextWithin(t, c, context.Background(), 10*time.Second)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if len(err.Error()) > 1000 {
				t.Errorf("error message of %d bytes", len(err.Error()))
			}
			var se *ServerError
			if errors.As(err, &se) && se.Kind != tc.kind {
				t.Errorf("kind %q, want %q", se.Kind, tc.kind)
			}
			if n := len(rec.arrivals()); n != tc.requests {
				t.Errorf("%d requests, want %d", n, tc.requests)
			}
		})
	}
}

func TestJSONAnswer(t *testing.T) {
	t.Parallel()
	h := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ids":["7",8,"-9"]}`)
	}
	c := newClient(t, Config{URL: serve(t, http.HandlerFunc(h)), BatchSize: 10, MaxAge: time.Minute})
	for _, want := range []int64{7, 8, -9} {
		if id, err := c.Next(context.Background()); err != nil || id != want {
			t.Fatalf("got %d, %v; want %d", id, err, want)
		}
	}
}

// Fetch is one request for one whole batch: the server sees exactly one
// request per call, and its errors come back as they are.
func TestFetchIsOneRequest(t *testing.T) {
	var requests atomic.Int64
	var next atomic.Int64
	fail := atomic.Bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if fail.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":"no valid node-ID lease","kind":"lease"}`))
			return
		}
		n, _ := strconv.Atoi(r.URL.Query().Get("count"))
		for range n {
			fmt.Fprintln(w, next.Add(1))
		}
	}))
	defer srv.Close()
	c, err := New(Config{URL: srv.URL, BatchSize: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := map[int64]bool{}
	for i := 1; i <= 4; i++ {
		ids, err := c.Fetch(context.Background())
		if err != nil || len(ids) != 50 {
			t.Fatalf("Fetch %d: %d IDs, %v; want 50", i, len(ids), err)
		}
		if got := requests.Load(); got != int64(i) {
			t.Fatalf("after %d calls the server saw %d requests", i, got)
		}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("ID %d twice", id)
			}
			seen[id] = true
		}
	}
	fail.Store(true)
	_, err = c.Fetch(context.Background())
	var se *ServerError
	if !errors.As(err, &se) || se.Kind != "lease" || requests.Load() != 5 {
		t.Errorf("Fetch from a failing server: %v after %d requests; want one request and a ServerError of kind lease", err, requests.Load())
	}
	c.Close()
	if _, err := c.Fetch(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Fetch after Close: %v, want ErrClosed", err)
	}
}
