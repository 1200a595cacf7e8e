package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeResults builds the results of a full run from made-up benchmark
// output, through the same parser as real runs.
func fakeResults(t *testing.T, id, arch string, kernels []string, emulated bool) *Results {
	t.Helper()
	speed := map[string]float64{"avx512": 30, "avx2": 15, "neon": 3, "generic": 1}
	var col collector
	seed := uint64(len(id))
	jitter := func(v float64) float64 {
		seed = seed*6364136223846793005 + 1442695040888963407
		return v * (1 + float64(seed>>40)/float64(1<<24)*0.06)
	}
	run := func(suite, kernel string, lines []string) {
		lines2, err := parseOutput(strings.NewReader(strings.Join(lines, "\n")))
		if err != nil || len(lines2) != len(lines) {
			t.Fatalf("fake output did not parse: %v %d", err, len(lines2))
		}
		if err := col.add(suite, kernel, lines2); err != nil {
			t.Fatal(err)
		}
	}
	line := func(name string, nsOp float64, extra string) string {
		return fmt.Sprintf("Benchmark%s-4 \t 1000\t %.4g ns/op%s", name, nsOp, extra)
	}
	batch := []int{1, 8, 64, 1024, 65536}
	for round := 0; round < 6; round++ {
		var l []string
		l = append(l, line("Sparx64Block/Encrypt", jitter(49), "\t 163 MB/s"))
		for _, op := range []string{"EncryptIDs", "DecryptIDs"} {
			for _, k := range kernels {
				for _, n := range batch {
					per := jitter(50 / speed[k])
					if n <= 2 {
						per = jitter(60)
					}
					l = append(l, line(fmt.Sprintf("%s/kernel=%s/n=%d", op, k, n), per*float64(n), fmt.Sprintf("\t %.4g ns/ID", per)))
				}
			}
		}
		run("cipher", kernels[0], l)
		run("generator", kernels[0], []string{line("Generator/Generate", jitter(7000), "\t 0 B/op\t 0 allocs/op")})
		for _, k := range kernels {
			g := []string{
				line("Sharded/Generate", jitter(10+50/speed[k]), "\t 0 B/op\t 0 allocs/op"),
				line("Sharded/GenerateParallel", jitter(5+25/speed[k]), "\t 0 B/op\t 0 allocs/op"),
				line("Local/Generate", jitter(3+45/speed[k]), "\t 0 B/op\t 0 allocs/op"),
				line("Local/GenerateParallel", jitter(2+22/speed[k]), "\t 0 B/op\t 0 allocs/op"),
			}
			for _, n := range []int{64, 1024, 65536} {
				per := jitter(1 + 50/speed[k])
				g = append(g, line(fmt.Sprintf("Sharded/GenerateBatch/n=%d", n), per*float64(n), fmt.Sprintf("\t %.4g ns/ID\t 0 B/op\t 0 allocs/op", per)))
			}
			run("generator", k, g)
			var p []string
			names := []string{"randflake.Sharded", "randflake.Local"}
			if k == kernels[0] {
				names = append(names, "randflake.Generator", "rs/xid", "google/uuid.v4", "google/uuid.v7",
					"oklog/ulid.v2", "segmentio/ksuid", "bwmarrin/snowflake", "sony/sonyflake")
			}
			for i, name := range names {
				base := map[string]float64{"randflake.Sharded": 12 + 50/speed[k], "randflake.Local": 4 + 45/speed[k], "randflake.Generator": 7000, "rs/xid": 64, "google/uuid.v4": 112,
					"google/uuid.v7": 180, "oklog/ulid.v2": 98, "segmentio/ksuid": 130, "bwmarrin/snowflake": 244, "sony/sonyflake": 38630}[name]
				p = append(p, line("Generate/"+name, jitter(base), fmt.Sprintf("\t 0 B/op\t %d allocs/op", i%2)))
				p = append(p, line("GenerateParallel/"+name, jitter(base/2), "\t 0 B/op\t 0 allocs/op"))
			}
			for _, n := range []int{64, 65536} {
				per := jitter(2 + 50/speed[k])
				p = append(p, line(fmt.Sprintf("GenerateBatch/randflake.Sharded/n=%d", n), per*float64(n), fmt.Sprintf("\t %.4g ns/ID\t 0 B/op\t 0 allocs/op", per)))
			}
			run("peers", k, p)
		}
	}
	// The service suite: one load run per mode, once per run.
	for i, m := range serviceModes {
		batch := map[string]float64{serviceBinary: 1 << 20, serviceJSON: 10000}[m.name]
		if batch == 0 {
			batch = 1
		}
		// Requests per second of each mode.
		rate := map[string]float64{serviceBinary: 60, serviceJSON: 520, serviceSingle: 17000, servicePaced: 4990, serviceBare: 18500}[m.name]
		out := fmt.Sprintf("requests %.0f\nBenchmarkService/%s-4 \t %.0f\t %.4g ns/op\t %.6g IDs/s\t %.6g req/s\t %.4g p50-ms\t %.4g p99-ms\n",
			5*rate, m.name, 5*rate, 1e9/rate, rate*batch, rate, 0.3+0.1*float64(i), 1.5+0.1*float64(i))
		l, err := parseServiceOutput([]byte(out), m.name)
		if err != nil {
			t.Fatal(err)
		}
		if err := col.add("service", kernels[0], []resultLine{l}); err != nil {
			t.Fatal(err)
		}
	}
	r := &Results{
		Schema: schemaVersion,
		Machine: Machine{
			ID: id, OS: "linux", Arch: arch, NumCPU: 4, GoVersion: "go1.26.0", Kernels: kernels, SelectedKernel: kernels[0],
			CPU:      CPU{Brand: "Test CPU " + id, Vendor: "Test", X64Level: 3, Features: []string{"AVX2"}, L1D: 32 << 10, L1I: 32 << 10, L2: 1 << 20, L3: -1},
			Emulated: emulated,
		},
		Run: RunInfo{Date: "2026-01-02T03:04:05Z", Count: 6, Benchtime: "300ms", Seconds: 200, Raw: id + ".txt", LoadStart: "0.1 0.2 0.3", LoadEnd: "0.4 0.5 0.6", Note: "a test machine"},
	}
	if emulated {
		r.Machine.EmulationNote = "qemu"
	}
	r.Benchmarks = col.benchmarks()
	r.Run.Service = &ServiceInfo{Serve: serveDisplay(), NodeIDs: serveNodeIDs}
	for _, m := range serviceModes {
		r.Find("service", serviceBenchmark(m.name), "").Command = loadDisplay(m, false)
	}
	return r
}

