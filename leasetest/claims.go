package leasetest

import (
	"errors"
	"sort"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/lease"
)

// The subtests of claims without faults, and of a crash.

// disjointClaims: one holder per run, all claiming at once, get disjoint
// node IDs and issue unique IDs; one more finds every block held.
func disjointClaims(e *env) {
	t := e.t
	ps := e.claimAtOnce(e.runs, "holder", opts{})
	leases := make([]randflake.Lease, len(ps))
	for i, p := range ps {
		leases[i] = p.first()
		if n := leases[i].Nodes(); n != e.h.Blocks*e.h.Layout.Size {
			t.Errorf("%s got %v: %d node IDs, want %d", p.name, leases[i], n, e.h.Blocks*e.h.Layout.Size)
		}
	}
	sort.Slice(leases, func(i, j int) bool { return leases[i].FirstNode < leases[j].FirstNode })
	for i := 1; i < len(leases); i++ {
		if leases[i].FirstNode <= leases[i-1].LastNode {
			t.Errorf("overlapping claims: %v and %v", leases[i-1], leases[i])
		}
	}
	extra := e.newProc("extra", opts{})
	m, began := slowdown.Start(), time.Now()
	l, err := extra.acquire()
	if !errors.Is(err, lease.ErrNoFreeNodes) {
		t.Errorf("a claim while every block is held: lease %v, error %v; want ErrNoFreeNodes", l, err)
	}
	// Refused at once, not after waiting a claim out: within a promise,
	// stretched by how slow the machine ran.
	if took, limit := time.Since(began), m.Stretch(e.info.Promise); took > limit {
		t.Errorf("a claim while every block is held took %v to fail, longer than a promise (%v; %s)", took, limit.Round(time.Millisecond), m)
	}
	for _, p := range ps {
		p.col.WaitCount(t, 1000, e.budget)
	}
	for _, p := range ps {
		p.stop()
	}
	t.Logf("%d holders claiming at once got disjoint node IDs (the slowest in %v); %s", len(ps), slowest(ps), e.check)
}

func slowest(ps []*proc) time.Duration {
	var d time.Duration
	for _, p := range ps {
		d = max(d, p.took)
	}
	return d.Round(time.Millisecond)
}

// releaseAndReuse: a released run is claimed again at once, starting
// right after the last second its holder used.
func releaseAndReuse(e *env) {
	t := e.t
	e.fillers()
	a := e.start("first", opts{})
	la := a.first()
	a.runFor(1200 * time.Millisecond)
	spa := a.stop()
	if e.s.ReadRecord != nil {
		used := e.perBlock(spa)
		for _, f := range e.blocksOf(la) {
			if r, err := e.record(f); err != nil {
				t.Errorf("after the release: %v", err)
			} else if r.until < used[f] || r.until > spa.Last+1 {
				t.Errorf("after the release, node IDs from %d record second %d; the holder used them up to %d, and no block after %d",
					f, r.until, used[f], spa.Last)
			}
		}
	}
	from := time.Now().Unix()
	b := e.start("second", opts{})
	lb := b.first()
	e.onlyRun("the next claim, after the release of "+a.name, lb, la)
	if lb.Start <= spa.Last {
		t.Errorf("the next lease starts at %d, not after the released holder's last second %d", lb.Start, spa.Last)
	}
	// It starts after the last second used, or a takeover's wait after
	// its claim (rule 14), whichever is later. The claim's second is when
	// the engine logged its wait (however slowly the store answered the
	// claim; the last wait, if a stalled store let a claim lapse while it
	// waited and the engine claimed again); without a wait, the lease
	// starts right after the release.
	claimed := from
	if at, ok := e.lastLoggedAt(b.name, waitingMsg); ok {
		claimed = at.Unix()
	}
	if lb.Start > max(spa.Last+2, claimed+e.takeover+2) {
		t.Errorf("the next lease starts at %d, %d s after the released holder's last second %d and %d s after its claim at %d (a takeover waits %d s): the release did not record the last second used",
			lb.Start, lb.Start-spa.Last, spa.Last, lb.Start-claimed, claimed, e.takeover)
	}
	b.col.WaitCount(t, 500, e.budget)
	b.stop()
	t.Logf("released %v after second %d; claimed again in %v from second %d; %s", la, spa.Last, b.took.Round(time.Millisecond), lb.Start, e.check)
}

