package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Chart file names, in the results directory.
const (
	nsPerIDChartFile = "ns-per-id.svg"
	speedupChartFile = "kernel-speedup.svg"
)

// Colours: randflake in blue, peers in orange; dark for one goroutine,
// light for RunParallel.
var nsPerIDSeries = []series{
	{"randflake, one goroutine", "#1f5fa8"},
	{"randflake, RunParallel (all threads)", "#8db9e6"},
	{"peer, one goroutine", "#c2641b"},
	{"peer, RunParallel (all threads)", "#f2b47e"},
}

var kernelColors = map[string]string{
	"avx512": "#6a3d9a",
	"avx2":   "#1f78b4",
	"neon":   "#2e8b3a",
}

var fallbackColors = []string{"#b15928", "#e31a1c", "#17becf", "#7f7f7f"}

// shown returns the results that belong in the report: emulated runs never
// do.
func shown(rs []*Results) []*Results {
	var out []*Results
	for _, r := range rs {
		if !r.Machine.Emulated {
			out = append(out, r)
		}
	}
	return out
}

// panelTitle names a machine in a chart.
func machinePanelTitle(r *Results) string {
	m := r.Machine
	t := fmt.Sprintf("%s · %s/%s · %d threads · %s · %s", m.CPU.Brand, m.OS, m.Arch, m.NumCPU, m.GoVersion, r.Run.Date[:min(10, len(r.Run.Date))])
	if r.Run.Short {
		t += " · SMOKE RUN, figures meaningless"
	}
	return t
}

// perIDBar is a bar for the time per ID of a benchmark, with its interval.
func perIDBar(s int, b *Benchmark) chartBar {
	m := b.PerID()
	bar := chartBar{Series: s, V: m.Median, Text: formatNumber(m.Median) + " ns"}
	if m.CI {
		bar.Lo, bar.Hi = m.Lo, m.Hi
	}
	return bar
}

// peerNames returns the generators of the peer harness other than
// randflake's, fastest first on one goroutine.
func peerNames(r *Results) []string {
	var names []string
	for _, b := range r.Benchmarks {
		if b.Suite != "peers" || !strings.HasPrefix(b.Name, "Generate/") {
			continue
		}
		n := strings.TrimPrefix(b.Name, "Generate/")
		if !strings.HasPrefix(n, "randflake.") {
			names = append(names, n)
		}
	}
	sort.SliceStable(names, func(i, j int) bool {
		return r.Find("peers", "Generate/"+names[i], "").PerID().Median <
			r.Find("peers", "Generate/"+names[j], "").PerID().Median
	})
	return names
}

// largestBatch returns the largest n of the peer harness's GenerateBatch
// benchmarks, 0 if there is none.
func largestBatch(r *Results, suite, prefix string) int {
	best := 0
	for _, b := range r.Benchmarks {
		if b.Suite == suite && strings.HasPrefix(b.Name, prefix) {
			if n, err := strconv.Atoi(b.Name[strings.LastIndex(b.Name, "=")+1:]); err == nil && n > best {
				best = n
			}
		}
	}
	return best
}

