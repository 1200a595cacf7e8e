package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// roundSig rounds v to n significant digits.
func roundSig(v float64, n int) float64 {
	if v == 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return v
	}
	p := math.Pow(10, float64(n)-math.Ceil(math.Log10(math.Abs(v))))
	return math.Round(v*p) / p
}

// formatNumber prints v with three significant digits, and thousands
// separators from 1,000 on: 1.49, 10.7, 243, 6,981.
func formatNumber(v float64) string {
	r := roundSig(v, 3)
	if math.Abs(v) >= 1000 {
		r = math.Round(v)
		s := strconv.FormatFloat(math.Abs(r), 'f', 0, 64)
		var b strings.Builder
		if r < 0 {
			b.WriteByte('-')
		}
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		return b.String()
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}

// parseNumber reads a number printed by formatNumber.
func parseNumber(s string) (float64, error) {
	return strconv.ParseFloat(strings.ReplaceAll(strings.TrimSpace(s), ",", ""), 64)
}

// sameNumber reports whether a printed number shows v.
func sameNumber(printed string, v float64) bool {
	p, err := parseNumber(printed)
	if err != nil {
		return false
	}
	want := roundSig(v, 3)
	if math.Abs(v) >= 1000 {
		want = math.Round(v)
	}
	return math.Abs(p-want) <= 1e-9*math.Max(1, math.Abs(want))
}

// formatBytes prints a cache size.
func formatBytes(n int) string {
	switch {
	case n < 0:
		return "?"
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// formatMetric prints a median with its spread, "1.49 ±3%", or the bare
// median when the samples give no confidence interval.
func formatMetric(m *Metric) string {
	if m == nil {
		return "–"
	}
	s := formatNumber(m.Median)
	if m.CI && m.Median != 0 {
		s += fmt.Sprintf(" ±%.0f%%", 100*m.spread())
	}
	return s
}

// formatRatio prints a speed-up, "34.9×".
func formatRatio(r float64) string {
	return formatNumber(r) + "×"
}

// thousands prints an integer with thousands separators.
func thousands(n int) string { return formatNumber(float64(n)) }
