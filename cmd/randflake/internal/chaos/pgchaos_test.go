//go:build chaos

package chaos

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/randflake/randflake/pglease/pgtest"
)

const (
	// pgTTL is --postgres-ttl: the shortest the command accepts with
	// pglease's default MaxClockSkew of 1 s (2 x skew + a tenth of the TTL
	// must not exceed half the TTL). A lease then ends about 2.5 s after
	// its last renewal, and a crashed holder's block is free 5 s after it.
	pgTTL     = 5 * time.Second
	pgClaim   = 16 // --claim: node IDs per block, one block per server
	pgServers = 4
	// pgWait is the horizon a claim waits out when the history is
	// unknown: pglease's promise (one TTL) plus its MaxClockSkew (1 s), in
	// whole seconds (docs/leases.md, rule 5).
	pgWait = 6
	// No event starts after this much of the schedule has run, except the
	// ones every run must have.
	pgBudget = 50 * time.Second
	// pgLongTTL is the TTL (and horizon) of the member with a longer TTL
	// than the rest.
	pgLongTTL = 7 * time.Second
)

// pgRun is the PostgreSQL run's state besides the fleet.
type pgRun struct {
	*chaosRun
	ctx context.Context
	srv *pgtest.Server
	tab *pgTables
}

// TestChaosPostgres runs 4 `randflake serve --node-source postgres`
// processes on a real PostgreSQL server, with clients fetching IDs
// continuously, under a seeded schedule of SIGKILLs with replacements, a
// restart of the database, a wipe of the blocks table (DELETE FROM) and
// one of the table and the fleet marker, each right after a SIGKILL, and
// a rollback of the records to older ones after a SIGKILL.
func TestChaosPostgres(t *testing.T) {
	srv := pgtest.New(t)
	secret, cipher := newSecret(t)
	ctx := context.Background()
	tab := &pgTables{dsn: srv.DSN(), free: pgServers}
	f := newFleet(t, fleetConfig{
		name: "postgres",
		env: append(baseEnv(), "RANDFLAKE_SECRET="+hex.EncodeToString(secret), "RANDFLAKE_POSTGRES_DSN="+srv.DSN(),
			"RANDFLAKE_STATE_DIR="+t.TempDir()),
		args: func(s *server) ([]string, func(), error) {
			args := []string{"--node-source", "postgres", "--postgres-ttl", pgTTL.String(), "--postgres-horizon", pgTTL.String(),
				"--claim", strconv.Itoa(pgClaim), "--shutdown-timeout", "5s"}
			if s.name == "s1" {
				// The first server creates the tables, once.
				args = append(args, "--postgres-migrate")
			}
			return args, func() {}, nil
		},
		clients:      []clientSpec{{1, 5 * time.Millisecond}, {100, 10 * time.Millisecond}, {1000, 50 * time.Millisecond}},
		readyTimeout: 40 * time.Second,
		requestLimit: 2 * time.Second,
	})
	r := &pgRun{chaosRun: newRun(t, f, 0x9e57), ctx: ctx, srv: srv, tab: tab}
	r.cipher, r.claim, r.ttl = cipher, pgClaim, pgTTL
	f.event("PostgreSQL at %s; %d servers, TTL %v, %d node IDs each; free pool: node IDs 0-%d, the rest claimed by stand-in rows",
		srv.Addr(), pgServers, pgTTL, pgClaim, pgServers*pgClaim-1)
	// s1 creates the tables (--postgres-migrate): they are fresh, so its
	// claim waits nothing. Only then do the stand-ins claim the blocks
	// outside the pool (s1 has the lowest block), and the others start.
	f.launch("s1", "initial", "")
	d := within(40 * time.Second)
	if starting := f.waitStarted(d); len(starting) > 0 {
		t.Fatalf("s1 not ready after %v: %s", d, starting[0].logTail(10))
	}
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := tab.block(bctx)
	cancel()
	if err != nil {
		t.Fatalf("claiming the blocks outside the free pool: %v", err)
	}
	for i := 2; i <= pgServers; i++ {
		f.launch(fmt.Sprintf("s%d", i), "initial", "")
	}
	d = within(40 * time.Second)
	if starting := f.waitStarted(d); len(starting) > 0 {
		t.Fatalf("%d servers not ready after %v; %s: %s", len(starting), d, starting[0].name, starting[0].logTail(10))
	}
	f.event("fresh tables: the first claims waited nothing (servers ready %s after launch)", readySpan(f.all()))

	// The member with a longer TTL comes first, so that every event after
	// it finds it running.
	required := []string{"kill", "kill", "restart", "wipe", "wipe+marker", "rollback", "otherfleet"}
	events := append([]string{"longttl"}, r.schedule(required, []string{"kill", "restart"}, r.rng.IntN(2))...)
	r.play(events, len(required)+1, pgBudget, time.Second, 2*time.Second, r.do)

	head := func(rep *report) string {
		return fmt.Sprintf("chaos postgres: seed %d, PostgreSQL, %d servers (+%d replacements), TTL %v; %s; %s, %.0fs",
			seed, pgServers, f.replacements, pgTTL, r.eventsLine(), rep.idLine(), time.Since(r.began).Seconds())
	}
	r.finish(checkConfig{secret: secret, rangeSize: pgClaim, poolNodes: tab.free * pgClaim}, head, nil, 100_000)
}

// do plays one event.
func (r *pgRun) do(ev string) (time.Time, bool) {
	switch ev {
	case "kill":
		_, _, ok := r.killThen("kill", nil)
		return time.Time{}, ok
	case "restart":
		return r.restart()
	case "wipe", "wipe+marker":
		return r.wipe(ev)
	case "rollback":
		return r.rollback()
	case "longttl":
		return r.longer([]string{"--postgres-ttl", pgLongTTL.String(), "--postgres-horizon", pgLongTTL.String()}, pgLongTTL, r.grow)
	case "otherfleet":
		return r.otherFleet()
	}
	r.t.Fatalf("unknown event %q", ev)
	return time.Time{}, false
}

