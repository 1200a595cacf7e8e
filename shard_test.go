package randflake

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
)

// maxBuffered is the most IDs Generate can hold in its buffers: one
// slot's worth per P.
func (s *Sharded) maxBuffered() int {
	return s.slotCount() * bufferIDs
}

func newTestSharded(t testing.TB, first, last int64, clk *fakeClock, shards int) *Sharded {
	t.Helper()
	cfg := ShardedConfig{
		Secret:     testSecret,
		FirstNode:  first,
		LastNode:   last,
		LeaseStart: testStart,
		LeaseEnd:   testStart + 1_000_000,
		Shards:     shards,
	}
	if clk != nil {
		cfg.TimeSource = clk.Now
	}
	s, err := NewSharded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// With one node ID and a stopped clock, a sharded generator issues exactly
// 131,072 IDs, all distinct, whichever shards the goroutines land on, and
// then reports exhaustion.
func TestShardedSingleNodeExhaustsExactly(t *testing.T) {
	forEachKernel(t, testShardedSingleNodeExhaustsExactly)
}

func testShardedSingleNodeExhaustsExactly(t *testing.T) {
	clk := newFakeClock(testStart + 50)
	s := newTestSharded(t, 42, 42, clk, 8)
	var mu sync.Mutex
	var ids []int64
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []int64
			batch := make([]int64, 100)
			for {
				var err error
				if w%2 == 0 {
					var id int64
					id, err = s.Generate()
					if err == nil {
						mine = append(mine, id)
					}
				} else {
					var n int
					n, err = s.GenerateBatch(batch)
					mine = append(mine, batch[:n]...)
				}
				if err != nil {
					if !errors.Is(err, ErrResourceExhausted) {
						t.Error(err)
					}
					break
				}
			}
			mu.Lock()
			ids = append(ids, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	checkUnique(t, ids)
	// IDs encrypted into a P's buffer but not handed out are lost, never
	// duplicated; at most one buffer per P is lost.
	if len(ids) > IDsPerSecond || len(ids) < IDsPerSecond-s.maxBuffered() {
		t.Fatalf("issued %d IDs in one second on one node", len(ids))
	}
	for _, id := range ids {
		ts, node, _, _ := s.Inspect(id)
		if ts != testStart+50 || node != 42 {
			t.Fatalf("Inspect: %d %d", ts, node)
		}
	}
	// The next second works again.
	clk.Add(1)
	if _, err := s.Generate(); err != nil {
		t.Fatal(err)
	}
}

// When a node's second is used up the shard moves on to other nodes of the
// range: 3 nodes give three times the IDs of one in a second.
func TestShardedMovesToOtherNodes(t *testing.T) { forEachKernel(t, testShardedMovesToOtherNodes) }

func testShardedMovesToOtherNodes(t *testing.T) {
	clk := newFakeClock(testStart + 7)
	s := newTestSharded(t, 100, 102, clk, 1)
	var ids []int64
	buf := make([]int64, 50000)
	for {
		n, err := s.GenerateBatch(buf)
		ids = append(ids, buf[:n]...)
		if err != nil {
			if !errors.Is(err, ErrResourceExhausted) {
				t.Fatal(err)
			}
			break
		}
	}
	if len(ids) != 3*IDsPerSecond {
		t.Fatalf("issued %d IDs, want %d", len(ids), 3*IDsPerSecond)
	}
	checkUnique(t, ids)
	nodes := map[int64]int{}
	for _, id := range ids {
		_, node, _, _ := s.Inspect(id)
		nodes[node]++
	}
	for n := int64(100); n <= 102; n++ {
		if nodes[n] != IDsPerSecond {
			t.Fatalf("node %d issued %d", n, nodes[n])
		}
	}
}

// Buffered IDs are never handed out more than one second behind the clock,
// and never outside the lease.
func TestShardedBufferFreshness(t *testing.T) { forEachKernel(t, testShardedBufferFreshness) }

func testShardedBufferFreshness(t *testing.T) {
	clk := newFakeClock(testStart + 100)
	s, err := NewSharded(ShardedConfig{Secret: testSecret, FirstNode: 0, LastNode: 3,
		LeaseStart: testStart, LeaseEnd: testStart + 110, TimeSource: clk.Now, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for step := 0; step < 30; step++ {
		for range 1 + step*37 {
			id, err := s.Generate()
			if clk.Now() > testStart+110 {
				if !errors.Is(err, ErrInvalidLease) {
					t.Fatalf("after lease end: %v", err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			ts, _, _, _ := s.Inspect(id)
			if ts < clk.Now()-1 || ts > testStart+110 {
				t.Fatalf("clock %d: ID from second %d", clk.Now(), ts)
			}
			ids = append(ids, id)
		}
		clk.Add(int64(step % 3)) // 0, 1 or 2 seconds
	}
	checkUnique(t, ids)
	if !s.UpdateLease(testStart, testStart+1000) {
		t.Fatal("renewal refused")
	}
	if _, err := s.Generate(); err != nil {
		t.Fatalf("after renewal: %v", err)
	}
}

func TestShardedClockStepsBack(t *testing.T) { forEachKernel(t, testShardedClockStepsBack) }

func testShardedClockStepsBack(t *testing.T) {
	clk := newFakeClock(testStart + 500)
	s := newTestSharded(t, 9, 9, clk, 2)
	var ids []int64
	for range 1000 {
		id, err := s.Generate()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	clk.Add(-300) // minutes back
	buf := make([]int64, 1000)
	n, err := s.GenerateBatch(buf)
	if err != nil || n != len(buf) {
		t.Fatal(n, err)
	}
	ids = append(ids, buf...)
	for range 1000 {
		id, err := s.Generate()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		if ts, _, _, _ := s.Inspect(id); ts != testStart+500 {
			t.Fatalf("timestamp %d after the clock stepped back, want the newest second", ts)
		}
	}
	checkUnique(t, ids)
}

// Millions of IDs from many goroutines on the real clock, through Generate
// and GenerateBatch: no duplicates. Run under -race in CI.
func TestShardedConcurrentUnique(t *testing.T) { forEachKernel(t, testShardedConcurrentUnique) }

func testShardedConcurrentUnique(t *testing.T) {
	now := time.Now().Unix()
	s, err := NewSharded(ShardedConfig{Secret: testSecret, FirstNode: 10, LastNode: 25,
		LeaseStart: now - 5, LeaseEnd: now + 3600})
	if err != nil {
		t.Fatal(err)
	}
	perG := 250000
	if raceEnabled || testing.Short() {
		perG = 60000
	}
	workers := 4 * runtime.GOMAXPROCS(0)
	ids := collectConcurrently(t, workers, perG, func(buf []int64) error {
		if len(buf)%2 == 0 {
			for i := range buf[:len(buf)/2] {
				id, err := s.Generate()
				if err != nil {
					return err
				}
				buf[i] = id
			}
		}
		for done := len(buf) / 2; done < len(buf); {
			n, err := s.GenerateBatch(buf[done:min(done+1000, len(buf))])
			done += n
			if err != nil {
				return err
			}
		}
		return nil
	})
	checkUnique(t, ids)
	end := time.Now().Unix()
	for _, id := range ids {
		ts, node, _, _ := s.Inspect(id)
		if node < 10 || node > 25 || ts < now-1 || ts > end {
			t.Fatalf("Inspect: ts %d node %d (window %d..%d)", ts, node, now, end)
		}
	}
	t.Logf("%d IDs from %d goroutines", len(ids), workers)
}
