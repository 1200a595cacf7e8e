// Command benchreport runs randflake's benchmarks (the Sparx-64 kernels,
// every one the CPU supports; the generators under each kernel; the peer
// comparison; once per run, randflake serve under the load generator
// cmd/loadgen) on this
// machine, saves the results as
// bench/results/<machine>.json beside the raw, benchstat-compatible output,
// and renders BENCHMARKS.md with SVG charts from every saved result.
//
// Run it from the bench module:
//
//	cd bench
//	go run ./cmd/benchreport            # run (a few minutes), save, render
//	go run ./cmd/benchreport -render    # render from bench/results/*.json only
//	go run ./cmd/benchreport -short     # smoke test into a temp dir, checked
//	go run ./cmd/benchreport -verify    # check the committed report is current
//
// -service=false leaves out the service suite. -short runs it for about a
// second per mode.
//
// Rendering needs nothing but the saved JSON files; the charts are drawn by
// this program.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const benchModule = "github.com/randflake/randflake/bench"

// Defaults of -count and -benchtime. Ten rounds let the 95% confidence
// interval of a median leave out the fastest and the slowest sample, so one
// disturbed round on a busy machine does not widen it.
const (
	defaultCount     = 10
	defaultBenchtime = "200ms"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

// options are the command-line flags.
type options struct {
	count         int
	benchtime     string
	short         bool
	render        bool
	verify        bool
	resultsDir    string
	report        string
	out           string
	exec          string
	note          string
	allowEmulated bool
	service       bool
	serviceChoice serviceChoice // from service and short
}

func run(args []string) error {
	var o options
	fs := flag.NewFlagSet("benchreport", flag.ContinueOnError)
	fs.IntVar(&o.count, "count", defaultCount, "rounds: every benchmark runs this many times (-short: 1)")
	fs.StringVar(&o.benchtime, "benchtime", defaultBenchtime, "-test.benchtime of every benchmark (-short: 10ms)")
	fs.BoolVar(&o.short, "short", false, "smoke test: run briefly into a temporary directory, render, check the output; touches no committed file")
	fs.BoolVar(&o.render, "render", false, "do not run benchmarks: render the report from the saved results")
	fs.BoolVar(&o.verify, "verify", false, "do not run or write anything: check that the report and charts on disk are well-formed and what -render would write")
	fs.StringVar(&o.resultsDir, "results", "", "results directory (default: the bench module's results/)")
	fs.StringVar(&o.report, "report", "", "Markdown report (default: BENCHMARKS.md at the repository root)")
	fs.StringVar(&o.out, "out", "", "with -short: write into this directory and keep it, instead of a temporary one")
	fs.StringVar(&o.exec, "exec", "", "run the test binaries through this program, as go test -exec does (e.g. qemu-aarch64-static)")
	fs.StringVar(&o.note, "note", "", "a remark about the machine, saved with the results and shown in the report")
	fs.BoolVar(&o.allowEmulated, "allow-emulated", false, "save results even when running under an emulator (the report leaves them out)")
	fs.BoolVar(&o.service, "service", true, "measure randflake serve under the load generator (cmd/loadgen) once per run (-short: about a second per mode)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.serviceChoice = serviceOff
	switch {
	case o.service && o.short && !set["service"]:
		o.serviceChoice = serviceIfAvailable
	case o.service:
		o.serviceChoice = serviceOn
	}
	if o.short {
		if !set["count"] {
			o.count = 1
		}
		if !set["benchtime"] {
			o.benchtime = "10ms"
		}
	}
	if o.count < 1 {
		return fmt.Errorf("-count %d", o.count)
	}
	if o.render && o.verify || o.short && (o.render || o.verify) {
		return fmt.Errorf("-short, -render and -verify exclude each other")
	}

	rootDir, benchDir, err := moduleDirs()
	if err != nil {
		return err
	}
	if o.resultsDir == "" {
		o.resultsDir = filepath.Join(benchDir, "results")
	}
	if o.report == "" {
		o.report = filepath.Join(rootDir, "BENCHMARKS.md")
	}

	switch {
	case o.verify:
		return verify(o)
	case o.render:
		return renderDir(o.resultsDir, o.report, os.Stderr)
	case o.short:
		return smoke(o, rootDir, benchDir)
	}
	return full(o, rootDir, benchDir)
}

// moduleDirs finds the randflake module and the bench module from the
// module this command runs in.
func moduleDirs() (root, bench string, err error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Path}}\t{{.Dir}}").Output()
	if err != nil {
		return "", "", fmt.Errorf("go list -m (run this from the bench module): %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, dir, ok := strings.Cut(line, "\t"); ok && path == benchModule {
			bench = dir
		}
	}
	if bench == "" {
		return "", "", fmt.Errorf("run this from the bench module (%s), not %q", benchModule, strings.TrimSpace(string(out)))
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/randflake/randflake")
	cmd.Dir = bench
	out, err = cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("go list -m github.com/randflake/randflake: %v", err)
	}
	return strings.TrimSpace(string(out)), bench, nil
}

