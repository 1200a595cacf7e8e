package leasetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// Cycles describes a run of ClaimReleaseCycles.
type Cycles struct {
	// Workers is how many claimants run at once; each claims and releases
	// Cycles times.
	Workers, Cycles int
	// Source returns worker w's source, opened as a process of its own
	// would open it (a holder name of its own, say).
	Source func(w int) (randflake.LeaseSource, error)
	// Refused reports whether a failed claim is a refusal, tried again
	// (every block held, say); any other error fails the test. Nil:
	// errors wrapping lease.ErrNoFreeNodes.
	Refused func(err error) bool
	// Last returns the second a release of lease l, at the worker's cycle
	// i, records as the last one used: l.Start-1 for none, a second of l
	// for a lease that was used.
	Last func(i int, l randflake.Lease) int64
	// AfterRelease, if not nil, is called after each release with the
	// number of cycles all workers have done so far, one call at a time.
	AfterRelease func(done int)
	// Transient, if not nil, reports whether a failed claim failed only
	// because the store was slow (a step past its timeout): the claim is
	// tried again after a pause, as Leased tries again a failed
	// acquisition, counted and logged. More than MaxTransient such
	// failures in a row at one worker fail the test, naming the last.
	// Nil: no claim error is transient. A failed release is never tried
	// again (Leased does not either).
	Transient func(err error) bool
}

// MaxTransient is how many claims in a row of one worker of
// ClaimReleaseCycles may fail transiently before the test fails.
const MaxTransient = 10

// ClaimReleaseCycles runs c.Workers claimants at once, each claiming a
// lease and releasing it c.Cycles times on its source, and fails t if a
// claim fails with anything but a refusal, if a release fails, or if a
// lease starts at or before the second the last release of its node IDs
// recorded. It returns how many claims were refused (and tried again);
// claims that failed transiently (see Cycles.Transient) and were tried
// again are logged. What the cycles leave behind in the store is for the
// caller to check.
func ClaimReleaseCycles(t testing.TB, c Cycles) (refusals int) {
	t.Helper()
	refused := c.Refused
	if refused == nil {
		refused = func(err error) bool { return errors.Is(err, lease.ErrNoFreeNodes) }
	}
	ctx := context.Background()
	var mu sync.Mutex
	recorded := map[int64]int64{} // first node -> second recorded at release
	done := 0
	transient, inRow := 0, 0
	var wg sync.WaitGroup
	for w := range c.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src, err := c.Source(w)
			if err != nil {
				t.Error(err)
				return
			}
			row := 0 // transient failures in a row
			for i := 0; i < c.Cycles; i++ {
				l, err := src.Acquire(ctx)
				if err != nil && refused(err) {
					mu.Lock()
					refusals++
					mu.Unlock()
					i--
					continue
				}
				if err != nil && c.Transient != nil && c.Transient(err) {
					row++
					mu.Lock()
					transient++
					inRow = max(inRow, row)
					mu.Unlock()
					t.Logf("worker %d, cycle %d: claim failed (try %d in a row), tried again: %v", w, i, row, err)
					if row > MaxTransient {
						t.Errorf("worker %d, cycle %d: %d claims in a row failed on a slow store, the last: %v", w, i, row, err)
						return
					}
					time.Sleep(time.Duration(row) * 100 * time.Millisecond)
					i--
					continue
				}
				row = 0
				if err != nil {
					t.Error(err)
					return
				}
				last := c.Last(i, l)
				mu.Lock()
				if prev, ok := recorded[l.FirstNode]; ok && l.Start <= prev {
					t.Errorf("lease %v starts at or before the recorded second %d", l, prev)
				}
				recorded[l.FirstNode] = last
				mu.Unlock()
				if err := src.Release(ctx, l, last); err != nil {
					t.Error(err)
					return
				}
				if c.AfterRelease != nil {
					mu.Lock()
					done++
					c.AfterRelease(done)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if transient > 0 {
		t.Logf("%d claims failed on a slow store and were tried again (at most %d in a row at one worker)", transient, inRow)
	}
	return refusals
}
