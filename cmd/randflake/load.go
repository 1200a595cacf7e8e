package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"
)

func runLoad(e *env, args []string) error {
	fs := newFlags(e, "load", `load --url URL [--batch N] [--concurrency C] [--duration D | --requests R] [--rate Q]

Sends GET /v1/ids?count=N requests to a running randflake serve, bounded in
count and time, and reports IDs per second and latency percentiles. Every
ID received is kept and checked for duplicates; any duplicate, malformed
response or error fails the run (exit status 1).`)
	base := fs.String("url", "http://127.0.0.1:8080", "base URL of the service (loopback only)")
	batch := fs.Int("batch", 1, "IDs per request")
	conc := fs.Int("concurrency", 4, "concurrent connections")
	dur := fs.Duration("duration", 5*time.Second, "how long to run (at most 60s)")
	reqs := fs.Int("requests", 0, "stop after this many requests (0: run for --duration)")
	rate := fs.Float64("rate", 0, "requests per second in total (0: as fast as possible)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	u, err := url.Parse(*base)
	if err != nil || u.Scheme != "http" {
		return usagef("--url must be an http URL")
	}
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
		return usagef("--url must point at this machine (127.0.0.1, localhost or ::1)")
	}
	if *batch < 1 || *conc < 1 || *dur <= 0 || *dur > time.Minute || *reqs < 0 || *rate < 0 {
		return usagef("--batch and --concurrency must be positive, --duration in (0, 60s], --requests and --rate not negative")
	}
	rep, err := loadTest(context.Background(), loadConfig{
		URL: u.JoinPath("v1", "ids").String(), Batch: *batch, Concurrency: *conc,
		Duration: *dur, Requests: *reqs, Rate: *rate,
	})
	if err != nil {
		return err
	}
	fmt.Fprint(e.stdout, rep)
	return nil
}

type loadConfig struct {
	URL         string // the /v1/ids endpoint
	Batch       int
	Concurrency int
	Duration    time.Duration
	Requests    int
	Rate        float64
}

type loadReport struct {
	Requests  int
	IDs       int
	Elapsed   time.Duration
	Latencies []time.Duration // sorted
}

func (r loadReport) percentile(p float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(p / 100 * float64(len(r.Latencies)-1))
	return r.Latencies[i]
}

// IDsPerSecond is the throughput of the run.
func (r loadReport) IDsPerSecond() float64 { return float64(r.IDs) / r.Elapsed.Seconds() }

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
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	endpoint := cfg.URL + "?count=" + strconv.Itoa(cfg.Batch) + "&format=int"

	var (
		mu      sync.Mutex
		ids     []int64
		lat     []time.Duration
		sent    int
		firstEr error
	)
	start := time.Now()
	// claim takes the next request and returns when it is due: with a rate,
	// request i is due at start + i/rate, so the average rate holds even
	// where timers are coarse.
	claim := func() (due time.Time, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		if firstEr != nil || (cfg.Requests > 0 && sent >= cfg.Requests) {
			return time.Time{}, false
		}
		if cfg.Rate > 0 {
			due = start.Add(time.Duration(float64(sent) / cfg.Rate * float64(time.Second)))
		}
		sent++
		return due, true
	}
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]int64, 0, 1024)
			var localLat []time.Duration
			defer func() {
				mu.Lock()
				ids = append(ids, local...)
				lat = append(lat, localLat...)
				mu.Unlock()
			}()
			for {
				due, ok := claim()
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
				got, err := fetchIDs(ctx, hc, endpoint, local)
				if ctx.Err() != nil {
					return // the run's time is up: an interrupted request is not an error
				}
				if err == nil && len(got)-len(local) != cfg.Batch {
					err = fmt.Errorf("asked for %d IDs, got %d", cfg.Batch, len(got)-len(local))
				}
				if err != nil {
					mu.Lock()
					if firstEr == nil {
						firstEr = err
					}
					mu.Unlock()
					return
				}
				localLat = append(localLat, time.Since(t0))
				local = got
			}
		}()
	}
	wg.Wait()
	rep := loadReport{Elapsed: time.Since(start)}
	if firstEr != nil {
		return rep, firstEr
	}
	slices.Sort(ids)
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			return rep, fmt.Errorf("duplicate ID %d among %d", ids[i], len(ids))
		}
	}
	slices.Sort(lat)
	rep.Requests, rep.IDs, rep.Latencies = len(lat), len(ids), lat
	if rep.Requests == 0 {
		return rep, errors.New("no request completed")
	}
	return rep, nil
}

func fetchIDs(ctx context.Context, hc *http.Client, endpoint string, dst []int64) ([]int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return dst, err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := hc.Do(req)
	if err != nil {
		return dst, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return dst, fmt.Errorf("%s: %s", resp.Status, b)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		id, err := strconv.ParseInt(sc.Text(), 10, 64)
		if err != nil {
			return dst, fmt.Errorf("bad ID %q in response", sc.Text())
		}
		dst = append(dst, id)
	}
	return dst, sc.Err()
}
