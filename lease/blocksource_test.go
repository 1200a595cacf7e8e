package lease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/leasetest"
)

// The lease engine on the in-memory reference store, through the
// conformance suite, and the rules the suite cannot reach.

// suiteLayout is 8 blocks of 16 node IDs.
var suiteLayout = lease.BlockLayout{FirstNode: 0, LastNode: 127, Size: 16}

// The suite on claims that lapse 2 s after their last renewal, like etcd
// leases or PostgreSQL rows with an expiry; a store that goes back moves
// its position back, which only a running holder sees. The backend serves
// a TCP address, so that the suite can cut a holder off with its proxy.
func TestLeaseSuiteMemStore(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite waits out 2 s claims and promises: not in -short")
	}
	t.Parallel()
	leasetest.Run(t, leasetest.Harness{Layout: suiteLayout, Parallel: true, New: func(t *testing.T) *leasetest.Store {
		b, err := leasetest.NewMemBackend(suiteLayout)
		if err != nil {
			t.Fatal(err)
		}
		b.Serve(t)
		return b.Hooks(leasetest.MemOptions{TTL: 2 * time.Second})
	}})
}

// The suite on claims that never lapse while their process lives, like
// file locks; a store that goes back changes its identity (a failover).
func TestLeaseSuiteMemStoreLocks(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite waits out 2 s promises: not in -short")
	}
	t.Parallel()
	leasetest.Run(t, leasetest.Harness{Layout: suiteLayout, Blocks: 2, Parallel: true, New: func(t *testing.T) *leasetest.Store {
		b, err := leasetest.NewMemBackend(suiteLayout)
		if err != nil {
			t.Fatal(err)
		}
		s := b.Hooks(leasetest.MemOptions{Promise: 2 * time.Second})
		s.Rollback = func(*testing.T) func(*testing.T) {
			sn := b.Save()
			return func(*testing.T) {
				b.Restore(sn)
				b.Failover()
			}
		}
		return s
	}})
}

// Rules the suite does not reach, on MemStore with short promises.

// unitLayout is 4 blocks of 16 node IDs.
var unitLayout = lease.BlockLayout{FirstNode: 0, LastNode: 63, Size: 16}

// locks and lapsing are the two kinds of MemStore claims: file locks,
// with a 1 s promise, and claims lapsing 1.5 s after their renewal.
var (
	locks   = leasetest.MemOptions{Promise: time.Second}
	lapsing = leasetest.MemOptions{TTL: 1500 * time.Millisecond}
)

func newBackend(t *testing.T, l lease.BlockLayout) *leasetest.MemBackend {
	t.Helper()
	b, err := leasetest.NewMemBackend(l)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newSource opens a handle on b and a BlockSource on it, with blocks
// blocks per claim.
func newSource(t *testing.T, b *leasetest.MemBackend, o leasetest.MemOptions, blocks int64) (*lease.BlockSource, *leasetest.MemStore) {
	t.Helper()
	h, err := b.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return sourceOn(t, h, b.Layout(), blocks), h
}

// sourceOn returns a BlockSource on st, with blocks blocks of l per claim.
func sourceOn(t *testing.T, st lease.BlockStore, l lease.BlockLayout, blocks int64) *lease.BlockSource {
	t.Helper()
	src, err := lease.NewBlockSource(st, lease.BlockSourceConfig{Secret: leasetest.Secret(), Layout: l, Blocks: blocks})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// renewFor renews l every 100 ms for d and returns the last renewal, as a
// holder keeps a claim that lapses 1.5 s after its last renewal alive: a
// loaded machine that delays a renewal by less than the TTL does not let
// it lapse (as it would one renewal after a sleep of most of the TTL).
func renewFor(t *testing.T, ctx context.Context, src *lease.BlockSource, l randflake.Lease, d time.Duration) randflake.Lease {
	t.Helper()
	for start := time.Now(); time.Since(start) < d; {
		time.Sleep(max(min(100*time.Millisecond, d-time.Since(start)), time.Millisecond))
		var err error
		if l, err = src.Renew(ctx, l); err != nil {
			t.Fatalf("renewal %v after the first: %v", time.Since(start).Round(time.Millisecond), err)
		}
	}
	return l
}

// ctxFor returns a context for a budget of d on idle cores: its deadline
// is d stretched by how much slower the test runs, so that it ends only a
// call that never returns. (A deadline meant to expire is set directly.)
func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), slowdown.Stretch(d))
	t.Cleanup(cancel)
	return ctx
}

