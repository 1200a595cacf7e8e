package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/loadclient"
)

// The bare handler answers with the size and type of the service's
// answer, which the unverified load accepts as the service's.
func TestLoadBare(t *testing.T) {
	for _, c := range []struct {
		format string
		batch  int
		size   int
	}{{"json", 1, 26}, {"json", 3, 8 + 3*15 + 2 + 3}, {"text", 2, 28}, {"binary", 5, 40}} {
		cfg := loadConfig{Config: loadclient.Config{Format: c.format, Batch: c.batch, Concurrency: 2, Duration: 10 * time.Second, Requests: 10}}
		if n := len(bareBody(cfg)); n != c.size {
			t.Errorf("%s batch %d: bare body of %d bytes, want %d", c.format, c.batch, n, c.size)
		}
		rep, err := loadBare(context.Background(), cfg)
		if err != nil || rep.Requests != 10 || rep.IDs != 10*c.batch || rep.Bytes != int64(10*c.size) {
			t.Errorf("%s batch %d: %+v, %v", c.format, c.batch, rep, err)
		}
	}
}

// The command line: a bare run prints the benchmark line that benchreport
// reads, and mistakes are usage errors.
func TestRun(t *testing.T) {
	var out, errs strings.Builder
	err := run([]string{"--bare", "--requests", "5", "--duration", "10s", "--benchfmt", "bare-handler"}, &out, &errs)
	if err != nil || !strings.Contains(out.String(), "\nBenchmarkService/bare-handler 5 ") {
		t.Errorf("bare run: %v\n%s%s", err, out.String(), errs.String())
	}
	for _, args := range [][]string{
		{"--url", "http://example.com"},
		{"--concurrency", "1025"},
		{"--suite", "--bare"},
		{"--benchfmt", "single-8"},
		{"extra"},
	} {
		var ue usageError
		if err := run(args, &out, &errs); err == nil || !asUsage(err, &ue) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

func asUsage(err error, ue *usageError) bool {
	u, ok := err.(usageError)
	*ue = u
	return ok
}
