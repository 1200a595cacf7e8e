package leasetest

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// The subtests of one member that differs from the rest of its fleet: a
// longer promise, a clock far ahead, another fleet's secret (rules 11 to
// 13 of docs/leases.md).

// longerPromiseThenWipe: the fleet's horizon is longer than this store's
// promise, as when another member runs with a longer TTL. A member whose
// promise passes the horizon is refused; after a wipe, which takes the
// marker and the horizon it recorded, a newcomer still waits out the
// fleet's horizon, not its own promise, while the running holder loses
// its claim; no ID twice.
func longerPromiseThenWipe(e *env) {
	t := e.t
	e.need("Wipe", e.s.Wipe != nil)
	promise := time.Duration(ceilSeconds(e.info.Promise)) * time.Second
	horizon := 2*promise + time.Second
	if promise >= 2*time.Second {
		// A member configured with a horizon shorter than its promise.
		h := e.open(Process{Name: e.name("short-horizon")})
		_, err := lease.NewBlockSource(h, lease.BlockSourceConfig{Secret: Secret(), Layout: e.h.Layout, Blocks: e.h.Blocks, Horizon: promise - time.Second})
		if !errors.Is(err, lease.ErrBeyondHorizon) {
			t.Errorf("a member promising %v under a horizon of %v: %v, want ErrBeyondHorizon", promise, promise-time.Second, err)
		}
	}
	a := e.start("member", opts{horizon: horizon})
	a.runFor(time.Second)
	wiped := time.Now()
	from := wiped.Unix()
	e.s.Wipe(t)
	b := e.start("newcomer", opts{horizon: horizon})
	lb := b.first()
	wait := ceilSeconds(horizon + e.info.MaxClockSkew)
	if lb.Start < from+wait+1 {
		t.Errorf("after a wipe the newcomer's lease %v starts %d s after its claim at %d: it waited its own promise (%v), not the fleet's horizon (%v)",
			lb, lb.Start-from, from, e.info.Promise, horizon)
	}
	lostAfter := a.waitLost(t, wiped, e.budget+horizon)
	b.col.WaitCount(t, 500, e.budget)
	b.stop()
	a.stop()
	t.Logf("horizon %v over a promise of %v; after the wipe the newcomer's lease starts %d s after its claim; the running member lost its claim %v after the wipe; %s",
		horizon, e.info.Promise, lb.Start-from, lostAfter, e.check)
}

// clockAheadFindsUnknownHistory: a process an hour ahead is the one that
// finds the history unknown (a wiped store) and writes the marker's
// unknown second from its clock; a process with the true clock caps that
// second at its own bound instead of waiting the hour, and takes another
// block than the one the fast process used.
func clockAheadFindsUnknownHistory(e *env) {
	t := e.t
	e.need("Wipe", e.s.Wipe != nil)
	e.initialise()
	e.s.Wipe(t)
	f := e.newProc("ahead", opts{ahead: time.Hour})
	lf, err := f.acquire()
	if err != nil {
		t.Fatalf("%s, an hour ahead, claiming on unknown history: %v", f.name, err)
	}
	if lf.Start < time.Now().Add(time.Hour).Unix()-e.wait-5 {
		t.Fatalf("%s, an hour ahead, got %v: not a lease of its own clock's seconds", f.name, lf)
	}
	f.release(lf)
	from := time.Now().Unix()
	c := e.start("true-clock", opts{})
	lc := c.first()
	// The true clock's bound is its second + the wait; the fast clock's
	// is an hour later. A lease within a few minutes was capped, however
	// slowly the machine ran the claim.
	if lc.Start > from+e.wait+180 {
		t.Errorf("the true-clock process's lease %v starts %d s after its claim: it waited for the unknown second an hour-ahead clock wrote", lc, lc.Start-from)
	}
	if lc.FirstNode <= lf.LastNode && lf.FirstNode <= lc.LastNode {
		t.Errorf("the true-clock process got %v, the node IDs the hour-ahead process used at its clock's seconds (%v)", lc, lf)
	}
	c.col.WaitCount(t, 500, e.budget)
	c.stop()
	t.Logf("the hour-ahead process claimed %v on unknown history; the true-clock process then got %v, %d s after its claim; %s", lf, lc, lc.Start-from, e.check)
}

// anotherFleet: a process under another fleet's secret is refused with
// ErrFleetMismatch naming it, and claims and writes nothing; the running
// holder keeps its claim and issues on, and a newcomer of the fleet
// claims without waiting out any history.
func anotherFleet(e *env) {
	t := e.t
	e.initialise()
	h := e.start("holder", opts{})
	h.col.WaitCount(t, 100, e.budget)
	// The fleet's holder rewrites the marker with its promises; the
	// other fleet must neither sign it (its key ID) nor reset the history
	// (its unknown second).
	var fields []string
	if e.s.ReadMarker != nil {
		fields = markerFields(e.s.ReadMarker(t), "fleet", "unknown")
	}
	o := e.newProc("other-fleet", opts{secret: []byte("other-fleet-key!")})
	lo, err := o.acquire()
	if !errors.Is(err, lease.ErrFleetMismatch) || !strings.Contains(err.Error(), "another fleet's secret") {
		t.Fatalf("a process under another fleet's secret: lease %v, error %v; want ErrFleetMismatch naming another fleet's secret", lo, err)
	}
	if e.s.ReadMarker != nil {
		if got := markerFields(e.s.ReadMarker(t), "fleet", "unknown"); !slices.Equal(got, fields) {
			t.Errorf("after the claim under another fleet's secret the marker's key ID and unknown second read %q, were %q", got, fields)
		}
	}
	from := time.Now().Unix()
	n := e.start("newcomer", opts{})
	if ln := n.first(); e.logged(n.name, unknownHistory) {
		t.Errorf("a newcomer of the fleet after the other fleet's claim got %v, %d s after its claim, on history found unknown: the history was reset", ln, ln.Start-from)
	}
	// The holder renews through it all and issues on.
	h.runFor(e.info.Promise)
	for _, err := range h.errors() {
		if !errors.Is(err, randflake.ErrLeaseLost) {
			continue
		}
		if l, lost := h.g.Lease(), h.lostAt(); lost.Unix() > l.End {
			// Found at a renewal after its lease had ended: renewals
			// that came too late on a loaded machine, not the other
			// fleet.
			t.Logf("the running holder's claim lapsed, found at %s after its lease %v had ended: %v", lost.Format("15:04:05.000"), l, err)
			continue
		}
		t.Errorf("the running holder lost its claim after the other fleet's claim, while its lease ran: %v", err)
	}
	n.col.WaitCount(t, 100, e.budget)
	n.stop()
	h.stop()
	t.Logf("refused: %v; %s", err, e.check)
}

// markerFields returns the values of the named fields of a marker's
// text, in order ("" for a field it lacks).
func markerFields(raw []byte, names ...string) []string {
	out := make([]string, len(names))
	for _, f := range strings.Fields(string(raw)) {
		k, v, _ := strings.Cut(f, "=")
		if i := slices.Index(names, k); i >= 0 {
			out[i] = v
		}
	}
	return out
}