// Bad configurations are refused with an error that names the problem,
// never the secret.
func TestBlockSourceConfig(t *testing.T) {
	t.Parallel()
	b := newBackend(t, unitLayout)
	h, _ := b.Open(locks)
	secret := leasetest.Secret()
	ok := lease.BlockSourceConfig{Secret: secret, Layout: unitLayout}
	for _, c := range []struct {
		name  string
		store lease.BlockStore
		edit  func(*lease.BlockSourceConfig)
		want  string
	}{
		{"nil store", nil, func(*lease.BlockSourceConfig) {}, "nil store"},
		{"short secret", h, func(c *lease.BlockSourceConfig) { c.Secret = secret[:15] }, "16 bytes"},
		{"blocks of 0", h, func(c *lease.BlockSourceConfig) { c.Layout.Size = 0 }, "do not divide"},
		{"blocks that do not divide", h, func(c *lease.BlockSourceConfig) { c.Layout.Size = 24 }, "do not divide"},
		{"range past MaxNode", h, func(c *lease.BlockSourceConfig) { c.Layout.LastNode = randflake.MaxNode + 16 }, "node"},
		{"more blocks per claim than blocks", h, func(c *lease.BlockSourceConfig) { c.Blocks = 5 }, "blocks per claim"},
		{"negative blocks per claim", h, func(c *lease.BlockSourceConfig) { c.Blocks = -1 }, "blocks per claim"},
		{"negative horizon", h, func(c *lease.BlockSourceConfig) { c.Horizon = -time.Second }, "negative horizon"},
	} {
		cfg := ok
		c.edit(&cfg)
		_, err := lease.NewBlockSource(c.store, cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), string(secret)) {
			t.Errorf("%s: the error shows the secret: %v", c.name, err)
		}
	}
	if _, err := b.Open(leasetest.MemOptions{}); err == nil {
		t.Error("a MemStore with neither TTL nor promise was opened")
	}
}

// A source holds one lease at a time, and renews or releases only it.
func TestBlockSourceOneLease(t *testing.T) {
	t.Parallel()
	b := newBackend(t, unitLayout)
	src, _ := newSource(t, b, locks, 1)
	ctx := ctxFor(t, 10*time.Second)
	l, err := src.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Acquire(ctx); err == nil {
		t.Error("a second Acquire while holding a lease succeeded")
	}
	other := l
	other.FirstNode, other.LastNode = l.FirstNode+16, l.LastNode+16
	if _, err := src.Renew(ctx, other); err == nil {
		t.Errorf("Renew of %v, not the lease held (%v), succeeded", other, l)
	}
	if err := src.Release(ctx, other, 0); err == nil {
		t.Errorf("Release of %v, not the lease held (%v), succeeded", other, l)
	}
	if err := src.Release(ctx, l, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Renew(ctx, l); err == nil {
		t.Error("Renew after Release succeeded")
	}
}

// A release reporting a second after the lease's end is refused: the
// promise stands (the record is left as it was) and the blocks are freed.
func TestBlockSourceReleaseAfterEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a dead holder's promise: not in -short")
	}
	t.Parallel()
	b := newBackend(t, lease.BlockLayout{FirstNode: 0, LastNode: 15, Size: 16})
	src, _ := newSource(t, b, locks, 1)
	ctx := ctxFor(t, 10*time.Second)
	l, err := src.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := b.Record(0)
	if err := src.Release(ctx, l, l.End+1); err == nil {
		t.Fatalf("a release reporting second %d after the end of %v succeeded", l.End+1, l)
	}
	if after := b.Record(0); !bytes.Equal(after, before) {
		t.Errorf("the refused release changed the record from %q to %q", before, after)
	}
	next, _ := newSource(t, b, locks, 1)
	l2, err := next.Acquire(ctx)
	if err != nil {
		t.Fatalf("the blocks of a refused release are not free: %v", err)
	}
	if l2.Start <= l.End {
		t.Errorf("the next lease %v starts within the promise of %v", l2, l)
	}
}

