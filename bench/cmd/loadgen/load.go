package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/randflake/randflake/client"
)

// benchName is what --benchfmt takes: a benchmark name that the Go
// benchmark format does not read a GOMAXPROCS suffix from.
var benchName = regexp.MustCompile(`^[A-Za-z0-9_-]*[A-Za-z_-]$|^[A-Za-z0-9_-]*[A-Za-z_][0-9]+$`)

// benchLine is rep in the Go benchmark format: requests as the iteration
// count, wall time per request, then IDs and requests per second and the
// latency percentiles in milliseconds.
func (r loadReport) benchLine(name string) string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 4, 64) }
	return fmt.Sprintf("BenchmarkService/%s %d %.0f ns/op %.0f IDs/s %.1f req/s %s p50-ms %s p99-ms",
		name, r.Requests, float64(r.Elapsed.Nanoseconds())/float64(r.Requests),
		r.IDsPerSecond(), r.RequestsPerSecond(), ms(r.percentile(50)), ms(r.percentile(99)))
}

// loadConfig is a load test, checked.
type loadConfig struct {
	URL         string        // the service's base URL
	Format      string        // json (also ""), text or binary
	Batch       int           // IDs per request
	Concurrency int           // requests at a time
	Duration    time.Duration // the run's bound in time
	Requests    int           // the run's bound in requests; 0: none
	Rate        float64       // requests per second in total; 0: no bound
	// Verify decodes every ID (package client) and checks for duplicates;
	// otherwise answers are counted, not decoded.
	Verify bool
	// BareURL is a bare handler served elsewhere (--serve-bare); "": one
	// in this process.
	BareURL string
	// Token, if set, is sent as a bearer token.
	Token string
}

// loadReport is the outcome of a load test.
type loadReport struct {
	Format    string
	Batch     int
	Verified  bool            // IDs decoded and checked for duplicates
	Requests  int             // requests completed
	Refused   int             // 503 answers of kind exhausted, waited out
	Quota     int             // 429 answers (over the client's share), waited out
	IDs       int             // IDs received (all distinct, if Verified)
	Bytes     int64           // body bytes received
	Elapsed   time.Duration   // the run's duration
	Latencies []time.Duration // of every request completed, sorted
}

// percentile returns the latency below which p percent of the requests
// completed.
func (r loadReport) percentile(p float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(p / 100 * float64(len(r.Latencies)-1))
	return r.Latencies[i]
}

// IDsPerSecond is the throughput of the run.
func (r loadReport) IDsPerSecond() float64 { return float64(r.IDs) / r.Elapsed.Seconds() }

// RequestsPerSecond is the request rate of the run.
func (r loadReport) RequestsPerSecond() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// String is the report that load prints.
func (r loadReport) String() string {
	checked := "all distinct"
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
	return fmt.Sprintf("%s, batch %d: requests %d, IDs %d (%s), %.2fs\nthroughput %.0f IDs/s, %.0f requests/s%s\nlatency p50 %v, p90 %v, p99 %v, max %v\n",
		r.Format, r.Batch, r.Requests, r.IDs, checked, r.Elapsed.Seconds(),
		r.IDsPerSecond(), r.RequestsPerSecond(), mbps,
		r.percentile(50), r.percentile(90), r.percentile(99), r.percentile(100))
}

// clientFormat is the client's Format for a load format.
func clientFormat(f string) client.Format {
	switch f {
	case "binary":
		return client.FormatBinary
	case "text":
		return client.FormatText
	}
	return client.FormatJSON
}

