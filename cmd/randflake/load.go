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
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/randflake/randflake/client"
	"github.com/randflake/randflake/statedir"
)

const loadUsage = `load [--url URL] [--format json|text|binary] [--batch N] [--concurrency C]
     [--duration D | --requests R] [--rate Q] [--verify=false] [--compare-bare | --bare]
     [--suite] [--cpuprofile FILE] [--benchfmt NAME]
     [--token-file FILE] [--cacert FILE] [--cert FILE --key FILE]
   load --serve-bare ADDR [--format F] [--batch N]

Sends GET /v1/ids?count=N requests to a running randflake serve, bounded in
count and time, and reports requests and IDs per second and latency
percentiles. By default every answer is decoded by package client, and
every ID kept and checked for duplicates; a duplicate, a malformed answer
or an error fails the run (exit status 1). With --verify=false each answer
is read into a counting sink through a reused buffer instead: its status,
Content-Type, length (Content-Length when sent) and number of IDs are
checked, and nothing is kept, so that the load generator costs little.

--compare-bare runs the same load, unverified, against the service and
then against a bare net/http handler started in this process on a
loopback port, which answers every request with a fixed body of the size
and type of the service's answer (13-character IDs), and prints the ratio
of their requests per second. --bare measures the bare handler alone;
--serve-bare ADDR only serves it, for other load generators such as wrk,
until SIGINT or SIGTERM.

--suite runs, each for --duration: binary batches of 1,048,576 and JSON
batches of 10,000 (2 connections), single IDs in JSON unpaced
(--concurrency connections) against the service and the bare handler,
single IDs at --rate (default 5,000) requests/s on 8 connections, and a
verified binary check (8 batches decoded, no duplicate); then prints a
table and the single-ID ratio.

--benchfmt NAME also prints the run (of the service, or with --bare of the
bare handler) as one line in the Go benchmark format, for benchstat and
the benchmark report:
  BenchmarkService/NAME REQUESTS NS ns/op IDS IDs/s REQS req/s P50 p50-ms P99 p99-ms

A service with TLS is reached at an https --url: --cacert is the CA
certificate (PEM) that signed its certificate (default: the system's),
--cert and --key a client certificate for one that requires them. HTTPS
runs HTTP/1.1, one connection per --concurrency as in plain HTTP, so that
the two compare. --token-file is a private file holding the bearer token
for a service with --issue-tokens-file. A 429 answer (over the client's
share) is counted and waited out as its Retry-After asks, as is a 503 of
kind exhausted.`

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
	compareBare bool
	bare        bool
	serveBare   string
	bareURL     string
	suite       bool
	cpuProfile  string
	benchfmt    string
	tokenFile   string
	caCert      string
	cert        string
	key         string
}

func (c *loadCmd) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8080", "base URL of the service (loopback only)")
	fs.StringVar(&c.format, "format", "json", "answer format asked for: json, text (both base32hex unless verified, then decimal) or binary")
	fs.IntVar(&c.batch, "batch", 1, "IDs per request")
	fs.IntVar(&c.concurrency, "concurrency", 4, "concurrent connections")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "how long to run (at most 60s; with --suite, per measurement)")
	fs.IntVar(&c.requests, "requests", 0, "stop after this many requests (0: run for --duration)")
	fs.Float64Var(&c.rate, "rate", 0, "requests per second in total (0: as fast as possible; --suite: for its paced row, default 5000)")
	fs.BoolVar(&c.verify, "verify", true, "decode every ID and check for duplicates (false: count bytes and IDs only)")
	fs.BoolVar(&c.compareBare, "compare-bare", false, "also measure a bare net/http handler with the same load, and print the ratio")
	fs.BoolVar(&c.bare, "bare", false, "measure only the bare net/http handler (no service needed)")
	fs.StringVar(&c.serveBare, "serve-bare", "", "only serve the bare handler on this loopback address, until a signal")
	fs.StringVar(&c.bareURL, "bare-url", "", "with --compare-bare, --bare or --suite: measure the bare handler of a --serve-bare at this URL instead of one in this process")
	fs.BoolVar(&c.suite, "suite", false, "run the service's whole measurement suite and print a table")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write the load generator's CPU profile to this file")
	fs.StringVar(&c.benchfmt, "benchfmt", "", "also print the run as the Go benchmark BenchmarkService/NAME (not with --suite, --compare-bare or --serve-bare)")
	fs.StringVar(&c.tokenFile, "token-file", "", "private file holding the bearer token to send (for serve --issue-tokens-file)")
	fs.StringVar(&c.caCert, "cacert", "", "PEM CA certificate(s) to verify an https --url with (default: the system's)")
	fs.StringVar(&c.cert, "cert", "", "PEM client certificate to present to an https --url (with --key)")
	fs.StringVar(&c.key, "key", "", "PEM private key of --cert (a private file: mode 600)")
}

