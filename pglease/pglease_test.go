package pglease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/randflake/randflake"
	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/leasetest"
)

func TestConfig(t *testing.T) {
	pool := &pgxpool.Pool{} // never used: rejected with a DSN beside it
	s, err := New(Config{DSN: "host=127.0.0.1 port=1 user=u dbname=d", Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := s.st
	if st.n.blocks != `"randflake_blocks"` || st.n.version != `"randflake_blocks_schema"` ||
		st.layout != (lease.BlockLayout{FirstNode: 0, LastNode: randflake.MaxNode, Size: DefaultNodes}) ||
		st.ttl != DefaultTTL || st.skew != DefaultMaxClockSkew || st.holder == "" {
		t.Errorf("defaults: %+v", st)
	}
	info := st.Info()
	if info.Name != "postgres randflake_blocks" || info.Promise != DefaultTTL || !info.Durable || info.MaxClockSkew != 2*DefaultMaxClockSkew ||
		info.EndFor(time.Unix(100, 0)) != endFor(time.Unix(100, 0), DefaultTTL, DefaultMaxClockSkew) {
		t.Errorf("store info: %+v", info)
	}
	// Node IDs past the last whole block are not used.
	s2, err := New(Config{DSN: "host=x", Secret: testSecret, Schema: "my app", Table: `ids"x`, Nodes: 3, FirstNode: 10, LastNode: 20})
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if s2.st.n.blocks != `"my app"."ids""x"` || s2.st.n.version != `"my app"."ids""x_schema"` || s2.st.n.display != `my app.ids"x` {
		t.Errorf("quoted names: %s, %s, %s", s2.st.n.blocks, s2.st.n.version, s2.st.n.display)
	}
	if s2.st.layout != (lease.BlockLayout{FirstNode: 10, LastNode: 18, Size: 3}) {
		t.Errorf("layout of 3 node IDs in 10-20: %+v", s2.st.layout)
	}
	for _, c := range []Config{
		{},
		{DSN: "host=x"}, // no secret
		{DSN: "host=x", Secret: []byte("short")},
		{DSN: "host=x", Secret: testSecret, Pool: pool},
		{DSN: "host=x", Secret: testSecret, Nodes: -1},
		{DSN: "host=x", Secret: testSecret, FirstNode: 10, LastNode: 5},
		{DSN: "host=x", Secret: testSecret, LastNode: randflake.MaxNode + 1},
		{DSN: "host=x", Secret: testSecret, Nodes: 16, FirstNode: 0, LastNode: 7},
		{DSN: "host=x", Secret: testSecret, TTL: time.Second},
		{DSN: "host=x", Secret: testSecret, TTL: 3 * time.Second, MaxClockSkew: 700 * time.Millisecond},
		{DSN: "host=x", Secret: testSecret, MaxClockSkew: -time.Second},
		{DSN: "host=x", Secret: testSecret, Horizon: -time.Second},
		{DSN: "host=x", Secret: testSecret, Table: strings.Repeat("t", 60)},
	} {
		s, err := New(c)
		if err == nil {
			s.Close()
			t.Errorf("%+v accepted", c)
			continue
		}
		if strings.Contains(err.Error(), string(testSecret)) {
			t.Errorf("the error shows the secret: %v", err)
		}
	}
	// A TTL past the fleet's horizon is refused, naming both, unless the
	// horizon is raised with it (rule 13).
	if s, err := New(Config{DSN: "host=x", Secret: testSecret, TTL: 20 * time.Minute}); err == nil {
		s.Close()
		t.Error("a TTL of 20m under the default horizon was accepted")
	} else if !strings.Contains(err.Error(), "promise 20m0s ahead, beyond the fleet's horizon of 10s") {
		t.Errorf("a TTL of 20m under the default horizon: %v, want the promise and the horizon named", err)
	}
	if s, err := New(Config{DSN: "host=x", Secret: testSecret, TTL: 20 * time.Minute, Horizon: 20 * time.Minute}); err != nil {
		t.Errorf("a TTL of 20m under a horizon of 20m: %v", err)
	} else {
		s.Close()
	}
	// NewLeased refuses a Config.Secret other than its secret.
	if _, err := NewLeased(context.Background(), testSecret, Config{DSN: "host=x", Secret: []byte("another-secret16")}); err == nil {
		t.Error("NewLeased with two secrets accepted")
	}
}

// The lease end is the last whole second ending a margin and twice the
// clock-skew bound before the claim can lapse.
func TestEndFor(t *testing.T) {
	for _, c := range []struct {
		t0        time.Time
		ttl, skew time.Duration
		end       int64
	}{
		{time.Unix(100, 0), 3 * time.Second, 200 * time.Millisecond, 101},         // stop at 102.3
		{time.Unix(100, 699e6), 3 * time.Second, 200 * time.Millisecond, 101},     // stop at 102.999
		{time.Unix(100, 800e6), 3 * time.Second, 200 * time.Millisecond, 102},     // stop at 103.1
		{time.Unix(100, 0), 10 * time.Second, time.Second, 106},                   // stop at 107
		{time.Unix(100, 999e6), 10 * time.Second, time.Second, 106},               // stop at 107.999
		{time.Unix(1750000000, 0), time.Minute, 5 * time.Second, 1750000000 + 43}, // stop at +44
		{time.Unix(randflake.MaxTimestamp, 0), time.Minute, time.Second, randflake.MaxTimestamp},
	} {
		end := endFor(c.t0, c.ttl, c.skew)
		if end != c.end {
			t.Errorf("endFor(%v, %v, %v) = %d, want %d", c.t0, c.ttl, c.skew, end, c.end)
		}
		if stop := time.Unix(end+1, 0); end < randflake.MaxTimestamp && stop.After(c.t0.Add(c.ttl-2*c.skew-margin(c.ttl))) {
			t.Errorf("endFor(%v, %v, %v): issuing until %v, past the margin", c.t0, c.ttl, c.skew, stop)
		}
	}
}

func TestCheckSkew(t *testing.T) {
	skew := 500 * time.Millisecond
	t0 := time.Unix(1000, 0)
	t1 := t0.Add(20 * time.Millisecond)
	for _, c := range []struct {
		srv time.Time
		ok  bool
	}{
		{t0, true},
		{t0.Add(-500 * time.Millisecond), true},
		{t1.Add(500 * time.Millisecond), true},
		{t0.Add(-600 * time.Millisecond), false},
		{t1.Add(600 * time.Millisecond), false},
	} {
		err := checkSkew(t0, t1, c.srv, skew)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrClockSkew)) {
			t.Errorf("server at %v, here %v to %v: %v", c.srv, t0, t1, err)
		}
	}
}

