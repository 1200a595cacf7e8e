// Package loadclient is the load client of randflake serve: bounded runs
// of GET /v1/ids?count=N from a number of workers, with an optional rate,
// that report requests and IDs per second and latency percentiles, and
// may decode every ID and check it for duplicates. It is what randflake
// load and the benchmark's load generator (bench/cmd/loadgen) both run;
// their flags, their bounds' messages and their other modes stay theirs.
//
// A run ends when its requests are all made, when one fails, or at its
// deadline: Config.Duration, or the end of the caller's context. At the
// deadline the requests in flight are cancelled, and Run waits for every
// worker to stop before it reports, so that no request of the run
// outlives it. Its memory is bounded whatever its length or the answers'
// size (see Config.Verify and DupWindow).
package loadclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// The bounds of a run: Run refuses a Config beyond them.
const (
	// MaxConcurrency is the most workers (connections) a run has.
	MaxConcurrency = 1024
	// MaxDuration is the longest a run lasts.
	MaxDuration = time.Minute
)

// Config is a load test.
type Config struct {
	URL         string        // the service's base URL
	Format      string        // json (also ""), text or binary
	Batch       int           // IDs per request
	Concurrency int           // requests at a time: 1 to MaxConcurrency
	Duration    time.Duration // the run's bound in time: up to MaxDuration
	Requests    int           // the run's bound in requests; 0: none
	Rate        float64       // requests per second in total; 0: no bound
	// Verify decodes every ID as it arrives and checks for duplicates
	// among the last DupWindow to 2*DupWindow IDs received; otherwise
	// answers are counted, not decoded: their status, Content-Type,
	// length and number of IDs are checked.
	Verify bool
	// TLS is the client's TLS configuration for an https URL (nil: the
	// system's roots). HTTPS runs HTTP/1.1, a connection per worker.
	TLS *tls.Config
	// Token, if set, is sent as a bearer token.
	Token string
}

// Report is the outcome of a load test.
type Report struct {
	Format   string        // the answers' format: json, text or binary
	Batch    int           // IDs per request
	Verified bool          // IDs decoded and checked for duplicates
	Requests int           // requests completed
	Refused  int           // 503 answers of kind exhausted, waited out
	Quota    int           // 429 answers (over the client's share), waited out
	Busy     int           // 503 answers of kind busy, waited out
	IDs      int           // IDs received
	Bytes    int64         // body bytes received (counted runs only)
	Elapsed  time.Duration // the run's duration
	// Deadline says the run ended at its deadline (its Duration, or the
	// caller's context), which cancelled the context of every request
	// still in flight; otherwise its requests were all made, or one
	// failed.
	Deadline bool
	// Cancelled is the requests in flight at the deadline: cancelled,
	// waited for, and not counted.
	Cancelled int
	// Unfinished is the requests still in flight when the report was
	// made: none, since the run waits for its workers to stop.
	Unfinished int

	latency *histogram // of every request completed
}

// Percentile returns the latency below which p percent of the requests
// completed (within 1%; exact for the maximum, p = 100).
func (r Report) Percentile(p float64) time.Duration {
	if r.latency == nil {
		return 0
	}
	return r.latency.percentile(p)
}

// IDsPerSecond is the throughput of the run.
func (r Report) IDsPerSecond() float64 { return float64(r.IDs) / r.Elapsed.Seconds() }