// takeoverAfterCrash: a holder killed under load half-way through a
// second; its successor, started at once, takes its blocks only once
// they are free and starts after every second the killed holder could
// have used.
func takeoverAfterCrash(e *env) {
	t := e.t
	e.need("Kill", e.s.Kill != nil)
	e.fillers()
	spk, lk := e.killedHolder()
	killed := time.Now()
	s := e.start("successor", opts{waitFor: true})
	ls := s.first()
	e.onlyRun("the successor of a killed holder", ls, lk)
	if ls.Start <= spk.Last {
		t.Errorf("the successor's lease %v starts at or before the killed holder's last second %d", ls, spk.Last)
	}
	if ls.Start <= lk.End {
		t.Errorf("the successor's lease %v starts at or before the end of the killed holder's lease %v, which it could have used", ls, lk)
	}
	begun, _ := s.timed.claimed()
	if e.info.EndFor != nil && begun.Add(claimSlack).Before(time.Unix(lk.End+1, 0)) {
		t.Errorf("the successor claimed the killed holder's blocks at %s, before the killed holder's lease %v had ended",
			begun.Format(time.RFC3339Nano), lk)
	}
	s.col.WaitCount(t, 500, e.budget)
	s.stop()
	t.Logf("killed at %s under load (last second %d, lease to %d); successor's lease from %d, got %v after the kill; %s",
		killed.Format("15:04:05.000"), spk.Last, lk.End, ls.Start, s.took.Round(time.Millisecond), e.check)
}

// claimSlack is how much earlier than a lease's end another process's
// claim step may begin: the step applies some time after it begins.
const claimSlack = 250 * time.Millisecond

// promisesHonoured: while holders run under load, every ID they issued
// carries a second their block's record already allowed; after their
// release, each record allows the last second used.
func promisesHonoured(e *env) {
	t := e.t
	e.need("ReadRecord", e.s.ReadRecord != nil)
	ps := make([]*proc, min(3, e.runs))
	for i := range ps {
		ps[i] = e.start("holder", opts{})
	}
	newest := map[int64]int64{} // by block: the newest second issued
	seen := make([]int, len(ps))
	samples, checked := 0, 0
	for end := time.Now().Add(e.info.Promise + 1500*time.Millisecond); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		// Take the IDs issued so far, then read the records: a record
		// only grows while its block is held, so it must cover them.
		var fresh []Issued
		for i, p := range ps {
			ids := p.col.Since(seen[i])
			seen[i] += len(ids)
			fresh = append(fresh, ids...)
		}
		until := map[int64]int64{}
		for _, p := range ps {
			for _, f := range e.blocksOf(p.first()) {
				r, err := e.record(f)
				if err != nil {
					t.Fatalf("while %s holds it: %v", p.name, err)
				}
				until[f] = r.until
			}
		}
		for _, is := range fresh {
			ts, node := e.check.Split(is.ID)
			f := e.blockOf(node)
			newest[f] = max(newest[f], ts)
			if u, ok := until[f]; !ok || ts > u {
				t.Fatalf("ID %d issued at %s carries second %d on node %d; the block's record, read after, allows up to %d",
					is.ID, is.At.Format("15:04:05.000"), ts, node, u)
			}
		}
		samples++
		checked += len(fresh)
	}
	for _, p := range ps {
		p.stop()
	}
	for f, last := range newest {
		r, err := e.record(f)
		if err != nil {
			t.Errorf("after the release: %v", err)
			continue
		}
		if r.until < last {
			t.Errorf("after the release, node IDs from %d record second %d; IDs were issued there up to %d", f, r.until, last)
		}
	}
	t.Logf("%d IDs compared with %d readings of the records; %s", checked, samples, e.check)
}
