package leasetest

import (
	"fmt"
	"time"
)

// replayWhileHolding: an older, consistent copy of the store (Save), taken
// just before a holder claimed, is put back while the holder issues under
// load: its run looks free, with the record and the marker of before its
// claim. A newcomer then claims from the copy, which gives it the
// holder's run unless the store still shows that run held. The holder
// checks its records at every renewal and stops within the detection
// bound; the newcomer waits a takeover's time after its claim (rule 14 of
// docs/leases.md), so that it starts only after the holder's last second.
// Every ID of both is checked for duplicates.
func replayWhileHolding(e *env) {
	t := e.t
	e.need("Save", e.s.Save != nil)
	e.initialise()
	// The copy is of the store the holder claims from: a newcomer
	// claiming from it picks the holder's run, as the holder did.
	putBack := e.s.Save(t)
	h := e.start("holder", opts{})
	lh := h.first()
	// Renewed and promised past the copy.
	h.runFor(e.info.Promise + 1500*time.Millisecond)
	// The newcomer's handle is open before the copy goes back, so that
	// its claim follows at once, before the holder's next check.
	n := e.newProc("newcomer", opts{waitFor: true})
	putBack(t)
	from := time.Now().Unix()
	if err := n.lease(); err != nil {
		t.Fatalf("%s: no lease after the copy was put back: %v", n.name, err)
	}
	ln := n.first()
	// The holder finds its records put back, or its claim gone, within the
	// detection bound (or its lease ends), and stops.
	deadline := time.Now().Add(e.limit())
	for h.lostAt().IsZero() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if h.lostAt().IsZero() {
		t.Errorf("the holder of %v never found the older copy put back under it (errors: %v; %s)", lh, h.errors(), slowness())
	}
	n.col.WaitCount(t, 500, e.budget)
	sph := h.stop()
	spn := n.stop()
	used := e.perBlock(sph)
	overlap := false
	for _, f := range e.blocksOf(ln) {
		last, ok := used[f]
		if !ok {
			continue
		}
		overlap = true
		if ln.Start <= last {
			t.Errorf("the newcomer's lease %v starts at %d, and the holder put back under used node IDs from %d up to second %d", ln, ln.Start, f, last)
		}
	}
	// However long the claim took, the holder's last second on its first
	// lease comes at most the detection bound after the copy was put back
	// (unless it claimed those node IDs again, later). A store whose
	// claims do not lapse (locks: no takeover wait) keeps the run held
	// meanwhile, so the bound does not apply.
	again := false
	for _, l := range h.col.Leases()[1:] {
		again = again || (l.FirstNode <= lh.LastNode && lh.FirstNode <= l.LastNode)
	}
	for _, f := range e.blocksOf(lh) {
		if last, ok := used[f]; ok && !again && e.takeover > 0 && last > from+e.takeover {
			t.Errorf("the holder used node IDs from %d up to second %d, %d s after the copy was put back at %d: more than the takeover's %d s", f, last, last-from, from, e.takeover)
		}
	}
	start := "at once (its node IDs' seconds had passed)"
	if ln.Start > from {
		start = fmt.Sprintf("%d s after its claim", ln.Start-from)
	}
	t.Logf("copy put back at second %d under the holder of %v (last second %d); the newcomer got %v (the holder's node IDs: %v), starting %s, first ID at second %d; the holder lost its claim %v after the second began; %s",
		from, lh, sph.Last, ln, overlap, start, spn.First, h.lostAt().Sub(time.Unix(from, 0)).Round(time.Millisecond), e.check)
}
