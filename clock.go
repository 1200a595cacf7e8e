package randflake

import (
	"sync"
	"sync/atomic"
	"time"
)

// The coarse clock: reading the wall clock costs tens of nanoseconds, more
// than generating an ID, so generators read a Unix second that a background
// goroutine refreshes at least every clockTick and at each second boundary.
// The goroutine runs only while the clock is being read: after clockIdle
// without a reader it stops, and the next reader starts it again (reading
// the wall clock itself for that call).
const (
	clockTick = 10 * time.Millisecond
	clockIdle = time.Second
)

var coarse struct {
	_ [cacheLine]byte // keep word off cache lines written by others
	// word is the current Unix second shifted left by one, with the low
	// bit set once a reader has used it since the last tick; 0 while the
	// ticker is stopped.
	word atomic.Int64
	mu   sync.Mutex // serialises starting and stopping the ticker
	_    [cacheLine]byte
}

// coarseNow returns the current Unix second, at most clockTick old.
func coarseNow() int64 {
	if now, ok := coarseFast(); ok {
		return now
	}
	return coarseWordSlow() >> 1
}

// coarseFast is the inlinable fast path of coarseNow: the current second,
// and whether it was valid to use without the slow path. Hot paths call it
// directly and fall back to coarseNow.
func coarseFast() (int64, bool) {
	w := coarse.word.Load()
	return w >> 1, w&1 != 0
}

// coarseWordSlow marks the clock as used, starting the ticker if it is
// stopped, and returns the clock word.
func coarseWordSlow() int64 {
	for {
		w := coarse.word.Load()
		if w != 0 {
			if w&1 != 0 || coarse.word.CompareAndSwap(w, w|1) {
				return w | 1
			}
			continue
		}
		// Stopped: start the ticker, unless another reader just did.
		coarse.mu.Lock()
		if coarse.word.Load() == 0 {
			w = time.Now().Unix()<<1 | 1
			coarse.word.Store(w)
			go runCoarseClock()
			coarse.mu.Unlock()
			return w
		}
		coarse.mu.Unlock()
	}
}

func runCoarseClock() {
	timer := time.NewTimer(clockTick)
	defer timer.Stop()
	idle := time.Duration(0)
	for {
		now := time.Now()
		// Wake at the next second boundary or after clockTick, whichever
		// comes first.
		wait := min(clockTick, time.Second-time.Duration(now.Nanosecond())+time.Microsecond)
		timer.Reset(wait)
		<-timer.C
		now = time.Now()
		if coarse.word.Swap(now.Unix()<<1)&1 != 0 {
			idle = 0
			continue
		}
		idle += wait
		if idle >= clockIdle {
			coarse.mu.Lock()
			if coarse.word.CompareAndSwap(now.Unix()<<1, 0) {
				coarse.mu.Unlock()
				return
			}
			coarse.mu.Unlock()
			idle = 0
		}
	}
}

// wallNow reads the wall clock's second directly, for the calls that pay
// a clock reading once per batch: GenerateBatch and the refills of the
// per-CPU and per-goroutine buffers. The coarse clock can lag by more than
// a tick when its goroutine has not run for a while (the process was
// stopped with SIGSTOP, the machine was suspended, the CPUs were starved);
// batches must not carry such a stale second. wallNow also moves the
// coarse clock on when it lags, so that the per-ID calls catch up at the
// first batch or refill. Generators also call it before refusing a lease
// that has not started yet by the coarse clock, so that no call fails at a
// second the wall clock has already reached.
func wallNow() int64 {
	now := time.Now().Unix()
	for {
		w := coarse.word.Load()
		if w == 0 || w>>1 >= now {
			return now
		}
		if coarse.word.CompareAndSwap(w, now<<1|w&1) {
			return now
		}
	}
}
