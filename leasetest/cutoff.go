package leasetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// CutOff is a partition test of a store module's own: holder A, whose
// connections to the store pass through a Proxy, is cut off; the test
// waits, in its store's terms, for A's claim to go and for holder B to
// take A's node IDs over; then Heal checks what follows, and every ID.
//
//	gA := newLeased(t, cfgA) // connected through p
//	r := leasetest.StartCutOff(t, p, secret, gA, claimB)
//	// ... wait for A's claim to lapse, check when A stopped issuing ...
//	gB := newLeased(t, cfgB)
//	r.Heal(gB)
type CutOff struct {
	t      testing.TB
	p      *Proxy
	secret []byte
	// A collects A's IDs from the start.
	A *Collector
	// At is when A was cut off.
	At time.Time
	// held is A's claim when it was cut off.
	held randflake.Lease
}

// StartCutOff runs holder a, connected to its store through p, under load
// for half a second (its IDs are checked under the fleet secret); checks that claimB (a claim by another holder, on a
// connection of its own) fails with ErrNoFreeNodes while A holds the node
// IDs; and cuts A off.
func StartCutOff(t testing.TB, p *Proxy, secret []byte, a *randflake.Leased, claimB func(ctx context.Context) error) *CutOff {
	t.Helper()
	r := &CutOff{t: t, p: p, secret: secret, A: Collect("A", a)}
	time.Sleep(500 * time.Millisecond)
	if err := claimB(context.Background()); !errors.Is(err, lease.ErrNoFreeNodes) {
		t.Fatalf("claim while A holds the node IDs: %v, want ErrNoFreeNodes", err)
	}
	r.held = a.Lease()
	r.At = time.Now()
	p.Cut()
	return r
}

// Heal goes on once b, holder B, holds A's node IDs: it runs B under load
// for half a second, heals the partition, checks that A issues nothing
// for a second while B holds its node IDs, closes B, waits up to 15
// seconds for A to claim the node IDs again and issue, and checks every
// ID: none issued twice or outside its holder's leases (A's after the
// heal outside the claims it made after the cut), B's seconds after A's
// before the cut, and A's after the heal after B's. It returns A's IDs
// from before the cut.
func (r *CutOff) Heal(b *randflake.Leased) Span {
	t := r.t
	t.Helper()
	nA, _ := r.A.Count()
	cB := Collect("B", b)
	time.Sleep(500 * time.Millisecond)
	r.p.Heal()
	time.Sleep(time.Second)
	if n, _ := r.A.Count(); n != nA {
		t.Fatalf("A issued %d IDs while B held its node IDs", n-nA)
	}
	idsB := cB.Stop()
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.A.WaitCount(t, nA+1, 15*time.Second)
	time.Sleep(200 * time.Millisecond)
	idsA := r.A.Stop()
	var after []randflake.Lease
	for _, l := range r.A.Leases() {
		if !l.SameClaim(r.held) {
			after = append(after, l)
		}
	}
	check := NewChecker(t, r.secret)
	a1 := check.Add("A before the cut", idsA[:nA])
	sb := check.Add("B", idsB, cB.Leases()...)
	a2 := check.Add("A after the heal", idsA[nA:], after...)
	if sb.First <= a1.Last || a2.First <= sb.Last {
		t.Errorf("seconds overlap: A up to %d, B %d-%d, A again from %d", a1.Last, sb.First, sb.Last, a2.First)
	}
	t.Logf("A %d IDs before the cut, B %d, A %d after the heal: %v", a1.IDs, sb.IDs, a2.IDs, check)
	return a1
}