// No error, nor log line, contains the DSN's password.
func TestPasswordNeverShown(t *testing.T) {
	const pw = "s3cret-Passw0rd"
	for _, dsn := range []string{
		"postgres://randflake:" + pw + "@127.0.0.1:bad/postgres",
		"host=127.0.0.1 port=x password=" + pw,
		"host=127.0.0.1 password='" + pw + " user=x",
		"postgres://randflake:" + pw + "@[::1/postgres",
	} {
		_, err := New(Config{DSN: dsn, Secret: testSecret})
		if err == nil {
			t.Errorf("%q accepted", dsn)
			continue
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("error shows the password: %v", err)
		}
	}
	var logs bytes.Buffer
	// A port nothing listens on: the connection fails.
	dsn := fmt.Sprintf("postgres://randflake:%s@127.0.0.1:%d/postgres?connect_timeout=1&sslmode=disable", pw, closedPort(t))
	s, err := New(Config{DSN: dsn, Secret: testSecret, TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Acquire(context.Background())
	if err == nil {
		t.Fatal("Acquire on a closed port succeeded")
	}
	if strings.Contains(err.Error(), pw) || strings.Contains(logs.String(), pw) {
		t.Errorf("the password is shown: %v\n%s", err, logs.String())
	}
	t.Logf("Acquire without a server: %v", err)
	// An error that quotes the password (a server's message, say) is
	// scrubbed and still answers errors.Is.
	e := s.red.scrub(fmt.Errorf("wrapped %s: %w", pw, randflake.ErrLeaseLost))
	if strings.Contains(e.Error(), pw) || !errors.Is(e, randflake.ErrLeaseLost) {
		t.Errorf("scrub: %v", e)
	}
}

// Claimants beyond the blocks are refused with ErrNoFreeNodes, even when
// a stale reading makes a claimant try a held block; a process configured
// for another block size is refused; and a released block passes at once
// to the next claimant, which starts after the last second used.
func TestRefusedWhenAllHeld(t *testing.T) {
	t.Parallel()
	cfg := tableConfig(t, "refused", 31)
	pool, table := cfg.Pool, cfg.Table
	ctx := context.Background()
	g1, g2 := newLeased(t, cfg), newLeased(t, cfg)
	if g1.Lease().FirstNode == g2.Lease().FirstNode {
		t.Fatalf("two leases on one block: %v, %v", g1.Lease(), g2.Lease())
	}
	extra, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = extra.Acquire(ctx)
	if !errors.Is(err, ErrNoFreeNodes) {
		t.Fatalf("third claimant: %v, want ErrNoFreeNodes", err)
	}
	t.Logf("third claimant: %v", err)
	// A claimant whose reading is stale (the block looked free) is refused
	// by the claiming statement itself, and the holder keeps its claim.
	racer, _ := New(cfg)
	for _, held := range []randflake.Lease{g1.Lease(), g2.Lease()} {
		_, err := racer.st.Update(ctx, nil, true, func(v *lease.StoreView) (*lease.StoreChanges, error) {
			return &lease.StoreChanges{Claim: []int64{held.FirstNode}}, nil
		})
		if !errors.Is(err, lease.ErrBlockHeld) {
			t.Fatalf("claim of the held block %v ignoring the reading: %v, want ErrBlockHeld", held, err)
		}
	}
	var holders int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE token IS NOT NULL AND expires_at > clock_timestamp()`).Scan(&holders); err != nil || holders != 2 {
		t.Fatalf("claims after the refused ones: %d, %v; want the 2 holders'", holders, err)
	}
	wide := cfg
	wide.Nodes = 32
	ws, _ := New(wide)
	if l, err := ws.Acquire(ctx); !errors.Is(err, lease.ErrFleetMismatch) {
		t.Fatalf("claimant of 32 node IDs over blocks of 16: %v, %v; want ErrFleetMismatch", l, err)
	} else {
		t.Logf("claimant of another block size: %v", err)
	}
	c := leasetest.Collect("g2", g2)
	time.Sleep(1200 * time.Millisecond)
	ids := c.Stop()
	check := checker(t)
	last := check.Add("generator 2", ids, g2.Lease()).Last
	released := g2.Lease()
	if err := g2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	from := time.Now().Unix()
	l, err := extra.Acquire(ctx)
	if err != nil {
		t.Fatalf("claim right after a release: %v", err)
	}
	// From the second after the last one used, or a takeover's wait
	// after the claim (rule 14), whichever is later.
	if takeover := takeoverOf(t, cfg); l.FirstNode != released.FirstNode || l.Start <= last || l.Start > max(last+1, from+takeover+2) {
		t.Errorf("took over %v, want node IDs %d- from second %d or a takeover's %d s after the claim at %d", l, released.FirstNode, last+1, takeover, from)
	}
	if err := extra.Release(ctx, l, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d IDs before the release; the next holder started at second %d, right after them", len(ids), l.Start)
}

// Claims and releases by concurrent claimants on two blocks
// leave no claim, no extra row and no connection behind, and every claim
// starts after the second its predecessor recorded. Only the connections
// of the test's own pool are counted (by their application_name), never
// those of the tests running beside it.
func TestClaimReleaseCycles(t *testing.T) {
	t.Parallel()
	srv := server(t)
	app := uniqueName("pglease_cycles")
	pc, err := pgxpool.ParseConfig(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	table := newTable(t, pool, "cycles")
	cfg := Config{Pool: pool, Secret: testSecret, Table: table, Nodes: 16, LastNode: 31, TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew}
	// Each claim waits a takeover's time (rule 14): a few cycles each.
	const workers, cycles = 4, 4
	ctx := context.Background()
	// ours counts the server's connections of this test's pool.
	ours := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
			t.Error(err)
		}
		return n
	}
	var connsEarly int
	refusals := leasetest.ClaimReleaseCycles(t, leasetest.Cycles{
		Workers: workers, Cycles: cycles,
		Source: func(w int) (randflake.LeaseSource, error) {
			cfg := cfg
			cfg.Holder = fmt.Sprintf("worker %d", w)
			return New(cfg)
		},
		// Report the previous second as used, when the lease covers it
		// (so that the next claim need not wait), else nothing.
		Last: func(_ int, l randflake.Lease) int64 {
			if last := time.Now().Unix() - 1; last >= l.Start && last <= l.End {
				return last
			}
			return l.Start - 1
		},
		AfterRelease: func(done int) {
			if done == 4 {
				connsEarly = ours()
			}
		},
		// A claim whose step ran past its bound on a loaded machine
		// is tried again, as Leased tries a failed acquisition again.
		Transient: slowStep,
	})
	var rows, held int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(token) FROM `+table).Scan(&rows, &held); err != nil {
		t.Fatal(err)
	}
	if rows != 2 || held != 0 {
		t.Errorf("after %d cycles: %d rows (want 2), %d claimed (want 0)", workers*cycles, rows, held)
	}
	// The pool holds no connection still acquired (a step left open), and
	// the server sees as many connections of the pool as the pool has (a
	// closing one may take a moment to leave), never more than its limit.
	st := pool.Stat()
	if st.AcquiredConns() != 0 {
		t.Errorf("after %d cycles: %d connections still acquired from the pool", workers*cycles, st.AcquiredConns())
	}
	var connsLate int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		connsLate = ours()
		if connsLate <= int(pool.Stat().TotalConns()) || time.Now().After(deadline) {
			break
		}
	}
	if connsLate > int(pool.Stat().TotalConns()) || connsLate > int(st.MaxConns()) || connsEarly > int(st.MaxConns()) {
		t.Errorf("server connections of the test's pool: %d after 200 cycles, %d after %d; the pool has %d of at most %d",
			connsEarly, connsLate, workers*cycles, pool.Stat().TotalConns(), st.MaxConns())
	}
	for range 2 {
		s, _ := New(cfg)
		if _, err := s.Acquire(ctx); err != nil {
			t.Fatalf("after %d cycles: %v", workers*cycles, err)
		}
	}
	t.Logf("%d claim/release cycles (%d refusals while 4 claimants shared 2 blocks); %d rows; connections of the test's pool on the server: %d after 200 cycles, %d at the end (pool limit %d)",
		workers*cycles, refusals, rows, connsEarly, connsLate, st.MaxConns())
}

