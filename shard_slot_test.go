package randflake

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
)

// Generate's per-P buffers under the scheduler's worst: more goroutines
// than Ps, goroutines yielding between IDs (so they move between Ps), and
// GOMAXPROCS changing all the while, up to more Ps than the generator made
// slots for. No ID may be handed out twice. Normal builds hold the slots
// by pinning, race and purego builds with a mutex; CI runs both.
func TestShardedSlotsUnderScheduling(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(2)
	now := time.Now().Unix()
	s, err := NewSharded(ShardedConfig{Secret: testSecret, FirstNode: 100, LastNode: 199,
		LeaseStart: now - 5, LeaseEnd: now + 3600})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.slots) != 2 {
		t.Fatalf("%d slots for GOMAXPROCS 2", len(s.slots))
	}
	perG := 100_000
	if raceEnabled || testing.Short() {
		perG = 20_000
	}
	var stop atomic.Bool
	var flips sync.WaitGroup
	flips.Add(1)
	go func() {
		defer flips.Done()
		for i := 0; !stop.Load(); i++ {
			runtime.GOMAXPROCS([]int{1, 4, 2, 8, 3}[i%5])
			time.Sleep(200 * time.Microsecond)
		}
	}()
	gen := func(buf []int64) error {
		for i := range buf {
			id, err := s.Generate()
			if err != nil {
				return err
			}
			buf[i] = id
			if i%97 == 0 {
				runtime.Gosched()
			}
		}
		return nil
	}
	// Rounds until a goroutine has run on a P beyond the slots made at
	// the start (a loaded machine may finish a round before the flips
	// reach 8), within a deadline stretched by how slowly it runs.
	var ids []int64
	slow := slowdown.Start()
	for began := time.Now(); ; {
		ids = append(ids, collectConcurrently(t, 16, perG, gen)...)
		if lockedSlots || s.slotCount() > len(s.slots) || time.Since(began) > slow.Stretch(20*time.Second) {
			break
		}
	}
	stop.Store(true)
	flips.Wait()
	checkUnique(t, ids)
	end := time.Now().Unix()
	for _, id := range ids {
		ts, node, _, _ := s.Inspect(id)
		if node < 100 || node > 199 || ts < now-6 || ts > end {
			t.Fatalf("Inspect: second %d node %d (window %d..%d)", ts, node, now-6, end)
		}
	}
	extra := s.slotCount() - len(s.slots)
	if !lockedSlots && extra == 0 {
		t.Errorf("GOMAXPROCS went up to 8 but no extra slot was made: the path for Ps beyond the first %d was not tested", len(s.slots))
	}
	t.Logf("%d IDs from 16 goroutines while GOMAXPROCS changed; %d extra slots (%s)", len(ids), extra, slow)
}

// Generate allocates nothing, refills included.
func TestShardedGenerateAllocates0(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	now := time.Now().Unix()
	s, err := NewSharded(ShardedConfig{Secret: testSecret, FirstNode: 0, LastNode: 1023,
		LeaseStart: now - 5, LeaseEnd: now + 3600})
	if err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(10*bufferIDs, func() {
		if _, err := s.Generate(); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("Generate: %v allocations per ID", a)
	}
}
