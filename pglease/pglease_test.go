package pglease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/randflake/randflake"
)

const (
	testTTL  = 3 * time.Second
	testSkew = 200 * time.Millisecond
)

// validity is how long after a renewal is sent the test configuration's
// lease lasts: TTL - 2 x MaxClockSkew - margin.
const validity = testTTL - 2*testSkew - 300*time.Millisecond

func TestConfig(t *testing.T) {
	pool := &pgxpool.Pool{} // never used: rejected with a DSN beside it
	s, err := New(Config{DSN: "host=127.0.0.1 port=1 user=u dbname=d"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.n.blocks != `"randflake_blocks"` || s.n.version != `"randflake_blocks_schema"` || s.nodes != DefaultNodes || s.first != 0 || s.last != randflake.MaxNode ||
		s.ttl != DefaultTTL || s.skew != DefaultMaxClockSkew || s.holder == "" {
		t.Errorf("defaults: %+v", s)
	}
	s2, err := New(Config{DSN: "host=x", Schema: "my app", Table: `ids"x`, Nodes: 3, FirstNode: 10, LastNode: 20})
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if s2.n.blocks != `"my app"."ids""x"` || s2.n.version != `"my app"."ids""x_schema"` {
		t.Errorf("quoted names: %s, %s", s2.n.blocks, s2.n.version)
	}
	for _, c := range []Config{
		{},
		{DSN: "host=x", Pool: pool},
		{DSN: "host=x", Nodes: -1},
		{DSN: "host=x", FirstNode: 10, LastNode: 5},
		{DSN: "host=x", LastNode: randflake.MaxNode + 1},
		{DSN: "host=x", Nodes: 16, FirstNode: 0, LastNode: 7},
		{DSN: "host=x", TTL: time.Second},
		{DSN: "host=x", TTL: 3 * time.Second, MaxClockSkew: 700 * time.Millisecond},
		{DSN: "host=x", MaxClockSkew: -time.Second},
		{DSN: "host=x", Table: strings.Repeat("t", 60)},
	} {
		if s, err := New(c); err == nil {
			s.Close()
			t.Errorf("%+v accepted", c)
		}
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
	s := &Source{skew: 500 * time.Millisecond}
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
		err := s.checkSkew(t0, t1, c.srv)
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
		_, err := New(Config{DSN: dsn})
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
	s, err := New(Config{DSN: dsn, TTL: testTTL, MaxClockSkew: testSkew, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
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
	e := s.scrub(fmt.Errorf("wrapped %s: %w", pw, randflake.ErrLeaseLost))
	if strings.Contains(e.Error(), pw) || !errors.Is(e, randflake.ErrLeaseLost) {
		t.Errorf("scrub: %v", e)
	}
}

// Several processes claim at once: disjoint blocks, no ID twice, and a
// block used by two of them in turn only on later seconds.
func TestDisjointProcesses(t *testing.T) {
	t.Parallel()
	srv := server(t)
	pool := newPool(t, srv.DSN())
	table := newTable(t, pool, "disjoint")
	const procs = 4
	var hs []*helper
	for i := range procs {
		hs = append(hs, startHelper(t, "gen", srv.DSN(), table, fmt.Sprintf("child %d", i)))
	}
	check := newIDCheck(t)
	type use struct {
		who    string
		lo, hi int64
	}
	byBlock := map[int64][]use{}
	total := 0
	for i, h := range hs {
		l := h.lease(t)
		ids := h.wait(t)
		select {
		case l = <-h.leases: // as renewed, printed at the end
		default:
			t.Errorf("process %d printed no final lease", i)
		}
		who := fmt.Sprintf("process %d (%v)", i, l)
		lo, hi := check.add(who, ids, l)
		if len(ids) == 0 {
			t.Errorf("%s issued no IDs", who)
		}
		byBlock[l.FirstNode] = append(byBlock[l.FirstNode], use{who, lo, hi})
		total += len(ids)
		t.Logf("%s: %d IDs on seconds %d-%d", who, len(ids), lo, hi)
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
	t.Logf("%d processes on %d blocks: %d IDs, none twice", procs, len(byBlock), total)
}

// Claimants beyond the blocks are refused with ErrNoFreeNodes, a
// different block size never overlaps, and a released block passes at once
// to the next claimant, which starts after the last second used.
func TestRefusedWhenAllHeld(t *testing.T) {
	t.Parallel()
	srv := server(t)
	pool := newPool(t, srv.DSN())
	table := newTable(t, pool, "refused")
	cfg := Config{Pool: pool, Table: table, Nodes: 16, LastNode: 31, TTL: testTTL, MaxClockSkew: testSkew}
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
	// A claimant whose scan is stale (the block looked free) is refused by
	// the claim statement itself.
	racer, _ := New(cfg)
	for _, held := range []randflake.Lease{g1.Lease(), g2.Lease()} {
		if l, ok, err := racer.claimSlot(ctx, slot{first: held.FirstNode, last: held.LastNode, until: randflake.Epoch, exists: true}, "racer"); ok || err != nil {
			t.Fatalf("claim statement on the held block %v: %v, %v, %v; want it refused", held, l, ok, err)
		}
		if l, ok, err := racer.claimSlot(ctx, slot{first: held.FirstNode, last: held.LastNode, until: randflake.Epoch}, "racer"); ok || err != nil {
			t.Fatalf("insert of the held block %v: %v, %v, %v; want it refused", held, l, ok, err)
		}
	}
	wide := cfg
	wide.Nodes = 32
	ws, _ := New(wide)
	if l, err := ws.Acquire(ctx); !errors.Is(err, ErrNoFreeNodes) || !strings.Contains(err.Error(), "another size") {
		t.Fatalf("claimant of 32 node IDs over two held blocks of 16: %v, %v", l, err)
	} else {
		t.Logf("claimant of another block size: %v", err)
	}
	c := collect(g2)
	time.Sleep(1200 * time.Millisecond)
	ids := c.stop()
	check := newIDCheck(t)
	_, last := check.add("generator 2", ids, g2.Lease())
	released := g2.Lease()
	if err := g2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := extra.Acquire(ctx)
	if err != nil {
		t.Fatalf("claim right after a release: %v", err)
	}
	if l.FirstNode != released.FirstNode || l.Start != last+1 {
		t.Errorf("took over %v, want node IDs %d- from second %d", l, released.FirstNode, last+1)
	}
	if err := extra.Release(ctx, l, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d IDs before the release; the next holder started at second %d, right after them", len(ids), l.Start)
}

// Thousands of claims and releases by concurrent claimants on two blocks
// leave no claim, no extra row and no extra connection behind, and every
// claim starts after the seconds its predecessors recorded.
func TestClaimReleaseCycles(t *testing.T) {
	t.Parallel()
	srv := server(t)
	pool := newPool(t, srv.DSN())
	table := newTable(t, pool, "cycles")
	cfg := Config{Pool: pool, Table: table, Nodes: 16, LastNode: 31, TTL: testTTL, MaxClockSkew: testSkew}
	const workers, cycles = 4, 500
	ctx := context.Background()
	var mu sync.Mutex
	recorded := map[int64]int64{} // first node -> second recorded at release
	var refusals, done int
	conns := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var connsEarly int
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := cfg
			cfg.Holder = fmt.Sprintf("worker %d", w)
			s, err := New(cfg)
			if err != nil {
				t.Error(err)
				return
			}
			for i := 0; i < cycles; i++ {
				l, err := s.Acquire(ctx)
				if errors.Is(err, ErrNoFreeNodes) {
					mu.Lock()
					refusals++
					mu.Unlock()
					i--
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				last := time.Now().Unix()
				if last < l.Start {
					last = 0
				}
				mu.Lock()
				if prev := recorded[l.FirstNode]; l.Start <= prev {
					t.Errorf("lease %v starts at or before the recorded second %d", l, prev)
				}
				recorded[l.FirstNode] = max(last, l.Start-1)
				mu.Unlock()
				if err := s.Release(ctx, l, last); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if done++; done == 200 {
					connsEarly = conns()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	var rows, held int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(token) FROM `+table).Scan(&rows, &held); err != nil {
		t.Fatal(err)
	}
	connsLate := conns()
	if rows != 2 || held != 0 {
		t.Errorf("after %d cycles: %d rows (want 2), %d claimed (want 0)", workers*cycles, rows, held)
	}
	if st := pool.Stat(); connsLate > connsEarly+2 || st.TotalConns() > st.MaxConns() {
		t.Errorf("connections: %d after 200 cycles, %d after %d; pool %d of at most %d", connsEarly, connsLate, workers*cycles, st.TotalConns(), st.MaxConns())
	}
	for range 2 {
		s, _ := New(cfg)
		if _, err := s.Acquire(ctx); err != nil {
			t.Fatalf("after %d cycles: %v", workers*cycles, err)
		}
	}
	t.Logf("%d claim/release cycles (%d refusals while 4 claimants shared 2 blocks); %d rows; server connections %d after 200 cycles, %d at the end",
		workers*cycles, refusals, rows, connsEarly, connsLate)
}
