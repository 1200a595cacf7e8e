package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/randflake/randflake/statedir"
)

const loadUsage = `load [--url URL] [--format json|text|binary] [--batch N] [--concurrency C]
     [--duration D | --requests R] [--rate Q] [--verify=false]
     [--token-file FILE] [--cacert FILE] [--cert FILE --key FILE]

Sends GET /v1/ids?count=N requests to a running randflake serve, bounded in
count and time, and reports requests and IDs per second and latency
percentiles. By default every answer is decoded as it arrives and its IDs
checked for duplicates; a duplicate, a malformed answer or an error fails
the run (exit status 1). With --verify=false each answer is read
into a counting sink through a reused buffer instead: its status,
Content-Type, length (Content-Length when sent) and number of IDs are
checked, so that the load generator costs little.

Bounds. The run ends at --duration (at most 60s): the requests still in
flight then are cancelled, and the run waits for them to stop before it
reports, so that none outlives it; they are not counted, and the report
says how many there were.
--concurrency is at most 1024. Memory is bounded whatever the run's
length or the answers' size: latencies are kept in a histogram
(percentiles within 1%, the maximum exact), and answers are read as they
arrive through a buffer of at most 256 KiB per connection (32 MiB in
all), counted or, with --verify, decoded a buffer at a time. --verify
looks for duplicates among the last 1,048,576 to 2,097,152 IDs received
(two tables of 16 MiB): a duplicate within one answer, or between two
IDs fewer than 1,048,576 IDs apart, is always caught; two equal IDs
further apart may not be.
Services that share node IDs by mistake repeat IDs of the same second,
which arrive close together: within the window at the rates load reaches.

A service with TLS is reached at an https --url: --cacert is the CA
certificate (PEM) that signed its certificate (default: the system's),
--cert and --key a client certificate for one that requires them. HTTPS
runs HTTP/1.1, one connection per --concurrency as in plain HTTP, so that
the two compare. --token-file is a private file holding the bearer token
for a service with --issue-tokens-file. A 429 answer (over the client's
share) is counted and waited out as its Retry-After asks, as is a 503 of
kind exhausted (the second's IDs used up) or busy (the service's budget
of answers in flight full).`

// Load's bounds (see loadUsage).
const (
	maxLoadConcurrency = 1024
	maxLoadDuration    = time.Minute
)

// loadCmd is randflake load: a bounded load test of randflake serve.
type loadCmd struct {
	url         string
	format      string
	batch       int
	concurrency int
	duration    time.Duration
	requests    int
	rate        float64
	verify      bool
	tokenFile   string
	caCert      string
	cert        string
	key         string
}

func (c *loadCmd) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8080", "base URL of the service (loopback only)")
	fs.StringVar(&c.format, "format", "json", "answer format asked for: json, text (both with IDs in string form) or binary")
	fs.IntVar(&c.batch, "batch", 1, "IDs per request")
	fs.IntVar(&c.concurrency, "concurrency", 4, "concurrent connections (at most 1024)")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "how long to run (at most 60s)")
	fs.IntVar(&c.requests, "requests", 0, "stop after this many requests (0: run for --duration)")
	fs.Float64Var(&c.rate, "rate", 0, "requests per second in total (0: as fast as possible)")
	fs.BoolVar(&c.verify, "verify", true, "decode every ID and check for duplicates (false: count bytes and IDs only)")
	fs.StringVar(&c.tokenFile, "token-file", "", "private file holding the bearer token to send (for serve --issue-tokens-file)")
	fs.StringVar(&c.caCert, "cacert", "", "PEM CA certificate(s) to verify an https --url with (default: the system's)")
	fs.StringVar(&c.cert, "cert", "", "PEM client certificate to present to an https --url (with --key)")
	fs.StringVar(&c.key, "key", "", "PEM private key of --cert (a private file: mode 600)")
}

func (c *loadCmd) run(e *env, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	cfg, err := c.config()
	if err != nil {
		return err
	}
	rep, err := loadTest(context.Background(), cfg)
	if err != nil {
		return err
	}
	fmt.Fprint(e.stdout, rep)
	return nil
}

