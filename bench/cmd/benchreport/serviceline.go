package main

import (
	"bytes"
	"fmt"
	"strings"
)

// The line that loadgen --benchfmt NAME prints, in the Go benchmark
// format:
//
//	BenchmarkService/NAME[-P] <requests> <ns> ns/op <ids> IDs/s <reqs> req/s <p50> p50-ms <p99> p99-ms
//
// <requests> is the number of requests completed (any positive integer is
// read); ns/op is the run's wall time per request; IDs/s and req/s its
// throughput; p50-ms and p99-ms the latency percentiles in milliseconds, as
// decimals. The optional -P suffix is GOMAXPROCS. Other lines of load's
// output are ignored; extra units are kept.

// serviceUnits are the units the line must have.
var serviceUnits = []string{"ns/op", "IDs/s", "req/s", "p50-ms", "p99-ms"}

// serviceBenchmark is the benchmark name of a mode, without "Benchmark".
func serviceBenchmark(mode string) string { return "Service/" + mode }

// parseServiceOutput reads the one result line of a load run of mode.
func parseServiceOutput(out []byte, mode string) (resultLine, error) {
	lines, err := parseOutput(bytes.NewReader(out))
	if err != nil {
		return resultLine{}, err
	}
	want := serviceBenchmark(mode)
	if len(lines) != 1 {
		return resultLine{}, fmt.Errorf("%d result lines in the output of load, want one Benchmark%s line", len(lines), want)
	}
	l := lines[0]
	if l.name != want {
		return resultLine{}, fmt.Errorf("result line of Benchmark%s, want Benchmark%s", l.name, want)
	}
	var missing []string
	for _, u := range serviceUnits {
		if !hasUnit(l, u) {
			missing = append(missing, u)
		}
	}
	if len(missing) > 0 {
		return resultLine{}, fmt.Errorf("result line Benchmark%s has no %s", want, strings.Join(missing, ", "))
	}
	return l, nil
}

func hasUnit(l resultLine, unit string) bool {
	for _, v := range l.values {
		if v.unit == unit {
			return true
		}
	}
	return false
}