// RequestsPerSecond is the request rate of the run.
func (r Report) RequestsPerSecond() float64 {
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// String is the report that randflake load prints: three lines, the
// counts, the throughput and the latency percentiles.
func (r Report) String() string {
	checked := fmt.Sprintf("no duplicate within %d consecutive IDs", DupWindow)
	if !r.Verified {
		checked = "counted, not decoded"
	}
	mbps := ""
	if r.Bytes > 0 {
		mbps = fmt.Sprintf(", %.1f MB/s", float64(r.Bytes)/r.Elapsed.Seconds()/1e6)
	}
	if r.Refused > 0 {
		checked += fmt.Sprintf("; %d requests refused: the second's IDs used up", r.Refused)
	}
	if r.Quota > 0 {
		checked += fmt.Sprintf("; %d requests over the client's share (429)", r.Quota)
	}
	if r.Busy > 0 {
		checked += fmt.Sprintf("; %d requests refused busy: the service's answers in flight at its budget", r.Busy)
	}
	if r.Cancelled > 0 {
		checked += fmt.Sprintf("; %d requests in flight at the deadline, cancelled", r.Cancelled)
	}
	return fmt.Sprintf("%s, batch %d: requests %d, IDs %d (%s), %.2fs\nthroughput %.0f IDs/s, %.0f requests/s%s\nlatency p50 %v, p90 %v, p99 %v, max %v\n",
		r.Format, r.Batch, r.Requests, r.IDs, checked, r.Elapsed.Seconds(),
		r.IDsPerSecond(), r.RequestsPerSecond(), mbps,
		r.Percentile(50).Round(time.Microsecond), r.Percentile(90).Round(time.Microsecond),
		r.Percentile(99).Round(time.Microsecond), r.Percentile(100).Round(time.Microsecond))
}

// Run runs the load cfg describes and, if cfg.Verify, checks the IDs for
// duplicates. At cfg.Duration (or when ctx ends) the requests in flight
// are cancelled, and Run returns once every worker has stopped: no
// request of the run outlives it. Every step of a worker sees the
// deadline at once: the request and the reading of its answer go by the
// run's context, and decoding looks at it every few KiB.
//
// A 503 answer of kind exhausted is counted and waited out to the next
// second; a 429, or a 503 of kind busy, is counted and waited out as its
// Retry-After asks (at most 10 s). Any other failure ends the run and is
// returned with a report of the run's time and deadline but no counts. A
// Config beyond the bounds is refused, before any request, with an empty
// report; a run that completed no request returns its report and an
// error that says so.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Format == "" {
		cfg.Format = "json"
	}
	if err := cfg.check(); err != nil {
		return Report{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	// With TLSClientConfig set and no ForceAttemptHTTP2, HTTPS is
	// HTTP/1.1: a connection per worker, as in plain HTTP.
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency, MaxConnsPerHost: cfg.Concurrency, TLSClientConfig: cfg.TLS}
	defer tr.CloseIdleConnections()
	r := &run{cfg: cfg, lat: new(histogram), hc: &http.Client{Transport: tr}}
	if cfg.Verify {
		r.dups = newDupWindow(DupWindow)
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return Report{}, err
	}
	u = u.JoinPath("v1", "ids")
	u.RawQuery = "count=" + strconv.Itoa(cfg.Batch)
	r.reqURL = u.String()
	r.start = time.Now()
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(ctx)
		}()
	}
	// At the deadline ctx cancels the requests in flight, and the
	// workers stop: they are waited for.
	wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := Report{Format: cfg.Format, Batch: cfg.Batch, Verified: cfg.Verify, Elapsed: time.Since(r.start), latency: r.lat,
		Deadline: ctx.Err() != nil, Cancelled: r.cancelled, Unfinished: r.inFlight}
	if r.err != nil {
		return rep, r.err
	}
	rep.Requests, rep.IDs, rep.Bytes, rep.Refused, rep.Quota, rep.Busy = r.requests, r.count, r.bytes, r.refused, r.quota, r.busy
	if rep.Requests == 0 {
		return rep, fmt.Errorf("no request completed within %v (%d connections sharing the answers of %d IDs each: fewer connections or a longer --duration complete some)",
			cfg.Duration, cfg.Concurrency, cfg.Batch)
	}
	return rep, nil
}

