package randflake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
)

// TestLeasedLocal: goroutines taking IDs through their own Local of one
// Leased generator, through renewals of the lease, its loss and a new
// lease on another node ID. No ID is issued twice, none outside a lease's
// node IDs or seconds, none on the lost lease after the loss was seen,
// and every Local moves to the new lease.
func TestLeasedLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("renews and loses 2 s leases for seconds: not in -short")
	}
	t.Parallel()
	src := &testSource{first: 40, last: 41, ttl: 2}
	g := newTestLeased(t, src, nil)
	first := g.Lease()
	const workers = 4
	var stop atomic.Bool
	ids := make([][]int64, workers)
	// moved[w] is set once worker w took an ID of the new lease.
	var moved [workers]atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loc := g.NewLocal()
			for !stop.Load() {
				id, err := loc.Generate()
				switch {
				case err == nil:
					ids[w] = append(ids[w], id)
					if !moved[w].Load() {
						if _, node, _, _ := g.Inspect(id); node == 300 {
							moved[w].Store(true)
						}
					}
				case errors.Is(err, ErrInvalidLease) || errors.Is(err, ErrResourceExhausted):
					time.Sleep(time.Millisecond)
				default:
					t.Errorf("worker %d: %v", w, err)
					return
				}
			}
		}()
	}
	// Renewals while the Locals issue: a 2s lease is renewed every ~0.7s.
	waitFor(t, 10*time.Second, "two renewals", func() bool {
		var n int
		src.set(func(s *testSource) { n = s.renewed })
		return n >= 2
	})
	nextStart := time.Now().Unix() + 1
	src.set(func(s *testSource) {
		s.first, s.last, s.start = 300, 300, nextStart
		s.renewErr = fmt.Errorf("claim deleted: %w", ErrLeaseLost)
	})
	waitFor(t, 10*time.Second, "the new lease", func() bool { return g.Lease().FirstNode == 300 })
	// The loss was seen by now: no later second may carry the old nodes.
	lossSeen := time.Now().Unix()
	// Let the workers issue for a second or more on the new lease, and
	// until each has moved to it: its one node ID's 131,072 IDs a second
	// can go to the Locals that refill first, so a worker may wait a
	// second or two for its share.
	waitFor(t, 10*time.Second, "second after the new lease's start", func() bool { return time.Now().Unix() > nextStart+1 })
	waitFor(t, 20*time.Second, "every worker on the new lease", func() bool {
		for w := range workers {
			if !moved[w].Load() {
				return false
			}
		}
		return true
	})
	stop.Store(true)
	wg.Wait()
	seen := map[int64]bool{}
	for w, list := range ids {
		onNew := 0
		for _, id := range list {
			if seen[id] {
				t.Fatalf("duplicate ID %d", id)
			}
			seen[id] = true
			ts, node, _, _ := g.Inspect(id)
			switch {
			case node == 40 || node == 41:
				if ts < first.Start || ts > lossSeen {
					t.Errorf("worker %d: ID of node %d at second %s, outside %s..%s (the first lease's start, the loss seen)",
						w, node, formatSecond(ts), formatSecond(first.Start), formatSecond(lossSeen))
				}
			case node == 300:
				onNew++
				if ts < nextStart {
					t.Errorf("worker %d: ID of node 300 at second %s, before the new lease's start %s", w, formatSecond(ts), formatSecond(nextStart))
				}
			default:
				t.Errorf("worker %d: ID of node %d, in no lease", w, node)
			}
		}
		if onNew == 0 {
			t.Errorf("worker %d: no ID of the new lease (of %d)", w, len(list))
		}
	}
	t.Logf("%d IDs from %d workers", len(seen), workers)
}

// TestLeasedLocalStopsAtLeaseEnd: when renewal fails, a Local issues until
// the lease's end and none after it, then returns the *LeaseError.
func TestLeasedLocalStopsAtLeaseEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 1 s lease: not in -short")
	}
	t.Parallel()
	src := &testSource{first: 50, last: 50, ttl: 1}
	g := newTestLeased(t, src, nil)
	down := errors.New("coordination service down")
	src.set(func(s *testSource) { s.renewErr = down })
	loc := g.NewLocal()
	var maxTS int64
	var err error
	// The lease ends by the wall clock within two seconds; the bound only
	// ends a Local that never stops.
	slow := slowdown.Start()
	for start := time.Now(); time.Since(start) < slow.Stretch(10*time.Second); {
		var id int64
		id, err = loc.Generate()
		if errors.Is(err, ErrResourceExhausted) {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if err != nil {
			break
		}
		ts, _, _, _ := g.Inspect(id)
		maxTS = max(maxTS, ts)
	}
	var le *LeaseError
	if !errors.As(err, &le) || !errors.Is(err, ErrInvalidLease) || !errors.Is(err, down) {
		t.Fatalf("after the lease's end: %v, want a *LeaseError wrapping ErrInvalidLease and the source's error (lease %v; %s)", err, g.Lease(), slow)
	}
	if end := g.Lease().End; maxTS > end {
		t.Errorf("ID at second %s, after the lease's end %s", formatSecond(maxTS), formatSecond(end))
	}
}

// TestLeasedLocalClosed: a Local of a closed Leased returns ErrClosed.
func TestLeasedLocalClosed(t *testing.T) {
	t.Parallel()
	g := newTestLeased(t, &testSource{first: 60, last: 60, ttl: 30}, nil)
	loc := g.NewLocal()
	if _, err := loc.Generate(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := loc.Generate(); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

// waitFor polls cond every 10ms until it holds, failing the test after
// limit, stretched by how much slower than on idle cores the test runs
// meanwhile.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	slow := slowdown.Start()
	for start := time.Now(); !cond(); time.Sleep(10 * time.Millisecond) {
		if d := slow.Stretch(limit); time.Since(start) > d {
			t.Fatalf("no %s within %v (%s)", what, d, slow)
		}
	}
}