func (c *loadCmd) run(e *env, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	u, err := url.Parse(c.url)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" {
		return usagef("--url must be an http or https URL")
	}
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
		return usagef("--url must point at this machine (127.0.0.1, localhost or ::1)")
	}
	if c.batch < 1 || c.concurrency < 1 || c.duration <= 0 || c.duration > time.Minute || c.requests < 0 || c.rate < 0 {
		return usagef("--batch and --concurrency must be positive, --duration in (0, 60s], --requests and --rate not negative")
	}
	if c.format != "json" && c.format != "text" && c.format != "binary" {
		return usagef("--format must be json, text or binary")
	}
	modes := 0
	for _, on := range []bool{c.compareBare, c.bare, c.serveBare != "", c.suite} {
		if on {
			modes++
		}
	}
	if modes > 1 {
		return usagef("--compare-bare, --bare, --serve-bare and --suite exclude each other")
	}
	if c.benchfmt != "" && (c.suite || c.compareBare || c.serveBare != "") {
		return usagef("--benchfmt goes with a single run: not with --suite, --compare-bare or --serve-bare")
	}
	if c.benchfmt != "" && !benchName.MatchString(c.benchfmt) {
		return usagef("--benchfmt NAME: letters, digits, '-' and '_' only, not ending in -DIGITS")
	}
	if (c.cert == "") != (c.key == "") {
		return usagef("--cert and --key go together")
	}
	if u.Scheme != "https" && (c.caCert != "" || c.cert != "") {
		return usagef("--cacert, --cert and --key need an https --url")
	}
	cfg := loadConfig{
		URL: u.String(), Format: c.format, Batch: c.batch, Concurrency: c.concurrency,
		Duration: c.duration, Requests: c.requests, Rate: c.rate, Verify: c.verify,
	}
	if u.Scheme == "https" {
		if cfg.TLS, err = clientTLS(c.caCert, c.cert, c.key); err != nil {
			return err
		}
	}
	if c.tokenFile != "" {
		if cfg.Token, err = readLoadToken(c.tokenFile); err != nil {
			return err
		}
	}
	if c.bareURL != "" {
		b, err := url.Parse(c.bareURL)
		if h := b.Hostname(); err != nil || b.Scheme != "http" || (h != "127.0.0.1" && h != "localhost" && h != "::1") {
			return usagef("--bare-url must be an http URL on this machine")
		}
		cfg.BareURL = b.String()
	}
	if c.serveBare != "" {
		return serveBare(e, c.serveBare, cfg)
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx := context.Background()
	switch {
	case c.suite:
		return runSuite(ctx, e, cfg)
	case c.bare:
		cfg.Verify = false
		rep, err := loadBare(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "bare net/http handler: %s", rep)
		c.printBench(e, rep)
		return nil
	case c.compareBare:
		cfg.Verify = false
		svc, err := loadTest(ctx, cfg)
		if err != nil {
			return err
		}
		bare, err := loadBare(ctx, cfg)
		if err != nil {
			return fmt.Errorf("bare handler: %w", err)
		}
		fmt.Fprintf(e.stdout, "service: %sbare net/http handler (%s, fixed %d-byte %s body): %s", svc, bareWhere(cfg), len(bareBody(cfg)), bareType(cfg.Format), bare)
		fmt.Fprintf(e.stdout, "ratio service/bare requests/s: %.3f\n", svc.RequestsPerSecond()/bare.RequestsPerSecond())
		return nil
	}
	rep, err := loadTest(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprint(e.stdout, rep)
	c.printBench(e, rep)
	return nil
}

// benchName is what --benchfmt takes: a benchmark name that the Go
// benchmark format does not read a GOMAXPROCS suffix from.
var benchName = regexp.MustCompile(`^[A-Za-z0-9_-]*[A-Za-z_-]$|^[A-Za-z0-9_-]*[A-Za-z_][0-9]+$`)

// printBench prints rep as the benchmark line of --benchfmt, if given.
func (c *loadCmd) printBench(e *env, rep loadReport) {
	if c.benchfmt == "" {
		return
	}
	fmt.Fprintln(e.stdout, rep.benchLine(c.benchfmt))
}

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
	// TLS is the client's TLS configuration for an https URL.
	TLS *tls.Config
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
	// With TLSClientConfig set and no ForceAttemptHTTP2, HTTPS is
	// HTTP/1.1: a connection per worker, as in plain HTTP.
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency, MaxConnsPerHost: cfg.Concurrency, TLSClientConfig: cfg.TLS}
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
		wg.Go(func() { r.worker(ctx) })
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

// bareType is the Content-Type of answers in format f.
func bareType(f string) string {
	switch f {
	case "binary":
		return "application/octet-stream"
	case "text":
		return "text/plain"
	}
	return "application/json"
}

// bareID stands for an ID in the bare handler's bodies: 13 characters, the
// length of most IDs in base32hex.
const bareID = "0123456789abc"

// bareBody is the bare handler's fixed answer: the size and form of the
// service's answer to cfg's requests.
func bareBody(cfg loadConfig) []byte {
	switch cfg.Format {
	case "binary":
		return make([]byte, 8*cfg.Batch)
	case "text":
		return bytes.Repeat([]byte(bareID+"\n"), cfg.Batch)
	}
	b := []byte(`{"ids":[`)
	for i := range cfg.Batch {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `"`+bareID+`"`...)
	}
	return append(b, "]}\n"...)
}