// check refuses a Config that Run cannot run within its bounds.
func (c Config) check() error {
	switch {
	case c.Batch < 1:
		return fmt.Errorf("loadclient: batch %d, want at least 1", c.Batch)
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return fmt.Errorf("loadclient: concurrency %d, want 1 to %d", c.Concurrency, MaxConcurrency)
	case c.Duration <= 0 || c.Duration > MaxDuration:
		return fmt.Errorf("loadclient: duration %v, want more than 0 and at most %v", c.Duration, MaxDuration)
	case c.Requests < 0 || c.Rate < 0:
		return errors.New("loadclient: negative requests or rate")
	case c.Format != "json" && c.Format != "text" && c.Format != "binary":
		return fmt.Errorf("loadclient: format %q, want json, text or binary", c.Format)
	}
	return nil
}

// run is the state of a load test that its workers share.
type run struct {
	cfg    Config
	dups   *dupWindow // with Verify
	hc     *http.Client
	reqURL string
	start  time.Time
	lat    *histogram

	mu        sync.Mutex
	requests  int   // requests completed
	count     int   // IDs received
	refused   int   // 503 answers of kind exhausted
	quota     int   // 429 answers
	busy      int   // 503 answers of kind busy
	bytes     int64 // body bytes received
	sent      int   // requests started
	err       error // the first failure
	inFlight  int   // requests being made: started, not returned
	cancelled int   // requests in flight at the deadline, not counted
}

// worker makes requests until the run is over.
func (r *run) worker(ctx context.Context) {
	fetch := newFetcher(ctx, r.hc, r.reqURL, r.cfg, r.dups).fetch
	for {
		due, ok := r.claim()
		if !ok {
			return
		}
		if !sleep(ctx, time.Until(due)) {
			return
		}
		t0 := time.Now()
		if !r.begin(ctx) {
			return
		}
		n, b, err := fetch()
		if r.end(ctx) {
			return // the run's time is up: an interrupted request is not an error
		}
		if errors.Is(err, errExhausted) {
			// The service is at its limit for this second: counted, and
			// waited out as the answer's Retry-After asks.
			r.record(func() { r.refused++ })
			if WaitNextSecond(ctx); ctx.Err() != nil {
				return
			}
			continue
		}
		var qe *retryError
		if errors.As(err, &qe) {
			// Over this client's share, or the service's answers in
			// flight at its budget: counted, and waited out.
			r.record(func() {
				if qe.busy {
					r.busy++
				} else {
					r.quota++
				}
			})
			if !sleep(ctx, qe.wait) {
				return
			}
			continue
		}
		if err != nil {
			r.fail(err)
			return
		}
		lat := time.Since(t0)
		r.record(func() {
			r.lat.add(lat)
			r.requests++
			r.count += n
			r.bytes += b
		})
	}
}

// begin counts a request in flight, unless the run is past its
// deadline.
func (r *run) begin(ctx context.Context) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ctx.Err() != nil {
		return false
	}
	r.inFlight++
	return true
}

// end counts a request no longer in flight, and reports whether the
// run's deadline came while it was: then it was cancelled, and it is
// counted as such rather than by what it received.
func (r *run) end(ctx context.Context) (cancelled bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight--
	if ctx.Err() != nil {
		r.cancelled++
		return true
	}
	return false
}

// record runs f, which counts into the run, under the run's lock.
func (r *run) record(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

// claim takes the next request and returns when it is due: with a rate,
// request i is due at start + i/rate, so the average rate holds even where
// timers are coarse. It returns false when the run is over: the requests
// are all sent, or one failed.
func (r *run) claim() (due time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil || (r.cfg.Requests > 0 && r.sent >= r.cfg.Requests) {
		return time.Time{}, false
	}
	if r.cfg.Rate > 0 {
		due = r.start.Add(time.Duration(float64(r.sent) / r.cfg.Rate * float64(time.Second)))
	}
	r.sent++
	return due, true
}

// fail records the run's first failure, which ends it.
func (r *run) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// sleep waits for d, and reports whether it did: false if ctx ended
// first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// WaitNextSecond sleeps until the next second of the wall clock or until
// ctx is done: where the service refused a request because the second's
// IDs were used up, the next second brings new ones.
func WaitNextSecond(ctx context.Context) {
	now := time.Now()
	sleep(ctx, now.Truncate(time.Second).Add(time.Second).Sub(now))
}
