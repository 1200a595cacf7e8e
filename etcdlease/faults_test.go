package etcdlease

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/etcdlease/etcdtest"
	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/leasetest"
)

// horizonSeconds is how long lost history is waited out with the test
// configuration: the promise plus the clock skew bound.
const horizonSeconds = int64((testTTL + DefaultMaxClockSkew) / time.Second)

// startSuccessor starts a generator right away and reports how long its
// start took (the claim and the wait for its lease to start).
func startSuccessor(t *testing.T, cfg Config) (*randflake.Leased, time.Duration) {
	t.Helper()
	began := time.Now()
	g := newLeased(t, cfg)
	return g, time.Since(began)
}

// The etcd case: a holder under load is SIGKILLed half-way through
// a second, every key is deleted at once (etcdctl del --prefix /, as an
// operator "cleaning up stale claims" would), and a successor is started
// at once on the same etcd. The successor finds no marker, so the history
// of every block is unknown: it waits out the horizon before using the
// dead holder's node IDs, and no ID repeats. (Before the lease engine, the
// successor started at once and repeated 50 to 1,350 IDs.)
func TestWipeAfterKill(t *testing.T) {
	t.Parallel()
	srv, cli := startEtcd(t)
	h := startHolder(t, srv.Endpoint(), "/wipe/", 15, "doomed")
	l1 := h.Lease(40 * time.Second)
	h.WaitIDs(5000, 10*time.Second)
	time.Sleep(time.Second) // a renewal and a promise under load

	killedAt := h.KillMidSecond()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := srv.Ctl(ctx, "del", "--prefix", "/"); err != nil {
		t.Fatal(err)
	}
	if n := keyCount(t, cli, "/"); n != 0 {
		t.Fatalf("%d keys left after etcdctl del --prefix /", n)
	}
	wipedAt := time.Since(killedAt)
	g, wait := startSuccessor(t, testConfig(cli, "/wipe/", 15, "successor"))
	c := leasetest.Collect("the successor", g)
	c.WaitCount(t, 2000, 10*time.Second)

	check := leasetest.NewChecker(t, testSecret)
	dead := check.Add("the killed holder", h.IDs(), h.Leases()...)
	next := check.AddCollector(c)
	l2 := c.Leases()[0]
	if l2.FirstNode != l1.FirstNode {
		t.Fatalf("the successor took %v, not the dead holder's node IDs %d-%d", l2, l1.FirstNode, l1.LastNode)
	}
	if next.First <= dead.Last {
		t.Errorf("the successor's first second %d is not after the dead holder's last %d", next.First, dead.Last)
	}
	if claimed := killedAt.Add(wipedAt).Unix(); l2.Start <= claimed+horizonSeconds {
		t.Errorf("the successor's lease %v starts before the horizon after its claim at %d", l2, claimed)
	}
	t.Logf("SIGKILL at %s, wipe done %v later; the successor waited %v; dead holder %d IDs up to second %d, successor %d IDs from second %d; %v",
		killedAt.Format("15:04:05.000"), wipedAt.Round(time.Millisecond), wait.Round(time.Millisecond),
		dead.IDs, dead.Last, next.IDs, next.First, check)
}

// restoreRun is the common part of the snapshot-restore tests: holder B
// runs in the test from before the snapshot; after the snapshot, holder A
// (a process of its own) claims the next block, which the snapshot shows
// free, issues under load and is SIGKILLed half-way through a second; then
// etcd is restored from the snapshot. The fleet has three blocks: B's, A's
// and a spare, so that after the restore both a successor and a B that
// claims again find a block.
type restoreRun struct {
	t        *testing.T
	srv      *etcdtest.Server
	cfg      Config
	a        *leasetest.Holder
	la       randflake.Lease
	b        *randflake.Leased
	colB     *leasetest.Collector
	snap     string // the snapshot file
	killedAt time.Time
	restored time.Time

	mu    sync.Mutex
	errsB []timedError
}

// timedError is an error of B's generator and when it came.
type timedError struct {
	at  time.Time
	err error
}

