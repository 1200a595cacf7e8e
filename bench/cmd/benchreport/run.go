package main

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// runConfig says what to run and how often.
type runConfig struct {
	RootDir   string   // the randflake module (kernel and generator benchmarks)
	BenchDir  string   // the bench module (peer benchmarks)
	WorkDir   string   // where the test binaries are built
	Count     int      // rounds
	Benchtime string   // -test.benchtime
	Short     bool     // smoke mode
	Exec      []string // runs each test binary through this, like go test -exec
	Note      string   // free text about the machine, saved with the results
	Service   serviceChoice
	Log       io.Writer
}

// invocation is one run of one test binary under one forced kernel.
type invocation struct {
	suite  string // see Benchmark.Suite
	binary string // "root" or "peers"
	bench  string // -test.bench
	kernel string // RANDFLAKE_KERNEL
}

// plan lists the invocations of one round. The cipher benchmarks run every
// kernel themselves (kernel=NAME sub-benchmarks), so they run once, under the
// default kernel. The generators (Sharded and its per-goroutine Local) run
// under every kernel in turn; the peers do not depend on the kernel and run
// once, with randflake's Sharded and Local rows of the same harness repeated
// under the other kernels.
func plan(kernels []string) []invocation {
	def := kernels[0]
	inv := []invocation{
		{"cipher", "root", "^(BenchmarkEncryptIDs|BenchmarkDecryptIDs|BenchmarkSparx64Block)$", def},
		{"generator", "root", "^BenchmarkGenerator$", def},
	}
	for _, k := range kernels {
		inv = append(inv, invocation{"generator", "root", "^(BenchmarkSharded|BenchmarkLocal)$", k})
	}
	inv = append(inv, invocation{"peers", "peers", ".", def})
	for _, k := range kernels[1:] {
		inv = append(inv, invocation{"peers", "peers", `^BenchmarkGenerate(Parallel|Batch)?$/^randflake\.(Sharded|Local)$`, k})
	}
	return inv
}

// runBenchmarks builds the two test binaries, runs every invocation once per
// round (rounds interleave, so that slow drifts of a noisy machine spread
// over all benchmarks alike), writes the raw output to raw and returns the
// results.
func runBenchmarks(cfg runConfig, raw io.Writer) (*Results, error) {
	start := time.Now()
	m := describeMachine()
	if len(m.Kernels) == 0 {
		return nil, fmt.Errorf("randflake.Kernels() is empty")
	}
	res := &Results{
		Schema:  schemaVersion,
		Machine: m,
		Run: RunInfo{
			Date:      start.UTC().Format(time.RFC3339),
			Count:     cfg.Count,
			Benchtime: cfg.Benchtime,
			Short:     cfg.Short,
			Raw:       m.ID + ".txt",
			LoadStart: loadAverage(),
			Note:      cfg.Note,
		},
	}
	if f := strings.Fields(res.Run.LoadStart); len(f) > 0 {
		if l, err := strconv.ParseFloat(f[0], 64); err == nil && l > 0.5*float64(m.NumCPU) {
			fmt.Fprintf(cfg.Log, "warning: load average %s on %d CPUs: other work is running, the figures will be noisy\n", res.Run.LoadStart, m.NumCPU)
		}
	}
	bins := map[string]string{
		"root":  filepath.Join(cfg.WorkDir, "randflake.test"),
		"peers": filepath.Join(cfg.WorkDir, "peers.test"),
	}
	dirs := map[string]string{"root": cfg.RootDir, "peers": cfg.BenchDir}
	for _, name := range []string{"root", "peers"} {
		fmt.Fprintf(cfg.Log, "building %s\n", bins[name])
		if err := buildTest(dirs[name], bins[name]); err != nil {
			return nil, err
		}
	}
	goVersion, level, err := binaryGo(bins["root"])
	if err != nil {
		return nil, err
	}
	// Built and checked before the rounds, so that a load command that
	// cannot run the suite fails the run at once.
	svc, err := prepareService(cfg)
	if err != nil {
		return nil, err
	}
	res.Machine.GoVersion, res.Machine.GoArchLevel = goVersion, level

	fmt.Fprintf(raw, "machine: %s\ncpu-brand: %s\n", m.ID, m.CPU.Brand)
	inv := plan(m.Kernels)
	var col collector
	for round := 0; round < cfg.Count; round++ {
		for i := range inv {
			// Rotate the order each round, so that no benchmark always
			// follows the same one.
			in := inv[(i+round)%len(inv)]
			t := time.Now()
			out, err := runTest(cfg, bins[in.binary], dirs[in.binary], in)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(raw, "randflake-kernel: %s\n", in.kernel)
			raw.Write(out)
			lines, err := parseOutput(bytes.NewReader(out))
			if err != nil {
				return nil, err
			}
			if len(lines) == 0 {
				return nil, fmt.Errorf("%s -test.bench %q ran no benchmark:\n%s", bins[in.binary], in.bench, out)
			}
			if err := col.add(in.suite, in.kernel, lines); err != nil {
				return nil, err
			}
			fmt.Fprintf(cfg.Log, "round %d/%d  %-9s kernel=%-8s %3d benchmarks  %5.1fs\n",
				round+1, cfg.Count, in.suite, in.kernel, len(lines), time.Since(t).Seconds())
		}
	}
	var svcResults []serviceResult
	if svc != nil {
		var err error
		svcResults, res.Run.Service, err = svc.run(m.Kernels[0], raw)
		if err != nil {
			return nil, err
		}
		for _, sr := range svcResults {
			if err := col.add("service", m.Kernels[0], []resultLine{sr.line}); err != nil {
				return nil, err
			}
		}
	}
	res.Benchmarks = col.benchmarks()
	for _, sr := range svcResults {
		res.Find("service", sr.line.name, m.Kernels[0]).Command = sr.command
	}
	res.Run.LoadEnd = loadAverage()
	res.Run.Seconds = int(time.Since(start).Seconds() + 0.5)
	return res, nil
}

// buildTest compiles the test binary of the package in dir for the
// architecture this tool runs on.
func buildTest(dir, out string) error {
	cmd := exec.Command("go", "test", "-c", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go test -c in %s: %v\n%s", dir, err, b)
	}
	return nil
}

// binaryGo returns the Go version and the GOAMD64/GOARM64 setting of a
// built binary.
func binaryGo(path string) (version, level string, err error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	for _, s := range bi.Settings {
		if s.Key == "GO"+strings.ToUpper(runtime.GOARCH) {
			level = s.Key + "=" + s.Value
		}
	}
	return bi.GoVersion, level, nil
}

// runTest runs one invocation and returns its standard output.
func runTest(cfg runConfig, bin, dir string, in invocation) ([]byte, error) {
	args := []string{bin, "-test.run", "^$", "-test.bench", in.bench,
		"-test.benchtime", cfg.Benchtime, "-test.count", "1", "-test.timeout", "60m"}
	args = append(append([]string(nil), cfg.Exec...), args...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	env := []string{"RANDFLAKE_KERNEL=" + in.kernel}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "RANDFLAKE_KERNEL=") {
			env = append(env, e)
		}
	}
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s (RANDFLAKE_KERNEL=%s): %v\n%s%s", strings.Join(args, " "), in.kernel, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes(), nil
}
