package pglease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/leasetest"
)

// PostgreSQL restarted under load: while it is down the generators issue
// IDs until their lease ends and none after; a short outage they ride out,
// after a long one (longer than the TTL) their renewal finds the claim
// still theirs and they resume. No ID twice.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	srv := ownServer(t)
	pool1, pool2 := newPool(t, srv.DSN()), newPool(t, srv.DSN())
	table := newTable(t, pool1, "restart")
	cfg := Config{Pool: pool1, Secret: testSecret, Table: table, Nodes: 16, LastNode: 31, TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew}
	g1 := newLeased(t, cfg)
	cfg.Pool = pool2
	g2 := newLeased(t, cfg)
	c1, c2 := leasetest.Collect("g1", g1), leasetest.Collect("g2", g2)
	time.Sleep(700 * time.Millisecond)

	for _, outage := range []time.Duration{time.Second, testTTL + 500*time.Millisecond} {
		stoppedAt := time.Now()
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(outage)
		// The lease ends at most the validity after the last renewal,
		// sent before the server stopped; the generators issue nothing
		// after their lease (the checker below checks every ID against
		// the leases the generators reported).
		for i, g := range []*randflake.Leased{g1, g2} {
			if end, limit := g.Lease().End, stoppedAt.Add(validity).Unix()-1; end > limit {
				t.Errorf("generator %d, %v into an outage, has a lease to second %d, past the validity after the stop (second %d)", i+1, outage, end, limit)
			}
		}
		if outage > validity {
			_, err := g1.Generate()
			var le *randflake.LeaseError
			if !errors.As(err, &le) || !errors.Is(err, randflake.ErrInvalidLease) {
				t.Fatalf("Generate %v into an outage: %v, want a *randflake.LeaseError", outage, err)
			}
			t.Logf("%v into the outage: %v", outage, err)
		}
		restartedAt := time.Now()
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		for _, c := range []*leasetest.Collector{c1, c2} {
			resumed := c.WaitIssuedAfter(t, restartedAt, 20*time.Second)
			t.Logf("outage of %v: %s issued again %v after the restart", outage, c.Name(), resumed.Round(time.Millisecond))
		}
		time.Sleep(300 * time.Millisecond)
	}
	check := checker(t)
	check.AddCollector(c1)
	check.AddCollector(c2)
	if g1.Lease().FirstNode == g2.Lease().FirstNode {
		t.Errorf("both generators on %v", g1.Lease())
	}
	t.Logf("%d IDs across two restarts, none twice", check.Total())
}

// A holder cut off from the database (its connections dropped, as in a
// network partition) stops issuing before another claimant can take its
// node IDs over; the other starts after its last second; when the
// partition heals, the first finds its lease lost and claims the node IDs
// again once they are free, after the other's last second.
func TestCutOff(t *testing.T) {
	t.Parallel()
	srv := server(t)
	p := leasetest.NewProxy(t, srv.Addr())
	poolA, poolB := newPool(t, srv.DSNAt(p.Addr())), newPool(t, srv.DSN())
	table := newTable(t, poolB, "cutoff")
	cfgA := Config{Pool: poolA, Secret: testSecret, Table: table, Nodes: 16, LastNode: 15, TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew, Holder: "A"}
	cfgB := cfgA
	cfgB.Pool, cfgB.Holder = poolB, "B"
	gA := newLeased(t, cfgA)
	r := leasetest.StartCutOff(t, p, testSecret, gA, func(ctx context.Context) error {
		_, err := NewLeased(ctx, testSecret, cfgB)
		return err
	})
	var expiry time.Time
	if err := poolB.QueryRow(context.Background(), `SELECT expires_at FROM `+table).Scan(&expiry); err != nil {
		t.Fatal(err)
	}
	// A cannot renew any more: its lease ends where it is now, and must
	// end before its claim expires, by the server's clock (the same clock
	// as this test's).
	endA := gA.Lease().End
	if stop := time.Unix(endA+1, 0); stop.After(expiry) {
		t.Errorf("A's lease ends at second %d, after its claim expires at %v: its node IDs could pass to another process while it issues", endA, expiry)
	}
	// B claims as soon as it can: that moment is the earliest anyone
	// could take A's node IDs over.
	gB := leasedWhenFree(t, cfgB, 3*testTTL)
	takenAt := time.Now()
	_, lastA := r.A.Count()
	if takenAt.Before(expiry) {
		t.Errorf("B took over at %v, before A's claim expired at %v", takenAt, expiry)
	}
	t.Logf("A stopped issuing %v after the cut (its lease ended with second %d); its claim expired %v after the cut; B took the node IDs over %v after it",
		lastA.Sub(r.At).Round(time.Millisecond), endA, expiry.Sub(r.At).Round(time.Millisecond), takenAt.Sub(r.At).Round(time.Millisecond))
	// Heal the partition: A's claim is B's now.
	if a1 := r.Heal(gB); a1.Last > endA {
		t.Errorf("A issued second %d, after its lease's end %d", a1.Last, endA)
	}
}

// ResetHistory, run while a generator holds a block (as after a restore
// nothing could detect): the holder keeps its claim and keeps issuing;
// the next claim, on another block, waits out the longest promise from the
// reset on, so it starts after every second any holder may have used.
func TestResetHistory(t *testing.T) {
	t.Parallel()
	cfg := tableConfig(t, "reset", 31)
	g1 := newLeased(t, cfg)
	c1 := leasetest.Collect("g1", g1)
	time.Sleep(500 * time.Millisecond)
	ctx := context.Background()
	op, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resetAt := time.Now()
	if err := op.ResetHistory(ctx); err != nil {
		t.Fatal(err)
	}
	n1, _ := c1.Count()
	g2 := newLeased(t, cfg)
	waited := time.Since(resetAt)
	c2 := leasetest.Collect("g2", g2)
	time.Sleep(300 * time.Millisecond)
	ids2, ids1 := c2.Stop(), c1.Stop()
	check := checker(t)
	check.Add("the holder through the reset", ids1)
	min2 := check.Add("the claimant after it", ids2, g2.Lease()).First
	// TTL + 2 x MaxClockSkew, rounded up to whole seconds, after the reset.
	if len(ids2) == 0 || min2 < resetAt.Unix()+4 || g2.Lease().Start < resetAt.Unix()+4 {
		t.Errorf("after the reset at second %d: the next claim %v issued %d IDs from second %d; want none before second %d",
			resetAt.Unix(), g2.Lease(), len(ids2), min2, resetAt.Unix()+4)
	}
	if len(ids1) <= n1 || !g1.Lease().SameClaim(g1.Lease()) || g1.Lease().FirstNode == g2.Lease().FirstNode {
		t.Errorf("the holder through the reset: %d IDs before it, %d in all, lease %v beside %v; want it to keep its claim and issue", n1, len(ids1), g1.Lease(), g2.Lease())
	}
	t.Logf("the next claim after the reset waited %v and started at second %d (the reset at %d); %d + %d IDs, none twice",
		waited.Round(time.Millisecond), g2.Lease().Start, resetAt.Unix(), len(ids1), len(ids2))
}