// nsPerIDChart is the main chart: ns per ID of randflake under every kernel
// beside its peers, all measured by the same harness, one panel per machine.
func nsPerIDChart(rs []*Results) *barChart {
	c := &barChart{
		Title:    "Time per ID: randflake under each kernel beside other Go ID generators",
		Subtitle: "Same harness for every generator (bench/peers_test.go); log scale, shorter is faster",
		XLabel:   "ns per ID (log scale)",
		Log:      true,
		Series:   nsPerIDSeries,
		Footer: []string{
			"Bars: median of the runs; whiskers: 95% confidence interval of the median (when there are at least 6 runs).",
			"RunParallel: GOMAXPROCS goroutines generating at once; ns per ID is wall time divided by all IDs.",
			"snowflake, sonyflake and randflake's one-node Generator are capped by IDs per time unit, not by CPU.",
		},
	}
	for _, r := range shown(rs) {
		p := chartPanel{Title: machinePanelTitle(r)}
		p.Rows = append(p.Rows, chartRow{Label: "randflake (this library), per kernel (RANDFLAKE_KERNEL)", Header: true})
		if n := largestBatch(r, "peers", "GenerateBatch/randflake.Sharded/n="); n > 0 {
			for _, k := range r.Machine.Kernels {
				if b := r.Find("peers", fmt.Sprintf("GenerateBatch/randflake.Sharded/n=%d", n), k); b != nil {
					p.Rows = append(p.Rows, chartRow{
						Label: fmt.Sprintf("Sharded.GenerateBatch, %s per call · %s", thousands(n), k),
						Bars:  []chartBar{perIDBar(0, b)},
					})
				}
			}
		}
		local := false
		for _, g := range []struct{ label, name string }{
			{"Sharded.Generate", "randflake.Sharded"},
			{"Local.Generate (one Local per goroutine)", "randflake.Local"},
		} {
			for _, k := range r.Machine.Kernels {
				row := chartRow{Label: g.label + " · " + k}
				if b := r.Find("peers", "Generate/"+g.name, k); b != nil {
					row.Bars = append(row.Bars, perIDBar(0, b))
				}
				if b := r.Find("peers", "GenerateParallel/"+g.name, k); b != nil {
					row.Bars = append(row.Bars, perIDBar(1, b))
				}
				if len(row.Bars) > 0 {
					p.Rows = append(p.Rows, row)
					local = local || g.name == "randflake.Local"
				}
			}
		}
		if !local && len(p.Rows) > 1 {
			p.Note = "Local.Generate: " + notMeasured + " in this run"
		}
		row := chartRow{Label: "Generator.Generate (one node ID)"}
		if b := r.Find("peers", "Generate/randflake.Generator", ""); b != nil {
			row.Bars = append(row.Bars, perIDBar(0, b))
		}
		if b := r.Find("peers", "GenerateParallel/randflake.Generator", ""); b != nil {
			row.Bars = append(row.Bars, perIDBar(1, b))
		}
		if len(row.Bars) > 0 {
			p.Rows = append(p.Rows, row)
		}
		if peers := peerNames(r); len(peers) > 0 {
			p.Rows = append(p.Rows, chartRow{Label: "peers, fastest first on one goroutine", Header: true})
			for _, name := range peers {
				row := chartRow{Label: name}
				row.Bars = append(row.Bars, perIDBar(2, r.Find("peers", "Generate/"+name, "")))
				if b := r.Find("peers", "GenerateParallel/"+name, ""); b != nil {
					row.Bars = append(row.Bars, perIDBar(3, b))
				}
				p.Rows = append(p.Rows, row)
			}
		}
		if len(p.Rows) == 1 {
			p.Rows = nil
			p.Note = "no generator benchmarks in this run"
		}
		c.Panels = append(c.Panels, p)
	}
	return c
}

// batchSizes returns the n of the cipher benchmarks, ascending.
func batchSizes(r *Results) []int {
	seen := map[int]bool{}
	var ns []int
	for _, b := range r.Benchmarks {
		if b.Suite != "cipher" || !strings.HasPrefix(b.Name, "EncryptIDs/") {
			continue
		}
		n, err := strconv.Atoi(b.Name[strings.LastIndex(b.Name, "=")+1:])
		if err == nil && !seen[n] {
			seen[n] = true
			ns = append(ns, n)
		}
	}
	sort.Ints(ns)
	return ns
}

// simdKernels returns the kernels of r other than generic.
func simdKernels(r *Results) []string {
	var ks []string
	for _, k := range r.Machine.Kernels {
		if k != "generic" {
			ks = append(ks, k)
		}
	}
	return ks
}

// speedup returns how many times faster b is than base, per ID.
func speedup(base, b *Benchmark) (float64, bool) {
	if base == nil || b == nil || b.PerID().Median == 0 {
		return 0, false
	}
	return base.PerID().Median / b.PerID().Median, true
}

// speedupRow is one row of the speed-up chart: for every SIMD kernel, how
// much faster it makes the benchmark named by name(kernel) than generic.
type speedupRow struct {
	label string
	suite string
	name  func(kernel string) string // benchmark name under that kernel
	env   bool                       // the kernel is chosen by RANDFLAKE_KERNEL, not by name
}

