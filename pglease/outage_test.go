package pglease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/randflake/randflake"
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
	cfg := Config{Pool: pool1, Table: table, Nodes: 16, LastNode: 31, TTL: testTTL, MaxClockSkew: testSkew}
	g1 := newLeased(t, cfg)
	cfg.Pool = pool2
	g2 := newLeased(t, cfg)
	c1, c2 := collect(g1), collect(g2)
	time.Sleep(700 * time.Millisecond)

	for _, outage := range []time.Duration{time.Second, testTTL + 500*time.Millisecond} {
		stoppedAt := time.Now()
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(outage)
		for i, c := range []*collector{c1, c2} {
			_, last := c.count()
			// The lease end is at most the validity after the last renewal,
			// sent before the server stopped; allow for scheduling delays.
			if limit := stoppedAt.Add(validity + 200*time.Millisecond); last.After(limit) {
				t.Errorf("generator %d issued an ID %v after the server stopped, past its lease", i+1, last.Sub(stoppedAt))
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
		for i, c := range []*collector{c1, c2} {
			for {
				if _, last := c.count(); last.After(restartedAt) {
					t.Logf("outage of %v: generator %d issued again %v after the restart", outage, i+1, last.Sub(restartedAt).Round(time.Millisecond))
					break
				}
				if time.Since(restartedAt) > 20*time.Second {
					t.Fatalf("generator %d did not resume within 20s of the restart: %v", i+1, c.errs)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	check := newIDCheck(t)
	check.add("generator 1", c1.stop(), g1.Lease())
	check.add("generator 2", c2.stop(), g2.Lease())
	if g1.Lease().FirstNode == g2.Lease().FirstNode {
		t.Errorf("both generators on %v", g1.Lease())
	}
	t.Logf("%d IDs across two restarts, none twice", len(check.seen))
}

// A holder cut off from the database (its connections dropped, as in a
// network partition) stops issuing before another claimant can take its
// node IDs over; the other starts after its last second; when the
// partition heals, the first finds its lease lost and claims the node IDs
// again once they are free, after the other's last second.
func TestCutOff(t *testing.T) {
	t.Parallel()
	srv := server(t)
	p := newProxy(t, srv.Addr())
	poolA, poolB := newPool(t, srv.DSNAt(p.addr)), newPool(t, srv.DSN())
	table := newTable(t, poolB, "cutoff")
	cfgA := Config{Pool: poolA, Table: table, Nodes: 16, LastNode: 15, TTL: testTTL, MaxClockSkew: testSkew, Holder: "A"}
	cfgB := cfgA
	cfgB.Pool, cfgB.Holder = poolB, "B"
	gA := newLeased(t, cfgA)
	cA := collect(gA)
	time.Sleep(500 * time.Millisecond)

	ctx := context.Background()
	if _, err := NewLeased(ctx, testSecret, cfgB); !errors.Is(err, ErrNoFreeNodes) {
		t.Fatalf("claim while A holds the node IDs: %v, want ErrNoFreeNodes", err)
	}
	var left float64
	cutAt := time.Now()
	p.cut()
	if err := poolB.QueryRow(ctx, `SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 FROM `+table).Scan(&left); err != nil {
		t.Fatal(err)
	}
	expiresIn := time.Duration(left * float64(time.Second))
	// B claims as soon as it can: that moment is the earliest anyone
	// could take A's node IDs over.
	var gB *randflake.Leased
	var err error
	for {
		gB, err = NewLeased(ctx, testSecret, cfgB)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNoFreeNodes) {
			t.Fatal(err)
		}
		if time.Since(cutAt) > 3*testTTL {
			t.Fatal("A's claim still held 3 TTLs after the cut")
		}
		time.Sleep(20 * time.Millisecond)
	}
	takenAt := time.Now()
	nA, lastA := cA.count()
	// From the claim's expiry on, another process could claim the node
	// IDs (B may have had to wait for A's recorded second after that).
	if expiry := cutAt.Add(expiresIn); !lastA.Before(expiry) {
		t.Errorf("A issued an ID %v after the cut, when its claim had expired (%v after the cut) and its node IDs could pass to another process",
			lastA.Sub(cutAt), expiresIn)
	}
	if !lastA.Before(takenAt) {
		t.Fatalf("A issued an ID at %v, after B took its node IDs over at %v", lastA, takenAt)
	}
	t.Logf("A stopped issuing %v after the cut; its claim expired %v after the cut; B took the node IDs over %v after it (%v after A's last ID)",
		lastA.Sub(cutAt).Round(time.Millisecond), expiresIn.Round(time.Millisecond), takenAt.Sub(cutAt).Round(time.Millisecond), takenAt.Sub(lastA).Round(time.Millisecond))
	if takenAt.Sub(cutAt) < expiresIn-10*time.Millisecond {
		t.Errorf("B took over %v after the cut, before A's claim expired (%v)", takenAt.Sub(cutAt), expiresIn)
	}
	cB := collect(gB)
	time.Sleep(500 * time.Millisecond)

	// Heal the partition: A's claim is B's now.
	p.restore(t)
	time.Sleep(time.Second)
	if n, _ := cA.count(); n != nA {
		t.Fatalf("A issued %d IDs while B held its node IDs", n-nA)
	}
	idsB := cB.stop()
	if err := gB.Close(ctx); err != nil {
		t.Fatal(err)
	}
	releasedAt := time.Now()
	for {
		if n, _ := cA.count(); n > nA {
			break
		}
		if time.Since(releasedAt) > 15*time.Second {
			t.Fatalf("A issued nothing 15s after B released the node IDs: %v", cA.errs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	idsA := cA.stop()
	check := newIDCheck(t)
	_, maxA1 := check.add("A before the cut", idsA[:nA], randflake.Lease{})
	minB, maxB := check.add("B", idsB, gB.Lease())
	minA2, _ := check.add("A after the cut", idsA[nA:], gA.Lease())
	if minB <= maxA1 || minA2 <= maxB {
		t.Errorf("seconds overlap: A up to %d, B %d-%d, A again from %d", maxA1, minB, maxB, minA2)
	}
	t.Logf("%d IDs (A %d before the cut, B %d, A %d after), none twice", len(check.seen), nA, len(idsB), len(idsA)-nA)
}

// The fence of docs/leases.md, run while a generator holds a block (as
// after a restore that lost commits): the holder loses its claim at its
// next renewal, and the next holder starts after the fence, past every
// second the old one used.
func TestFence(t *testing.T) {
	t.Parallel()
	srv := server(t)
	pool := newPool(t, srv.DSN())
	table := newTable(t, pool, "fence")
	cfg := Config{Pool: pool, Table: table, Nodes: 16, LastNode: 15, TTL: testTTL, MaxClockSkew: testSkew}
	g1 := newLeased(t, cfg)
	c1 := collect(g1)
	time.Sleep(500 * time.Millisecond)
	ctx := context.Background()
	// TTL + MaxClockSkew + 1 s, rounded up.
	if _, err := pool.Exec(ctx, `UPDATE `+table+`
		SET used_until = GREATEST(used_until, extract(epoch FROM clock_timestamp())::bigint + 5),
		holder = NULL, token = NULL, claimed_at = NULL, expires_at = NULL`); err != nil {
		t.Fatal(err)
	}
	fencedAt := time.Now()
	g2 := newLeased(t, cfg)
	c2 := collect(g2)
	time.Sleep(300 * time.Millisecond)
	ids2, ids1 := c2.stop(), c1.stop()
	check := newIDCheck(t)
	_, max1 := check.add("the holder before the fence", ids1, randflake.Lease{})
	min2, _ := check.add("the holder after it", ids2, g2.Lease())
	if len(ids2) == 0 || min2 <= max1 {
		t.Errorf("after the fence: %d IDs from second %d; before it up to second %d", len(ids2), min2, max1)
	}
	if l := g1.Lease(); l.SameClaim(g2.Lease()) {
		t.Errorf("both generators on %v", l)
	}
	t.Logf("the next holder started %v after the fence, at second %d (the old holder's last: %d); %d + %d IDs, none twice",
		time.Since(fencedAt).Round(time.Millisecond), g2.Lease().Start, max1, len(ids1), len(ids2))
}
