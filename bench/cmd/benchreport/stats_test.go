package main

import (
	"math"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		samples        []float64
		median, lo, hi float64
		ci             bool
	}{
		{[]float64{5}, 5, 5, 5, false},
		{[]float64{3, 1, 2, 5, 4}, 3, 1, 5, false},                  // 5 samples: no 95% interval
		{[]float64{6, 1, 2, 5, 4, 3}, 3.5, 1, 6, true},              // 6: min and max cover 96.9%
		{[]float64{10, 1, 9, 2, 8, 3, 7, 4, 6, 5}, 5.5, 2, 9, true}, // 10: x(2), x(9) cover 97.9%
	} {
		m := &Metric{Samples: tc.samples}
		summarize(m)
		if m.Median != tc.median || m.Lo != tc.lo || m.Hi != tc.hi || m.CI != tc.ci {
			t.Errorf("summarize(%v) = median %v [%v, %v] ci %v, want %v [%v, %v] %v",
				tc.samples, m.Median, m.Lo, m.Hi, m.CI, tc.median, tc.lo, tc.hi, tc.ci)
		}
	}
}

func TestBinomCDF(t *testing.T) {
	if got := binomCDF(0, 6); math.Abs(got-1.0/64) > 1e-15 {
		t.Errorf("P(B<=0), n=6: %v", got)
	}
	if got := binomCDF(6, 6); math.Abs(got-1) > 1e-15 {
		t.Errorf("P(B<=6), n=6: %v", got)
	}
	if got := binomCDF(1, 10); math.Abs(got-11.0/1024) > 1e-15 {
		t.Errorf("P(B<=1), n=10: %v", got)
	}
}

func TestParseOutput(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/randflake/randflake
cpu: AMD EPYC
BenchmarkEncryptIDs/kernel=avx2/n=1024-2   	    4174	      3430 ns/op	2388.21 MB/s	         3.349 ns/ID
BenchmarkSharded/Generate                  	  782890	     13.98 ns/op	       0 B/op	       0 allocs/op
BenchmarkLog-8  some log line that is not a result
BenchmarkOdd-2   	 100	 1.0 ns/op	 2.0
BenchmarkZero-2   	 0	 1.0 ns/op
PASS
ok  	github.com/randflake/randflake	1.2s
`
	lines, err := parseOutput(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2: %+v", len(lines), lines)
	}
	l := lines[0]
	if l.name != "EncryptIDs/kernel=avx2/n=1024" || l.procs != 2 || l.iters != 4174 || len(l.values) != 3 ||
		l.values[2] != (value{3.349, "ns/ID"}) {
		t.Errorf("line 0: %+v", l)
	}
	if l := lines[1]; l.name != "Sharded/Generate" || l.procs != 1 || len(l.values) != 3 {
		t.Errorf("line 1: %+v", l)
	}

	var c collector
	if err := c.add("cipher", "avx2", lines); err != nil {
		t.Fatal(err)
	}
	if err := c.add("cipher", "avx2", lines); err != nil {
		t.Fatal(err)
	}
	bs := c.benchmarks()
	if len(bs) != 2 || len(bs[0].Metric("ns/ID").Samples) != 2 || bs[0].PerID().Median != 3.349 || bs[1].PerID().Unit != "ns/op" {
		t.Errorf("collected %+v", bs)
	}
	lines[0].procs = 4
	if err := c.add("cipher", "avx2", lines); err == nil {
		t.Error("GOMAXPROCS changed between runs and nobody noticed")
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "0"}, {1.4949, "1.49"}, {10.74, "10.7"}, {76, "76"}, {243.4, "243"}, {999.4, "999"},
		{6981.2, "6,981"}, {38630, "38,630"}, {1234567, "1,234,567"}, {0.6812, "0.681"}, {2.1, "2.1"},
	} {
		if got := formatNumber(tc.v); got != tc.want {
			t.Errorf("formatNumber(%v) = %q, want %q", tc.v, got, tc.want)
		}
		if !sameNumber(formatNumber(tc.v), tc.v) {
			t.Errorf("sameNumber(%q, %v) is false", formatNumber(tc.v), tc.v)
		}
	}
	if sameNumber("1.5", 1.49) {
		t.Error("sameNumber(1.5, 1.49)")
	}
	if got := formatBytes(32 << 10); got != "32 KiB" {
		t.Error(got)
	}
	if got := formatBytes(-1); got != "?" {
		t.Error(got)
	}
	m := &Metric{Median: 10, Lo: 9, Hi: 10.5, CI: true}
	if got := formatMetric(m); got != "10 ±10%" {
		t.Error(got)
	}
	if got := slug("  Intel(R) Core(TM) i7-8700K CPU @ 3.70GHz "); got != "intel-r-core-tm-i7-8700k-cpu-3-70ghz" {
		t.Error(got)
	}
}