// newRestoreRun starts etcd and B, claiming under prefix, then takes the
// snapshot and runs and kills A (snapshotThenKill).
func newRestoreRun(t *testing.T, prefix string) *restoreRun {
	r := &restoreRun{t: t}
	srv, c := startEtcd(t)
	r.srv = srv
	r.cfg = testConfig(c, prefix, 47, "")
	cfgB := r.cfg
	cfgB.Holder = "B"
	cfgB.OnError = func(err error) {
		r.mu.Lock()
		r.errsB = append(r.errsB, timedError{time.Now(), err})
		r.mu.Unlock()
	}
	r.b = newLeased(t, cfgB)
	if lb := r.b.Lease(); lb.FirstNode != 0 {
		t.Fatalf("B holds %v, want the first block", lb)
	}
	r.colB = leasetest.Collect("B", r.b)
	time.Sleep(500 * time.Millisecond)
	r.snapshotThenKill()
	return r
}

// snapshotThenKill takes the snapshot, starts A, lets it issue and kills
// it half-way through a second.
func (r *restoreRun) snapshotThenKill() {
	t := r.t
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r.snap = filepath.Join(t.TempDir(), "snap.db")
	if err := r.srv.Snapshot(ctx, r.snap); err != nil {
		t.Fatal(err)
	}
	r.a = startHolder(t, r.srv.Endpoint(), r.cfg.Prefix, r.cfg.LastNode, "A")
	r.la = r.a.Lease(40 * time.Second)
	if r.la.FirstNode != 16 {
		t.Fatalf("A holds %v, want the second block", r.la)
	}
	r.a.WaitIDs(5000, 10*time.Second)
	time.Sleep(time.Second)
	r.killedAt = r.a.KillMidSecond()
}

// restore restores etcd from the snapshot.
func (r *restoreRun) restore(opts etcdtest.RestoreOptions) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.srv.Restore(ctx, r.snap, opts); err != nil {
		r.t.Fatal(err)
	}
	r.restored = time.Now()
}