// Rule 2: a claim prefers a block whose seconds have passed, and takes a
// block whose seconds are still ahead only when there is no other, starting
// after them.
func TestBlockSourcePrefersPassedBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a dead holder's promise: not in -short")
	}
	t.Parallel()
	b := newBackend(t, lease.BlockLayout{FirstNode: 0, LastNode: 31, Size: 16})
	ctx := ctxFor(t, 10*time.Second)
	dead, h := newSource(t, b, locks, 1)
	ld, err := dead.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h.Kill() // the promise stands; the lock goes with the process
	a, _ := newSource(t, b, locks, 1)
	// Acquire waits only for a lease whose Start is still ahead: one
	// starting no later than the second Acquire was called in came
	// without a wait.
	from := time.Now().Unix()
	la, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if la.FirstNode == ld.FirstNode || la.Start > from {
		t.Errorf("with a free block whose seconds have passed, a claim at second %d got %v, the dead holder's %v: want the free block, at once", from, la, ld)
	}
	c, _ := newSource(t, b, locks, 1)
	lc, err := c.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lc.FirstNode != ld.FirstNode || lc.Start != ld.End+1 {
		t.Errorf("the last free block: got %v, want the dead holder's node IDs from second %d", lc, ld.End+1)
	}
}

// Rule 4: a claimant that waits for a block's seconds records nothing, so
// a claimant that gives up, or dies, while waiting costs its successor no
// further wait.
func TestBlockSourceWaitRecordsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a dead holder's promise: not in -short")
	}
	t.Parallel()
	b := newBackend(t, lease.BlockLayout{FirstNode: 0, LastNode: 15, Size: 16})
	dead, h := newSource(t, b, locks, 1)
	ld, err := dead.Acquire(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	h.Kill()
	before := b.Record(0)
	impatient, _ := newSource(t, b, locks, 1)
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if l, err := impatient.Acquire(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a claim that must wait until second %d, given 200ms: %v, %v", ld.End+1, l, err)
	}
	if after := b.Record(0); !bytes.Equal(after, before) {
		t.Errorf("a claimant that gave up waiting changed the record from %q to %q", before, after)
	}
	next, _ := newSource(t, b, locks, 1)
	l, err := next.Acquire(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l.Start != ld.End+1 {
		t.Errorf("after a claimant gave up waiting, the next lease is %v, want it to start at %d, right after the dead holder's promise", l, ld.End+1)
	}
}

// A record that fails its check is waited out once: once the marker
// covers it, the next claims do not wait again while it stays.
func TestBlockSourceBadRecordWaitedOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the history a damaged record leaves unknown: not in -short")
	}
	t.Parallel()
	b := newBackend(t, unitLayout)
	ctx := ctxFor(t, 20*time.Second)
	setup, _ := newSource(t, b, locks, 1)
	l, err := setup.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := setup.Release(ctx, l, 0); err != nil {
		t.Fatal(err)
	}
	b.SetRecord(48, []byte("not a record"))
	first, _ := newSource(t, b, locks, 1)
	from := time.Now().Unix()
	l1, err := first.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l1.Start <= from+1 {
		t.Errorf("the first claim after a record was damaged got %v at second %d: no wait", l1, from)
	}
	second, _ := newSource(t, b, locks, 1)
	from = time.Now().Unix()
	l2, err := second.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Acquire waits only for a lease whose Start is still ahead.
	if l2.Start > from && l2.FirstNode != 48 {
		t.Errorf("the second claim, at second %d, waited for a damaged record already waited out (lease %v)", from, l2)
	}
	if got := b.Record(48); string(got) != "not a record" {
		t.Fatalf("the damaged record changed to %q", got)
	}
}