// loadTest runs the load and, if cfg.Verify, checks every ID for
// duplicates.
func loadTest(ctx context.Context, cfg loadConfig) (loadReport, error) {
	if cfg.Format == "" {
		cfg.Format = "json"
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency, MaxConnsPerHost: cfg.Concurrency}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	r := &loadRun{cfg: cfg}
	if cfg.Verify {
		// One Fetch is one request: no prefetch, no retry, so every
		// request's latency shows.
		cli, err := client.New(client.Config{
			URL: cfg.URL, BatchSize: cfg.Batch, Format: clientFormat(cfg.Format),
			HTTPClient: hc, MaxAge: 10 * time.Second, Token: cfg.Token,
		})
		if err != nil {
			return loadReport{}, err
		}
		defer cli.Close()
		r.cli = cli
	} else {
		u, err := url.Parse(cfg.URL)
		if err != nil {
			return loadReport{}, err
		}
		u = u.JoinPath("v1", "ids")
		u.RawQuery = "count=" + strconv.Itoa(cfg.Batch)
		r.hc, r.reqURL = hc, u.String()
	}
	r.start = time.Now()
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(ctx)
		}()
	}
	wg.Wait()
	rep := loadReport{Format: cfg.Format, Batch: cfg.Batch, Verified: cfg.Verify, Elapsed: time.Since(r.start)}
	if r.err != nil {
		return rep, r.err
	}
	if cfg.Verify {
		slices.Sort(r.ids)
		for i := 1; i < len(r.ids); i++ {
			if r.ids[i] == r.ids[i-1] {
				return rep, fmt.Errorf("duplicate ID %d among %d", r.ids[i], len(r.ids))
			}
		}
		r.count = len(r.ids)
	}
	slices.Sort(r.lat)
	rep.Requests, rep.IDs, rep.Bytes, rep.Latencies, rep.Refused, rep.Quota = len(r.lat), r.count, r.bytes, r.lat, r.refused, r.quota
	if rep.Requests == 0 {
		return rep, errors.New("no request completed")
	}
	return rep, nil
}

// loadRun is the state of a load test that its workers share.
type loadRun struct {
	cfg    loadConfig
	cli    *client.Client // with Verify
	hc     *http.Client   // without Verify
	reqURL string         // without Verify
	start  time.Time

	mu      sync.Mutex
	ids     []int64         // every ID received, with Verify
	count   int             // IDs received
	refused int             // 503 answers of kind exhausted
	quota   int             // 429 answers
	bytes   int64           // body bytes received
	lat     []time.Duration // of every request completed
	sent    int             // requests started
	err     error           // the first failure
}

// worker makes requests until the run is over, then adds its IDs and
// latencies to the run's.
func (r *loadRun) worker(ctx context.Context) {
	var (
		ids     []int64
		lat     []time.Duration
		count   int
		refused int
		quota   int
		bytes   int64
		fetch   func() (int, int64, error)
		last    []int64 // the IDs of the last Fetch, with Verify
	)
	if r.cli != nil {
		ids = make([]int64, 0, 1024)
		fetch = func() (int, int64, error) {
			got, err := r.cli.Fetch(ctx)
			if err == nil && len(got) != r.cfg.Batch {
				err = fmt.Errorf("asked for %d IDs, got %d", r.cfg.Batch, len(got))
			}
			last = got
			return len(got), 0, err // bytes are counted unverified only
		}
	} else {
		fetch = newCounter(ctx, r.hc, r.reqURL, r.cfg).fetch
	}
	defer func() {
		r.mu.Lock()
		r.ids = append(r.ids, ids...)
		r.lat = append(r.lat, lat...)
		r.count += count
		r.refused += refused
		r.quota += quota
		r.bytes += bytes
		r.mu.Unlock()
	}()
	for {
		due, ok := r.claim()
		if !ok {
			return
		}
		if wait := time.Until(due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return
			}
		}
		t0 := time.Now()
		n, b, err := fetch()
		if ctx.Err() != nil {
			return // the run's time is up: an interrupted request is not an error
		}
		if exhausted(err) {
			// The service is at its limit for this second: counted, and
			// waited out as the answer's Retry-After asks.
			refused++
			if waitNextSecond(ctx); ctx.Err() != nil {
				return
			}
			continue
		}
		if wait, ok := overQuota(err); ok {
			// Over this client's share: counted, and waited out.
			quota++
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return
			}
			continue
		}
		if err != nil {
			r.fail(err)
			return
		}
		lat = append(lat, time.Since(t0))
		ids = append(ids, last...)
		count += n
		bytes += b
	}
}

