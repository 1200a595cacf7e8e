package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/leasetest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestConfig(t *testing.T) {
	cli := &clientv3.Client{}
	s, err := NewStore(Config{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	info := s.Info()
	if s.prefix != DefaultPrefix || s.layout != (lease.BlockLayout{FirstNode: 0, LastNode: randflake.MaxNode, Size: DefaultNodes}) ||
		s.ttl != 10 || info.Promise != 30*time.Second || info.MaxClockSkew != time.Second || !strings.Contains(s.holder, " pid ") {
		t.Errorf("defaults: %+v, %+v", s, info)
	}
	if s, _ := NewStore(Config{Client: cli, TTL: 3500 * time.Millisecond, Promise: time.Second}); s.ttl != 4 || s.promise != 4*time.Second {
		t.Errorf("rounding: ttl %d, promise %v", s.ttl, s.promise)
	}
	if s, _ := NewStore(Config{Client: cli, Nodes: 131072}); s.layout.Count() != 1 {
		t.Errorf("one block of every node ID: %+v", s.layout)
	}
	for _, c := range []Config{
		{},
		{Client: cli, Nodes: -1},
		{Client: cli, Nodes: 3},
		{Client: cli, FirstNode: 10, LastNode: 5},
		{Client: cli, LastNode: randflake.MaxNode + 1},
		{Client: cli, Nodes: 16, FirstNode: 0, LastNode: 7},
		{Client: cli, TTL: 2 * time.Second},
		{Client: cli, TTL: -time.Second},
		{Client: cli, TTL: 1 << 62},
		{Client: cli, Promise: -time.Second},
		{Client: cli, MaxClockSkew: -time.Second},
	} {
		if _, err := NewStore(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if _, err := New(Config{Client: cli}); err == nil || !strings.Contains(err.Error(), "Secret") {
		t.Errorf("New without a secret: %v", err)
	}
	if _, err := New(Config{Client: cli, Secret: []byte("15 bytes secret")}); err == nil {
		t.Error("New with a 15-byte secret succeeded")
	} else if strings.Contains(err.Error(), "15 bytes secret") {
		t.Errorf("the error shows the secret: %v", err)
	}
	// A TTL whose promise passes the fleet's horizon is refused, naming
	// both, unless the horizon is raised with it (rule 13).
	if _, err := New(Config{Client: cli, Secret: testSecret, TTL: 20 * time.Minute}); err == nil ||
		!strings.Contains(err.Error(), "promise 1h0m0s ahead, beyond the fleet's horizon of 30s") {
		t.Errorf("New with a TTL of 20m under the default horizon: %v, want it refused naming the promise and the horizon", err)
	}
	if _, err := New(Config{Client: cli, Secret: testSecret, TTL: 20 * time.Minute, Horizon: time.Hour}); err != nil {
		t.Errorf("New with a TTL of 20m under a horizon of 1h: %v", err)
	}
	if _, err := NewStore(Config{Client: cli, Horizon: -time.Second}); err == nil {
		t.Error("a negative horizon was accepted")
	}
	src, err := New(Config{Client: cli, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	var _ randflake.LeaseSource = src
}

// The lease end is the last whole second ending a margin before the etcd
// lease can expire.
func TestEndFor(t *testing.T) {
	for _, c := range []struct {
		t0  time.Time
		ttl int64
		end int64
	}{
		{time.Unix(100, 0), 3, 101},                     // expiry 103, margin 0.3s: last second 101 (ends at 102)
		{time.Unix(100, 400e6), 3, 102},                 // stop at 103.1
		{time.Unix(100, 200e6), 3, 101},                 // stop at 102.9
		{time.Unix(100, 0), 10, 108},                    // stop at 109
		{time.Unix(100, 999e6), 10, 108},                // stop at 109.999
		{time.Unix(1750000000, 0), 60, 1750000000 + 53}, // stop at +54
	} {
		end := endFor(c.t0, c.ttl)
		if end != c.end {
			t.Errorf("endFor(%v, %d) = %d, want %d", c.t0, c.ttl, end, c.end)
		}
		if stop := time.Unix(end+1, 0); stop.After(c.t0.Add(time.Duration(c.ttl)*time.Second - margin(c.ttl))) {
			t.Errorf("endFor(%v, %d): issuing until %v, past the margin", c.t0, c.ttl, stop)
		}
	}
}

// The first claim under a new prefix waits out the horizon once (etcd
// cannot tell a new prefix from a wiped one) and records the marker;
// a later claimant waits no longer than the marker says.
func TestFirstClaimWaitsOnce(t *testing.T) {
	t.Parallel()
	_, cli := startEtcd(t)
	cfg := testConfig(cli, "/first/", 31, "first")
	began := time.Now()
	g := newLeased(t, cfg)
	waited := time.Since(began)
	l := g.Lease()
	// The horizon: the promise plus the clock skew bound, in whole
	// seconds, after the second of the claim.
	horizon := int64((testTTL + DefaultMaxClockSkew) / time.Second)
	if l.Start <= began.Unix()+horizon {
		t.Errorf("the first lease %v starts before %d, the claim's second plus the horizon", l, began.Unix()+horizon)
	}
	if _, ok := value(t, cli, "/first/marker"); !ok {
		t.Error("no marker after the first claim")
	}
	began2 := time.Now()
	cfg2 := testConfig(cli, "/first/", 31, "second")
	g2 := newLeased(t, cfg2)
	// It waits a takeover's time (rule 14 of docs/leases.md), not the
	// horizon again.
	if l2, takeover := g2.Lease(), takeoverOf(t, cfg2); l2.Start > max(l.Start, began2.Unix()+takeover+2) {
		t.Errorf("the second lease %v starts after the first's start %d and more than a takeover's %d s after its claim: it waited again", l2, l.Start, takeover)
	}
	t.Logf("first claim under a new prefix waited %v; the second %v", waited.Round(time.Millisecond), time.Since(began2).Round(time.Millisecond))
}

// Several claimants get disjoint node IDs; one more is refused while they
// live; a released block passes at once to the next claimant, which
// starts after the last second used.
func TestDisjointClaimsAndRefusal(t *testing.T) {
	t.Parallel()
	_, cli := startEtcd(t)
	cfg := testConfig(cli, "/disjoint/", 63, "")
	var gens []*randflake.Leased
	var cols []*leasetest.Collector
	blocks := map[int64]bool{}
	for i := range 4 {
		g := newLeased(t, cfg)
		l := g.Lease()
		if blocks[l.FirstNode] || l.Nodes() != 16 {
			t.Fatalf("lease %v overlaps another or has the wrong size", l)
		}
		blocks[l.FirstNode] = true
		gens = append(gens, g)
		cols = append(cols, leasetest.Collect(fmt.Sprintf("generator %d", i), g))
	}
	extra, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := extra.Acquire(ctx); !errors.Is(err, ErrNoFreeNodes) {
		t.Fatalf("fifth claimant: %v, want ErrNoFreeNodes", err)
	}
	time.Sleep(time.Second)
	check := leasetest.NewChecker(t, testSecret)
	var spans []leasetest.Span
	for _, c := range cols {
		spans = append(spans, check.AddCollector(c))
	}
	released := gens[1].Lease()
	if err := gens[1].Close(ctx); err != nil {
		t.Fatal(err)
	}
	from := time.Now().Unix()
	l, err := extra.Acquire(ctx)
	if err != nil {
		t.Fatalf("claim right after a release: %v", err)
	}
	// From the second after the last one used, or a takeover's wait
	// after the claim (rule 14), whichever is later.
	if takeover := takeoverOf(t, cfg); l.FirstNode != released.FirstNode || l.Start <= spans[1].Last || l.Start > max(spans[1].Last+1, from+takeover+2) {
		t.Errorf("took over %v, want node IDs %d- from second %d or a takeover's %d s after the claim at %d", l, released.FirstNode, spans[1].Last+1, takeover, from)
	}
	if err := extra.Release(ctx, l, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("4 generators: %v", check)
}

// While etcd is down the generators issue IDs until their lease ends (no
// later than their etcd leases could expire) and none after; when etcd
// comes back they resume.
func TestEtcdStopAndRestart(t *testing.T) {
	t.Parallel()
	srv, cli := startEtcd(t)
	cfg := testConfig(cli, "/restart/", 31, "")
	g1, g2 := newLeased(t, cfg), newLeased(t, cfg)
	c1, c2 := leasetest.Collect("generator 1", g1), leasetest.Collect("generator 2", g2)
	time.Sleep(700 * time.Millisecond)

	stoppedAt := time.Now()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(testTTL + 500*time.Millisecond)
	for _, c := range []*leasetest.Collector{c1, c2} {
		_, last := c.Count()
		// The lease end is at most TTL - margin after the last keep-alive,
		// sent before etcd stopped; allow for scheduling delays, as slow
		// as this process has been.
		if limit := stoppedAt.Add(testTTL - margin(3) + sinceStart.Stretch(200*time.Millisecond)); last.After(limit) {
			t.Errorf("%s issued an ID at %v, %v after etcd stopped (%s)", c.Name(), last, last.Sub(stoppedAt), sinceStart)
		}
	}
	// Once a renewal has failed, Generate says why: the renewal goroutine
	// records the failure at its next try, which a loaded machine may
	// run late.
	var err error
	var le *randflake.LeaseError
	for deadline := time.Now().Add(sinceStart.Stretch(5 * time.Second)); ; time.Sleep(50 * time.Millisecond) {
		_, err = g1.Generate()
		if errors.Is(err, randflake.ErrInvalidLease) && errors.As(err, &le) || time.Now().After(deadline) {
			break
		}
	}
	if !errors.Is(err, randflake.ErrInvalidLease) || !errors.As(err, &le) {
		t.Fatalf("Generate with etcd down: %v, want a *randflake.LeaseError (%s)", err, sinceStart)
	}
	t.Logf("with etcd down: %v", err)

	restartedAt := time.Now()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*leasetest.Collector{c1, c2} {
		resumed := c.WaitIssuedAfter(t, restartedAt, 20*time.Second)
		t.Logf("%s resumed %v after the restart (errors: %v)", c.Name(), resumed.Round(time.Millisecond), c.Errors())
	}
	time.Sleep(300 * time.Millisecond)
	check := leasetest.NewChecker(t, testSecret)
	check.AddCollector(c1)
	check.AddCollector(c2)
	t.Logf("%v", check)
}

// A holder cut off from etcd (its connections dropped, as in a network
// partition) stops issuing before another claimant can take its node IDs;
// the other claimant starts after its last second; when the partition
// heals, the first finds its lease lost and claims node IDs again once
// they are free, after the second's last second.
func TestPartition(t *testing.T) {
	t.Parallel()
	srv, cliB := startEtcd(t)
	p := leasetest.NewProxy(t, srv.Endpoint())
	cliA := newClient(t, p.Addr())
	cfgA := testConfig(cliA, "/partition/", 15, "A")
	cfgB := testConfig(cliB, "/partition/", 15, "B")
	r := leasetest.StartCutOff(t, p, testSecret, newLeased(t, cfgA), func(ctx context.Context) error {
		_, err := NewLeased(ctx, testSecret, cfgB)
		return err
	})
	// The moment A's claim disappears (its etcd lease expired) is the
	// earliest another process could claim its node IDs.
	var freedAt time.Time
	m := slowdown.Start()
	for {
		if keyCount(t, cliB, "/partition/claim/") == 0 {
			freedAt = time.Now()
			break
		}
		// Its etcd lease expires one TTL after its last keep-alive:
		// three TTLs, stretched by how slow the machine ran, is a claim
		// that outlived its lease.
		if limit := m.Stretch(3 * testTTL); time.Since(r.At) > limit {
			t.Fatalf("A's claim still there %v after the partition, three TTLs of %v (%s)", limit.Round(time.Millisecond), testTTL, m)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, lastA := r.A.Count()
	if !lastA.Before(freedAt) {
		t.Fatalf("A issued an ID at %v, after its node IDs were free at %v", lastA, freedAt)
	}
	if freedAt.Sub(r.At) < testTTL-time.Second {
		t.Errorf("A's node IDs free %v after the cut, before its TTL could pass", freedAt.Sub(r.At))
	}
	gB := newLeased(t, cfgB)
	t.Logf("A stopped %v after the cut; its node IDs were free %v after it; B started %v after it",
		lastA.Sub(r.At).Round(time.Millisecond), freedAt.Sub(r.At).Round(time.Millisecond), time.Since(r.At).Round(time.Millisecond))
	// Heal the partition: A's lease has expired, B holds the node IDs.
	r.Heal(gB)
}

// Claims and releases by concurrent claimants on a few blocks leave no
// claim, no etcd lease and no extra key behind, and every claim starts
// after the seconds its predecessors recorded.
func TestClaimReleaseCycles(t *testing.T) {
	t.Parallel()
	_, cli := startEtcd(t)
	cfg := testConfig(cli, "/cycles/", 31, "")
	// Each claim waits a takeover's time (rule 14): a few cycles each.
	const workers, cycles = 4, 4
	refusals := leasetest.ClaimReleaseCycles(t, leasetest.Cycles{
		Workers: workers, Cycles: cycles,
		Source: func(w int) (randflake.LeaseSource, error) { return New(withHolder(cfg, fmt.Sprintf("worker %d", w))) },
		// Every block held, or the block chosen taken by another worker
		// in each of the engine's tries: try again.
		Refused: func(err error) bool { return errors.Is(err, ErrNoFreeNodes) || errors.Is(err, lease.ErrBlockHeld) },
		// Half the cycles use nothing; every 2nd uses its second, so that
		// the next claim of the block starts after it.
		Last: func(i int, l randflake.Lease) int64 {
			if i%2 == 1 {
				return max(time.Now().Unix(), l.Start)
			}
			return l.Start - 1
		},
		// A claim whose request ran past its bound on a loaded machine
		// is tried again, as Leased tries a failed acquisition again.
		Transient: slowRequest,
	})
	ctx := context.Background()
	leases, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The marker and one record per block.
	if claims, keys := keyCount(t, cli, "/cycles/claim/"), keyCount(t, cli, "/cycles/"); claims != 0 || keys != 3 || len(leases.Leases) != 0 {
		t.Errorf("after %d cycles: %d claim keys, %d keys in all (want the marker and 2 records) and %d etcd leases left",
			workers*cycles, claims, keys, len(leases.Leases))
	}
	for range 2 {
		s, _ := New(cfg)
		if _, err := s.Acquire(ctx); err != nil {
			t.Fatalf("after %d cycles: %v", workers*cycles, err)
		}
	}
	t.Logf("%d claim/release cycles (%d refusals while 4 claimants shared 2 blocks)", workers*cycles, refusals)
}