// A store that goes back (its position lower, or its identity changed)
// under a holder: the next renewal reports ErrLeaseLost wrapping
// ErrHistoryRolledBack, including when the claim had lapsed in the copy
// put back; a newcomer then waits out unknown history.
func TestBlockSourceGoesBackUnderHolder(t *testing.T) {
	if testing.Short() {
		t.Skip("renews for 1.7 s and waits out unknown history: not in -short")
	}
	t.Parallel()
	for _, c := range []struct {
		name  string
		fault func(b *leasetest.MemBackend, saved *leasetest.MemSnapshot)
	}{
		// Back by two steps: the renewal may record a promise (a step)
		// before it reads the position, and from one step back that
		// would bring the position to where the holder saw it, which no
		// comparison of positions can tell (a loaded machine delays the
		// renewal until it is due to record one).
		{"position rewound", func(b *leasetest.MemBackend, _ *leasetest.MemSnapshot) { b.RewindPosition(2) }},
		{"failover", func(b *leasetest.MemBackend, _ *leasetest.MemSnapshot) { b.Failover() }},
		{"copy with the claim lapsed", func(b *leasetest.MemBackend, saved *leasetest.MemSnapshot) { b.Restore(saved) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newBackend(t, unitLayout)
			ctx := ctxFor(t, 20*time.Second)
			src, _ := newSource(t, b, lapsing, 1)
			l, err := src.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			saved := b.Save()
			// Another process claims and releases while the holder
			// renews: the store moves on.
			other, _ := newSource(t, b, lapsing, 1)
			moved := make(chan error, 1)
			go func() {
				lo, err := other.Acquire(ctx)
				if err == nil {
					err = other.Release(ctx, lo, 0)
				}
				moved <- err
			}()
			// Renew until the other process is done and the claim in the
			// copy has lapsed (1.5 s after the claim).
			l = renewFor(t, ctx, src, l, 1700*time.Millisecond)
			for done := false; !done; {
				select {
				case err := <-moved:
					if err != nil {
						t.Fatal(err)
					}
					done = true
				case <-time.After(100 * time.Millisecond):
					l = renewFor(t, ctx, src, l, 100*time.Millisecond)
				}
			}
			// The holder sees the position the other process left.
			l = renewFor(t, ctx, src, l, 200*time.Millisecond)
			from := time.Now().Unix() // the history is unknown from the fault on
			c.fault(b, saved)
			_, err = src.Renew(ctx, l)
			if !errors.Is(err, randflake.ErrLeaseLost) || !errors.Is(err, lease.ErrHistoryRolledBack) {
				t.Fatalf("renewal after the store went back: %v, want ErrLeaseLost wrapping ErrHistoryRolledBack", err)
			}
			next, _ := newSource(t, b, lapsing, 1)
			ln, err := next.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ln.Start < from+2+1 || ln.Start <= l.End {
				t.Errorf("a newcomer after the store went back got %v at second %d; want it after the unknown history (2 s) and the holder's end %d", ln, from, l.End)
			}
		})
	}
}

// A holder that finds the history lost drops its claim at once: on a
// store whose claims never lapse, the blocks are free for the next claim
// (which waits out the unknown history).
func TestBlockSourceHistoryLostDropsClaim(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for renewals a second apart: not in -short")
	}
	t.Parallel()
	b := newBackend(t, lease.BlockLayout{FirstNode: 0, LastNode: 31, Size: 16})
	ctx := ctxFor(t, 20*time.Second)
	src, _ := newSource(t, b, locks, 2)
	l, err := src.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Failover()
	time.Sleep(1100 * time.Millisecond) // the next renewal records a promise, and checks
	if _, err := src.Renew(ctx, l); !errors.Is(err, lease.ErrHistoryRolledBack) {
		t.Fatalf("renewal after a failover: %v, want ErrHistoryRolledBack", err)
	}
	next, _ := newSource(t, b, locks, 2)
	ln, err := next.Acquire(ctx)
	if err != nil {
		t.Fatalf("the claim of a holder that found the history lost is still held: %v", err)
	}
	if ln.Start <= l.End {
		t.Errorf("the next lease %v starts within the dropped lease %v", ln, l)
	}
}