func config(o options, rootDir, benchDir, workDir string) runConfig {
	return runConfig{
		RootDir: rootDir, BenchDir: benchDir, WorkDir: workDir,
		Count: o.count, Benchtime: o.benchtime, Short: o.short,
		Exec: strings.Fields(o.exec), Note: o.note, Service: o.serviceChoice, Log: os.Stderr,
	}
}

// full runs everything, saves this machine's results and renders the report
// from all saved results.
func full(o options, rootDir, benchDir string) error {
	work, err := os.MkdirTemp("", "benchreport-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	var raw bytes.Buffer
	res, err := runBenchmarks(config(o, rootDir, benchDir, work), &raw)
	if err != nil {
		return err
	}
	if res.Machine.Emulated && !o.allowEmulated {
		return fmt.Errorf("not saving: %s (-allow-emulated saves them anyway; the report leaves them out)", res.Machine.EmulationNote)
	}
	if err := os.MkdirAll(o.resultsDir, 0o755); err != nil {
		return err
	}
	path, err := res.Save(o.resultsDir)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.resultsDir, res.Run.Raw), raw.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s and %s (%d s)\n", path, res.Run.Raw, res.Run.Seconds)
	return renderDir(o.resultsDir, o.report, os.Stderr)
}

// renderDir renders the report from every result in dir, writes it and
// checks what it wrote.
func renderDir(dir, report string, log io.Writer) error {
	rs, err := LoadResults(dir)
	if err != nil {
		return err
	}
	if len(rs) == 0 {
		return fmt.Errorf("no results in %s", dir)
	}
	out, err := render(rs, report, dir)
	if err != nil {
		return err
	}
	for _, p := range out.paths {
		if err := os.WriteFile(p, out.files[p], 0o644); err != nil {
			return err
		}
		fmt.Fprintln(log, "wrote", p)
	}
	return checkOutput(rs, report, dir)
}

// smoke runs every benchmark briefly into a scratch directory, renders the
// report from that run alone and checks it.
func smoke(o options, rootDir, benchDir string) error {
	dir := o.out
	if dir == "" {
		tmp, err := os.MkdirTemp("", "benchreport-smoke-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	res, err := smokeRun(config(o, rootDir, benchDir, dir), dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "smoke: %d benchmarks on %s (kernels %s) in %d s; report and charts well-formed and complete\n",
		len(res.Benchmarks), res.Machine.ID, strings.Join(res.Machine.Kernels, ", "), res.Run.Seconds)
	return nil
}

// smokeRun runs, saves into dir/results, renders dir/BENCHMARKS.md and
// checks the output.
func smokeRun(cfg runConfig, dir string) (*Results, error) {
	resultsDir := filepath.Join(dir, "results")
	if err := os.MkdirAll(resultsDir, 0o755); err != nil {
		return nil, err
	}
	var raw bytes.Buffer
	res, err := runBenchmarks(cfg, &raw)
	if err != nil {
		return nil, err
	}
	if res.Machine.Emulated {
		// Shown anyway: the smoke test checks the pipeline, not speed.
		res.Machine.Emulated = false
		res.Run.Note = strings.TrimSpace(res.Run.Note + " " + res.Machine.EmulationNote)
	}
	if _, err := res.Save(resultsDir); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(resultsDir, res.Run.Raw), raw.Bytes(), 0o644); err != nil {
		return nil, err
	}
	if err := checkResults(res); err != nil {
		return nil, err
	}
	if err := renderDir(resultsDir, filepath.Join(dir, "BENCHMARKS.md"), cfg.Log); err != nil {
		return nil, err
	}
	return res, nil
}

