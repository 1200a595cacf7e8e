package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/leasetest"
)

// rivals is a store on which another process takes the run of each of the
// first `wins` claims between the claim's read and its write: those claims
// fail with ErrBlockHeld, as a real store's do, and change nothing.
type rivals struct {
	lease.BlockStore
	wins   int64
	step   time.Duration // how long each lost claim's step takes
	claims atomic.Int64  // claiming steps seen
}

func (s *rivals) Update(ctx context.Context, held lease.StoreClaim, all bool, fn func(*lease.StoreView) (*lease.StoreChanges, error)) (lease.StoreClaim, error) {
	return s.BlockStore.Update(ctx, held, all, func(v *lease.StoreView) (*lease.StoreChanges, error) {
		ch, err := fn(v)
		if err != nil || ch == nil || len(ch.Claim) == 0 {
			return ch, err
		}
		if n := s.claims.Add(1); n <= s.wins {
			time.Sleep(s.step)
			return nil, fmt.Errorf("%w (node IDs from %d: a rival's claim %d)", lease.ErrBlockHeld, ch.Claim[0], n)
		}
		return ch, nil
	})
}

// rivalSource returns a source of one block a claim, on a store where the
// first wins claims lose to a rival.
func rivalSource(t *testing.T, wins int64, step time.Duration) (*lease.BlockSource, *rivals) {
	t.Helper()
	h, err := newBackend(t, suiteLayout).Open(leasetest.MemOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st := &rivals{BlockStore: h, wins: wins, step: step}
	return sourceOn(t, st, suiteLayout, 1), st
}

// A claim that loses its run to another claimant claims again, many times
// in a row if it must (processes that start together meet again and
// again on a loaded machine), and only past 32 losses reports every block
// claimed, saying why.
func TestBlockSourceClaimLostToRivals(t *testing.T) {
	t.Parallel()
	for _, wins := range []int64{1, 7, 8, 20, 31} {
		t.Run(fmt.Sprintf("lost %d", wins), func(t *testing.T) {
			t.Parallel()
			src, st := rivalSource(t, wins, 0)
			l, err := src.Acquire(ctxFor(t, 30*time.Second))
			if err != nil {
				t.Fatalf("after %d claims lost to rivals, on a store with every block free: %v", wins, err)
			}
			if got := st.claims.Load(); got != wins+1 {
				t.Errorf("the source made %d claims, want %d (%d lost, then one that held)", got, wins+1, wins)
			}
			if err := src.Release(ctxFor(t, 10*time.Second), l, 0); err != nil {
				t.Errorf("releasing %v: %v", l, err)
			}
		})
	}
	t.Run("lost every time", func(t *testing.T) {
		t.Parallel()
		src, st := rivalSource(t, 1<<40, 0)
		_, err := src.Acquire(ctxFor(t, 60*time.Second))
		if !errors.Is(err, lease.ErrNoFreeNodes) || !errors.Is(err, lease.ErrBlockHeld) {
			t.Fatalf("a claim that loses every try: %v, want ErrNoFreeNodes wrapping the last ErrBlockHeld", err)
		}
		if got := st.claims.Load(); got != 32 {
			t.Errorf("the source made %d claims before it gave up, want 32", got)
		}
	})
}

// The pauses between lost claims end with the caller's context: a claim
// whose steps take 100 ms pauses up to 200 ms after each loss, 32 times,
// and is cancelled at 50 ms.
func TestBlockSourceClaimLostStopsWithContext(t *testing.T) {
	t.Parallel()
	src, st := rivalSource(t, 1<<40, 100*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := src.Acquire(ctx)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire cancelled while it lost claims, after %d claims: %v, want context.Canceled", st.claims.Load(), err)
		}
	case <-time.After(slowdown.Stretch(10 * time.Second)):
		t.Fatalf("Acquire did not return after its context was cancelled (%d claims made)", st.claims.Load())
	}
}