// config checks the flags and returns the load test they ask for.
func (c *loadCmd) config() (loadConfig, error) {
	u, err := url.Parse(c.url)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" {
		return loadConfig{}, usagef("--url must be an http or https URL")
	}
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
		return loadConfig{}, usagef("--url must point at this machine (127.0.0.1, localhost or ::1)")
	}
	if c.batch < 1 || c.duration <= 0 || c.duration > maxLoadDuration || c.requests < 0 || c.rate < 0 {
		return loadConfig{}, usagef("--batch must be positive, --duration in (0, 60s], --requests and --rate not negative")
	}
	if c.concurrency < 1 || c.concurrency > maxLoadConcurrency {
		return loadConfig{}, usagef("--concurrency must be between 1 and %d", maxLoadConcurrency)
	}
	if c.format != "json" && c.format != "text" && c.format != "binary" {
		return loadConfig{}, usagef("--format must be json, text or binary")
	}
	if (c.cert == "") != (c.key == "") {
		return loadConfig{}, usagef("--cert and --key go together")
	}
	if u.Scheme != "https" && (c.caCert != "" || c.cert != "") {
		return loadConfig{}, usagef("--cacert, --cert and --key need an https --url")
	}
	cfg := loadConfig{
		URL: u.String(), Format: c.format, Batch: c.batch, Concurrency: c.concurrency,
		Duration: c.duration, Requests: c.requests, Rate: c.rate, Verify: c.verify,
	}
	if u.Scheme == "https" {
		if cfg.TLS, err = clientTLS(c.caCert, c.cert, c.key); err != nil {
			return loadConfig{}, err
		}
	}
	if c.tokenFile != "" {
		if cfg.Token, err = readLoadToken(c.tokenFile); err != nil {
			return loadConfig{}, err
		}
	}
	return cfg, nil
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
	// Verify decodes every ID as it arrives and checks for duplicates;
	// otherwise answers are counted, not decoded.
	Verify bool
	// TLS is the client's TLS configuration for an https URL.
	TLS *tls.Config
	// Token, if set, is sent as a bearer token.
	Token string
}

// loadReport is the outcome of a load test.
type loadReport struct {
	Format   string
	Batch    int
	Verified bool              // IDs decoded and checked for duplicates
	Requests int               // requests completed
	Refused  int               // 503 answers of kind exhausted, waited out
	Quota    int               // 429 answers (over the client's share), waited out
	Busy     int               // 503 answers of kind busy, waited out
	IDs      int               // IDs received
	Bytes    int64             // body bytes received
	Elapsed  time.Duration     // the run's duration
	Latency  *latencyHistogram // of every request completed
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
}

// percentile returns the latency below which p percent of the requests
// completed (within 1%; exact for the maximum, p = 100).
func (r loadReport) percentile(p float64) time.Duration {
	if r.Latency == nil {
		return 0
	}
	return r.Latency.percentile(p)
}

// IDsPerSecond is the throughput of the run.
func (r loadReport) IDsPerSecond() float64 { return float64(r.IDs) / r.Elapsed.Seconds() }

// RequestsPerSecond is the request rate of the run.
func (r loadReport) RequestsPerSecond() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// String is the report that load prints.
func (r loadReport) String() string {
	checked := fmt.Sprintf("no duplicate within %d consecutive IDs", dupWindowIDs)
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
		r.percentile(50).Round(time.Microsecond), r.percentile(90).Round(time.Microsecond),
		r.percentile(99).Round(time.Microsecond), r.percentile(100).Round(time.Microsecond))
}