// The store checks this machine's clock against the server's: a process
// whose clock is an hour ahead is refused with ErrClockSkew before it
// claims or records anything; a holder whose clock jumps after its claim
// fails its renewals (transient: its lease runs out) and cannot record
// its release: the engine then frees the claim without a record, so no
// record carries the wrong time, and the block passes to a holder with a
// true clock once the last promise made with the true clock has passed,
// without ErrClockBehind.
func TestClockSkewRefused(t *testing.T) {
	t.Parallel()
	cfg := tableConfig(t, "skew", 15)
	pool, table := cfg.Pool, cfg.Table
	ctx := context.Background()
	var ahead atomic.Int64 // nanoseconds the clock is ahead
	clock := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	source := func() *lease.BlockSource {
		st := openStore(t, cfg)
		st.now = clock
		bs, err := lease.NewBlockSource(st, lease.BlockSourceConfig{Secret: testSecret, Layout: st.layout, Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		return bs
	}
	rows := func() (n, held int, at int64) {
		t.Helper()
		var rec *string
		err := pool.QueryRow(ctx, `SELECT count(*) OVER (), count(token) OVER (), record FROM `+table).Scan(&n, &held, &rec)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, 0, 0
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec != nil {
			f := strings.Fields(*rec)
			at, _ = strconv.ParseInt(f[4], 10, 64)
		}
		return n, held, at
	}

	ahead.Store(int64(time.Hour))
	if l, err := source().Acquire(ctx); !errors.Is(err, ErrClockSkew) {
		t.Fatalf("a claim with a clock an hour ahead: %v, %v; want ErrClockSkew", l, err)
	} else {
		t.Logf("a clock an hour ahead: %v", err)
	}
	if n, _, _ := rows(); n != 0 {
		t.Fatalf("the refused claim left %d rows", n)
	}

	ahead.Store(0)
	bs := source()
	l, err := bs.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ahead.Store(int64(time.Hour))
	if _, err := bs.Renew(ctx, l); !errors.Is(err, ErrClockSkew) || errors.Is(err, randflake.ErrLeaseLost) {
		t.Fatalf("a renewal after the clock jumped an hour: %v; want ErrClockSkew, not a lost lease", err)
	}
	if err := bs.Release(ctx, l, l.Start-1); !errors.Is(err, ErrClockSkew) {
		t.Fatalf("a release after the clock jumped an hour: %v; want ErrClockSkew", err)
	}
	n, held, at := rows()
	if n != 1 || held != 0 || at > time.Now().Unix()+1 {
		t.Fatalf("after the jumped holder's release: %d rows, %d claims, record written at second %d (now %d); want the claim freed and no record from the wrong clock",
			n, held, at, time.Now().Unix())
	}
	ahead.Store(0)
	next := source()
	m, began := slowdown.Start(), time.Now()
	var l2 randflake.Lease
	for {
		if l2, err = next.Acquire(ctx); err == nil {
			break
		}
		// The freed claim is free at once; a claim still held would be
		// free within a TTL: three TTLs, stretched by how slow the
		// machine ran, is a claim that was never freed.
		if limit := m.Stretch(3 * testTTL); !errors.Is(err, ErrNoFreeNodes) || time.Since(began) > limit {
			t.Fatalf("a true clock's claim after the jumped holder, %v after its release (limit %v; %s): %v",
				time.Since(began).Round(time.Millisecond), limit.Round(time.Millisecond), m, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := next.Release(ctx, l2, l2.Start-1); err != nil {
		t.Fatal(err)
	}
	if l2.FirstNode != l.FirstNode || l2.Start <= l.End {
		t.Errorf("the true clock's lease %v after the jumped holder's %v: want the same node IDs after its end", l2, l)
	}
	t.Logf("a true clock claimed the jumped holder's node IDs %v after its failed release, lease %v after %v, without ErrClockBehind",
		time.Since(began).Round(time.Millisecond), l2, l)
}

// stepCounter is a store that counts its renewals and the steps on a held
// claim that record a promise.
type stepCounter struct {
	*store
	mu               sync.Mutex
	renewals, writes int
}

func (c *stepCounter) Renew(ctx context.Context, held lease.StoreClaim) (lease.StoreIdentity, error) {
	c.mu.Lock()
	c.renewals++
	c.mu.Unlock()
	return c.store.Renew(ctx, held)
}

func (c *stepCounter) Update(ctx context.Context, held lease.StoreClaim, all bool, fn func(*lease.StoreView) (*lease.StoreChanges, error)) (lease.StoreClaim, error) {
	return c.store.Update(ctx, held, all, func(v *lease.StoreView) (*lease.StoreChanges, error) {
		ch, err := fn(v)
		if err == nil && held != nil && ch != nil && len(ch.Records) > 0 && !ch.Release {
			c.mu.Lock()
			c.writes++
			c.mu.Unlock()
		}
		return ch, err
	})
}

// With promises of one TTL, a holder records its seconds at some of its
// renewals only, never more often than it renews, and its lease follows
// the renewals without a gap.
func TestPromiseWrites(t *testing.T) {
	t.Parallel()
	cfg := tableConfig(t, "promises", 15)
	st := &stepCounter{store: openStore(t, cfg)}
	bs, err := lease.NewBlockSource(st, lease.BlockSourceConfig{Secret: testSecret, Layout: st.layout})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g, err := randflake.NewLeased(ctx, randflake.LeasedConfig{Secret: testSecret, Source: bs})
	if err != nil {
		t.Fatal(err)
	}
	c := leasetest.Collect("holder", g)
	time.Sleep(6 * time.Second)
	st.mu.Lock()
	renewals, writes := st.renewals, st.writes
	st.mu.Unlock()
	check := checker(t)
	check.AddCollector(c)
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if writes < 1 || writes > renewals {
		t.Errorf("in 6s: %d renewals, %d promises recorded; want at least one promise, and none without a renewal", renewals, writes)
	}
	if errs := c.Errors(); len(errs) > 0 {
		t.Errorf("the holder's generator failed: %v", errs)
	}
	t.Logf("in 6s with a TTL of %v: %d renewals, %d promises recorded (the claim's own not counted); %s", testTTL, renewals, writes, check)
}
