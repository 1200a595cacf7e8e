package randflake

import (
	"testing"
	"time"
)

// A lease that starts at the current second is usable at once, even in the
// first microseconds of that second, when the coarse clock may still read
// the previous one.
func TestLeaseStartingNowAtSecondBoundary(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for eight second boundaries: not in -short")
	}
	// It reads the coarse clock only; the tests that set it run before
	// the parallel ones.
	t.Parallel()
	secret := make([]byte, 16)
	failures := map[string]int{}
	const rounds = 8
	for r := 0; r < rounds; r++ {
		// Keep the coarse clock running, then stand just past a boundary:
		// sleep to within a few milliseconds of it, reading the clock
		// (it stops after a second without a reader), and spin the rest.
		coarseNow()
		next := time.Now().Truncate(time.Second).Add(time.Second + 20*time.Microsecond)
		for time.Until(next) > 5*time.Millisecond {
			coarseNow()
			time.Sleep(time.Millisecond)
		}
		for time.Now().Before(next) {
			coarseNow()
		}
		start := time.Now().Unix()
		g, err := NewGenerator(5, start, start+60, secret)
		if err != nil {
			t.Fatal(err)
		}
		sh, err := NewSharded(ShardedConfig{Secret: secret, FirstNode: 0, LastNode: 3, LeaseStart: start, LeaseEnd: start + 60})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Generate(); err != nil {
			failures["Generator.Generate: "+err.Error()]++
		}
		if _, err := g.GenerateBatch(make([]int64, 4)); err != nil {
			failures["Generator.GenerateBatch: "+err.Error()]++
		}
		if _, err := sh.Generate(); err != nil {
			failures["Sharded.Generate: "+err.Error()]++
		}
		if _, err := sh.GenerateBatch(make([]int64, 4)); err != nil {
			failures["Sharded.GenerateBatch: "+err.Error()]++
		}
		if _, err := sh.NewLocal().Generate(); err != nil {
			failures["Local.Generate: "+err.Error()]++
		}
	}
	for what, n := range failures {
		t.Errorf("%s in %d of %d rounds started 20µs after a second boundary", what, n, rounds)
	}
}

// A lease that has not started by the wall clock is still refused.
func TestLeaseInTheFutureRefused(t *testing.T) {
	start := time.Now().Unix() + 5
	g, _ := NewGenerator(5, start, start+60, make([]byte, 16))
	if _, err := g.Generate(); err != ErrInvalidLease {
		t.Errorf("Generator.Generate before the lease: %v, want ErrInvalidLease", err)
	}
	sh, _ := NewSharded(ShardedConfig{Secret: make([]byte, 16), LastNode: 3, LeaseStart: start, LeaseEnd: start + 60})
	if _, err := sh.Generate(); err != ErrInvalidLease {
		t.Errorf("Sharded.Generate before the lease: %v, want ErrInvalidLease", err)
	}
	if _, err := sh.NewLocal().Generate(); err != ErrInvalidLease {
		t.Errorf("Local.Generate before the lease: %v, want ErrInvalidLease", err)
	}
}
