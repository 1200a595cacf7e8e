package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/randflake/randflake/internal/loadclient"
)

// suiteRow is one measurement of the suite.
type suiteRow struct {
	name string
	cfg  loadConfig
	bare bool
}

// runSuite measures the service's rows (see the command's doc) and prints
// the table.
func runSuite(ctx context.Context, stdout io.Writer, base loadConfig) error {
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

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measurement\tconnections\trequests/s\tIDs/s\tMB/s\tp50\tp99\t503 exhausted\t")
	var single, bare float64
	for i, r := range rows {
		if i > 0 {
			// Each row starts on a second of its own, unused by the last.
			loadclient.WaitNextSecond(ctx)
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
			rep.IDsPerSecond(), mbps, fmtLatency(rep.Percentile(50)), fmtLatency(rep.Percentile(99)), rep.Refused)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "single IDs: service/bare requests/s = %.3f (bare handler %s; target at least 0.9)\n", single/bare, bareWhere(base))
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