// ResetHistory makes the next claims wait out the horizon; holders keep
// their claims and renew.
func TestBlockSourceResetHistoryKeepsHolders(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the unknown history a reset leaves: not in -short")
	}
	t.Parallel()
	b := newBackend(t, unitLayout)
	ctx := ctxFor(t, 20*time.Second)
	holder, _ := newSource(t, b, lapsing, 1)
	l, err := holder.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	op, _ := newSource(t, b, lapsing, 1)
	from := time.Now().Unix()
	if err := op.ResetHistory(ctx); err != nil {
		t.Fatal(err)
	}
	// The holder renews as usual (every 100 ms here, well within its
	// 1.5 s TTL), its end moving on with the clock.
	slow := slowdown.Start()
	for start, l2 := time.Now(), l; l2.End <= l.End; {
		time.Sleep(100 * time.Millisecond)
		var err error
		if l2, err = holder.Renew(ctx, l2); err != nil {
			t.Fatalf("the holder's renewal %v after ResetHistory: %v; want it renewed past %d", time.Since(start), err, l.End)
		}
		if limit := slow.Stretch(3 * time.Second); time.Since(start) > limit && l2.End <= l.End {
			t.Fatalf("the holder's renewals for %v after ResetHistory left its end at %d, want it past %d (%s)", limit, l2.End, l.End, slow)
		}
	}
	next, _ := newSource(t, b, lapsing, 1)
	ln, err := next.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ln.Start < from+2+1 {
		t.Errorf("after ResetHistory at second %d, a claim got %v: the horizon (2 s) was not waited out", from, ln)
	}
}

