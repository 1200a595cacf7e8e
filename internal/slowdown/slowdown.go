// Package slowdown measures how much slower than on idle cores this
// process is running, from the kernel's scheduler statistics, so that a
// test can stretch the deadline it asserts by what the machine really
// does to it, rather than by a fixed second that a loaded 2-core runner
// overruns.
//
// The measure is the time the process's threads spent runnable but
// waiting for a CPU against the time they ran (Linux
// /proc/self/task/*/schedstat): a process that waited as long as it ran
// is running at half speed, and a deadline meant for idle cores is
// stretched twice. Elsewhere, or where the statistics cannot be read, the
// factor is 1.
//
// It is for tests only; the product never reads it.
package slowdown

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxFactor caps the stretch: past it a deadline is too loose to mean
// anything, and a test that needs more has found a real stall.
const MaxFactor = 40

// sample is the process's threads' scheduler totals at one moment.
type sample struct {
	run, wait time.Duration
	ok        bool
}

func read() sample {
	paths, err := filepath.Glob("/proc/self/task/*/schedstat")
	if err != nil || len(paths) == 0 {
		return sample{}
	}
	var s sample
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // a thread that exited
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		run, err1 := strconv.ParseInt(f[0], 10, 64)
		wait, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		s.run += time.Duration(run)
		s.wait += time.Duration(wait)
		s.ok = true
	}
	return s
}

// Meter measures the slowdown since it started.
type Meter struct {
	start sample
	mu    sync.Mutex
	worst float64
}

// Start returns a Meter that measures from now on.
func Start() *Meter { return &Meter{start: read(), worst: 1} }

// process measures since the process started: from zero totals, which
// each thread's statistics count from.
var process = &Meter{start: sample{ok: true}, worst: 1}

// Factor returns how many times slower than on idle cores the process has
// run since m started (at least 1, at most MaxFactor), and never less
// than it returned before: a deadline once stretched stays stretched.
func (m *Meter) Factor() float64 {
	now := read()
	f := 1.0
	if m.start.ok && now.ok {
		run, wait := now.run-m.start.run, now.wait-m.start.wait
		if run < 20*time.Millisecond {
			// Too little has run since the start to tell: the
			// process's totals say more.
			run, wait = now.run, now.wait
		}
		if run > 0 {
			f = 1 + float64(wait)/float64(run)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.worst = min(max(m.worst, f), MaxFactor)
	return m.worst
}

// Stretch returns d stretched by m's factor.
func (m *Meter) Stretch(d time.Duration) time.Duration {
	return time.Duration(float64(d) * m.Factor())
}

// String describes the factor, for a failure message.
func (m *Meter) String() string {
	return fmt.Sprintf("this process ran %.1f× slower than on idle cores (time waiting for a CPU against time running)", m.Factor())
}

// Factor is the process's slowdown since it started (see Meter.Factor).
func Factor() float64 { return process.Factor() }

// Stretch returns d stretched by the process's slowdown since it started.
func Stretch(d time.Duration) time.Duration { return process.Stretch(d) }
