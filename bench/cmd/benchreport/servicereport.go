package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/randflake/randflake"
)

// serviceSection writes a machine's service table: one row per mode, the
// command that measured it, and the ratios the service is held to. Rows the
// run did not measure say so.
func serviceSection(s *section, r *Results) {
	m := r.Machine
	s.p("### Service: `randflake serve` under the load generator, on loopback")
	s.p("")
	info := r.Run.Service
	if info == nil {
		info = &ServiceInfo{Serve: serveDisplay(), NodeIDs: serveNodeIDs}
		s.p("Not measured in this run, on CPU %s (%d threads). Every row would be one run of `loadgen` (bench/cmd/loadgen)", m.CPU.Brand, m.NumCPU)
		s.p("against one service, started with `%s` (`PORT` a free port, e.g. 8080).", info.Serve)
	} else {
		s.p("Measured once per run, not per round (one sample per row, so no interval), on CPU %s with %d threads", m.CPU.Brand, m.NumCPU)
		s.p("shared by the service and the load generator. Every row is one run of the load generator (`loadgen`,")
		s.p("bench/cmd/loadgen; results recorded before it existed show `randflake load`, which held it then) against")
		s.p("one service, started with `%s` (`PORT` a free port, e.g. 8080). It counts the IDs of every answer", info.Serve)
		s.p("(`--verify=false`: status, type, length and count checked, nothing decoded), as it does for the bare")
		s.p("handler, so that the load generator takes as little of the shared CPUs as it can; the test suite's")
		s.p("load tests decode every ID and check for duplicates.")
	}
	s.p("")

	var rows [][]string
	seen := map[string]bool{}
	add := func(label, name, command string) {
		b := r.Find("service", name, "")
		seen[name] = true
		if b == nil {
			rows = append(rows, []string{label, notMeasured, notMeasured, notMeasured, notMeasured, code(command)})
			return
		}
		if b.Command != "" {
			command = b.Command
		}
		rows = append(rows, []string{label, serviceCell(b, "IDs/s"), serviceCell(b, "req/s"),
			serviceCell(b, "p50-ms"), serviceCell(b, "p99-ms"), code(command)})
	}
	for _, md := range serviceModes {
		add(md.label, serviceBenchmark(md.name), loadDisplay(md, r.Run.Short))
	}
	for _, b := range r.Benchmarks {
		if b.Suite == "service" && !seen[b.Name] {
			add(code(b.Name), b.Name, b.Command)
		}
	}
	s.table("lrrrrl", []string{"mode", "IDs/s", "requests/s", "p50 ms", "p99 ms", "command"}, rows)

	s.p("Ratios:")
	s.p("")
	for _, l := range serviceRatios(r, info) {
		s.p("- %s", l)
	}
	s.p("")
}

// serviceCell prints one metric of a service benchmark.
func serviceCell(b *Benchmark, unit string) string {
	m := b.Metric(unit)
	if m == nil {
		return "–"
	}
	return formatNumber(m.Median)
}

// serviceValue returns the median of one metric of a mode, if measured.
func serviceValue(r *Results, mode, unit string) (float64, bool) {
	b := r.Find("service", serviceBenchmark(mode), "")
	if b == nil {
		return 0, false
	}
	m := b.Metric(unit)
	if m == nil {
		return 0, false
	}
	return m.Median, true
}

// percent prints a share, "93.4%".
func percent(x float64) string { return formatNumber(100*x) + "%" }

// verdict says whether a target is met.
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// modeSeconds returns the whole seconds of --duration of a mode's run (as
// run short or not), or 0 if it is not a whole number of seconds.
func modeSeconds(mode string, short bool) int {
	i := slices.IndexFunc(serviceModes, func(m serviceMode) bool { return m.name == mode })
	if i < 0 {
		return 0
	}
	args := serviceModes[i].args
	if short {
		args = withDuration(args, serviceShortDuration)
	}
	for j := 0; j+1 < len(args); j++ {
		if args[j] == "--duration" {
			var d int
			if _, err := fmt.Sscanf(args[j+1], "%ds", &d); err == nil && fmt.Sprintf("%ds", d) == args[j+1] {
				return d
			}
		}
	}
	return 0
}

