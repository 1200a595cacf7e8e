package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// resultLine is one benchmark result line of `go test -bench` output.
type resultLine struct {
	name   string // without "Benchmark" and the -GOMAXPROCS suffix
	procs  int    // 1 when the name has no suffix
	iters  int64
	values []value
}

type value struct {
	v    float64
	unit string
}

// parseOutput reads the result lines of `go test -bench` output (the Go
// benchmark data format) and ignores everything else: configuration lines,
// PASS, ok, logs.
func parseOutput(r io.Reader) ([]resultLine, error) {
	var out []resultLine
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		// Name, iterations, then value-unit pairs. A line that does not fit
		// is a benchmark's log output, not a result.
		if len(f) < 4 || len(f)%2 != 0 {
			continue
		}
		iters, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || iters <= 0 {
			continue
		}
		rl := resultLine{iters: iters, procs: 1}
		rl.name = strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(rl.name, '-'); i > 0 {
			if p, err := strconv.Atoi(rl.name[i+1:]); err == nil && p > 0 {
				rl.name, rl.procs = rl.name[:i], p
			}
		}
		ok := true
		for i := 2; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				ok = false
				break
			}
			rl.values = append(rl.values, value{v, f[i+1]})
		}
		if ok && rl.name != "" {
			out = append(out, rl)
		}
	}
	return out, sc.Err()
}

// collector accumulates the samples of many runs into benchmarks, in the
// order in which they first appear.
type collector struct {
	list  []*Benchmark
	index map[string]*Benchmark
}

func (c *collector) add(suite, kernel string, lines []resultLine) error {
	if c.index == nil {
		c.index = map[string]*Benchmark{}
	}
	for _, l := range lines {
		key := suite + "\x00" + kernel + "\x00" + l.name
		b := c.index[key]
		if b == nil {
			b = &Benchmark{Suite: suite, Name: l.name, Kernel: kernel, Procs: l.procs}
			c.index[key] = b
			c.list = append(c.list, b)
		}
		if b.Procs != l.procs {
			return fmt.Errorf("%s: GOMAXPROCS changed from %d to %d between runs", l.name, b.Procs, l.procs)
		}
		for _, v := range l.values {
			m := b.Metric(v.unit)
			if m == nil {
				m = &Metric{Unit: v.unit}
				b.Metrics = append(b.Metrics, m)
			}
			m.Samples = append(m.Samples, v.v)
		}
	}
	return nil
}

// benchmarks returns the collected benchmarks with every metric summarized.
func (c *collector) benchmarks() []*Benchmark {
	for _, b := range c.list {
		for _, m := range b.Metrics {
			summarize(m)
		}
	}
	return c.list
}
