package pglease

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/leasetest"
)

// The process tests run holders in real processes with leasetest's
// process harness: the test binary runs itself as a holder (TestMain calls
// leasetest.HolderMain), which opens the store that holderArg describes,
// runs a leased generator under load, reports its leases and writes every
// ID it issues to a file, until it is killed or its run is over.

// holderArg describes a holder's store: DSN, table and node range with
// blocks of 16, tab-separated.
func holderArg(dsn, table string, lastNode int64) string {
	return strings.Join([]string{dsn, table, strconv.FormatInt(lastNode, 10)}, "\t")
}

// holderLayout is the layout of a holder on node IDs 0..lastNode.
func holderLayout(lastNode int64) lease.BlockLayout {
	return lease.BlockLayout{FirstNode: 0, LastNode: lastNode, Size: 16}
}

// openHolderStore opens, in a holder process, the store holderArg
// described, on a pool of its own, with the tests' TTL and clock bound.
func openHolderStore(arg string) (lease.BlockStore, error) {
	f := strings.Split(arg, "\t")
	if len(f) != 3 {
		return nil, fmt.Errorf("holder argument %q: want DSN, table and last node", arg)
	}
	last, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(context.Background(), f[0])
	if err != nil {
		return nil, err
	}
	st, err := newStore(Config{Pool: pool, Table: f[1], Nodes: 16, LastNode: last, TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew, Holder: "holder process"})
	if err != nil {
		return nil, err
	}
	st.pool = pool
	return st, nil
}

// startHolder starts a holder process on table, on node IDs 0..lastNode,
// issuing for run (0: until killed).
func startHolder(t *testing.T, name, dsn, table string, lastNode int64, run time.Duration) *leasetest.Holder {
	t.Helper()
	return leasetest.StartHolder(t, leasetest.HolderConfig{
		Name: name, Arg: holderArg(dsn, table, lastNode), Secret: testSecret, Layout: holderLayout(lastNode), Run: run,
	})
}

// Several processes claim at once: disjoint blocks, no ID twice, and a
// block used by two of them in turn only on later seconds.
func TestDisjointProcesses(t *testing.T) {
	t.Parallel()
	srv := server(t)
	pool := newPool(t, srv.DSN())
	table := newTable(t, pool, "disjoint")
	const procs = 4
	var hs []*leasetest.Holder
	for i := range procs {
		hs = append(hs, startHolder(t, fmt.Sprintf("process %d", i), srv.DSN(), table, 63, 1500*time.Millisecond))
	}
	check := checker(t)
	type use struct {
		who    string
		lo, hi int64
	}
	byBlock := map[int64][]use{}
	for i, h := range hs {
		h.Lease(30 * time.Second)
		if err := h.Wait(30 * time.Second); err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
		leases := h.Leases()
		who := fmt.Sprintf("process %d (%v)", i, leases)
		sp := check.Add(who, h.IDs(), leases...)
		if sp.IDs == 0 {
			t.Errorf("%s issued no IDs", who)
		}
		for _, l := range leases {
			byBlock[l.FirstNode] = append(byBlock[l.FirstNode], use{who, sp.First, sp.Last})
		}
		t.Logf("%s: %d IDs on seconds %d-%d", who, sp.IDs, sp.First, sp.Last)
	}
	for first, us := range byBlock {
		for i := range us {
			for j := range us {
				if i != j && us[i].lo <= us[j].hi && us[j].lo <= us[i].hi {
					t.Errorf("block %d: %s (seconds %d-%d) and %s (%d-%d) overlap", first, us[i].who, us[i].lo, us[i].hi, us[j].who, us[j].lo, us[j].hi)
				}
			}
		}
	}
	var rows, held int
	if err := pool.QueryRow(context.Background(), `SELECT count(*), count(token) FROM `+table).Scan(&rows, &held); err != nil {
		t.Fatal(err)
	}
	if held != 0 || rows > procs {
		t.Errorf("after clean exits: %d rows, %d still claimed", rows, held)
	}
	t.Logf("%d processes on %d blocks: %s", procs, len(byBlock), check)
}

// A holder killed with SIGKILL keeps its node IDs until its claim's TTL
// passes, by the server's clock; then another claimant takes them over and
// issues IDs that start strictly after the killed holder's last second.
func TestKilledHolder(t *testing.T) {
	t.Parallel()
	srv := server(t)
	pool := newPool(t, srv.DSN())
	table := newTable(t, pool, "killed")
	h := startHolder(t, "doomed", srv.DSN(), table, 15, 0)
	l1 := h.Lease(30 * time.Second)
	h.WaitIDs(32*20, 10*time.Second)
	// Let it renew at least once, so its recorded second is ahead of its
	// start.
	time.Sleep(time.Second)
	cfg := Config{Pool: pool, Secret: testSecret, Table: table, Nodes: 16, LastNode: 15, TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew, Holder: "successor"}
	ctx := context.Background()
	if _, err := NewLeased(ctx, testSecret, cfg); !errors.Is(err, ErrNoFreeNodes) {
		t.Fatalf("claim while the holder lives: %v, want ErrNoFreeNodes", err)
	}
	h.KillMidSecond()
	killedAt := time.Now()
	var expiry time.Time
	if err := pool.QueryRow(ctx, `SELECT expires_at FROM `+table).Scan(&expiry); err != nil {
		t.Fatal(err)
	}
	g := leasedWhenFree(t, cfg, 3*testTTL)
	takenAt := time.Now()
	if takenAt.Before(expiry) {
		t.Errorf("node IDs taken over at %v, before the claim expired at %v", takenAt, expiry)
	}
	c := leasetest.Collect("the successor", g)
	c.WaitCount(t, 2000, 10*time.Second)
	check := checker(t)
	killed := check.Add("the killed holder", h.IDs(), h.Leases()...)
	succ := check.AddCollector(c)
	l2 := g.Lease()
	if l2.FirstNode != l1.FirstNode {
		t.Fatalf("the successor got %v, not the killed holder's node IDs %v", l2, l1)
	}
	if l2.Start <= killed.Last || succ.First <= killed.Last {
		t.Errorf("the successor's lease %v (first ID at second %d) does not start after the killed holder's last second %d", l2, succ.First, killed.Last)
	}
	if killed.IDs == 0 || succ.IDs == 0 {
		t.Errorf("IDs: %d from the killed holder, %d from the successor", killed.IDs, succ.IDs)
	}
	t.Logf("taken over %v after SIGKILL (the claim expired %v after it, TTL %v); the killed holder's last second %d, the successor's lease starts at %d; %s",
		takenAt.Sub(killedAt).Round(time.Millisecond), expiry.Sub(killedAt).Round(time.Millisecond), testTTL, killed.Last, l2.Start, check)
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
