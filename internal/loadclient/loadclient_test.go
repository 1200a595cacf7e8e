package loadclient

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
)

// Every format, verified (decoded, no duplicate) and counted, gets
// exactly the IDs asked for, in exactly the requests asked for, and the
// report's counts agree with what the service served.
func TestRunFormats(t *testing.T) {
	for _, format := range []string{"json", "text", "binary"} {
		for _, verify := range []bool{true, false} {
			for _, batch := range []int{1, 1000} {
				s := new(fakeService)
				url := s.start(t)
				what := fmt.Sprintf("%s, verify %v, batch %d", format, verify, batch)
				rep, err := Run(context.Background(), Config{URL: url, Format: format, Batch: batch, Concurrency: 8,
					Duration: MaxDuration, Requests: 40, Verify: verify})
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if rep.Requests != 40 || rep.IDs != 40*batch || rep.Verified != verify || rep.Format != format || rep.Batch != batch {
					t.Errorf("%s: %+v", what, rep)
				}
				if calls := s.calls.Load(); calls != 40 {
					t.Errorf("%s: the service got %d requests, want 40", what, calls)
				}
				if rep.Deadline || rep.Cancelled != 0 || rep.Unfinished != 0 {
					t.Errorf("%s: %+v; want no deadline, nothing cancelled or unfinished", what, rep)
				}
				if verify != (rep.Bytes == 0) || format == "binary" && !verify && rep.Bytes != int64(8*40*batch) {
					t.Errorf("%s: %d bytes for %d IDs", what, rep.Bytes, rep.IDs)
				}
				if p50, max := rep.Percentile(50), rep.Percentile(100); p50 <= 0 || p50 > max {
					t.Errorf("%s: p50 %v, max %v", what, p50, max)
				}
			}
		}
	}
}

// An answer that is not what was asked for fails the run with a message
// that says so, verified and counted.
func TestRunBadAnswers(t *testing.T) {
	for _, c := range []struct {
		name   string
		format string
		h      http.HandlerFunc
		want   string
	}{
		{"wrong type", "binary", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(someBytes(8))
		}, `Content-Type "application/json", want application/octet-stream`},
		{"too few IDs", "binary", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(someBytes(16))
		}, "asked for 4 IDs, got 2 (16 bytes)"},
		{"short body", "binary", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", "32")
			w.Write(someBytes(20))
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
		for _, verify := range []bool{false, true} {
			_, err := Run(context.Background(), Config{URL: ts.URL, Format: c.format, Batch: 4, Concurrency: 1, Duration: MaxDuration, Requests: 3, Verify: verify})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s, verify %v: %v; want %q", c.name, verify, err, c.want)
			}
		}
		ts.Close()
	}
	// The same IDs in two answers: a duplicate, found when verified.
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeIDs(w, r.Header.Get("Accept"), 4, func(i int) int64 { return int64(i) })
	}))
	defer ts.Close()
	for _, format := range []string{"json", "text", "binary"} {
		_, err := Run(context.Background(), Config{URL: ts.URL, Format: format, Batch: 4, Concurrency: 1, Duration: MaxDuration, Requests: 2, Verify: true})
		if err == nil || !strings.Contains(err.Error(), "duplicate ID 0") {
			t.Errorf("%s: the same IDs twice: %v, want a duplicate", format, err)
		}
	}
}

// someBytes is n bytes of distinct IDs in binary: 1, 2, 3, ...
func someBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i + 1)
	}
	return b
}