// loadTest runs the load and, if cfg.Verify, checks the IDs for
// duplicates (see dupWindow). At cfg.Duration (or when ctx ends) the
// requests in flight are cancelled, and loadTest returns once every
// worker has stopped: no request of the run outlives it. Every step of a
// worker sees the deadline at once: the request and the reading of its
// answer go by the run's context, and decoding looks at it every
// sinkChunk bytes.
func loadTest(ctx context.Context, cfg loadConfig) (loadReport, error) {
	if cfg.Format == "" {
		cfg.Format = "json"
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	// With TLSClientConfig set and no ForceAttemptHTTP2, HTTPS is
	// HTTP/1.1: a connection per worker, as in plain HTTP.
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency, MaxConnsPerHost: cfg.Concurrency, TLSClientConfig: cfg.TLS}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	r := &loadRun{cfg: cfg, lat: new(latencyHistogram), hc: hc}
	if cfg.Verify {
		r.dups = newDupWindow(dupWindowIDs)
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return loadReport{}, err
	}
	u = u.JoinPath("v1", "ids")
	u.RawQuery = "count=" + strconv.Itoa(cfg.Batch)
	r.reqURL = u.String()
	r.start = time.Now()
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() { r.worker(ctx) })
	}
	// At the deadline ctx cancels the requests in flight, and the
	// workers stop: they are waited for.
	wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.over = true
	rep := loadReport{Format: cfg.Format, Batch: cfg.Batch, Verified: cfg.Verify, Elapsed: time.Since(r.start), Latency: r.lat,
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

// loadRun is the state of a load test that its workers share.
type loadRun struct {
	cfg    loadConfig
	dups   *dupWindow // with Verify
	hc     *http.Client
	reqURL string
	start  time.Time
	lat    *latencyHistogram

	mu        sync.Mutex
	over      bool  // the report is made: nothing more is counted
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
func (r *loadRun) worker(ctx context.Context) {
	fetch := newCounter(ctx, r.hc, r.reqURL, r.cfg, r.dups).fetch
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
		if !r.begin(ctx) {
			return
		}
		n, b, err := fetch()
		if r.end(ctx) {
			return // the run's time is up: an interrupted request is not an error
		}
		if exhausted(err) {
			// The service is at its limit for this second: counted, and
			// waited out as the answer's Retry-After asks.
			r.record(func() { r.refused++ })
			if waitNextSecond(ctx); ctx.Err() != nil {
				return
			}
			continue
		}
		if wait, ok := overQuota(err); ok {
			// Over this client's share, or the service's answers in
			// flight at its budget: counted, and waited out.
			if _, busy := err.(busyError); busy {
				r.record(func() { r.busy++ })
			} else {
				r.record(func() { r.quota++ })
			}
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
func (r *loadRun) begin(ctx context.Context) bool {
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
func (r *loadRun) end(ctx context.Context) (cancelled bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight--
	if ctx.Err() != nil {
		r.cancelled++
		return true
	}
	return false
}

// record runs f, which counts into the run, unless the report is made.
func (r *loadRun) record(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.over {
		f()
	}
}

// claim takes the next request and returns when it is due: with a rate,
// request i is due at start + i/rate, so the average rate holds even where
// timers are coarse. It returns false when the run is over: the requests
// are all sent, or one failed.
func (r *loadRun) claim() (due time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.over || r.err != nil || (r.cfg.Requests > 0 && r.sent >= r.cfg.Requests) {
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
	if r.err == nil && !r.over {
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
	ids   *idSink // with Verify: decodes the IDs instead of counting bytes
}

func newCounter(ctx context.Context, hc *http.Client, reqURL string, cfg loadConfig, dups *dupWindow) *counter {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, reqURL, nil)
	if err != nil {
		panic(err) // reqURL was made from a parsed URL
	}
	req.Header.Set("Accept", contentType(cfg.Format))
	if cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.Token)
	}
	// At most 256 KiB per connection, 32 MiB in all.
	size := min(256<<10, max(4<<10, (32<<20)/cfg.Concurrency))
	c := &counter{hc: hc, req: req, cfg: cfg, ctype: contentType(cfg.Format), buf: make([]byte, size)}
	if dups != nil {
		c.ids = &idSink{ctx: ctx, format: cfg.Format, dups: dups, part: make([]byte, 0, maxIDText)}
	}
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
		if resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(body, []byte(`"kind":"busy"`)) {
			return 0, 0, busyError{quotaError{retryAfter(resp)}}
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			return 0, 0, quotaError{retryAfter(resp)}
		}
		return 0, 0, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != c.ctype {
		return 0, 0, fmt.Errorf("Content-Type %q, want %s", resp.Header.Get("Content-Type"), c.ctype)
	}
	if c.ids != nil {
		return c.verify(resp)
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

// verify decodes the answer's IDs as they arrive and checks them for
// duplicates.
func (c *counter) verify(resp *http.Response) (int, int64, error) {
	c.ids.reset()
	n, err := io.CopyBuffer(c.ids, resp.Body, c.buf)
	if err == nil {
		err = c.ids.finish()
	}
	if err != nil {
		return 0, n, fmt.Errorf("reading the answer after %d bytes: %w", c.ids.bytes, err)
	}
	if c.ids.n != int64(c.cfg.Batch) {
		return 0, n, fmt.Errorf("asked for %d IDs, got %d (%d bytes)", c.cfg.Batch, c.ids.n, n)
	}
	return int(c.ids.n), 0, nil // bytes are counted unverified only
}

// errExhausted is a 503 answer of kind exhausted.
var errExhausted = errors.New("503: this second's IDs are used up")

// exhausted reports whether err is the service's 503 of kind exhausted.
func exhausted(err error) bool { return errors.Is(err, errExhausted) }

// quotaError is a 429 answer: over the client's share until wait has
// passed.
type quotaError struct{ wait time.Duration }

// Error says how long to wait.
func (e quotaError) Error() string {
	return fmt.Sprintf("429: over the client's share; retry after %v", e.wait)
}

// busyError is a 503 answer of kind busy: the service's answers in
// flight hold its memory budget; retry after wait.
type busyError struct{ quotaError }

// Error says how long to wait.
func (e busyError) Error() string {
	return fmt.Sprintf("503: busy; retry after %v", e.wait)
}

// retryAfter is the wait an answer's Retry-After asks for: whole
// seconds, at least one.
func retryAfter(resp *http.Response) time.Duration {
	secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return time.Duration(max(secs, 1)) * time.Second
}

// overQuota reports whether err is a 429 answer or a 503 of kind busy,
// and how long it asks to wait (at most 10 s, as package client waits).
func overQuota(err error) (time.Duration, bool) {
	var qe quotaError
	var be busyError
	switch {
	case errors.As(err, &be):
		return min(be.wait, 10*time.Second), true
	case errors.As(err, &qe):
		return min(qe.wait, 10*time.Second), true
	}
	return 0, false
}

// clientTLS is load's TLS configuration: caFile's CAs (else the system's),
// and the client certificate certFile with keyFile, if given.
func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		b, err := readPublicFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		if cfg.RootCAs, err = parseCAs(b); err != nil {
			return nil, fmt.Errorf("--cacert %s: %w", caFile, err)
		}
	}
	if certFile != "" {
		certPEM, err := readPublicFile(certFile)
		if err != nil {
			return nil, fmt.Errorf("--cert: %w", err)
		}
		keyPEM, err := statedir.ReadPrivateFile(keyFile, maxPEMFile)
		if err != nil {
			return nil, fmt.Errorf("--key: %w", err)
		}
		defer clear(keyPEM)
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("--cert %s and --key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// readLoadToken reads --token-file: a private file, its content trimmed.
func readLoadToken(file string) (string, error) {
	b, err := statedir.ReadPrivateFile(file, maxTokenFile)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	defer clear(b)
	token := strings.TrimSpace(string(b))
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("--token-file %s: want one token, without white space inside", file)
	}
	return token, nil
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

// contentType is the Content-Type of answers in format f.
func contentType(f string) string {
	switch f {
	case "binary":
		return "application/octet-stream"
	case "text":
		return "text/plain"
	}
	return "application/json"
}