func speedupRows(r *Results) (groups []string, rows [][]speedupRow) {
	for _, op := range []string{"EncryptIDs", "DecryptIDs"} {
		var g []speedupRow
		for _, n := range batchSizes(r) {
			op, n := op, n
			g = append(g, speedupRow{
				label: fmt.Sprintf("%s, %s per call", op, thousands(n)),
				suite: "cipher",
				name:  func(k string) string { return fmt.Sprintf("%s/kernel=%s/n=%d", op, k, n) },
			})
		}
		groups = append(groups, "Sparx-64 "+op+" (the cipher alone), by IDs per call")
		rows = append(rows, g)
	}
	var g []speedupRow
	fixed := func(label, name string) {
		if r.Find("generator", name, "") != nil {
			g = append(g, speedupRow{label: label, suite: "generator", env: true, name: func(string) string { return name }})
		}
	}
	var ns []int
	for _, b := range r.Benchmarks {
		if b.Suite == "generator" && b.Kernel == "generic" && strings.HasPrefix(b.Name, "Sharded/GenerateBatch/n=") {
			if n, err := strconv.Atoi(strings.TrimPrefix(b.Name, "Sharded/GenerateBatch/n=")); err == nil {
				ns = append(ns, n)
			}
		}
	}
	sort.Ints(ns)
	for _, n := range ns {
		fixed(fmt.Sprintf("Sharded.GenerateBatch, %s per call", thousands(n)), fmt.Sprintf("Sharded/GenerateBatch/n=%d", n))
	}
	fixed("Sharded.Generate, one goroutine", "Sharded/Generate")
	fixed("Sharded.Generate, RunParallel", "Sharded/GenerateParallel")
	fixed("Local.Generate, one goroutine", "Local/Generate")
	fixed("Local.Generate, RunParallel", "Local/GenerateParallel")
	groups = append(groups, "Sharded generator and its Local handle (library benchmarks), RANDFLAKE_KERNEL forced")
	rows = append(rows, g)
	return groups, rows
}

// speedupOf returns the speed-up of kernel k over generic for one row.
func speedupOf(r *Results, row speedupRow, k string) (float64, bool) {
	if row.env {
		return speedup(r.Find(row.suite, row.name(k), "generic"), r.Find(row.suite, row.name(k), k))
	}
	return speedup(r.Find(row.suite, row.name("generic"), ""), r.Find(row.suite, row.name(k), ""))
}

// speedupChart shows, per machine, how many times faster each SIMD kernel
// is than the generic Go code.
func speedupChart(rs []*Results) *barChart {
	c := &barChart{
		Title:    "Speed-up of each SIMD kernel over the generic Go kernel",
		Subtitle: "Ratio of medians of ns per ID; longer is faster; 1 or 2 IDs per call take the scalar path in every kernel",
		XLabel:   "times faster than generic (linear scale)",
		Ref:      1,
		RefLabel: "generic = 1×",
		Footer: []string{
			"Cipher rows: one run calls every kernel in turn (kernel=NAME sub-benchmarks).",
			"Generator rows: the library's BenchmarkSharded and BenchmarkLocal run once per kernel, chosen with RANDFLAKE_KERNEL.",
		},
	}
	index := map[string]int{}
	for _, r := range shown(rs) {
		for _, k := range simdKernels(r) {
			if _, ok := index[k]; !ok {
				color := kernelColors[k]
				if color == "" {
					color = fallbackColors[len(index)%len(fallbackColors)]
				}
				index[k] = len(c.Series)
				c.Series = append(c.Series, series{k, color})
			}
		}
	}
	for _, r := range shown(rs) {
		p := chartPanel{Title: machinePanelTitle(r)}
		ks := simdKernels(r)
		if len(ks) == 0 {
			p.Note = "only the generic kernel runs on this CPU: nothing to compare"
			c.Panels = append(c.Panels, p)
			continue
		}
		groups, rows := speedupRows(r)
		for i, g := range groups {
			var body []chartRow
			for _, sr := range rows[i] {
				row := chartRow{Label: sr.label}
				for _, k := range ks {
					if x, ok := speedupOf(r, sr, k); ok {
						row.Bars = append(row.Bars, chartBar{Series: index[k], V: x, Text: formatRatio(x)})
					}
				}
				if len(row.Bars) > 0 {
					body = append(body, row)
				}
			}
			if len(body) > 0 {
				p.Rows = append(p.Rows, chartRow{Label: g, Header: true})
				p.Rows = append(p.Rows, body...)
			}
		}
		if len(p.Rows) == 0 {
			p.Note = "no kernel benchmarks in this run"
		}
		c.Panels = append(c.Panels, p)
	}
	return c
}