// A 503 of kind exhausted, a 429 and a 503 of kind busy are counted and
// waited out, verified and not: the next request comes in the next
// second of the wall clock, or no sooner than the Retry-After asked.
func TestRunWaitsOut(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a Retry-After of 1 s, or to the next second, six times: not in -short")
	}
	for _, c := range []struct {
		name   string
		status int
		kind   string
		count  func(Report) int
		say    string
	}{
		{"exhausted", 503, "exhausted", func(r Report) int { return r.Refused }, "1 requests refused: the second's IDs used up"},
		{"over the share", 429, "quota", func(r Report) int { return r.Quota }, "1 requests over the client's share (429)"},
		{"busy", 503, "busy", func(r Report) int { return r.Busy }, "1 requests refused busy"},
	} {
		for _, verify := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/verify=%v", c.name, verify), func(t *testing.T) {
				t.Parallel()
				var refusedAt atomic.Int64 // Unix ns
				s := &fakeService{hook: func(n int64, w http.ResponseWriter, r *http.Request) bool {
					if n != 2 {
						return false
					}
					w.Header().Set("Content-Type", "application/json")
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(c.status)
					fmt.Fprintf(w, `{"error":"x","kind":%q}`, c.kind)
					refusedAt.Store(time.Now().UnixNano())
					return true
				}}
				url := s.start(t)
				rep, err := Run(context.Background(), Config{URL: url, Format: "binary", Batch: 1, Concurrency: 1, Duration: MaxDuration, Requests: 4, Verify: verify})
				if err != nil || rep.Requests != 3 || c.count(rep) != 1 || rep.Refused+rep.Quota+rep.Busy != 1 || !strings.Contains(rep.String(), c.say) {
					t.Fatalf("%+v, %v; want 3 requests and one %s counted", rep, err, c.name)
				}
				arrivals := s.times()
				if len(arrivals) != 4 {
					t.Fatalf("the service got %d requests, want 4", len(arrivals))
				}
				refused, next := time.Unix(0, refusedAt.Load()), arrivals[2]
				if c.status == 503 && c.kind == "exhausted" {
					if next.Unix() <= refused.Unix() {
						t.Errorf("the request after the 503 came at %v, in the second it was refused in (%v)", next, refused)
					}
				} else if next.Sub(refused) < time.Second {
					t.Errorf("the request after the %d came %v after it, sooner than its Retry-After of 1 s", c.status, next.Sub(refused))
				}
			})
		}
	}
}

// With a rate, request i is not sent before i/rate after the start.
func TestRunRate(t *testing.T) {
	s := new(fakeService)
	url := s.start(t)
	const rate, requests = 50.0, 10
	start := time.Now()
	rep, err := Run(context.Background(), Config{URL: url, Batch: 1, Concurrency: 4, Duration: MaxDuration, Requests: requests, Rate: rate, Verify: true})
	if err != nil || rep.Requests != requests {
		t.Fatalf("%+v, %v", rep, err)
	}
	arrivals := s.times()
	if len(arrivals) != requests {
		t.Fatalf("the service got %d requests, want %d", len(arrivals), requests)
	}
	for i, a := range arrivals {
		if due := start.Add(time.Duration(float64(i) / rate * float64(time.Second))); a.Before(due) {
			t.Errorf("request %d came %v after the start, before its time %v", i, a.Sub(start), due.Sub(start))
		}
	}
}

