package slowdown

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// Busy goroutines, more than the CPUs, make the process wait for CPUs:
// the factor must rise above 1, and a stretched deadline with it.
func TestFactorRisesUnderContention(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the scheduler statistics are Linux's")
	}
	m := Start()
	if f := m.Factor(); f < 1 || f > MaxFactor {
		t.Fatalf("factor %v outside [1, %d]", f, MaxFactor)
	}
	// Threads locked to OS threads, 4 per CPU, spinning for 300 ms.
	stop := time.Now().Add(300 * time.Millisecond)
	var wg sync.WaitGroup
	for range 4 * runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for time.Now().Before(stop) {
			}
		}()
	}
	old := runtime.GOMAXPROCS(4 * runtime.NumCPU())
	wg.Wait()
	runtime.GOMAXPROCS(old)
	f := m.Factor()
	if f <= 1.5 {
		t.Errorf("after %d spinning threads on %d CPUs the factor is %.2f, want above 1.5", 4*runtime.NumCPU(), runtime.NumCPU(), f)
	}
	if d := m.Stretch(time.Second); d < time.Duration(float64(time.Second)*f) {
		t.Errorf("Stretch(1s) = %v, want at least %v", d, time.Duration(float64(time.Second)*f))
	}
	// The process's own measure, since it started, saw the same wait.
	if pf := Factor(); pf <= 1.2 {
		t.Errorf("after the spinning threads the process's factor is %.2f, want above 1.2", pf)
	}
	if f2 := m.Factor(); f2 < f {
		t.Errorf("the factor fell from %.2f to %.2f: a stretched deadline must stay stretched", f, f2)
	}
	t.Log(m)
}