// checkResults checks that a run measured what the report needs: every
// kernel in the cipher and generator benchmarks (Sharded and Local), every
// peer, every mode of the service suite when it ran. It is for new runs: saved results of older versions of this tool may
// lack some rows, which the report then calls not measured.
func checkResults(r *Results) error {
	var errs []error
	need := func(suite, name, kernel string) {
		if r.Find(suite, name, kernel) == nil {
			errs = append(errs, fmt.Errorf("no result for %s %s under kernel %q", suite, name, kernel))
		}
	}
	def := r.Machine.Kernels[0]
	for _, k := range r.Machine.Kernels {
		need("cipher", "EncryptIDs/kernel="+k+"/n=65536", def)
		need("cipher", "DecryptIDs/kernel="+k+"/n=65536", def)
		need("generator", "Sharded/Generate", k)
		need("generator", "Sharded/GenerateParallel", k)
		need("generator", "Sharded/GenerateBatch/n=65536", k)
		need("generator", "Local/Generate", k)
		need("generator", "Local/GenerateParallel", k)
		need("peers", "Generate/randflake.Sharded", k)
		need("peers", "GenerateParallel/randflake.Sharded", k)
		need("peers", "Generate/randflake.Local", k)
		need("peers", "GenerateParallel/randflake.Local", k)
		need("peers", "GenerateBatch/randflake.Sharded/n=65536", k)
	}
	if r.Run.Service != nil {
		for _, m := range serviceModes {
			need("service", serviceBenchmark(m.name), def)
		}
	}
	need("generator", "Generator/Generate", def)
	for _, p := range []string{"randflake.Generator", "bwmarrin/snowflake", "sony/sonyflake", "rs/xid",
		"google/uuid.v4", "google/uuid.v7", "oklog/ulid.v2", "segmentio/ksuid"} {
		need("peers", "Generate/"+p, def)
		need("peers", "GenerateParallel/"+p, def)
	}
	return errors.Join(errs...)
}

// verify checks that the report and charts on disk are exactly what -render
// would write from the saved results, and well-formed.
func verify(o options) error {
	rs, err := LoadResults(o.resultsDir)
	if err != nil {
		return err
	}
	if len(rs) == 0 {
		return fmt.Errorf("no results in %s", o.resultsDir)
	}
	out, err := render(rs, o.report, o.resultsDir)
	if err != nil {
		return err
	}
	var stale []string
	for _, p := range out.paths {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(b, out.files[p]) {
			stale = append(stale, p)
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("out of date with %s: %s; run `go run ./cmd/benchreport -render` in bench/", o.resultsDir, strings.Join(stale, ", "))
	}
	if err := checkOutput(rs, o.report, o.resultsDir); err != nil {
		return err
	}
	for _, r := range rs {
		if _, err := os.Stat(filepath.Join(o.resultsDir, r.Run.Raw)); err != nil {
			return fmt.Errorf("raw output of %s: %v", r.Machine.ID, err)
		}
	}
	fmt.Fprintf(os.Stderr, "verify: %s and %d charts are current and well-formed (%d machines)\n", o.report, len(out.charts), len(rs))
	return nil
}
