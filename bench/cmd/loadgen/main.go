// Command loadgen is the benchmark's load generator for randflake serve:
// bounded runs of GET /v1/ids?count=N, their throughput and latency, the
// bare net/http handler they are compared with, and the suite of
// bench/service.sh. The benchmark report (cmd/benchreport) runs it once
// per mode of its service suite, with -benchfmt.
//
//	loadgen [-url URL] [-format json|text|binary] [-batch N] [-concurrency C]
//	        [-duration D | -requests R] [-rate Q] [-verify]
//	        [-compare-bare | -bare | -suite] [-bare-url URL] [-benchfmt NAME]
//	loadgen -serve-bare ADDR [-format F] [-batch N]
//
// With -verify=false runs count answers instead of decoding them:
// status, Content-Type, length (Content-Length when sent) and number of
// IDs are checked, and each body is read into a counting sink through a
// reused buffer, so that the load generator, which shares the machine
// with the service, costs little. Otherwise every answer is decoded as it
// arrives and its IDs checked for duplicates among the last 1,048,576 to
// 2,097,152 received. The runs are those of randflake load (package
// internal/loadclient, which both use).
//
// -compare-bare runs the same load against the service and then against
// a bare net/http handler, which answers every request with a fixed body
// of the size and type of the service's answer (13-character IDs), and
// prints the ratio of their requests per second. -bare measures the bare
// handler alone; -serve-bare ADDR only serves it (for other load
// generators such as wrk) until SIGINT or SIGTERM; -bare-url measures one
// served that way instead of one in this process.
//
// -suite runs, each for -duration: binary batches of 1,048,576 and JSON
// batches of 10,000 (2 connections), single IDs in JSON unpaced
// (-concurrency connections) against the service and the bare handler,
// single IDs at -rate (default 5,000) requests/s on 8 connections, and a
// verified binary check (8 batches decoded, no duplicate); then it prints
// a table and the single-ID ratio.
//
// -benchfmt NAME also prints the run (of the service, or with -bare of
// the bare handler) as one line in the Go benchmark format:
//
//	BenchmarkService/NAME REQUESTS NS ns/op IDS IDs/s REQS req/s P50 p50-ms P99 p99-ms
//
// Runs are bounded to 60 s and 1024 connections, and their memory to
// fixed buffers, a latency histogram (percentiles within 1%) and the
// duplicate window.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"

	"github.com/randflake/randflake/internal/loadclient"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	var ue usageError
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "loadgen: %s\n", err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "loadgen: %s\n", err)
		os.Exit(1)
	}
}

// usageError is a command-line mistake: exit status 2.
type usageError string

func (e usageError) Error() string { return string(e) }

// run parses args and runs the load they ask for.
func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg         loadConfig
		compareBare bool
		bare        bool
		serveBareAt string
		bareURL     string
		suite       bool
		benchfmt    string
	)
	cfg.Flags(fs, "-")
	fs.Lookup("duration").Usage += "; with -suite, per measurement"
	fs.Lookup("rate").Usage += "; -suite: for its paced row, default 5000"
	fs.BoolVar(&compareBare, "compare-bare", false, "also measure the bare net/http handler with the same load, and print the ratio")
	fs.BoolVar(&bare, "bare", false, "measure only the bare net/http handler (no service needed)")
	fs.StringVar(&serveBareAt, "serve-bare", "", "only serve the bare handler on this loopback address, until a signal")
	fs.StringVar(&bareURL, "bare-url", "", "with -compare-bare, -bare or -suite: measure the bare handler of a -serve-bare at this URL")
	fs.BoolVar(&suite, "suite", false, "run the service's whole measurement suite and print a table")
	fs.StringVar(&benchfmt, "benchfmt", "", "also print the run as the Go benchmark BenchmarkService/NAME (not with -suite, -compare-bare or -serve-bare)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("no arguments are taken")
	}
	if err := cfg.Check("-", false); err != nil {
		return usageError(err.Error())
	}
	modes := 0
	for _, on := range []bool{compareBare, bare, serveBareAt != "", suite} {
		if on {
			modes++
		}
	}
	if modes > 1 {
		return usageError("-compare-bare, -bare, -serve-bare and -suite exclude each other")
	}
	if benchfmt != "" && (suite || compareBare || serveBareAt != "") {
		return usageError("-benchfmt goes with a single run: not with -suite, -compare-bare or -serve-bare")
	}
	if benchfmt != "" && !benchName.MatchString(benchfmt) {
		return usageError("-benchfmt NAME: letters, digits, '-' and '_' only, not ending in -DIGITS")
	}
	if bareURL != "" {
		var err error
		if cfg.BareURL, err = loopbackURL(bareURL); err != nil {
			return usageError("-bare-url: " + err.Error())
		}
	}
	if serveBareAt != "" {
		return serveBare(stderr, serveBareAt, cfg)
	}
	ctx := context.Background()
	printBench := func(rep loadReport) {
		if benchfmt != "" {
			fmt.Fprintln(stdout, benchLine(rep, benchfmt))
		}
	}
	switch {
	case suite:
		return runSuite(ctx, stdout, cfg)
	case bare:
		cfg.Verify = false
		rep, err := loadBare(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "bare net/http handler: %s", rep)
		printBench(rep)
		return nil
	case compareBare:
		cfg.Verify = false
		svc, err := loadTest(ctx, cfg)
		if err != nil {
			return err
		}
		bare, err := loadBare(ctx, cfg)
		if err != nil {
			return fmt.Errorf("bare handler: %w", err)
		}
		fmt.Fprintf(stdout, "service: %sbare net/http handler (%s, fixed %d-byte %s body): %s", svc, bareWhere(cfg), len(bareBody(cfg)), loadclient.ContentType(cfg.Format), bare)
		fmt.Fprintf(stdout, "ratio service/bare requests/s: %.3f\n", svc.RequestsPerSecond()/bare.RequestsPerSecond())
		return nil
	}
	rep, err := loadTest(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, rep)
	printBench(rep)
	return nil
}

// loopbackURL checks that s is an http URL on this machine.
func loopbackURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" {
		return "", errors.New("want an http URL")
	}
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
		return "", errors.New("want a URL on this machine (127.0.0.1, localhost or ::1)")
	}
	return u.String(), nil
}