// bSawRollback waits up to timeout, stretched by the measured slowdown,
// for B to report its lease lost because etcd went back, and returns how
// long after the restore it did.
func (r *restoreRun) bSawRollback(timeout time.Duration) time.Duration {
	r.t.Helper()
	m := slowdown.Start()
	for {
		r.mu.Lock()
		var errs []error
		for _, e := range r.errsB {
			if errors.Is(e.err, lease.ErrHistoryRolledBack) && errors.Is(e.err, randflake.ErrLeaseLost) {
				r.mu.Unlock()
				return e.at.Sub(r.restored)
			}
			errs = append(errs, e.err)
		}
		r.mu.Unlock()
		if limit := m.Stretch(timeout); time.Since(r.restored) > limit {
			r.t.Fatalf("B did not see etcd go back within %v of the restore (%s); its errors: %v", limit.Round(time.Millisecond), m, errs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// finish runs the successor g for a while, then checks every ID of A, B
// and the successor: none repeats, and A's node IDs were taken again
// after the restore (by the successor or by B claiming again) no earlier
// than after A's last second.
func (r *restoreRun) finish(g *randflake.Leased, wait time.Duration) {
	t := r.t
	c := leasetest.Collect("the successor", g)
	c.WaitCount(t, 2000, 15*time.Second)
	time.Sleep(500 * time.Millisecond)
	check := leasetest.NewChecker(t, testSecret)
	dead := check.Add("A (killed)", r.a.IDs(), r.a.Leases()...)
	next := check.AddCollector(c)
	b := check.Add("B", r.colB.Stop(), r.colB.Leases()...)
	reused := false
	for _, l := range append(c.Leases(), r.colB.Leases()...) {
		if l.FirstNode == r.la.FirstNode && l.Start > r.killedAt.Unix()-5 {
			reused = true
			if l.Start <= dead.Last {
				t.Errorf("A's node IDs taken again by %v, not after A's last second %d", l, dead.Last)
			}
		}
	}
	if !reused {
		t.Errorf("nobody took A's node IDs %d-%d after the restore (the successor holds %v)", r.la.FirstNode, r.la.LastNode, c.Leases())
	}
	t.Logf("SIGKILL of A at %s, restore done %v later; the successor waited %v; A %d IDs up to second %d, B %d IDs, successor %d IDs from second %d; %v",
		r.killedAt.Format("15:04:05.000"), r.restored.Sub(r.killedAt).Round(time.Millisecond), wait.Round(time.Millisecond),
		dead.IDs, dead.Last, b.IDs, next.IDs, next.First, check)
}

// etcd restored from a snapshot under another cluster token, so under a
// new cluster ID: the successor, started at once, finds the marker written
// on another cluster and waits out the horizon; B sees the new cluster ID
// at its next keep-alive, drops its claim and claims again. No ID repeats.
func TestRestoreNewClusterID(t *testing.T) {
	t.Parallel()
	r := newRestoreRun(t, "/restore-id/")
	r.restore(etcdtest.RestoreOptions{ClusterToken: "restored-elsewhere"})
	claimed := time.Now().Unix()
	g, wait := startSuccessor(t, withHolder(r.cfg, "successor"))
	if l := g.Lease(); l.Start <= claimed+horizonSeconds {
		t.Errorf("the successor's lease %v starts before the horizon after its claim at %d", l, claimed)
	}
	seen := r.bSawRollback(3 * testTTL)
	r.finish(g, wait)
	t.Logf("B saw the new cluster ID %v after the restore", seen.Round(time.Millisecond))
}

// etcd restored under the same cluster ID while B runs: B's next
// keep-alive shows a revision lower than one it saw; it marks the whole
// history unknown and claims again. A successor started once B has seen
// it waits out the horizon. No ID repeats.
func TestRestoreSeenByRunningHolder(t *testing.T) {
	t.Parallel()
	r := newRestoreRun(t, "/restore-rev/")
	r.restore(etcdtest.RestoreOptions{})
	seen := r.bSawRollback(3 * testTTL)
	claimed := time.Now().Unix()
	g, wait := startSuccessor(t, withHolder(r.cfg, "successor"))
	if l := g.Lease(); l.Start <= claimed+horizonSeconds-1 {
		t.Errorf("the successor's lease %v starts before the horizon B recorded %v before its claim at %d", l, seen, claimed)
	}
	r.finish(g, wait)
	t.Logf("B saw the revision go back %v after the restore", seen.Round(time.Millisecond))
}

// etcd restored under the same cluster ID while no holder runs: nothing
// can tell the restored keyspace from one never written since the
// snapshot (the marker names this very cluster, the records match its
// digest). This is the restore that cannot be detected: the operator runs
// ResetHistory after it, and the successor then waits out the horizon.
// No ID repeats.
func TestRestoreUnseenThenResetHistory(t *testing.T) {
	t.Parallel()
	r := newRestoreRun(t, "/restore-unseen/")
	// B stops cleanly before the restore: no holder runs.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.colB.Stop()
	if err := r.b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r.restore(etcdtest.RestoreOptions{})

	// The restored marker names the cluster etcd now has: the restore
	// shows nowhere.
	cli := r.cfg.Client
	marker, ok := value(t, cli, r.cfg.Prefix+"marker")
	resp, err := cli.Get(ctx, "/none")
	if err != nil {
		t.Fatal(err)
	}
	if want := "id=" + strconv.FormatUint(resp.Header.ClusterId, 16) + " "; !ok || !strings.Contains(marker, want) {
		t.Fatalf("restored marker %q does not name the cluster (%s)", marker, want)
	}

	op, err := New(withHolder(r.cfg, "operator"))
	if err != nil {
		t.Fatal(err)
	}
	if err := op.ResetHistory(ctx); err != nil {
		t.Fatal(err)
	}
	claimed := time.Now().Unix()
	g, wait := startSuccessor(t, withHolder(r.cfg, "successor"))
	if l := g.Lease(); l.Start <= claimed+horizonSeconds-1 {
		t.Errorf("after ResetHistory the successor's lease %v starts before the horizon after %d", l, claimed)
	}
	r.finish(g, wait)
}

func withHolder(cfg Config, holder string) Config {
	cfg.Holder = holder
	return cfg
}
