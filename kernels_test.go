package randflake

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// kernelsRun records the kernels forEachKernel has run tests under.
var kernelsRun sync.Map

// archKernels lists every kernel of this architecture, fastest first,
// whether or not this build and CPU can run it.
func archKernels() []string {
	switch runtime.GOARCH {
	case "amd64":
		return []string{"avx512", "avx2", "generic"}
	case "arm64":
		return []string{"neon", "generic"}
	}
	return []string{"generic"}
}

// forEachKernel runs f as a subtest under every kernel this CPU can run,
// with the package's active kernel forced to it: the generator, batch,
// Local and fuzz tests run on every implementation in one go test, not
// only on the one the CPU selects. The architecture's other kernels show
// as skipped subtests, with the reason. f must not call t.Parallel.
func forEachKernel(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	can := map[string]kernel{}
	for _, k := range kernels() {
		can[k.name] = k
	}
	for _, name := range archKernels() {
		k, ok := can[name]
		if !ok {
			t.Run(name, func(t *testing.T) {
				if puregoBuild {
					t.Skipf("kernel %s: this build (purego, or a toolchain other than gc) has no assembly kernels", name)
				}
				t.Skipf("kernel %s: this CPU cannot run it (a CPU feature it needs is missing or turned off by GODEBUG); it runs %v", name, Kernels())
			})
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			saved := activeKernel
			activeKernel = k
			defer func() { activeKernel = saved }()
			kernelsRun.Store(k.name, true)
			f(t)
		})
	}
}

func TestMain(m *testing.M) {
	// The parallel tests spend most of their time waiting out lease
	// seconds, not computing: unless -test.parallel was given, let more
	// of them wait at once than there are processors (8: the few that
	// compute, under load, then share the processors with few others).
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "8")
	}
	code := m.Run()
	if referenceMissing.Load() {
		fmt.Fprintln(os.Stderr, "note: the reference implementation's vectors were not found beside the checkout (set RANDFLAKE_VECTORS); compatibility was checked against "+goldenPath+" only")
	}
	if code == 0 && fullRun() {
		if err := checkKernelsRun(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// fullRun reports whether this run ran every test: no -run or -skip
// pattern, no -list, and the kernel tests ran (so not, for instance, a
// run of benchmarks only).
func fullRun() bool {
	for _, name := range []string{"test.run", "test.skip", "test.list"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return false
		}
	}
	ran := false
	kernelsRun.Range(func(any, any) bool { ran = true; return false })
	return ran
}

// checkKernelsRun fails a full test run in which a kernel this CPU should
// have, by /proc/cpuinfo, was not run by forEachKernel: a feature
// detection bug must not hide behind a silent fallback.
func checkKernelsRun() error {
	want := expectedKernels()
	var missing []string
	for _, k := range want {
		if _, ok := kernelsRun.Load(k); !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("kernels %v should run on this CPU (by /proc/cpuinfo) but no test ran under them; available: %v", missing, kernelNames())
	}
	return nil
}

// expectedKernels lists the kernels this build should find on this CPU,
// read from /proc/cpuinfo independently of golang.org/x/sys/cpu, less
// those GODEBUG turns off.
func expectedKernels() []string {
	want := []string{"generic"}
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil || puregoBuild {
		return want
	}
	has := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		name, value, ok := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		if ok && (name == "flags" || name == "Features") {
			for _, f := range strings.Fields(value) {
				has[f] = true
			}
			break
		}
	}
	off := func(features ...string) bool {
		for _, f := range features {
			if strings.Contains(os.Getenv("GODEBUG"), "cpu."+f+"=off") {
				return true
			}
		}
		return false
	}
	switch runtime.GOARCH {
	case "amd64":
		if has["avx"] && has["avx512f"] && has["avx512bw"] && has["avx512vbmi"] && has["avx512_vbmi2"] &&
			!off("avx", "avx512f", "avx512bw", "avx512vbmi", "avx512vbmi2", "all") {
			want = append(want, "avx512")
		}
		if has["avx"] && has["avx2"] && !off("avx", "avx2", "all") {
			want = append(want, "avx2")
		}
	case "arm64":
		if has["asimd"] && !off("asimd", "all") {
			want = append(want, "neon")
		}
	}
	slices.Sort(want)
	return want
}

func TestKernelOverrideError(t *testing.T) {
	saved := activeKernel
	defer func() { activeKernel = saved }()
	t.Setenv("RANDFLAKE_KERNEL", "")
	if err := KernelOverrideError(); err != nil {
		t.Errorf("unset: %v", err)
	}
	t.Setenv("RANDFLAKE_KERNEL", "bogus")
	activeKernel = selectKernel("bogus")
	err := KernelOverrideError()
	if err == nil || !strings.Contains(err.Error(), `"bogus"`) || !strings.Contains(err.Error(), activeKernel.name) {
		t.Errorf("bogus kernel: %v; want an error naming it and the kernel used", err)
	}
	t.Setenv("RANDFLAKE_KERNEL", "generic")
	activeKernel = selectKernel("generic")
	if err := KernelOverrideError(); err != nil {
		t.Errorf("generic forced: %v", err)
	}
}

// The test binary run with -test.list (go test -list) lists the tests and
// succeeds: the check that every kernel ran applies only to full runs.
func TestListSucceeds(t *testing.T) {
	out, err := exec.Command(os.Args[0], "-test.list=^TestGoldenVectors$").CombinedOutput()
	if err != nil {
		t.Fatalf("test binary -test.list: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "TestGoldenVectors\n") {
		t.Errorf("test binary -test.list does not list TestGoldenVectors:\n%s", out)
	}
}
