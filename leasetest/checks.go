package leasetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/lease"
)

// The subtests of clocks, partitions, impossible values and layouts.

// clockAhead: a holder whose clock is an hour ahead claims and releases;
// a holder with the true clock then claims another block at once; once
// processes an hour ahead have touched every other free block, a process
// with the true clock gets ErrClockBehind, at once.
func clockAhead(e *env) {
	t := e.t
	// A claim with the true clock first, so that a store that is not
	// fresh has its unknown history waited out on the true clock.
	e.initialise()

	a := e.start("ahead", opts{ahead: time.Hour})
	a.runFor(1200 * time.Millisecond)
	spa := a.stop()
	la := a.first()

	from := time.Now().Unix()
	b := e.start("true-clock", opts{})
	lb := b.first()
	if lb.FirstNode <= la.LastNode && la.FirstNode <= lb.LastNode {
		t.Errorf("the true-clock holder got %v, the node IDs the hour-ahead holder used up to second %d", lb, spa.Last)
	}
	// Their cost would be an hour; a takeover's wait (rule 14), however
	// slowly the claim ran, is minutes less.
	if lb.Start > from+e.takeover+600 || e.logged(b.name, unknownHistory) {
		t.Errorf("the true-clock holder's lease %v starts %d s after its claim (a takeover waits %d s): the hour-ahead holder's blocks cost it a wait", lb, lb.Start-from, e.takeover)
	}

	// Processes an hour ahead claim every other free run, and release.
	var (
		mu       sync.Mutex
		held     []*proc
		leases   []randflake.Lease
		lapsed   []bool // the store let held[i]'s claim lapse, its lease ended
		released int    // held[:released] are released
		renewErr error
	)
	// gone marks held[i]'s claim lapsed, if its lease had ended by its own
	// clock (its renewals late on a loaded machine), and reports whether
	// it had; mu is held.
	gone := func(i int, how string) bool {
		if held[i].now().Unix() <= leases[i].End {
			return false
		}
		if !lapsed[i] {
			lapsed[i] = true
			t.Logf("%s, an hour ahead: its claim %v lapsed, its lease ended, its renewals late (%s): %s; its run counts as touched by a clock an hour ahead, and is claimed again",
				held[i].name, leases[i], slowness(), how)
		}
		return true
	}
	// The claimants stay alive, renewing their claims in the background
	// as their generators would, however long each claim or release
	// takes on a loaded machine.
	stop := make(chan struct{})
	var renewing sync.WaitGroup
	renewing.Add(1)
	go func() {
		defer renewing.Done()
		tick := time.NewTicker(max(e.info.Promise/6, 100*time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			mu.Lock()
			ps, ls, from, dead := slices.Clone(held), slices.Clone(leases), released, slices.Clone(lapsed)
			mu.Unlock()
			for i := from; i < len(ps); i++ {
				if dead[i] {
					continue
				}
				l, err := ps[i].renew(ls[i])
				mu.Lock()
				switch {
				case err == nil:
					leases[i] = l
				case i < released || lapsed[i]:
				case errors.Is(err, randflake.ErrLeaseLost) && gone(i, "renewing: "+err.Error()):
				case e.transient(err):
					// A renewal step the store did not finish in time:
					// the next tick renews again, or finds the claim
					// lapsed.
				case renewErr == nil:
					renewErr = fmt.Errorf("%s, an hour ahead, renewing its claim %v while the others claim or release (%s): %w", ps[i].name, ls[i], slowness(), err)
				}
				mu.Unlock()
			}
		}
	}()
	stopRenewing := func() {
		close(stop)
		renewing.Wait()
		if renewErr != nil {
			t.Fatal(renewErr)
		}
	}
	// Until no run is left: a run whose claim lapsed is claimed again.
	for range 2 * e.runs {
		p := e.newProc("ahead", opts{ahead: time.Hour})
		l, err := p.acquire()
		if errors.Is(err, lease.ErrNoFreeNodes) {
			break
		}
		if err != nil {
			stopRenewing()
			t.Fatalf("%s, an hour ahead, claiming every free run: %v", p.name, err)
		}
		mu.Lock()
		var twice []string
		if l.FirstNode <= lb.LastNode && lb.FirstNode <= l.LastNode {
			twice = append(twice, fmt.Sprintf("%s got %v, the true-clock holder's run", p.name, l))
		}
		for k, o := range leases {
			if !lapsed[k] && l.FirstNode <= o.LastNode && o.FirstNode <= l.LastNode && !gone(k, p.name+" got "+l.String()) {
				twice = append(twice, fmt.Sprintf("%s got %v, which %s holds (%v), its lease not ended (its errors: %v)", p.name, l, held[k].name, o, held[k].errors()))
			}
		}
		held, leases, lapsed = append(held, p), append(leases, l), append(lapsed, false)
		mu.Unlock()
		if len(twice) > 0 {
			stopRenewing()
			t.Fatalf("a claim an hour ahead was given a run someone else holds: %s", strings.Join(twice, "; "))
		}
	}
	mu.Lock()
	live := 0
	for _, d := range lapsed {
		if !d {
			live++
		}
	}
	mu.Unlock()
	if int64(live) != e.runs-1 {
		stopRenewing()
		t.Fatalf("processes an hour ahead hold %d runs (%d claims, %d of them lapsed), want every run but the true-clock holder's, %d (%s)",
			live, len(held), len(held)-live, e.runs-1, slowness())
	}
	// Released one by one while the others are still renewed; the
	// renewals stop before the claim that counts. A lapsed claim has
	// nothing to release.
	for i, p := range held {
		mu.Lock()
		l, dead := leases[i], lapsed[i]
		released = i + 1
		mu.Unlock()
		if dead {
			continue
		}
		if err := p.tryRelease(l); err != nil {
			mu.Lock()
			ok := errors.Is(err, randflake.ErrLeaseLost) && gone(i, "releasing: "+err.Error())
			mu.Unlock()
			if !ok {
				stopRenewing()
				t.Fatalf("%s: Release: %v", p.name, err)
			}
		}
	}
	stopRenewing()
	c := e.newProc("behind", opts{})
	m, began := slowdown.Start(), time.Now()
	lc, err := c.acquire()
	took := time.Since(began)
	if !errors.Is(err, lease.ErrClockBehind) {
		t.Errorf("with every free run touched by a clock an hour ahead, a true-clock claim returned lease %v, error %v; want ErrClockBehind", lc, err)
	}
	// Refused at once, not after waiting out a promise: within one,
	// stretched by how slow the machine ran.
	if limit := m.Stretch(e.info.Promise); took > limit {
		t.Errorf("the claim refused for its clock took %v, more than a promise (%v; %s): it waited before refusing", took, limit.Round(time.Millisecond), m)
	}
	b.col.WaitCount(t, 500, e.budget)
	b.stop()
	t.Logf("an hour-ahead holder used %v; a true-clock holder then got %v in %v; with every free run touched, a true-clock claim failed in %v: %v; %s",
		la, lb, b.took.Round(time.Millisecond), took.Round(time.Millisecond), err, e.check)
}

// cutOff: a holder cut off from the store through a proxy stops issuing
// before its claim can pass to another process, which starts after its
// lease.
func cutOff(e *env) {
	t := e.t
	if e.s.Addr == "" {
		t.Skip("the store has no network address (Store.Addr is empty): there is no connection for a proxy to cut")
	}
	e.fillers()
	px := NewProxy(t, e.s.Addr)
	c := e.start("cut-off", opts{addr: px.Addr()})
	c.runFor(time.Second)
	px.Cut()
	cutAt := time.Now()
	s := e.start("successor", opts{waitFor: true})
	begun, done := s.timed.claimed()
	ls := s.first()
	s.col.WaitCount(t, 500, e.budget)
	s.stop()
	spc := e.check.AddCollector(c.col)
	leases := c.col.Leases()
	lc := leases[len(leases)-1]
	e.onlyRun("the successor of the cut-off holder", ls, lc)
	if spc.LastAt.After(done) {
		t.Errorf("the cut-off holder issued an ID at %s, after its node IDs were claimed again (by %s)",
			spc.LastAt.Format("15:04:05.000"), done.Format("15:04:05.000"))
	}
	if e.info.EndFor != nil && begun.Add(claimSlack).Before(time.Unix(lc.End+1, 0)) {
		t.Errorf("the successor claimed the cut-off holder's node IDs at %s, before the end of its lease %v", begun.Format("15:04:05.000"), lc)
	}
	if ls.Start <= lc.End {
		t.Errorf("the successor's lease %v starts at or before the end of the cut-off holder's lease %v", ls, lc)
	}
	px.Heal() // let the cut-off holder find its claim gone and close at once
	t.Logf("cut off at %s with a lease to %d; it issued its last ID at %s; the successor claimed at %s, lease from %d; %s",
		cutAt.Format("15:04:05.000"), lc.End, spc.LastAt.Format("15:04:05.000"), done.Format("15:04:05.000"), ls.Start, e.check)
}

// rangeChecks: records and a marker with impossible values, validly
// signed, are unknown history: waited out, never trusted, never a panic.
func rangeChecks(e *env) {
	t := e.t
	e.need("WriteRecord", e.s.WriteRecord != nil)
	e.need("WriteMarker", e.s.WriteMarker != nil)
	e.initialise()

	now := time.Now().Unix()
	ly := e.h.Layout
	f0, last0 := ly.Block(0)
	f1, _ := ly.Block(1)
	f2, last2 := ly.Block(2)
	f3, last3 := ly.Block(3)
	forged := map[int64][]byte{
		f0: e.sign.record(f0, last0, randflake.MaxTimestamp+1000, now), // used until after the lifetime
		f1: e.sign.record(f2, last2, now-10, now),                      // the record of another block
		f2: e.sign.record(f2, last2, 1000, now),                        // used until before the epoch
		f3: e.sign.record(f3, last3, now-10, randflake.MaxTimestamp+5), // written after the lifetime
	}
	for f, raw := range forged {
		e.s.WriteRecord(t, f, raw)
	}
	x := e.newProc("after-records", opts{})
	lx, err := x.acquire()
	if err != nil {
		t.Fatalf("a claim after records with impossible values were written: %v", err)
	}
	e.waited("the claim after records with impossible values", lx, now)
	x.release(lx)
	// No impossible value was trusted: every run can be claimed (a block
	// used until after the lifetime, or written after it, would be
	// refused), and at once, the unknown history having been waited out.
	began := time.Now()
	ps := make([]*proc, e.runs)
	for i := range ps {
		ps[i] = e.newProc("claim-all", opts{idle: true})
		from := time.Now().Unix()
		if err := ps[i].lease(); err != nil {
			t.Fatalf("claim %d of %d after the impossible records were waited out: %v", i+1, e.runs, err)
		}
		// Waited out again, the claim would find the history unknown
		// (its wait, a promise, is no longer than a takeover's here).
		if l := ps[i].g.Lease(); e.logged(ps[i].name, unknownHistory) {
			t.Errorf("claim %d of %d after the impossible records had been waited out once got %v, %d s after its claim, on history found unknown: they were waited out again", i+1, e.runs, l, l.Start-from)
		}
	}
	all := time.Since(began)
	for _, p := range ps {
		p.close()
	}

	// A marker saying that history is unknown up to after the lifetime.
	digest := strings.Repeat("00", 16)
	from := time.Now().Unix()
	e.s.WriteMarker(t, e.sign.marker(fmt.Sprintf("id=forged first=%d last=%d size=%d horizon=%d unknown=%d digest=%s",
		ly.FirstNode, ly.LastNode, ly.Size, e.wait, int64(randflake.MaxTimestamp+1), digest)))
	y := e.newProc("after-marker", opts{})
	lm, err := y.acquire()
	if err != nil {
		t.Fatalf("a claim after a marker with impossible values was written: %v", err)
	}
	e.waited("the claim after a marker with impossible values", lm, from)
	t.Logf("records with impossible values: waited out once (lease from %d, claimed at %d), then every run claimed in %v; "+
		"a marker with impossible values: waited out (lease from %d, claimed at %d)", lx.Start, now, all.Round(time.Millisecond), lm.Start, from)
}

// layoutMismatch: a process configured with another layout than the one
// the store's marker records is refused with ErrFleetMismatch.
func layoutMismatch(e *env) {
	t := e.t
	e.initialise()
	ly := e.h.Layout
	other := lease.BlockLayout{FirstNode: ly.FirstNode, LastNode: ly.LastNode - ly.Size, Size: ly.Size}
	p := e.newProc("other-layout", opts{layout: other})
	began := time.Now()
	l, err := p.acquire()
	if !errors.Is(err, lease.ErrFleetMismatch) {
		t.Fatalf("a process configured for blocks of %d in %d-%d on a store of blocks of %d in %d-%d: lease %v, error %v; want ErrFleetMismatch",
			other.Size, other.FirstNode, other.LastNode, ly.Size, ly.FirstNode, ly.LastNode, l, err)
	}
	t.Logf("refused in %v: %v", time.Since(began).Round(time.Millisecond), err)
}