// Horizon: unknown history is waited out for the fleet's longest promise,
// when it is longer than this store's.
func TestBlockSourceHorizon(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 3 s horizon: not in -short")
	}
	t.Parallel()
	b := newBackend(t, unitLayout)
	b.Wipe() // no sign of initialisation
	h, _ := b.Open(locks)
	src, err := lease.NewBlockSource(h, lease.BlockSourceConfig{Secret: leasetest.Secret(), Layout: unitLayout, Horizon: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	from := time.Now().Unix()
	l, err := src.Acquire(ctxFor(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l.Start < from+3+1 {
		t.Errorf("with a 3 s horizon, a claim on unknown history at second %d got %v", from, l)
	}
}

// A clock outside the lifetime of Randflake IDs is refused with an error.
func TestBlockSourceClockOutsideLifetime(t *testing.T) {
	t.Parallel()
	b := newBackend(t, unitLayout)
	h, _ := b.Open(locks)
	for _, at := range []time.Time{time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)} {
		src, err := lease.NewBlockSource(h, lease.BlockSourceConfig{Secret: leasetest.Secret(), Layout: unitLayout,
			Now: func() time.Time { return at }})
		if err != nil {
			t.Fatal(err)
		}
		if l, err := src.Acquire(ctxFor(t, 5*time.Second)); err == nil || !strings.Contains(err.Error(), "lifetime") {
			t.Errorf("a clock reading %s: %v, %v; want an error naming the lifetime", at.Format(time.DateOnly), l, err)
		}
	}
}

// A release that cannot reach the store fails; the claim lapses, and the
// promise stands for the next holder.
func TestBlockSourceReleaseUnreachable(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 2 s claim: not in -short")
	}
	t.Parallel()
	b := newBackend(t, lease.BlockLayout{FirstNode: 0, LastNode: 15, Size: 16})
	ctx := ctxFor(t, 20*time.Second)
	src, h := newSource(t, b, lapsing, 1)
	l, err := src.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h.SetUnreachable(true)
	if err := src.Release(ctx, l, l.Start); !errors.Is(err, leasetest.ErrUnreachable) {
		t.Fatalf("a release out of reach: %v, want the store's error", err)
	}
	next, _ := newSource(t, b, lapsing, 1)
	var ln randflake.Lease
	for {
		if ln, err = next.Acquire(ctx); !errors.Is(err, lease.ErrNoFreeNodes) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if ln.Start <= l.End {
		t.Errorf("after a release that failed, the next lease %v starts within the promise of %v", ln, l)
	}
}

// answerLost is a store whose steps can fail after they were applied (the
// answer lost on the way back) or before (the request lost on the way).
type answerLost struct {
	lease.BlockStore
	after, before, unsent atomic.Bool // unsent: the changes made, never applied
}

var errAnswerLost = errors.New("the store's answer was lost")

func (s *answerLost) Update(ctx context.Context, held lease.StoreClaim, all bool, fn func(*lease.StoreView) (*lease.StoreChanges, error)) (lease.StoreClaim, error) {
	if s.before.Load() {
		return nil, errAnswerLost
	}
	c, err := s.BlockStore.Update(ctx, held, all, func(v *lease.StoreView) (*lease.StoreChanges, error) {
		ch, err := fn(v)
		if err == nil && s.unsent.Load() {
			return nil, errAnswerLost
		}
		return ch, err
	})
	if err == nil && s.after.Load() {
		return nil, errAnswerLost
	}
	return c, err
}

// A step whose outcome is unknown (applied, or not, with the answer lost;
// or made and never sent)
// is a transient failure: the next renewal accepts whichever record the
// store holds, instead of taking an applied step for a rollback (rule 8),
// and the lease end never passes a promise not known to be recorded.
func TestBlockSourceUncertainStep(t *testing.T) {
	if testing.Short() {
		t.Skip("renews a second apart for 6.6 s: not in -short")
	}
	t.Parallel()
	for _, mode := range []string{"applied", "not applied", "not sent"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := newBackend(t, unitLayout)
			h, err := b.Open(locks)
			if err != nil {
				t.Fatal(err)
			}
			st := &answerLost{BlockStore: h}
			src, err := lease.NewBlockSource(st, lease.BlockSourceConfig{Secret: leasetest.Secret(), Layout: b.Layout()})
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxFor(t, 20*time.Second)
			l, err := src.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for round := 0; round < 3; round++ {
				time.Sleep(1100 * time.Millisecond)
				flag := map[string]*atomic.Bool{"applied": &st.after, "not applied": &st.before, "not sent": &st.unsent}[mode]
				flag.Store(true)
				if _, err := src.Renew(ctx, l); !errors.Is(err, errAnswerLost) {
					t.Fatalf("round %d: Renew with the answer lost: %v, want the store's error", round, err)
				}
				flag.Store(false)
				time.Sleep(1100 * time.Millisecond)
				next, err := src.Renew(ctx, l)
				if err != nil {
					t.Fatalf("round %d: Renew after a step %s with its answer lost: %v", round, mode, err)
				}
				rec := string(b.Record(next.FirstNode))
				want := fmt.Sprintf(" %d ", next.End)
				if !strings.Contains(rec, want) {
					t.Errorf("round %d: lease end %d, record %q: the end is not the recorded promise", round, next.End, rec)
				}
				l = next
			}
			if err := src.Release(ctx, l, l.Start); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// After a holder found the store's position gone back and marked the
// history unknown, the lower position is the one to compare with: the same
// source claims again after one wait, renews, and claims once more with no
// further wait, although the store's position stays below the highest it
// saw before the restore.
func TestBlockSourceRewoundOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out unknown history and renews for seconds: not in -short")
	}
	t.Parallel()
	b := newBackend(t, unitLayout)
	ctx := ctxFor(t, 30*time.Second)
	src, _ := newSource(t, b, lapsing, 1)
	l, err := src.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Move the store's position far on (the same marker written 40
	// times), then lose most of it.
	for range 40 {
		b.SetMarker(b.Marker())
	}
	if l, err = src.Renew(ctx, l); err != nil { // the holder sees the high position
		t.Fatal(err)
	}
	b.RewindPosition(40)
	if _, err := src.Renew(ctx, l); !errors.Is(err, lease.ErrHistoryRolledBack) {
		t.Fatalf("renewal after the position went back: %v, want ErrHistoryRolledBack", err)
	}
	start := time.Now()
	l, err = src.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claimed again after %v", time.Since(start).Round(10*time.Millisecond))
	l = renewFor(t, ctx, src, l, 2100*time.Millisecond) // renewals after the loss was recorded
	if err := src.Release(ctx, l, 0); err != nil {
		t.Fatal(err)
	}
	// Found again, the loss would make the claim wait the unknown
	// history; it waits a takeover's time only (rule 14), a second more
	// however slowly it ran.
	from := time.Now().Unix()
	if l, err = src.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if takeover := int64(lease.TakeoverWait(src.Store().Info()) / time.Second); l.Start > from+takeover+1 {
		t.Errorf("a claim after the recorded loss, at second %d, waited more than a takeover's %d s (lease %v): the loss was found again", from, takeover, l)
	}
	if err := src.Release(ctx, l, 0); err != nil {
		t.Fatal(err)
	}
}

// Sleep returns nil once its time has passed, and the context's error at
// once when the context is done.
func TestSleep(t *testing.T) {
	if err := lease.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep of 1ms: %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := lease.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep of an hour on a cancelled context: %v, want context.Canceled", err)
	}
}
