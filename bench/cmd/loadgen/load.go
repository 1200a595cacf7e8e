package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/randflake/randflake/internal/loadclient"
)

// benchName is what --benchfmt takes: a benchmark name that the Go
// benchmark format does not read a GOMAXPROCS suffix from.
var benchName = regexp.MustCompile(`^[A-Za-z0-9_-]*[A-Za-z_-]$|^[A-Za-z0-9_-]*[A-Za-z_][0-9]+$`)

// benchLine is rep in the Go benchmark format: requests as the iteration
// count, wall time per request, then IDs and requests per second and the
// latency percentiles in milliseconds.
func benchLine(rep loadReport, name string) string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 4, 64) }
	return fmt.Sprintf("BenchmarkService/%s %d %.0f ns/op %.0f IDs/s %.1f req/s %s p50-ms %s p99-ms",
		name, rep.Requests, float64(rep.Elapsed.Nanoseconds())/float64(rep.Requests),
		rep.IDsPerSecond(), rep.RequestsPerSecond(), ms(rep.Percentile(50)), ms(rep.Percentile(99)))
}

// loadConfig is a load test of package loadclient, and where the bare
// handler it is compared with runs.
type loadConfig struct {
	loadclient.Config
	// BareURL is a bare handler served elsewhere (--serve-bare); "": one
	// in this process.
	BareURL string
}

// loadReport is the outcome of a load test.
type loadReport = loadclient.Report

// loadTest runs cfg's load against cfg.URL (see package loadclient).
func loadTest(ctx context.Context, cfg loadConfig) (loadReport, error) {
	return loadclient.Run(ctx, cfg.Config)
}
