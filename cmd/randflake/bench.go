package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/cpuid/v2"
	"github.com/randflake/randflake"
)

const benchUsage = `bench [--json] [--quick]

Prints this CPU's brand, features and microarchitecture level, the kernel
randflake selects, and ns per ID for every kernel the CPU supports: one
block, batches of 1,024, and the sharded generator (single ID, batch,
parallel). Each kernel is measured in a child process started with
RANDFLAKE_KERNEL set. Takes about 7 seconds per kernel (five figures of
about 1.3 s each); with --quick, under half a second per kernel. A
$RANDFLAKE_KERNEL this CPU cannot run is reported on standard error.`

// benchCmd is randflake bench: the kernels' speed on this machine.
type benchCmd struct {
	json  bool
	quick bool
}

func (c *benchCmd) flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.json, "json", false, "print the results as JSON")
	fs.BoolVar(&c.quick, "quick", false, "measure for 50ms per figure instead of 1s (rough figures, for smoke tests)")
}

// benchResult is one kernel's figures, in ns per ID.
type benchResult struct {
	Kernel   string  `json:"kernel"`
	Single   float64 `json:"single_ns"`   // EncryptID, one block
	Batch    float64 `json:"batch_ns"`    // EncryptIDs, 1,024 per call
	Generate float64 `json:"generate_ns"` // Sharded.Generate
	GenBatch float64 `json:"genbatch_ns"` // Sharded.GenerateBatch, 1,024 per call
	Parallel float64 `json:"parallel_ns"` // Sharded.Generate from GOMAXPROCS goroutines
}

// benchChildEnv, when set, makes bench measure its own kernel: bench runs
// itself with it once per kernel.
const benchChildEnv = "RANDFLAKE_BENCH_CHILD"

func (c *benchCmd) run(e *env, args []string) error {
	if len(args) > 0 {
		return usagef("no arguments are taken")
	}
	if e.getenv(benchChildEnv) != "" {
		return c.child(e)
	}
	warnKernel(e)
	results, err := c.measure(e)
	if err != nil {
		return err
	}
	cpu := cpuid.CPU
	if c.json {
		return json.NewEncoder(e.stdout).Encode(map[string]any{
			"cpu": cpu.BrandName, "arch": runtime.GOARCH, "level": cpu.X64Level(), "cores": runtime.NumCPU(),
			"selected": randflake.Kernel(), "go": runtime.Version(), "results": results,
		})
	}
	w := e.stdout
	fmt.Fprintf(w, "CPU        %s (%s, %d logical cores", cpu.BrandName, runtime.GOARCH, runtime.NumCPU())
	if runtime.GOARCH == "amd64" {
		fmt.Fprintf(w, ", x86-64-v%d", cpu.X64Level())
	}
	fmt.Fprintf(w, ")\nfeatures   %s\n", strings.Join(kernelFeatures(cpu), " "))
	fmt.Fprintf(w, "kernel     %s (available: %s)\n", randflake.Kernel(), strings.Join(randflake.Kernels(), ", "))
	fmt.Fprintf(w, "go         %s\n\n", runtime.Version())
	fmt.Fprintf(w, "%-8s %12s %12s %12s %12s %12s\n", "ns/ID", "1 block", "batch 1024", "Generate", "GenBatch", "parallel")
	for _, r := range results {
		fmt.Fprintf(w, "%-8s %12.2f %12.2f %12.2f %12.2f %12.2f\n", r.Kernel, r.Single, r.Batch, r.Generate, r.GenBatch, r.Parallel)
	}
	return nil
}

// measure measures every kernel in a child process of its own, reporting
// progress on standard error.
func (c *benchCmd) measure(e *env) ([]benchResult, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var results []benchResult
	kernels := randflake.Kernels()
	for i, k := range kernels {
		fmt.Fprintf(e.stderr, "measuring kernel %s (%d of %d)...\n", k, i+1, len(kernels))
		cmd := exec.Command(self, "bench", "--quick="+strconv.FormatBool(c.quick))
		cmd.Env = append(os.Environ(), benchChildEnv+"=1", "RANDFLAKE_KERNEL="+k)
		cmd.Stderr = e.stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("measuring kernel %s: %w", k, err)
		}
		var r benchResult
		if err := json.Unmarshal(out, &r); err != nil {
			return nil, fmt.Errorf("measuring kernel %s: %w", k, err)
		}
		if r.Kernel != k {
			return nil, fmt.Errorf("child ran kernel %q, want %q", r.Kernel, k)
		}
		results = append(results, r)
	}
	return results, nil
}

// child measures the kernel of this process, a child of bench, and
// prints the results as JSON.
func (c *benchCmd) child(e *env) error {
	testing.Init()
	if c.quick {
		if err := flag.Set("test.benchtime", "50ms"); err != nil {
			return err
		}
	}
	return json.NewEncoder(e.stdout).Encode(measureKernel())
}

// kernelFeatures lists the CPU features the kernels care about.
func kernelFeatures(c cpuid.CPUInfo) []string {
	var names []string
	for _, f := range []cpuid.FeatureID{cpuid.AVX, cpuid.AVX2, cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL, cpuid.AVX512VBMI, cpuid.AVX512VBMI2, cpuid.ASIMD} {
		if c.Supports(f) {
			names = append(names, f.String())
		}
	}
	if len(names) == 0 {
		names = append(names, "(none used by randflake)")
	}
	return names
}

// measureKernel runs the benchmarks in this process, whose kernel was
// chosen by RANDFLAKE_KERNEL.
func measureKernel() benchResult {
	c, _ := randflake.NewSparx64(make([]byte, 16))
	perID := func(r testing.BenchmarkResult, n int) float64 {
		return float64(r.T.Nanoseconds()) / float64(r.N) / float64(n)
	}
	res := benchResult{Kernel: randflake.Kernel()}
	res.Single = perID(testing.Benchmark(func(b *testing.B) {
		var x uint64
		for i := 0; i < b.N; i++ {
			x = c.EncryptID(x)
		}
		runtime.KeepAlive(x)
	}), 1)
	buf := make([]uint64, 1024)
	res.Batch = perID(testing.Benchmark(func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c.EncryptIDs(buf, buf)
		}
	}), len(buf))
	now := time.Now().Unix()
	s, err := randflake.NewSharded(randflake.ShardedConfig{Secret: make([]byte, 16), FirstNode: 0, LastNode: randflake.MaxNode, LeaseStart: now - 1, LeaseEnd: now + 3600})
	if err != nil {
		return res
	}
	res.Generate = perID(testing.Benchmark(func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			s.Generate()
		}
	}), 1)
	ids := make([]int64, 1024)
	res.GenBatch = perID(testing.Benchmark(func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			s.GenerateBatch(ids)
		}
	}), len(ids))
	res.Parallel = perID(testing.Benchmark(func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s.Generate()
			}
		})
	}), 1)
	return res
}