// oldResults strips from r what results saved by earlier versions of the
// tool lack (Local, the service suite), as in a file of schema 1.
func oldResults(r *Results) *Results {
	var keep []*Benchmark
	for _, b := range r.Benchmarks {
		if b.Suite != "service" && !strings.Contains(b.Name, "Local") {
			keep = append(keep, b)
		}
	}
	r.Benchmarks = keep
	r.Schema = 1
	r.Run.Service = nil
	return r
}

// writeFake saves fake results of several machines into dir/results and
// renders dir/REPORT.md from them.
func writeFake(t *testing.T, dir string, machines ...*Results) (report, results string) {
	t.Helper()
	results = filepath.Join(dir, "results")
	if err := os.MkdirAll(results, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, r := range machines {
		if _, err := r.Save(results); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(results, r.Run.Raw), []byte("raw\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	report = filepath.Join(dir, "REPORT.md")
	if err := renderDir(results, report, io.Discard); err != nil {
		t.Fatal(err)
	}
	return report, results
}

func machines(t *testing.T) []*Results {
	return []*Results{
		fakeResults(t, "test-amd64-00000001", "amd64", []string{"avx512", "avx2", "generic"}, false),
		fakeResults(t, "test-arm64-00000002", "arm64", []string{"neon", "generic"}, false),
		fakeResults(t, "test-arm64-00000003", "arm64", []string{"neon", "generic"}, true),
		fakeResults(t, "test-amd64-00000004", "amd64", []string{"generic"}, false),
	}
}

func TestRenderAndCheck(t *testing.T) {
	dir := t.TempDir()
	report, results := writeFake(t, dir, machines(t)...)
	md, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	text := string(md)
	for _, want := range []string{
		"## Machine test-amd64-00000001", "## Machine test-arm64-00000002", "## Machine test-amd64-00000004",
		"![Time per ID", "](results/ns-per-id.svg)", "](results/kernel-speedup.svg)",
		"Left out because they ran under an emulator", "`test-arm64-00000003` (qemu)",
		"> a test machine",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(text, "## Machine test-arm64-00000003") {
		t.Error("the emulated machine has a section")
	}
	if strings.Contains(text, "arm64: no figures") {
		t.Error("arm64 note although an arm64 machine is shown")
	}
	svg, err := os.ReadFile(filepath.Join(results, speedupChartFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(svg, []byte("only the generic kernel runs on this CPU")) {
		t.Error("the generic-only machine's panel does not say why it is empty")
	}

	// Rendering is deterministic, so that -verify can compare.
	rs, err := LoadResults(results)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := render(rs, report, results)
	b, _ := render(rs, report, results)
	for _, p := range a.paths {
		if !bytes.Equal(a.files[p], b.files[p]) {
			t.Errorf("%s differs between two renderings", p)
		}
	}
	if err := verify(options{resultsDir: results, report: report}); err != nil {
		t.Errorf("verify: %v", err)
	}
}

// TestRenderOldResults renders results saved before Local was measured
// beside new ones: the missing rows say so, and the output checks out.
func TestRenderOldResults(t *testing.T) {
	dir := t.TempDir()
	old := oldResults(fakeResults(t, "test-amd64-00000001", "amd64", []string{"avx2", "generic"}, false))
	report, results := writeFake(t, dir, old, fakeResults(t, "test-amd64-00000002", "amd64", []string{"avx2", "generic"}, false))
	b, err := os.ReadFile(filepath.Join(results, "test-amd64-00000001.json"))
	if err != nil || !bytes.Contains(b, []byte(`"schema": 1,`)) {
		t.Fatalf("the old file is not of schema 1: %v", err)
	}
	md, _ := os.ReadFile(report)
	text := string(md)
	oldPart, newPart, ok := strings.Cut(text, "## Machine test-amd64-00000002")
	if !ok {
		t.Fatal("no section for the new machine")
	}
	for _, want := range []string{
		"- `Local.Generate` (library benchmark, one `Local` per goroutine): not measured in this run.\n",
		"| `Local.Generate`, one goroutine | not measured | not measured |\n",
		"| `Local.Generate`, RunParallel (one `Local` per goroutine) | not measured | not measured |\n",
		"| **randflake `Local.Generate`** | avx2 | not measured | not measured | – |\n",
	} {
		if !strings.Contains(oldPart, want) {
			t.Errorf("old machine's section lacks %q", want)
		}
	}
	if strings.Contains(newPart, notMeasured) {
		t.Error("the new machine's section has a row not measured")
	}
	for _, want := range []string{
		"Not measured in this run, on CPU Test CPU test-amd64-00000001 (4 threads).",
		"| binary batches of 1,048,576 IDs | not measured | not measured | not measured | not measured | `loadgen --url http://127.0.0.1:$PORT --batch 1048576 --concurrency 2 --format binary --verify=false --duration 5s --benchfmt batch-binary` |\n",
		"- **Binary batches of 1,048,576 IDs vs the ceiling:** not measured (the ceiling, 134,217,728 IDs/s: 1,024 node IDs × 131,072 IDs per second each, the most a service holding them can hand out).\n",
		"- **Single IDs vs the bare net/http handler:** not measured (target ≥ 90%).\n",
		"- **p99 latency at 5,000 requests/s:** not measured (target < 2 ms).\n",
		"- **JSON vs binary batches:** not measured.\n",
	} {
		if !strings.Contains(oldPart, want) {
			t.Errorf("old machine's service section lacks %q", want)
		}
	}
	for _, want := range []string{
		"on CPU Test CPU test-amd64-00000002 with 4 threads",
		"| single IDs, paced at 5,000 requests/s | 4,990 | 4,990 | 0.6 | 1.8 | `loadgen --url http://127.0.0.1:$PORT --batch 1 --concurrency 8 --rate 5000 --verify=false --duration 5s --benchfmt single-paced` |\n",
		"- **Binary batches of 1,048,576 IDs vs the ceiling:** 62,914,600 IDs/s, 46.9% of the ceiling, 134,217,728 IDs/s: ",
		"- **Single IDs vs the bare net/http handler:** 17,000 requests/s, 91.9% of the bare handler's 18,500 (target ≥ 90%: met).\n",
		"- **p99 latency at 5,000 requests/s:** 1.8 ms, at 4,990 requests/s reached (target < 2 ms: met).\n",
		"- **JSON vs binary batches:** 5,200,000 IDs/s, 8.27% of binary's 62,914,600 (binary 12.1× faster).\n",
	} {
		if !strings.Contains(newPart, want) {
			t.Errorf("new machine's service section lacks %q", want)
		}
	}
	for _, want := range []string{"`Sharded.Generate` ÷ `Local.Generate`, ns per ID: **", "| **randflake `Local.Generate`** | generic | "} {
		if !strings.Contains(newPart, want) {
			t.Errorf("new machine's section lacks %q", want)
		}
	}
	svg, _ := os.ReadFile(filepath.Join(results, nsPerIDChartFile))
	if n := bytes.Count(svg, []byte("Local.Generate: not measured in this run")); n != 1 {
		t.Errorf("ns-per-ID chart: %d notes that Local was not measured, want 1", n)
	}
	if !bytes.Contains(svg, []byte("Local.Generate (one Local per goroutine) · avx2")) {
		t.Error("ns-per-ID chart: no Local row")
	}
}

func TestCheckResults(t *testing.T) {
	if err := checkResults(fakeResults(t, "test-amd64-00000001", "amd64", []string{"avx2", "generic"}, false)); err != nil {
		t.Fatalf("complete results: %v", err)
	}
	err := checkResults(oldResults(fakeResults(t, "test-amd64-00000001", "amd64", []string{"avx2", "generic"}, false)))
	want := `no result for generator Local/Generate under kernel "avx2"
no result for generator Local/GenerateParallel under kernel "avx2"
no result for peers Generate/randflake.Local under kernel "avx2"
no result for peers GenerateParallel/randflake.Local under kernel "avx2"
no result for generator Local/Generate under kernel "generic"
no result for generator Local/GenerateParallel under kernel "generic"
no result for peers Generate/randflake.Local under kernel "generic"
no result for peers GenerateParallel/randflake.Local under kernel "generic"`
	if err == nil || err.Error() != want {
		t.Errorf("results without Local: got\n%v\nwant\n%s", err, want)
	}
}

func TestArm64Note(t *testing.T) {
	report, _ := writeFake(t, t.TempDir(), fakeResults(t, "test-amd64-00000001", "amd64", []string{"avx2", "generic"}, false))
	md, _ := os.ReadFile(report)
	if !bytes.Contains(md, []byte("**arm64: no figures.**")) {
		t.Error("no arm64 note")
	}
}

// TestCheckCatchesDamage damages the written output in several ways; the
// checks must notice each.
func TestCheckCatchesDamage(t *testing.T) {
	ms := machines(t)
	for _, tc := range []struct {
		name   string
		file   string // relative to the temp dir
		damage func(string) string
	}{
		{"row missing", "REPORT.md", func(s string) string {
			return strings.Replace(s, "| cipher | `EncryptIDs/kernel=avx2/n=64` | avx512 | ns/ID |", "| cipher | `EncryptIDs/kernel=avx2/n=65` | avx512 | ns/ID |", 1)
		}},
		{"median wrong", "REPORT.md", func(s string) string {
			i := strings.Index(s, "| peers | `Generate/rs/xid` | avx512 | ns/op | ")
			j := i + len("| peers | `Generate/rs/xid` | avx512 | ns/op | ")
			return s[:j] + "1" + s[j:]
		}},
		{"ragged table", "REPORT.md", func(s string) string {
			return strings.Replace(s, "| 1,024 |", "| 1,024 | 7 |", 1)
		}},
		{"image missing", "REPORT.md", func(s string) string {
			return strings.Replace(s, "results/ns-per-id.svg", "results/nope.svg", 1)
		}},
		{"svg truncated", "results/" + nsPerIDChartFile, func(s string) string { return s[:len(s)/2] }},
		{"svg not svg", "results/" + nsPerIDChartFile, func(s string) string {
			return strings.Replace(s, `xmlns="http://www.w3.org/2000/svg"`, `xmlns="urn:x"`, 1)
		}},
		{"bar missing", "results/" + speedupChartFile, func(s string) string {
			i := strings.Index(s, `<rect x=`)
			i += strings.Index(s[i:], `class="bar"`)
			start := strings.LastIndex(s[:i], "<rect")
			end := start + strings.Index(s[start:], "</rect>") + len("</rect>")
			return s[:start] + s[end:]
		}},
		{"value missing", "results/" + nsPerIDChartFile, func(s string) string {
			i := strings.Index(s, `class="value">`) + len(`class="value">`)
			return s[:i] + "x" + s[i:]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			report, results := writeFake(t, dir, ms...)
			path := filepath.Join(dir, filepath.FromSlash(tc.file))
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			damaged := tc.damage(string(b))
			if damaged == string(b) {
				t.Fatal("the damage changed nothing")
			}
			if err := os.WriteFile(path, []byte(damaged), 0o644); err != nil {
				t.Fatal(err)
			}
			rs, err := LoadResults(results)
			if err != nil {
				t.Fatal(err)
			}
			err = checkOutput(rs, report, results)
			if err == nil {
				t.Fatal("checkOutput found nothing wrong")
			}
			t.Log(err)
			if err := verify(options{resultsDir: results, report: report}); err == nil || !strings.Contains(err.Error(), "out of date") {
				t.Errorf("verify: %v", err)
			}
		})
	}
}

func TestLoadResultsRejects(t *testing.T) {
	r := fakeResults(t, "test-amd64-00000001", "amd64", []string{"generic"}, false)
	good, err := r.marshal()
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ file, content string }{
		"schema 0":      {"test-amd64-00000001.json", strings.Replace(string(good), `"schema": 2`, `"schema": 0`, 1)},
		"schema 3":      {"test-amd64-00000001.json", strings.Replace(string(good), `"schema": 2`, `"schema": 3`, 1)},
		"file name":     {"other.json", string(good)},
		"unknown field": {"test-amd64-00000001.json", strings.Replace(string(good), `"schema": 2`, `"schema": 2, "x": 1`, 1)},
		"not json":      {"test-amd64-00000001.json", "{"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadResults(dir); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	dir := t.TempDir()
	if _, err := r.Save(dir); err != nil {
		t.Fatal(err)
	}
	rs, err := LoadResults(dir)
	if err != nil || len(rs) != 1 || len(rs[0].Benchmarks) != len(r.Benchmarks) {
		t.Fatalf("round trip: %v", err)
	}
}

func TestPlan(t *testing.T) {
	inv := plan([]string{"avx512", "avx2", "generic"})
	count := map[string]int{}
	for _, in := range inv {
		count[in.suite+" "+in.kernel]++
	}
	for key, want := range map[string]int{
		"cipher avx512": 1, "generator avx512": 2, "generator avx2": 1, "generator generic": 1,
		"peers avx512": 1, "peers avx2": 1, "peers generic": 1,
	} {
		if count[key] != want {
			t.Errorf("%s: %d invocations, want %d", key, count[key], want)
		}
	}
	for _, in := range inv {
		var want string
		switch {
		case in.suite == "generator" && in.bench != "^BenchmarkGenerator$":
			want = "^(BenchmarkSharded|BenchmarkLocal)$"
		case in.suite == "peers" && in.kernel != "avx512":
			want = `^BenchmarkGenerate(Parallel|Batch)?$/^randflake\.(Sharded|Local)$`
		default:
			continue
		}
		if in.bench != want {
			t.Errorf("%s under %s: -test.bench %q, want %q", in.suite, in.kernel, in.bench, want)
		}
	}
}

// TestSmoke runs the real benchmarks once each (one iteration) through the
// whole pipeline: build, run under every kernel, save, render, check.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the benchmarks")
	}
	root, bench, err := moduleDirs()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := smokeRun(runConfig{
		RootDir: root, BenchDir: bench, WorkDir: dir,
		Count: 1, Benchtime: "1x", Short: true, Log: io.Discard,
	}, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"BENCHMARKS.md", "results/" + nsPerIDChartFile, "results/" + speedupChartFile,
		"results/" + res.Machine.ID + ".json", "results/" + res.Machine.ID + ".txt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if res.Machine.GoVersion == "" || len(res.Machine.Kernels) == 0 || res.Machine.CPU.Brand == "" {
		t.Errorf("machine: %+v", res.Machine)
	}
}