// claim takes the next request and returns when it is due: with a rate,
// request i is due at start + i/rate, so the average rate holds even where
// timers are coarse. It returns false when the run is over: the requests
// are all sent, or one failed.
func (r *loadRun) claim() (due time.Time, ok bool) {
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
func (r *loadRun) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// counter makes unverified requests for one worker: one request value and
// one copy buffer for all of them, bodies read into a counting sink.
type counter struct {
	hc    *http.Client
	req   *http.Request
	cfg   loadConfig
	ctype string
	buf   []byte
	sink  countingSink
}

func newCounter(ctx context.Context, hc *http.Client, reqURL string, cfg loadConfig) *counter {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, reqURL, nil)
	if err != nil {
		panic(err) // reqURL was made from a parsed URL
	}
	req.Header.Set("Accept", bareType(cfg.Format))
	if cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.Token)
	}
	c := &counter{hc: hc, req: req, cfg: cfg, ctype: bareType(cfg.Format), buf: make([]byte, 256<<10)}
	switch cfg.Format {
	case "json":
		c.sink.scan = '"'
	case "text":
		c.sink.scan = '\n'
	}
	return c
}

// fetch makes one request and returns the IDs and bytes it received.
func (c *counter) fetch() (int, int64, error) {
	resp, err := c.hc.Do(c.req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(body, []byte(`"kind":"exhausted"`)) {
			return 0, 0, errExhausted
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			return 0, 0, quotaError{time.Duration(max(secs, 1)) * time.Second}
		}
		return 0, 0, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != c.ctype {
		return 0, 0, fmt.Errorf("Content-Type %q, want %s", resp.Header.Get("Content-Type"), c.ctype)
	}
	c.sink.n, c.sink.seen = 0, 0
	n, err := io.CopyBuffer(&c.sink, resp.Body, c.buf)
	if err != nil {
		return 0, n, fmt.Errorf("reading the answer after %d bytes: %w", n, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return 0, n, fmt.Errorf("answer of %d bytes, Content-Length %d", n, resp.ContentLength)
	}
	var ids int64
	switch c.cfg.Format {
	case "binary":
		if n%8 != 0 {
			return 0, n, fmt.Errorf("binary answer of %d bytes, not a multiple of 8", n)
		}
		ids = n / 8
	case "json":
		ids = (c.sink.seen - 2) / 2 // {"ids":["…","…"]}
	default:
		ids = c.sink.seen // one per line
	}
	if ids != int64(c.cfg.Batch) {
		return 0, n, fmt.Errorf("asked for %d IDs, got %d (%d bytes)", c.cfg.Batch, ids, n)
	}
	return int(ids), n, nil
}

// errExhausted is a 503 answer of kind exhausted.
var errExhausted = errors.New("503: this second's IDs are used up")

// exhausted reports whether err is the service's 503 of kind exhausted.
func exhausted(err error) bool {
	var se *client.ServerError
	return errors.Is(err, errExhausted) || (errors.As(err, &se) && se.Kind == "exhausted")
}

// quotaError is a 429 answer: over the client's share until wait has
// passed.
type quotaError struct{ wait time.Duration }

// Error says how long to wait.
func (e quotaError) Error() string {
	return fmt.Sprintf("429: over the client's share; retry after %v", e.wait)
}

// overQuota reports whether err is a 429 answer, and how long it asks to
// wait (at most 10 s, as package client waits).
func overQuota(err error) (time.Duration, bool) {
	var qe quotaError
	if errors.As(err, &qe) {
		return min(qe.wait, 10*time.Second), true
	}
	var se *client.ServerError
	if errors.As(err, &se) && se.StatusCode == http.StatusTooManyRequests {
		return min(max(se.RetryAfter, time.Second), 10*time.Second), true
	}
	return 0, false
}

// countingSink counts the bytes written to it and, if scan is set, the
// occurrences of scan among them.
type countingSink struct {
	scan byte
	n    int64
	seen int64
}

// Write counts p.
func (s *countingSink) Write(p []byte) (int, error) {
	s.n += int64(len(p))
	if s.scan != 0 {
		s.seen += int64(bytes.Count(p, []byte{s.scan}))
	}
	return len(p), nil
}

// waitNextSecond sleeps until the next second of the wall clock or until
// ctx is done.
func waitNextSecond(ctx context.Context) {
	now := time.Now()
	t := time.NewTimer(now.Truncate(time.Second).Add(time.Second).Sub(now))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