// A run ends at its deadline whatever its requests are doing: waiting for
// an answer, or reading one, at the largest concurrency and with batches
// of 1,048,576 IDs, counted and verified. The requests in flight then are
// cancelled (their context ends: the service sees them go), the run waits
// for them (none is in flight when it reports, and the service gets no
// request the run did not count), and its counts agree with what the
// service saw.
func TestRunEndsAtDeadline(t *testing.T) {
	for _, c := range []struct {
		name        string
		format      string
		batch       int
		concurrency int
		midBody     bool // the answers stop halfway, not before they start
	}{
		{"before the answer", "json", 1, MaxConcurrency, false},
		{"inside JSON", "json", 10000, 64, true},
		{"inside text", "text", 10000, 64, true},
		{"inside binary batches", "binary", 1 << 20, 32, true},
	} {
		if testing.Short() && c.midBody {
			continue // eight runs of a second each: in -short, the first two
		}
		for _, verify := range []bool{false, true} {
			what := fmt.Sprintf("%s, verify %v", c.name, verify)
			// The first 5 requests are answered; the others hang until
			// their client goes.
			var cancelled atomic.Int64
			s := &fakeService{hook: func(n int64, w http.ResponseWriter, r *http.Request) bool {
				if n <= 5 {
					return false
				}
				if c.midBody {
					writeIDs(w, r.Header.Get("Accept"), c.batch/2, func(i int) int64 { return -1 - int64(n)<<32 - int64(i) })
					w.(http.Flusher).Flush()
				}
				<-r.Context().Done()
				cancelled.Add(1)
				return true
			}}
			url := s.start(t)
			rep, err := Run(context.Background(), Config{URL: url, Format: c.format, Batch: c.batch, Concurrency: c.concurrency,
				Duration: time.Second, Verify: verify})
			returned := s.calls.Load()
			// On a loaded machine a run may complete no request of a large
			// batch in its second; that is reported as such.
			if err != nil && !(rep.Requests == 0 && strings.Contains(err.Error(), "no request completed")) {
				t.Errorf("%s: %v", what, err)
			}
			if !rep.Deadline {
				t.Errorf("%s: the run did not end at its deadline: %+v", what, rep)
			}
			if rep.Unfinished != 0 {
				t.Errorf("%s: %d requests still in flight when the run reported, want none", what, rep.Unfinished)
			}
			if rep.Requests > 5 || rep.Cancelled < 0 || rep.Cancelled > c.concurrency {
				t.Errorf("%s: %d requests completed (at most 5), %d cancelled (at most one per connection)", what, rep.Requests, rep.Cancelled)
			}
			if int64(rep.Requests+rep.Cancelled) < returned {
				t.Errorf("%s: the service got %d requests, the run counts %d completed and %d cancelled", what, returned, rep.Requests, rep.Cancelled)
			}
			// The service sees every hanging request's client go.
			limit := slowdown.Stretch(10 * time.Second)
			for deadline := time.Now().Add(limit); s.active.Load() != 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: the service still serves %d of the run's requests %v after it reported (deadlines stretched %.1f× by this process's slowdown)", what, s.active.Load(), limit, slowdown.Factor())
				}
			}
			// A request the run sent before its deadline may reach the
			// service's handler only after the run reported, on a loaded
			// machine; every request the service got is one the run
			// counted, completed or cancelled, and every hanging one saw
			// its client go.
			n := s.calls.Load()
			if got, want := cancelled.Load(), max(n-5, 0); got != want {
				t.Errorf("%s: %d hanging requests saw their context end, want %d", what, got, want)
			}
			if n > int64(rep.Requests+rep.Cancelled) {
				t.Errorf("%s: the service got %d requests, %d after the run reported; the run counts only %d completed and %d cancelled: it sent requests it did not count",
					what, n, n-returned, rep.Requests, rep.Cancelled)
			}
			t.Logf("%s: %d requests completed, %d cancelled at the deadline, reported %v after the start (%v)", what, rep.Requests, rep.Cancelled, rep.Elapsed.Round(time.Millisecond), err)
		}
	}
}

// The caller's context ends a run as its Duration does.
func TestRunCallerCancels(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &fakeService{hook: func(n int64, w http.ResponseWriter, r *http.Request) bool {
		if n == 3 {
			cancel()
		}
		return false
	}}
	url := s.start(t)
	rep, err := Run(ctx, Config{URL: url, Batch: 10, Concurrency: 1, Duration: MaxDuration, Verify: true})
	if err != nil || !rep.Deadline || rep.Unfinished != 0 || rep.Requests != 2 || rep.Cancelled != 1 {
		t.Errorf("%+v, %v; want 2 requests, then the deadline with the third cancelled", rep, err)
	}
	if n := s.calls.Load(); n != 3 {
		t.Errorf("the service got %d requests, want 3", n)
	}
}

