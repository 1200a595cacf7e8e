package main

import (
	"math"
	"sort"
)

// confidence is the coverage of the interval reported around every median.
const confidence = 0.95

// summarize fills m's median and its interval from m.Samples: the
// distribution-free confidence interval of the median built from order
// statistics (as benchstat does). With fewer than 6 samples no interval
// reaches 95%, and Lo, Hi are the smallest and largest sample instead.
func summarize(m *Metric) {
	xs := append([]float64(nil), m.Samples...)
	sort.Float64s(xs)
	n := len(xs)
	if n == 0 {
		return
	}
	if n%2 == 1 {
		m.Median = xs[n/2]
	} else {
		m.Median = (xs[n/2-1] + xs[n/2]) / 2
	}
	m.Lo, m.Hi, m.CI = xs[0], xs[n-1], false
	// The interval [x(k), x(n+1-k)] (1-based) covers the median with
	// probability 1 - 2*P(B <= k-1), B ~ Binomial(n, 1/2). Take the
	// narrowest one that still covers it 95% of the time.
	for k := n / 2; k >= 1; k-- {
		if 1-2*binomCDF(k-1, n) >= confidence {
			m.Lo, m.Hi, m.CI = xs[k-1], xs[n-k], true
			break
		}
	}
}

// binomCDF returns P(B <= k) for B ~ Binomial(n, 1/2).
func binomCDF(k, n int) float64 {
	var sum float64
	c := 1.0 // C(n, i)
	for i := 0; i <= k; i++ {
		if i > 0 {
			c = c * float64(n-i+1) / float64(i)
		}
		sum += c
	}
	return sum / math.Pow(2, float64(n))
}

// spread is the larger distance from the median to either end of its
// interval, relative to the median: the "±x%" of benchstat.
func (m *Metric) spread() float64 {
	if m.Median == 0 {
		return 0
	}
	return math.Max(m.Hi-m.Median, m.Median-m.Lo) / m.Median
}
