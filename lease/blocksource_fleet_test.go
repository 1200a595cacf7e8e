package lease_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/leasetest"
)

// Rules 11 and 12 of docs/leases.md: a member that differs from its fleet
// costs that member, not the fleet.

// otherSecret is another fleet's secret.
var otherSecret = []byte("another-fleet-16")

// records returns every block's record as the backend holds it.
func records(b *leasetest.MemBackend) map[int64]string {
	out := map[int64]string{}
	l := b.Layout()
	for first := l.FirstNode; first <= l.LastNode; first += l.Size {
		out[first] = string(b.Record(first))
	}
	return out
}

// A process under another fleet's secret is refused with ErrFleetMismatch
// naming the other secret, claims and writes nothing, and the running
// fleet goes on: its holder renews, and a newcomer of its own claims
// without waiting out any history.
func TestBlockSourceAnotherFleetRefused(t *testing.T) {
	t.Parallel()
	b := newBackend(t, unitLayout)
	opts := leasetest.MemOptions{TTL: 2 * time.Second}
	mine, _ := newSource(t, b, opts, 1)
	held, err := mine.Acquire(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	marker, recs := b.Marker(), records(b)
	if !bytes.Contains(marker, []byte(" fleet=")) {
		t.Fatalf("the marker carries no fleet key ID: %q", marker)
	}

	h, err := b.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := lease.NewBlockSource(h, lease.BlockSourceConfig{Secret: otherSecret, Layout: unitLayout})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		do   func() error
	}{
		{"a claim", func() error { _, err := theirs.Acquire(ctxFor(t, 10*time.Second)); return err }},
		{"a history reset", func() error { return theirs.ResetHistory(ctxFor(t, 10*time.Second)) }},
	} {
		err := c.do()
		if !errors.Is(err, lease.ErrFleetMismatch) || !strings.Contains(err.Error(), "another fleet's secret") {
			t.Errorf("%s under another fleet's secret: %v, want ErrFleetMismatch naming another fleet's secret", c.what, err)
		}
		if err != nil && (strings.Contains(err.Error(), string(otherSecret)) || strings.Contains(err.Error(), string(leasetest.Secret()))) {
			t.Errorf("%s: the error shows a secret: %v", c.what, err)
		}
		if got := b.Marker(); !bytes.Equal(got, marker) {
			t.Errorf("after %s under another fleet's secret the marker changed:\n%q\nwas\n%q", c.what, got, marker)
		}
		for first, rec := range records(b) {
			if rec != recs[first] {
				t.Errorf("after %s under another fleet's secret the record of node IDs %d- changed: %q, was %q", c.what, first, rec, recs[first])
			}
		}
	}

	if _, err := mine.Renew(ctxFor(t, 10*time.Second), held); err != nil {
		t.Errorf("the running holder's renewal after the other fleet's attempts: %v", err)
	}
	newcomer, _ := newSource(t, b, opts, 1)
	before := time.Now().Unix()
	l, err := newcomer.Acquire(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	takeover := int64(lease.TakeoverWait(newcomer.Store().Info()) / time.Second)
	if l.Start > before+takeover+1 || l.FirstNode == held.FirstNode {
		t.Errorf("a newcomer of the fleet after the other fleet's attempts got %v (the holder has %v, the clock read %d): want another block, after a takeover's %d s at most", l, held, before, takeover)
	}
}

// An edited marker of this fleet is still history unknown, waited out,
// and not taken for another fleet's: whether the edit keeps the key ID,
// mangles it or removes it.
func TestBlockSourceEditedMarkerWaited(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 1 s promise per case: not in -short")
	}
	t.Parallel()
	for _, c := range []struct {
		name string
		edit func(string) string
	}{
		{"key ID kept", func(m string) string { return strings.Replace(m, " horizon=", " horizon=9", 1) }},
		{"key ID mangled", func(m string) string {
			i := strings.Index(m, " fleet=") + len(" fleet=")
			return m[:i] + "zz" + m[i+2:]
		}},
		{"key ID removed", func(m string) string {
			i := strings.Index(m, " fleet=")
			j := strings.Index(m[i+1:], " ") + i + 1
			return m[:i] + m[j:]
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newBackend(t, unitLayout)
			first, _ := newSource(t, b, locks, 1)
			l, err := first.Acquire(ctxFor(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Release(ctxFor(t, 10*time.Second), l, l.Start-1); err != nil {
				t.Fatal(err)
			}
			edited := c.edit(string(b.Marker()))
			b.SetMarker([]byte(edited))
			src, _ := newSource(t, b, locks, 1)
			before := time.Now().Unix()
			l2, err := src.Acquire(ctxFor(t, 20*time.Second))
			if err != nil {
				t.Fatalf("a claim after an edit of the fleet's own marker (%q): %v, want the history waited out", edited, err)
			}
			if l2.Start <= before+1 {
				t.Errorf("a claim after an edit of the fleet's own marker got %v at second %d: want it to wait out the 1 s promise", l2, before)
			}
		})
	}
}

// A process whose clock is an hour ahead, finding the history unknown,
// writes the marker's unknown second from its clock; a process with a true
// clock caps it at its own bound instead of waiting the hour, and never
// takes the block the fast process used.
func TestBlockSourceFastClockCapped(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 1 s promise twice: not in -short")
	}
	t.Parallel()
	layout := lease.BlockLayout{FirstNode: 0, LastNode: 31, Size: 16}
	b := newBackend(t, layout)
	b.Wipe() // history unknown: the first claim writes the marker
	h, err := b.Open(locks)
	if err != nil {
		t.Fatal(err)
	}
	const ahead = time.Hour
	fast, err := lease.NewBlockSource(h, lease.BlockSourceConfig{Secret: leasetest.Secret(), Layout: layout,
		Now: func() time.Time { return time.Now().Add(ahead) }})
	if err != nil {
		t.Fatal(err)
	}
	fl, err := fast.Acquire(ctxFor(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if fl.Start < time.Now().Add(ahead).Unix()-5 {
		t.Fatalf("the fast process's lease %v does not start in its own clock's time", fl)
	}
	if err := fast.Release(ctxFor(t, 10*time.Second), fl, fl.Start); err != nil {
		t.Fatal(err)
	}

	for i := range 2 {
		src, _ := newSource(t, b, locks, 1)
		before := time.Now().Unix()
		l, err := src.Acquire(ctxFor(t, 2*time.Minute))
		if err != nil {
			t.Fatalf("claim %d with a true clock after the fast process's: %v", i+1, err)
		}
		// A true clock's bound is its own second + the 1 s promise (no
		// skew in the memory store); the fast clock's unknown second is
		// an hour ahead. A claim that started within a minute was capped,
		// however slowly the machine ran it.
		if l.Start > before+60 {
			t.Errorf("claim %d with a true clock got %v at second %d: it waited for the fast clock's unknown second, want it within its own bound", i+1, l, before)
		}
		if l.FirstNode == fl.FirstNode {
			t.Errorf("claim %d with a true clock got %v, the block the fast process used at its clock's seconds (%v)", i+1, l, fl)
		}
		if err := src.Release(ctxFor(t, 10*time.Second), l, l.Start-1); err != nil {
			t.Fatal(err)
		}
	}
}

// A store that would promise beyond the fleet's horizon is refused, with
// both values named (rule 13): after a wipe the others wait only the
// horizon.
func TestBlockSourcePromiseBeyondHorizon(t *testing.T) {
	t.Parallel()
	b := newBackend(t, unitLayout)
	h, err := b.Open(leasetest.MemOptions{TTL: 2 * time.Second, Promise: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lease.NewBlockSource(h, lease.BlockSourceConfig{Secret: leasetest.Secret(), Layout: unitLayout, Horizon: 2 * time.Second})
	if !errors.Is(err, lease.ErrBeyondHorizon) || !strings.Contains(err.Error(), "promise 3s ahead, beyond the fleet's horizon of 2s") {
		t.Errorf("a promise of 3s under a horizon of 2s: %v, want it refused naming both", err)
	}
	if _, err := lease.NewBlockSource(h, lease.BlockSourceConfig{Secret: leasetest.Secret(), Layout: unitLayout, Horizon: 3 * time.Second}); err != nil {
		t.Errorf("a promise of 3s under a horizon of 3s: %v", err)
	}
}

// A member that has read a longer horizon in the marker (another member
// promises further ahead) waits it out after a wipe takes the marker,
// not only its own promise (rule 13).
func TestBlockSourceRemembersHorizon(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 3 s horizon: not in -short")
	}
	t.Parallel()
	b := newBackend(t, unitLayout)
	long, _ := newSource(t, b, leasetest.MemOptions{Promise: 3 * time.Second}, 1)
	ll, err := long.Acquire(ctxFor(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	short, _ := newSource(t, b, locks, 1)
	ls, err := short.Acquire(ctxFor(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := short.Release(ctxFor(t, 10*time.Second), ls, ls.Start-1); err != nil {
		t.Fatal(err)
	}
	from := time.Now().Unix()
	b.Wipe()
	l, err := short.Acquire(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l.Start < from+3+1 {
		t.Errorf("after a wipe the member promising 1 s got %v at second %d: it waited its own promise, not the 3 s another member promises (%v)", l, from, ll)
	}
}

// slowClaims delays every step of a store, as a loaded machine or a busy
// server does.
type slowClaims struct {
	lease.BlockStore
	delay time.Duration
}

func (s slowClaims) Update(ctx context.Context, held lease.StoreClaim, all bool, fn func(*lease.StoreView) (*lease.StoreChanges, error)) (lease.StoreClaim, error) {
	time.Sleep(s.delay)
	return s.BlockStore.Update(ctx, held, all, fn)
}

// A claim made in slow steps (each half the TTL) after a release waits
// its takeover's time, keeping the claim alive, and records its promise
// after a renewal: the lease is valid and starts after the released one.
func TestBlockSourceSlowClaimRenewed(t *testing.T) {
	if testing.Short() {
		t.Skip("claim steps of 1 s and a takeover's wait: not in -short")
	}
	t.Parallel()
	b := newBackend(t, unitLayout)
	opts := leasetest.MemOptions{TTL: 2 * time.Second}
	first, _ := newSource(t, b, opts, unitLayout.Count())
	l1, err := first.Acquire(ctxFor(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Released with its last second used: the next lease starts after it.
	if err := first.Release(ctxFor(t, 10*time.Second), l1, l1.End); err != nil {
		t.Fatal(err)
	}
	h, err := b.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	src, err := lease.NewBlockSource(slowClaims{h, time.Second}, lease.BlockSourceConfig{Secret: leasetest.Secret(), Layout: unitLayout, Blocks: unitLayout.Count()})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := src.Acquire(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatalf("a claim in 1 s steps after a release at the lease's end %v: %v", l1, err)
	}
	if err := l2.Validate(); err != nil || l2.Start <= l1.End {
		t.Errorf("a claim in 1 s steps got %v (%v), want a valid lease after %v", l2, err, l1)
	}
}

// Rule 14's detection bound is capped: a member with a long TTL renews
// its lease at most ten seconds past its last check, so that neither its
// own claims nor any other member's takeovers wait its TTL, and the
// marker records no longer bound.
func TestBlockSourceLongTTLDetectionCapped(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a takeover (10 s): not in -short")
	}
	t.Parallel()
	b := newBackend(t, unitLayout)
	// A short-TTL member starts the fleet (a fresh store: no wait).
	first, _ := newSource(t, b, leasetest.MemOptions{TTL: 2 * time.Second}, 1)
	fl, err := first.Acquire(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctxFor(t, 10*time.Second), fl, fl.Start-1); err != nil {
		t.Fatal(err)
	}
	long := leasetest.MemOptions{TTL: 10 * time.Minute}
	holder, h := newSource(t, b, long, 1)
	takeover := lease.TakeoverWait(h.Info())
	if limit := 10*time.Second + h.Info().MaxClockSkew + time.Second; takeover <= 0 || takeover > limit {
		t.Fatalf("the takeover wait with a 10 min TTL is %v, want above 0 and at most %v (the capped bound plus the clock bound)", takeover, limit)
	}
	before := time.Now().Unix()
	l, err := holder.Acquire(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l.End > time.Now().Unix()+9 {
		t.Errorf("a 10 min TTL's lease %v, claimed from %d, runs past the capped detection bound (10 s)", l, before)
	}
	// Its claim waited (rule 14), and its promise went in with its
	// records: the marker records its horizon and its capped bound.
	if m := string(b.Marker()); !strings.Contains(m, " detect=10 ") || !strings.Contains(m, " horizon=600 ") {
		t.Errorf("the marker after a 10 min TTL's claim records %q, want detect=10 and horizon=600", m)
	}
	l, err = holder.Renew(ctxFor(t, 10*time.Second), l)
	if err != nil {
		t.Fatal(err)
	}
	if l.End > time.Now().Unix()+9 {
		t.Errorf("a 10 min TTL's renewed lease %v runs past the capped detection bound (10 s)", l)
	}
	if err := holder.Release(ctxFor(t, 10*time.Second), l, l.Start-1); err != nil {
		t.Fatal(err)
	}
	// A newcomer with a short TTL, after the long one: it waits the
	// capped bound, not the long TTL.
	newcomer, _ := newSource(t, b, leasetest.MemOptions{TTL: 2 * time.Second}, 1)
	from := time.Now().Unix()
	nl, err := newcomer.Acquire(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if w := int64(takeover / time.Second); nl.Start > from+w+1 {
		t.Errorf("a newcomer after a 10 min TTL's release got %v from its claim at %d: it waited past the capped takeover of %v", nl, from, takeover)
	}
}
