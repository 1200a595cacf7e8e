package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/randflake/randflake/client"
)

const loadUsage = `load --url URL [--batch N] [--concurrency C] [--duration D | --requests R] [--rate Q]

Sends GET /v1/ids?count=N requests to a running randflake serve, bounded in
count and time, and reports IDs per second and latency percentiles. Every
ID received is kept and checked for duplicates; any duplicate, malformed
response or error fails the run (exit status 1).`

// loadCmd is randflake load: a bounded load test of randflake serve.
type loadCmd struct {
	url         string
	batch       int
	concurrency int
	duration    time.Duration
	requests    int
	rate        float64
}

func (c *loadCmd) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8080", "base URL of the service (loopback only)")
	fs.IntVar(&c.batch, "batch", 1, "IDs per request")
	fs.IntVar(&c.concurrency, "concurrency", 4, "concurrent connections")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "how long to run (at most 60s)")
	fs.IntVar(&c.requests, "requests", 0, "stop after this many requests (0: run for --duration)")
	fs.Float64Var(&c.rate, "rate", 0, "requests per second in total (0: as fast as possible)")
}

func (c *loadCmd) run(e *env, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	u, err := url.Parse(c.url)
	if err != nil || u.Scheme != "http" {
		return usagef("--url must be an http URL")
	}
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
		return usagef("--url must point at this machine (127.0.0.1, localhost or ::1)")
	}
	if c.batch < 1 || c.concurrency < 1 || c.duration <= 0 || c.duration > time.Minute || c.requests < 0 || c.rate < 0 {
		return usagef("--batch and --concurrency must be positive, --duration in (0, 60s], --requests and --rate not negative")
	}
	rep, err := loadTest(context.Background(), loadConfig{
		URL: u.String(), Batch: c.batch, Concurrency: c.concurrency,
		Duration: c.duration, Requests: c.requests, Rate: c.rate,
	})
	if err != nil {
		return err
	}
	fmt.Fprint(e.stdout, rep)
	return nil
}

// loadConfig is a load test, checked.
type loadConfig struct {
	URL         string        // the service's base URL
	Batch       int           // IDs per request
	Concurrency int           // requests at a time
	Duration    time.Duration // the run's bound in time
	Requests    int           // the run's bound in requests; 0: none
	Rate        float64       // requests per second in total; 0: no bound
}

// loadReport is the outcome of a load test.
type loadReport struct {
	Requests  int             // requests completed
	IDs       int             // IDs received, all distinct
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

// String is the report that load prints.
func (r loadReport) String() string {
	return fmt.Sprintf("requests %d, IDs %d (all distinct), %.2fs\nthroughput %.0f IDs/s, %.0f requests/s\nlatency p50 %v, p90 %v, p99 %v, max %v\n",
		r.Requests, r.IDs, r.Elapsed.Seconds(), r.IDsPerSecond(), float64(r.Requests)/r.Elapsed.Seconds(),
		r.percentile(50), r.percentile(90), r.percentile(99), r.percentile(100))
}

// loadTest runs the load and checks every ID for duplicates.
func loadTest(ctx context.Context, cfg loadConfig) (loadReport, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency, MaxConnsPerHost: cfg.Concurrency}
	defer tr.CloseIdleConnections()
	// One Fetch is one request: no prefetch, no retry, so every request's
	// latency shows.
	cli, err := client.New(client.Config{
		URL:        cfg.URL,
		BatchSize:  cfg.Batch,
		HTTPClient: &http.Client{Transport: tr},
		MaxAge:     10 * time.Second,
	})
	if err != nil {
		return loadReport{}, err
	}
	defer cli.Close()
	r := &loadRun{cfg: cfg, cli: cli, start: time.Now()}
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() { r.worker(ctx) })
	}
	wg.Wait()
	rep := loadReport{Elapsed: time.Since(r.start)}
	if r.err != nil {
		return rep, r.err
	}
	slices.Sort(r.ids)
	for i := 1; i < len(r.ids); i++ {
		if r.ids[i] == r.ids[i-1] {
			return rep, fmt.Errorf("duplicate ID %d among %d", r.ids[i], len(r.ids))
		}
	}
	slices.Sort(r.lat)
	rep.Requests, rep.IDs, rep.Latencies = len(r.lat), len(r.ids), r.lat
	if rep.Requests == 0 {
		return rep, errors.New("no request completed")
	}
	return rep, nil
}

// loadRun is the state of a load test that its workers share.
type loadRun struct {
	cfg   loadConfig
	cli   *client.Client
	start time.Time

	mu   sync.Mutex
	ids  []int64         // every ID received
	lat  []time.Duration // of every request completed
	sent int             // requests started
	err  error           // the first failure
}

// worker makes requests until the run is over, then adds its IDs and
// latencies to the run's.
func (r *loadRun) worker(ctx context.Context) {
	ids := make([]int64, 0, 1024)
	var lat []time.Duration
	defer func() {
		r.mu.Lock()
		r.ids = append(r.ids, ids...)
		r.lat = append(r.lat, lat...)
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
		got, err := r.cli.Fetch(ctx)
		if ctx.Err() != nil {
			return // the run's time is up: an interrupted request is not an error
		}
		if err == nil && len(got) != r.cfg.Batch {
			err = fmt.Errorf("asked for %d IDs, got %d", r.cfg.Batch, len(got))
		}
		if err != nil {
			r.fail(err)
			return
		}
		lat = append(lat, time.Since(t0))
		ids = append(ids, got...)
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