// bareHandler is the bare net/http handler: the fixed body of bareBody
// with its Content-Type, as the simplest handler would write it. Its
// text/plain carries a charset, as the service's does.
func bareHandler(cfg loadConfig) http.Handler {
	body, ctype := bareBody(cfg), bareType(cfg.Format)
	if cfg.Format == "text" {
		ctype += "; charset=utf-8"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.Write(body)
	})
}

// startBare serves the bare handler on addr and returns its listener.
func startBare(addr string, cfg loadConfig) (net.Listener, *http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: bareHandler(cfg), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return ln, srv, nil
}

// loadBare runs cfg's load, unverified, against a bare handler started on
// a loopback port of this process.
func loadBare(ctx context.Context, cfg loadConfig) (loadReport, error) {
	if cfg.BareURL != "" {
		cfg.URL, cfg.Verify = cfg.BareURL, false
		return loadTest(ctx, cfg)
	}
	ln, srv, err := startBare("127.0.0.1:0", cfg)
	if err != nil {
		return loadReport{}, err
	}
	defer srv.Close()
	cfg.URL, cfg.Verify = "http://"+ln.Addr().String(), false
	return loadTest(ctx, cfg)
}

// bareWhere says where the bare handler runs.
func bareWhere(cfg loadConfig) string {
	if cfg.BareURL != "" {
		return cfg.BareURL
	}
	return "in this process"
}

// serveBare serves the bare handler on addr until a signal.
func serveBare(e *env, addr string, cfg loadConfig) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || (host != "127.0.0.1" && host != "localhost" && host != "::1") {
		return usagef("--serve-bare needs a loopback address such as 127.0.0.1:18091")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, srv, err := startBare(addr, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "bare handler on http://%s: fixed %d-byte %s body\n", ln.Addr(), len(bareBody(cfg)), bareType(cfg.Format))
	<-ctx.Done()
	return srv.Close()
}

// suiteRow is one measurement of the suite.
type suiteRow struct {
	name string
	cfg  loadConfig
	bare bool
}

// runSuite measures the service's rows (see loadUsage) and prints the
// table.
func runSuite(ctx context.Context, e *env, base loadConfig) error {
	rate := base.Rate
	if rate == 0 {
		rate = 5000
	}
	row := func(name, format string, batch, conns int, rate float64, verify, bare bool) suiteRow {
		c := base
		c.Format, c.Batch, c.Concurrency, c.Rate, c.Verify, c.Requests = format, batch, conns, rate, verify, 0
		return suiteRow{name: name, cfg: c, bare: bare}
	}
	rows := []suiteRow{
		row("binary batches of 1,048,576", "binary", 1<<20, 2, 0, false, false),
		row("JSON batches of 10,000", "json", 10000, 2, 0, false, false),
		row("single IDs (JSON)", "json", 1, base.Concurrency, 0, false, false),
		row("bare net/http handler, same body", "json", 1, base.Concurrency, 0, false, true),
		row(fmt.Sprintf("single IDs at %.0f requests/s", rate), "json", 1, 8, rate, false, false),
	}
	check := row("binary, verified: 8 batches decoded", "binary", 1<<20, 2, 0, true, false)
	check.cfg.Requests = 8
	rows = append(rows, check)

	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measurement\tconnections\trequests/s\tIDs/s\tMB/s\tp50\tp99\t503 exhausted\t")
	var single, bare float64
	for i, r := range rows {
		if i > 0 {
			// Each row starts on a second of its own, unused by the last.
			waitNextSecond(ctx)
		}
		var rep loadReport
		var err error
		if r.bare {
			rep, err = loadBare(ctx, r.cfg)
		} else {
			rep, err = loadTest(ctx, r.cfg)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		switch {
		case r.bare:
			bare = rep.RequestsPerSecond()
		case r.cfg.Batch == 1 && r.cfg.Rate == 0:
			single = rep.RequestsPerSecond()
		}
		mbps := "-" // not counted when decoding
		if rep.Bytes > 0 {
			mbps = strconv.FormatFloat(float64(rep.Bytes)/rep.Elapsed.Seconds()/1e6, 'f', 1, 64)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%s\t%s\t%s\t%d\t\n", r.name, r.cfg.Concurrency, rep.RequestsPerSecond(),
			rep.IDsPerSecond(), mbps, fmtLatency(rep.percentile(50)), fmtLatency(rep.percentile(99)), rep.Refused)
	}
	tw.Flush()
	fmt.Fprintf(e.stdout, "single IDs: service/bare requests/s = %.3f (bare handler %s; target at least 0.9)\n", single/bare, bareWhere(base))
	return nil
}

// fmtLatency prints d in ms with 3 significant digits.
func fmtLatency(d time.Duration) string {
	ms := float64(d) / 1e6
	s := strconv.FormatFloat(ms, 'g', 3, 64)
	if strings.Contains(s, "e") {
		s = strconv.FormatFloat(ms, 'f', 1, 64)
	}
	return s + " ms"
}