// serviceRatios are the comparisons the service is held to.
func serviceRatios(r *Results, info *ServiceInfo) []string {
	label := func(mode string) string {
		i := slices.IndexFunc(serviceModes, func(m serviceMode) bool { return m.name == mode })
		return serviceModes[i].label
	}
	var lines []string
	ceiling := float64(info.NodeIDs) * randflake.IDsPerSecond
	ceilText := fmt.Sprintf("the ceiling, %s IDs/s: %s node IDs × %s IDs per second each, the most a service holding them can hand out",
		formatNumber(ceiling), thousands(info.NodeIDs), thousands(randflake.IDsPerSecond))
	if bin, ok := serviceValue(r, serviceBinary, "IDs/s"); ok {
		line := fmt.Sprintf("**%s vs the ceiling:** %s IDs/s, %s of %s.", capital(label(serviceBinary)), formatNumber(bin), percent(bin/ceiling), ceilText)
		if d := modeSeconds(serviceBinary, r.Run.Short); d > 0 {
			// The ceiling holds per calendar second: a run of d seconds
			// started within a second spans d+1 of them.
			most := ceiling * float64(d+1) / float64(d)
			line += fmt.Sprintf(" The ceiling holds per calendar second, and a run of %d s spans %d of them, so it can reach %s IDs/s: the run reached %s of that.",
				d, d+1, formatNumber(most), percent(bin/most))
		}
		lines = append(lines, line)
	} else {
		lines = append(lines, fmt.Sprintf("**%s vs the ceiling:** %s (%s).", capital(label(serviceBinary)), notMeasured, ceilText))
	}
	single, ok1 := serviceValue(r, serviceSingle, "req/s")
	bare, ok2 := serviceValue(r, serviceBare, "req/s")
	target := fmt.Sprintf("target ≥ %s", percent(targetBareShare))
	if ok1 && ok2 && bare > 0 {
		lines = append(lines, fmt.Sprintf("**Single IDs vs the bare net/http handler:** %s requests/s, %s of the bare handler's %s (%s: %s).",
			formatNumber(single), percent(single/bare), formatNumber(bare), target, verdict(single/bare >= targetBareShare)))
	} else {
		lines = append(lines, fmt.Sprintf("**Single IDs vs the bare net/http handler:** %s (%s).", notMeasured, target))
	}
	target = fmt.Sprintf("target < %s ms", formatNumber(targetPacedP99))
	if p99, ok := serviceValue(r, servicePaced, "p99-ms"); ok {
		rate, _ := serviceValue(r, servicePaced, "req/s")
		lines = append(lines, fmt.Sprintf("**p99 latency at 5,000 requests/s:** %s ms, at %s requests/s reached (%s: %s).",
			formatNumber(p99), formatNumber(rate), target, verdict(p99 < targetPacedP99)))
	} else {
		lines = append(lines, fmt.Sprintf("**p99 latency at 5,000 requests/s:** %s (%s).", notMeasured, target))
	}
	js, ok1 := serviceValue(r, serviceJSON, "IDs/s")
	bin, ok2 := serviceValue(r, serviceBinary, "IDs/s")
	if ok1 && ok2 && js > 0 && bin > 0 {
		lines = append(lines, fmt.Sprintf("**JSON vs binary batches:** %s IDs/s, %s of binary's %s (binary %s faster).",
			formatNumber(js), percent(js/bin), formatNumber(bin), formatRatio(bin/js)))
	} else {
		lines = append(lines, fmt.Sprintf("**JSON vs binary batches:** %s.", notMeasured))
	}
	return lines
}

// capital returns s with its first letter in upper case.
func capital(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
