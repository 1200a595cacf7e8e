package randflake

import (
	"testing"
	"time"
)

// After the process was stopped (SIGSTOP, a suspended VM) the coarse clock
// still reads the second it was stopped in until its goroutine runs again.
// Batches and buffer refills read the wall clock, so none of their IDs
// carries that stale second, and the lease's end is judged by the real
// time.
func TestBatchesIgnoreAStaleCoarseClock(t *testing.T) {
	forEachKernel(t, testBatchesIgnoreAStaleCoarseClock)
}

func testBatchesIgnoreAStaleCoarseClock(t *testing.T) {
	secret := []byte("0123456789abcdef")
	now := time.Now().Unix()
	stale := now - 5
	sh, err := NewSharded(ShardedConfig{Secret: secret, LastNode: 7, LeaseStart: now - 60, LeaseEnd: now + 60})
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGenerator(9, now-60, now+60, secret)
	if err != nil {
		t.Fatal(err)
	}
	// A lease that ended between the stop and now.
	ended, err := NewSharded(ShardedConfig{Secret: secret, LastNode: 7, LeaseStart: now - 60, LeaseEnd: now - 3})
	if err != nil {
		t.Fatal(err)
	}
	freeze := func() {
		coarseNow() // make sure the ticker runs, then make it look stopped
		coarse.word.Store(stale<<1 | 1)
	}
	check := func(what string, ids []int64) {
		t.Helper()
		for _, id := range ids {
			ts, _, _, _ := sh.Inspect(id)
			if wall := time.Now().Unix(); ts < wall-1 {
				t.Fatalf("%s: an ID carries second %d, %ds behind the clock (the coarse clock read %d)", what, ts, wall-ts, stale)
			}
		}
	}
	batch := make([]int64, 300)
	freeze()
	n, err := sh.GenerateBatch(batch)
	if err != nil {
		t.Fatal(err)
	}
	check("Sharded.GenerateBatch", batch[:n])
	freeze()
	if n, err = g.GenerateBatch(batch); err != nil {
		t.Fatal(err)
	}
	check("Generator.GenerateBatch", batch[:n])
	freeze()
	id, err := sh.Generate() // the first call fills the shard's buffer
	if err != nil {
		t.Fatal(err)
	}
	check("Sharded.Generate", []int64{id})
	freeze()
	if id, err = sh.NewLocal().Generate(); err != nil {
		t.Fatal(err)
	}
	check("Local.Generate", []int64{id})
	freeze()
	if n, err := ended.GenerateBatch(batch); err == nil || n != 0 {
		t.Errorf("a lease that ended 3s ago by the wall clock issued %d IDs (%v) while the coarse clock lagged", n, err)
	}
}

// A batch reads the wall clock, a single ID the coarse one, which lags by
// up to a tick at a second boundary. A node a batch has used up in the
// wall clock's second is then ahead of the coarse reading: that is the
// second being used up (ErrResourceExhausted), not the clock stepping back.
func TestCoarseLagIsNoStepBack(t *testing.T) { forEachKernel(t, testCoarseLagIsNoStepBack) }

func testCoarseLagIsNoStepBack(t *testing.T) {
	secret := []byte("0123456789abcdef")
	for round := 0; round < 3; round++ {
		now := time.Now().Unix()
		g, err := NewGenerator(3, now-60, now+60, secret)
		if err != nil {
			t.Fatal(err)
		}
		sh, err := NewSharded(ShardedConfig{Secret: secret, LastNode: 0, LeaseStart: now - 60, LeaseEnd: now + 60})
		if err != nil {
			t.Fatal(err)
		}
		batch := make([]int64, IDsPerSecond)
		gn, _ := g.GenerateBatch(batch)
		sn, _ := sh.GenerateBatch(batch)
		coarseNow()
		coarse.word.Store((time.Now().Unix()-1)<<1 | 1) // the coarse clock lags a second
		if _, err := g.Generate(); err == ErrConsistencyViolation {
			t.Fatalf("Generator.Generate after a batch of %d used the second up: %v, want ErrResourceExhausted", gn, err)
		}
		coarse.word.Store((time.Now().Unix()-1)<<1 | 1)
		if _, err := sh.Generate(); err == ErrConsistencyViolation {
			t.Fatalf("Sharded.Generate after a batch of %d used the second up: %v, want ErrResourceExhausted", sn, err)
		}
	}
}