// grow frees one more block, for the member with a longer TTL.
func (r *pgRun) grow(why string) {
	gctx, cancel := context.WithTimeout(r.ctx, 20*time.Second)
	defer cancel()
	first, err := r.tab.grow(gctx)
	r.freed(why, first, err)
}

// restart stops the database server (a fast shutdown: connections cut,
// transactions rolled back), keeps it down for 1-3 s, and starts it again
// on the same data. The servers' renewals fail meanwhile: each stops
// issuing at its lease's end, and goes on once a renewal succeeds again.
func (r *pgRun) restart() (time.Time, bool) {
	f := r.f
	down := time.Second + upTo(r.rng, 2*time.Second)
	t0 := time.Now()
	if err := r.srv.Stop(); err != nil {
		r.t.Fatalf("stopping PostgreSQL: %v", err)
	}
	stopped := time.Now()
	f.event("PostgreSQL stopped (fast shutdown, %.1fs) for %.1fs", stopped.Sub(t0).Seconds(), down.Seconds())
	time.Sleep(down)
	// The server accepts connections, and renewals succeed, before Start
	// returns (it waits until a connection succeeds): the window of the
	// bound ends when the server is told to start.
	starting := time.Now()
	if err := r.srv.Start(); err != nil {
		r.t.Fatalf("starting PostgreSQL again: %v\n%s", err, r.srv.LogTail())
	}
	started := time.Now()
	// No renewal can succeed while the server is down; the last one was
	// sent before it stopped, and a lease ends 2 x MaxClockSkew and a
	// margin (a tenth of the TTL) before its claim can lapse.
	r.bounds = append(r.bounds, bound{from: stopped, until: starting, max: stopped.Add(r.ttl-2*time.Second-r.ttl/10).Unix() - 1,
		what: fmt.Sprintf("PostgreSQL stopped at %.1fs", stopped.Sub(f.start).Seconds())})
	limit := within(20 * time.Second)
	idle := f.waitAllIssuing(started, limit)
	back := time.Now()
	for _, s := range idle {
		r.t.Errorf("%s issued no ID within %v after PostgreSQL was started again; its clients' errors: %s; log: %s", s.name, limit, s.errorSummary(), s.logTail(5))
	}
	f.expect(nil, t0, back.Add(time.Second), "database restart", lease503)
	r.note("restart", started.Sub(t0))
	f.event("PostgreSQL started again after %.1fs; every server issuing again %.1fs after the start", started.Sub(t0).Seconds(), back.Sub(started).Seconds())
	return started, true
}

// wipe SIGKILLs a server issuing IDs half-way through a second, deletes
// every row of the blocks table (and, for wipe+marker, the fleet marker)
// at once, and starts a replacement at once. With the marker kept, the
// records no longer match its digest; without it, the store shows no sign
// of initialisation: either way every claim made after the wipe waits out
// the horizon. The servers still running find their claims gone at their
// next renewal and claim again.
func (r *pgRun) wipe(ev string) (time.Time, bool) {
	wctx, cancel := context.WithTimeout(r.ctx, 20*time.Second)
	defer cancel()
	rep, tw, ok := r.killThen(ev, func() (string, error) {
		n, err := r.tab.wipe(wctx, ev == "wipe+marker")
		what := "DELETE FROM " + pgBlocks
		if ev == "wipe+marker" {
			what += " and UPDATE " + pgSchema + " SET marker = NULL"
		}
		return fmt.Sprintf("%s deleted %d rows (stand-ins put back in the same transaction)", what, n), err
	})
	if !ok {
		return time.Time{}, false
	}
	back := r.horizon(ev, tw, pgWait, rep)
	r.noteLast(back.Sub(tw))
	return back, true
}

// rollback saves the pool's records while the fleet runs, waits until the
// servers have written newer ones (at least 2 s, at most 15 s), then
// SIGKILLs a server issuing IDs half-way through a second, puts the saved
// records back (older seconds, each with its valid tag: a restore of the
// rows from an older copy, the marker kept), and starts a replacement at
// once. The marker's digest no longer matches the records: every claim
// made after waits out the horizon, and the servers still running find
// their records changed at their next write and claim again.
func (r *pgRun) rollback() (time.Time, bool) {
	f := r.f
	rctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	saved, err := r.tab.records(rctx)
	if err != nil {
		r.t.Fatalf("rollback: saving the records: %v", err)
	}
	t0 := time.Now()
	for changed := 0; changed == 0 && time.Since(t0) < 15*time.Second; {
		time.Sleep(250 * time.Millisecond)
		now, err := r.tab.records(rctx)
		if err != nil {
			r.t.Fatalf("rollback: reading the records: %v", err)
		}
		changed = 0
		for first, rec := range saved {
			if now[first] != rec {
				changed++
			}
		}
		if time.Since(t0) < 2*time.Second {
			changed = 0
		}
	}
	f.event("rollback: %d records saved %.1fs ago", len(saved), time.Since(t0).Seconds())
	rep, tr, ok := r.killThen("rollback", func() (string, error) {
		n, err := r.tab.putBack(rctx, saved)
		if n == 0 && err == nil {
			r.t.Errorf("rollback: none of the %d saved records differed from the current ones: nothing was rolled back", len(saved))
		}
		return fmt.Sprintf("%d of %d records put back as they were", n, len(saved)), err
	})
	if !ok {
		return time.Time{}, false
	}
	back := r.horizon("rollback", tr, pgWait, rep)
	r.noteLast(back.Sub(tr))
	return back, true
}