// Over HTTPS (the service offering HTTP/2 as well) the run speaks
// HTTP/1.1, and sends its token; without it, the service's 401 fails the
// run.
func TestRunTLS(t *testing.T) {
	var h2 atomic.Int64
	s := &fakeService{hook: func(n int64, w http.ResponseWriter, r *http.Request) bool {
		if r.ProtoMajor != 1 {
			h2.Add(1)
		}
		if r.Header.Get("Authorization") != "Bearer token-0123" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"no valid token","kind":"unauthorized"}`))
			return true
		}
		return false
	}}
	ts := httptest.NewUnstartedServer(s)
	ts.EnableHTTP2 = true
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes cut short as the runs end
	ts.StartTLS()
	defer ts.Close()
	cfg := ts.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	for _, format := range []string{"json", "binary"} {
		for _, verify := range []bool{true, false} {
			rep, err := Run(context.Background(), Config{URL: ts.URL, Format: format, Batch: 100, Concurrency: 2,
				Duration: MaxDuration, Requests: 10, Verify: verify, TLS: cfg, Token: "token-0123"})
			if err != nil || rep.Requests != 10 || rep.IDs != 1000 {
				t.Errorf("%s, verify %v: %+v, %v", format, verify, rep, err)
			}
		}
	}
	if n := h2.Load(); n != 0 {
		t.Errorf("%d requests over HTTP/2, want HTTP/1.1 only", n)
	}
	_, err := Run(context.Background(), Config{URL: ts.URL, Batch: 1, Concurrency: 1, Duration: MaxDuration, Requests: 1, TLS: &tls.Config{RootCAs: cfg.RootCAs}})
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("without the token: %v; want the 401", err)
	}
}

// A Config beyond the bounds is refused, and no request made.
func TestRunRefusesConfig(t *testing.T) {
	s := new(fakeService)
	url := s.start(t)
	ok := Config{URL: url, Batch: 1, Concurrency: 1, Duration: time.Second, Requests: 1}
	for _, c := range []struct {
		name string
		edit func(*Config)
	}{
		{"batch 0", func(c *Config) { c.Batch = 0 }},
		{"concurrency 0", func(c *Config) { c.Concurrency = 0 }},
		{"concurrency beyond", func(c *Config) { c.Concurrency = MaxConcurrency + 1 }},
		{"duration 0", func(c *Config) { c.Duration = 0 }},
		{"duration beyond", func(c *Config) { c.Duration = MaxDuration + time.Second }},
		{"negative rate", func(c *Config) { c.Rate = -1 }},
		{"format", func(c *Config) { c.Format = "xml" }},
	} {
		cfg := ok
		c.edit(&cfg)
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	if n := s.calls.Load(); n != 0 {
		t.Errorf("%d requests made", n)
	}
	if _, err := Run(context.Background(), ok); err != nil {
		t.Errorf("within the bounds: %v", err)
	}
}

// A verified run's memory does not grow with the IDs it receives: over
// 30 million IDs (240 MB as int64) the live heap stays under 100 MB, the
// duplicate tables (32 MiB) included. The live heap (what the last
// collection kept, runtime/metrics /gc/heap/live:bytes) is sampled every
// 5 ms: it does not depend on when the collector runs, as the heap in use
// does, and a run that kept its IDs would show them live by its last
// sample. The service in this process makes its answers as it writes
// them, through a buffer of 32 KiB.
func TestRunVerifiedMemoryBounded(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("30 million IDs, decoded: not in -short or under the race detector")
	}
	s := new(fakeService)
	url := s.start(t)
	const bound = 100 << 20
	runtime.GC() // what earlier tests left is not this run's
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	// Bounded by its 300 requests: the property is the memory, not the
	// speed, which a loaded machine cuts to a fraction.
	rep, err := Run(context.Background(), Config{URL: url, Format: "binary", Batch: 100_000, Concurrency: 2,
		Duration: MaxDuration, Requests: 300, Verify: true})
	runtime.GC() // the last sample sees what the run kept to its end
	time.Sleep(20 * time.Millisecond)
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	if rep.IDs != 30_000_000 {
		t.Fatalf("%d IDs, want 30,000,000", rep.IDs)
	}
	if p := peak.Load(); p > bound {
		t.Errorf("live heap peaked at %d MB, want at most %d MB", p>>20, bound>>20)
	}
	t.Logf("30,000,000 IDs verified in %v, live heap at the collections during the run at most %d MB", rep.Elapsed.Round(time.Millisecond), peak.Load()>>20)
}

// The report says what the run did.
func TestReportString(t *testing.T) {
	h := new(histogram)
	h.add(2 * time.Millisecond)
	rep := Report{Format: "binary", Batch: 8, Verified: false, Requests: 1, IDs: 8, Bytes: 64, Elapsed: time.Second,
		Refused: 2, Quota: 3, Busy: 4, Cancelled: 5, latency: h}
	want := "binary, batch 8: requests 1, IDs 8 (counted, not decoded; 2 requests refused: the second's IDs used up; " +
		"3 requests over the client's share (429); 4 requests refused busy: the service's answers in flight at its budget; " +
		"5 requests in flight at the deadline, cancelled), 1.00s\n" +
		"throughput 8 IDs/s, 1 requests/s, 0.0 MB/s\n" +
		"latency p50 2ms, p90 2ms, p99 2ms, max 2ms\n"
	if got := rep.String(); got != want {
		t.Errorf("got\n%swant\n%s", got, want)
	}
	rep = Report{Format: "json", Batch: 1, Verified: true, Requests: 0, Elapsed: time.Second}
	if got := rep.String(); !strings.Contains(got, "(no duplicate within 1048576 consecutive IDs)") || !strings.Contains(got, "latency p50 0s") {
		t.Errorf("verified, nothing completed: %s", got)
	}
}
