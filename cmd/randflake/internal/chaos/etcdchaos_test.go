//go:build chaos

package chaos

import (
	"context"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake/etcdlease"
	"github.com/randflake/randflake/etcdlease/etcdtest"
	"github.com/randflake/randflake/leasetest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const (
	etcdTTL     = 3 * time.Second // --etcd-ttl of every server
	etcdClaim   = 16              // --claim: node IDs per block, one block per server
	etcdServers = 4
	// etcdWait is the horizon a claim waits out when the history is
	// unknown: etcdlease's promise (3 TTLs) plus its MaxClockSkew (1 s),
	// in whole seconds (docs/leases.md, rule 5).
	etcdWait = 10
	// No event starts after this much of the schedule has run, except the
	// ones every run must have.
	etcdBudget = 100 * time.Second
	// etcdLongTTL is the TTL of the member with a longer TTL than the
	// rest; its horizon is 3 times that (12 s, the others' 9 s).
	etcdLongTTL = 4 * time.Second
)

// etcdRun is the etcd run's state besides the fleet.
type etcdRun struct {
	*chaosRun
	ctx                      context.Context
	c                        *cluster
	cli                      *clientv3.Client
	pl                       *pool
	takeovers, takeoverFails int
}

// TestChaosEtcd runs 4 `randflake serve --etcd` processes, each reaching a
// 3-member etcd cluster through TCP proxies of its own, under a seeded
// schedule of SIGKILLs with replacements, SIGSTOPs and partitions longer
// than the TTL, an etcd member crash, a quorum loss, a wipe of every key
// of the fleet (etcdctl del --prefix) right after a SIGKILL, and a restore
// of the whole cluster from a snapshot saved earlier.
func TestChaosEtcd(t *testing.T) {
	c, err := newCluster(t.TempDir(), 3, fmt.Sprintf("randflake-chaos-%d", seed))
	if err != nil {
		skipWithout(t, err, etcdtest.ErrNotFound, etcdtest.Required())
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			m.stop()
		}
	})
	for _, m := range c.members {
		if err := m.start(); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = waitHealthy(hctx, c.members...)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	pl := &pool{cli: cli}
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = pl.block(bctx, etcdServers)
	cancel()
	if err != nil {
		t.Fatalf("claiming the blocks outside the free pool: %v", err)
	}
	secret, cipher := newSecret(t)

	f := newFleet(t, fleetConfig{
		name: "etcd",
		env:  append(baseEnv(), "RANDFLAKE_SECRET="+hex.EncodeToString(secret), "RANDFLAKE_STATE_DIR="+t.TempDir()),
		args: func(s *server) ([]string, func(), error) {
			var ps []*leasetest.Proxy
			var eps []string
			undo := func() {
				for _, p := range ps {
					p.Close()
				}
			}
			for _, ep := range c.endpoints() {
				p, err := leasetest.StartProxy(ep)
				if err != nil {
					undo()
					return nil, nil, err
				}
				ps = append(ps, p)
				eps = append(eps, p.Addr())
			}
			s.mu.Lock()
			s.proxies = ps
			s.mu.Unlock()
			return []string{"--etcd", strings.Join(eps, ","), "--etcd-ttl", etcdTTL.String(), "--etcd-horizon", (3 * etcdTTL).String(),
				"--claim", strconv.Itoa(etcdClaim), "--shutdown-timeout", "5s"}, undo, nil
		},
		clients:      []clientSpec{{1, 5 * time.Millisecond}, {100, 10 * time.Millisecond}, {1000, 50 * time.Millisecond}},
		readyTimeout: 40 * time.Second,
		requestLimit: 2 * time.Second,
	})
	r := &etcdRun{chaosRun: newRun(t, f, 0xe7cd), ctx: ctx, c: c, cli: cli, pl: pl}
	r.cipher, r.claim, r.ttl = cipher, etcdClaim, etcdTTL
	version := c.version()
	f.event("etcd %s, 3 members (client ports %s); %d servers, TTL %v, %d node IDs each; free pool: node IDs 0-%d, the rest claimed by stand-ins",
		version, strings.Join(c.endpoints(), " "), etcdServers, etcdTTL, etcdClaim, etcdServers*etcdClaim-1)
	// The prefix has no fleet marker yet: the first claim waits out
	// unknown history once (etcdWait seconds) and writes the marker; the
	// others, started with it, read the marker and wait until the same
	// second. The four initial servers pay the wait together, in
	// parallel, instead of a separate initialisation before them.
	for i := 1; i <= etcdServers; i++ {
		f.launch(fmt.Sprintf("s%d", i), "initial", "")
	}
	d := within(60 * time.Second)
	if starting := f.waitStarted(d); len(starting) > 0 {
		t.Fatalf("%d servers not ready after %v ; %s: %s", len(starting), d, starting[0].name, starting[0].logTail(10))
	}
	f.event("the first claims on the new prefix waited out unknown history (no fleet marker yet, horizon %ds): servers ready %s after launch",
		etcdWait, readySpan(f.all()))
	d = within(10 * time.Second)
	if _, ok := f.waitProgress(time.Now(), d); !ok {
		t.Fatalf("the fleet issued no ID within %v after becoming ready", d)
	}

	// The member with a longer TTL comes first, so that every event after
	// it finds it running.
	required := []string{"kill", "kill", "pause", "partition", "member", "quorum", "wipe", "restore", "replay", "otherfleet"}
	events := append([]string{"longttl"}, r.schedule(required, []string{"kill", "pause", "partition", "member", "quorum"}, r.rng.IntN(3))...)
	r.play(events, len(required)+1, etcdBudget, time.Second, 3*time.Second, r.do)

	head := func(rep *report) string {
		return fmt.Sprintf("chaos etcd: seed %d, etcd %s, 3 members, %d servers (+%d replacements, +%d claimants), TTL %v; %s; %s, %.0fs",
			seed, version, etcdServers, f.replacements, f.claimants, etcdTTL, r.eventsLine(), rep.idLine(), time.Since(r.began).Seconds())
	}
	extra := []string{"takeovers while the holder was alive but cut off: " + strconv.Itoa(r.takeovers) + ifNonZero(r.takeoverFails, " (%d did not happen)")}
	r.finish(checkConfig{secret: secret, rangeSize: etcdClaim, poolNodes: int64(pl.free) * etcdClaim}, head, extra, 100_000)
}

// readySpan returns how long after launch the servers became ready,
// shortest to longest: "10.2s-10.9s".
func readySpan(ss []*server) string {
	lo, hi := -1.0, -1.0
	for _, s := range ss {
		w := readyAfter(s, s.launched)
		if w < 0 {
			continue
		}
		if lo < 0 || w < lo {
			lo = w
		}
		hi = max(hi, w)
	}
	return fmt.Sprintf("%.1fs-%.1fs", lo, hi)
}

// do plays one event.
func (r *etcdRun) do(ev string) (time.Time, bool) {
	switch ev {
	case "kill":
		_, _, ok := r.killThen("kill", nil)
		return time.Time{}, ok
	case "pause", "partition":
		return r.cutOff(ev)
	case "member":
		return r.member()
	case "quorum":
		return r.quorum()
	case "wipe":
		return r.wipe()
	case "restore":
		return r.restore()
	case "replay":
		return r.replay()
	case "longttl":
		return r.longer([]string{"--etcd-ttl", etcdLongTTL.String(), "--etcd-horizon", (3 * etcdLongTTL).String()}, etcdLongTTL, r.growPool)
	case "otherfleet":
		return r.otherFleet()
	}
	r.t.Fatalf("unknown event %q", ev)
	return time.Time{}, false
}

// holderName names the server whose process a claim key's value names.
func (r *etcdRun) holderName(v string) string {
	for _, s := range r.f.all() {
		if p := s.proc(); p != nil && strings.Contains(v, fmt.Sprintf("pid %d ", p.pid())) {
			return s.name
		}
	}
	return "another process"
}

// takeOver waits for the claim of s on the block rs to lapse, launches a
// claimant, and waits until the block has a new holder.
func (r *etcdRun) takeOver(s *server, rs int64, known bool, old string, since time.Time) string {
	f := r.f
	if !known {
		time.Sleep(etcdTTL + time.Second)
		f.claimants++
		cl := f.launch(fmt.Sprintf("c%d", f.claimants), "claimant", "started while "+s.name+" was cut off")
		return fmt.Sprintf("%s's block unknown; %s launched", s.name, cl.name)
	}
	lapsed := false
	for time.Since(since) < etcdTTL+5*time.Second {
		v, ok, err := r.pl.claim(r.ctx, rs)
		if err == nil && (!ok || v != old) {
			lapsed = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	lapse := time.Since(since)
	f.claimants++
	cl := f.launch(fmt.Sprintf("c%d", f.claimants), "claimant", "started while "+s.name+" was cut off")
	if !lapsed {
		r.takeoverFails++
		return fmt.Sprintf("claim on %d-%d still held after %.1fs; %s launched", rs, rs+etcdClaim-1, lapse.Seconds(), cl.name)
	}
	// The claimant waits the detection bound plus the clock bound past its
	// claim (rule 14): the longest bound of any member that wrote the
	// marker, the longer-TTL member's once it has.
	for time.Since(since) < etcdTTL+r.ttl+5*time.Second {
		v, ok, err := r.pl.claim(r.ctx, rs)
		if err == nil && ok && v != old {
			r.takeovers++
			return fmt.Sprintf("claim on %d-%d lapsed after %.1fs; %s launched; block claimed by %s after %.1fs",
				rs, rs+etcdClaim-1, lapse.Seconds(), cl.name, r.holderName(v), time.Since(since).Seconds())
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.takeoverFails++
	return fmt.Sprintf("claim on %d-%d lapsed after %.1fs; %s launched; nobody claimed the block within %.1fs",
		rs, rs+etcdClaim-1, lapse.Seconds(), cl.name, time.Since(since).Seconds())
}

// growPool frees one more block, for a server that lost its own.
func (r *etcdRun) growPool(why string) {
	first, err := r.pl.grow(r.ctx)
	r.freed(why, first, err)
}

// cutOff stops a server issuing IDs (pause: SIGSTOP) or cuts it off from
// etcd through its proxies (partition) for longer than the TTL; once its
// claim has lapsed a claimant takes its block over while it is alive.
func (r *etcdRun) cutOff(ev string) (time.Time, bool) {
	f := r.f
	s := f.pickIssuing(r.rng)
	if s == nil {
		f.event("%s: no server issuing IDs", ev)
		return time.Time{}, false
	}
	rs, known := r.serverRange(s)
	old, _, _ := r.pl.claim(r.ctx, rs)
	dur := etcdTTL + time.Second + upTo(r.rng, 2*time.Second)
	s.mu.Lock()
	ps := s.proxies
	s.mu.Unlock()
	var t0 time.Time
	if ev == "pause" {
		s.setState("paused")
		s.proc().signal(syscall.SIGSTOP)
		t0 = time.Now()
		f.event("SIGSTOP %s (%s, node IDs %d-%d) for %.1fs", s.name, s.pidString(), rs, rs+etcdClaim-1, dur.Seconds())
	} else {
		s.setState("cut")
		for _, p := range ps {
			p.Cut()
		}
		t0 = time.Now()
		f.event("partition: %s (node IDs %d-%d) cut off from etcd for %.1fs", s.name, rs, rs+etcdClaim-1, dur.Seconds())
	}
	what := r.takeOver(s, rs, known, old, t0)
	time.Sleep(time.Until(t0.Add(dur)))
	restored := time.Now()
	if ev == "pause" {
		s.proc().signal(syscall.SIGCONT)
		s.addEpisode("SIGSTOP", t0, restored)
		f.event("SIGCONT %s after %.1fs; %s", s.name, restored.Sub(t0).Seconds(), what)
		f.expectUntilIssuing(s, t0, restored.Add(10*time.Second+r.ttl), restored.Add(within(45*time.Second)), "pause")
	} else {
		for _, p := range ps {
			p.Heal()
		}
		s.addEpisode("cut off from etcd", t0, restored)
		// The last keep-alive that can have succeeded was sent before
		// t0: the lease end is at most t0 + TTL - margin - 1s.
		r.bounds = append(r.bounds, bound{s: s, from: t0, until: restored, max: t0.Add(etcdTTL).Unix() - 1,
			what: fmt.Sprintf("%s cut off from etcd at %.1fs", s.name, t0.Sub(f.start).Seconds())})
		f.event("partition of %s healed after %.1fs; %s", s.name, restored.Sub(t0).Seconds(), what)
		f.expectUntilIssuing(s, t0, restored.Add(10*time.Second+r.ttl), restored.Add(within(45*time.Second)), "partition", lease503)
	}
	// The server claims again once it finds its claim gone, and that claim
	// waits the takeover wait (rule 14), longer with the longer-TTL member
	// in the fleet: its clients' 503s until then are the event's, hence
	// the TTL in the windows above, and their going on until it issues
	// again (45 s at most, stretched).
	s.setState("serving")
	r.note(ev, restored.Sub(t0))
	r.growPool("for " + s.name + " to claim again")
	return restored, true
}

// member SIGKILLs one etcd member, the leader or a follower, and restarts
// it 2-5 s later.
func (r *etcdRun) member() (time.Time, bool) {
	c, f := r.c, r.f
	li := c.leader(r.ctx, r.cli)
	killLeader, other := r.rng.IntN(2) == 0, r.rng.IntN(2)
	m := c.members[(li+1+other)%len(c.members)]
	role := "a follower"
	if li < 0 {
		m, role = c.members[other], "a member (no leader known)"
	} else if killLeader {
		m, role = c.members[li], "the leader"
	}
	dur := 2*time.Second + upTo(r.rng, 3*time.Second)
	m.kill()
	t0 := time.Now()
	f.event("SIGKILL etcd %s (%s) for %.1fs", m.name, role, dur.Seconds())
	time.Sleep(dur)
	restored := time.Now()
	if err := m.start(); err != nil {
		r.t.Fatal(err)
	}
	hctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	err := waitHealthy(hctx, m)
	cancel()
	if err != nil {
		r.t.Errorf("after restarting etcd %s: %v", m.name, err)
	}
	f.expect(nil, t0, time.Now().Add(3*time.Second), "etcd member down", lease503)
	r.note("member", restored.Sub(t0))
	f.event("etcd %s restarted after %.1fs, healthy %.1fs later", m.name, restored.Sub(t0).Seconds(), time.Since(restored).Seconds())
	return restored, true
}

// quorum SIGKILLs two of the three etcd members (the leader and a
// follower, or both followers) for 3-6 s.
func (r *etcdRun) quorum() (time.Time, bool) {
	c, f := r.c, r.f
	li := c.leader(r.ctx, r.cli)
	keepLeader, other := r.rng.IntN(2) == 0, r.rng.IntN(2)
	var a, b *member
	how := ""
	switch {
	case li < 0:
		a, b, how = c.members[other], c.members[2], "no leader known"
	case keepLeader:
		a, b = c.members[(li+1)%3], c.members[(li+2)%3]
		how = "both followers: the leader " + c.members[li].name + " stays up without a quorum"
	default:
		a, b = c.members[li], c.members[(li+1+other)%3]
		how = "the leader and a follower"
	}
	dur := 3*time.Second + upTo(r.rng, 3*time.Second)
	a.kill()
	b.kill()
	tl := time.Now()
	f.event("quorum lost: SIGKILL etcd %s and %s (%s) for %.1fs", a.name, b.name, how, dur.Seconds())
	time.Sleep(dur)
	restored := time.Now()
	lastBefore := time.Unix(0, f.lastOK.Load())
	for _, m := range []*member{a, b} {
		if err := m.start(); err != nil {
			r.t.Fatal(err)
		}
	}
	// A leader that lost its quorum may renew leases until it steps
	// down, at most two election timeouts later.
	r.bounds = append(r.bounds, bound{from: tl, until: restored, max: tl.Add(2*electionTimeout+r.ttl).Unix() - 1,
		what: fmt.Sprintf("quorum lost at %.1fs", tl.Sub(f.start).Seconds())})
	hctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	err := waitHealthy(hctx, c.members...)
	cancel()
	if err != nil {
		r.t.Errorf("after restoring the quorum: %v", err)
	}
	f.expect(nil, tl, time.Now().Add(3*time.Second), "quorum loss", lease503)
	r.note("quorum", restored.Sub(tl))
	f.event("etcd %s and %s restarted after %.1fs (the last ID before was fetched %.1fs after the loss); cluster healthy %.1fs later",
		a.name, b.name, restored.Sub(tl).Seconds(), lastBefore.Sub(tl).Seconds(), time.Since(restored).Seconds())
	return restored, true
}

// wipe SIGKILLs a server issuing IDs half-way through a second, deletes
// every key of the fleet at once with etcdctl del --prefix (the marker,
// the records, every claim: those of the servers still running too),
// puts the stand-ins back, and starts a replacement at once. Every claim
// made after the wipe waits out the horizon; the servers still running
// lose their claims at their next write and claim again.
func (r *etcdRun) wipe() (time.Time, bool) {
	wctx, cancel := context.WithTimeout(r.ctx, 20*time.Second)
	defer cancel()
	rep, tw, ok := r.killThen("wipe", func() (string, error) {
		t0 := time.Now()
		out, err := r.c.ctl(wctx, "del", "--prefix", etcdlease.DefaultPrefix)
		if err != nil {
			return "", err
		}
		taken, err := r.pl.reblock(wctx)
		if err != nil {
			return "", fmt.Errorf("putting the stand-ins back after the wipe: %w", err)
		}
		if taken > 0 {
			r.t.Errorf("after the wipe, %d blocks outside the free pool were claimed before the stand-ins were back", taken)
		}
		return fmt.Sprintf("etcdctl del --prefix %s deleted %s keys; stand-ins back after %.1fs",
			etcdlease.DefaultPrefix, strings.TrimSpace(string(out)), time.Since(t0).Seconds()), nil
	})
	if !ok {
		return time.Time{}, false
	}
	back := r.horizon("wipe", tw, etcdWait, rep)
	r.noteLast(back.Sub(tw))
	return back, true
}

// restore saves a snapshot of the cluster while the fleet runs, lets the
// fleet write to it for a few more seconds, then puts the whole cluster
// back to the snapshot: every member stopped, restored from it into a new
// data directory under the same cluster token (so the cluster ID is the
// same, and only the revision, gone back, shows the restore), and started
// again. No process may start meanwhile (a process that never saw the
// later revision cannot tell the copy from the real thing: docs/leases.md,
// "What cannot be detected"), so the event first waits for every start-up
// to end; then the running servers, which remember the revision they saw,
// must see it go back, mark the history unknown, and claim again.
func (r *etcdRun) restore() (time.Time, bool) {
	f := r.f
	d := within(30 * time.Second)
	if starting := f.waitStarted(d); len(starting) > 0 {
		r.t.Errorf("restore: %s still starting after %v; the restore is played anyway", starting[0].name, d)
	}
	rctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	snap := filepath.Join(r.f.dir, "etcd.snapshot")
	if err := r.c.snapshot(rctx, snap); err != nil {
		r.t.Fatal(err)
	}
	snapRev, _, _, err := r.pl.markerState(rctx)
	if err != nil {
		r.t.Fatal(err)
	}
	saved := time.Now()
	f.event("restore: snapshot saved while the fleet runs (revision %d)", snapRev)
	// The fleet writes promises on: wait for a few writes (at least 3 s,
	// at most 15 s), so that the revision the servers saw is above the
	// snapshot's.
	revBefore, idBefore := snapRev, uint64(0)
	for time.Since(saved) < 15*time.Second {
		time.Sleep(250 * time.Millisecond)
		var err error
		if revBefore, _, idBefore, err = r.pl.markerState(rctx); err != nil {
			r.t.Fatalf("restore: reading the revision: %v", err)
		}
		if time.Since(saved) >= 3*time.Second && revBefore >= snapRev+3 {
			break
		}
	}
	t0 := time.Now()
	f.event("restore: stopping every etcd member to restore the snapshot of revision %d, %.1fs old (revision now %d)",
		snapRev, t0.Sub(saved).Seconds(), revBefore)
	stopped, err := r.c.restore(rctx, snap)
	if err != nil {
		r.t.Fatalf("restore: %v", err)
	}
	restarted := time.Now()
	// No keep-alive can succeed once every member has stopped; the last
	// one was sent before.
	r.bounds = append(r.bounds, bound{from: stopped, until: restarted, max: stopped.Add(r.ttl).Unix() - 1,
		what: fmt.Sprintf("every etcd member stopped at %.1fs for the restore", stopped.Sub(f.start).Seconds())})
	revAfter, _, idAfter, err := r.pl.markerState(rctx)
	if err != nil {
		r.t.Fatalf("restore: reading the revision: %v", err)
	}
	f.event("restore: cluster back %.1fs after the first stop, cluster ID %x (before: %x), revision %d (before: %d)",
		restarted.Sub(t0).Seconds(), idAfter, idBefore, revAfter, revBefore)
	if idAfter != idBefore || revAfter >= revBefore {
		r.t.Errorf("restore: the cluster came back with cluster ID %x and revision %d, want the same ID (%x) and a lower revision than %d",
			idAfter, revAfter, idBefore, revBefore)
	}
	detected, limit := time.Time{}, within(20*time.Second)
	for time.Since(restarted) < limit {
		_, unknown, _, err := r.pl.markerState(rctx)
		if err == nil && unknown >= restarted.Unix() {
			detected = time.Now()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if detected.IsZero() {
		r.t.Errorf("restore: no running server marked the history unknown within %v of the restore", limit)
	} else {
		f.event("restore: a running server saw the revision go back and marked the history unknown %.1fs after the restart", detected.Sub(restarted).Seconds())
	}
	back := r.horizon("restore", t0, etcdWait, nil)
	if _, unknown, _, err := r.pl.markerState(rctx); err == nil {
		// One detection makes the history unknown for the horizon; a
		// later second means later steps found the history gone back
		// again and marked it unknown again.
		f.event("restore: the marker makes the history unknown up to %ds after the restart (the horizon is %ds)",
			unknown-restarted.Unix(), etcdWait)
	}
	r.note("restore", back.Sub(t0))
	return back, true
}

func ifNonZero(n int, format string) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(format, n)
}

// replay saves the record of the block a running server holds and the
// fleet marker, waits until the fleet has written newer ones (at least
// 2 s, at most 15 s), then writes the older copy over the running holder
// in one transaction: the holder's claim deleted, the saved record and
// marker put back (each validly signed, at a newer revision: nothing
// shows a restore). A claimant is launched at once, the holder's block
// the only free one. The holder must find its records not what it wrote
// at its next renewal and stop issuing, and the claimant's first second
// must come after the holder's last (docs/leases.md, rule 14): the check
// of the IDs finds any (second, node ID) the two shared.
func (r *etcdRun) replay() (time.Time, bool) {
	f := r.f
	s, rs, ok := r.pickHolder("replay")
	if !ok {
		return time.Time{}, false
	}
	rctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	recKey := fmt.Sprintf("%srecord/%06d", etcdlease.DefaultPrefix, rs)
	markerKey := etcdlease.DefaultPrefix + "marker"
	get := func() (rec, marker []byte, err error) {
		resp, err := r.cli.Txn(rctx).Then(clientv3.OpGet(recKey), clientv3.OpGet(markerKey)).Commit()
		if err != nil {
			return nil, nil, err
		}
		rr, mr := resp.Responses[0].GetResponseRange(), resp.Responses[1].GetResponseRange()
		if len(rr.Kvs) != 1 || len(mr.Kvs) != 1 {
			return nil, nil, fmt.Errorf("%s has %d records and the prefix %d markers, want 1 and 1", s.name, len(rr.Kvs), len(mr.Kvs))
		}
		return rr.Kvs[0].Value, mr.Kvs[0].Value, nil
	}
	savedRec, savedMarker, err := get()
	if err != nil {
		r.t.Errorf("replay: saving the record of node IDs %d-%d and the marker: %v", rs, rs+etcdClaim-1, err)
		return time.Time{}, false
	}
	saved := time.Now()
	for {
		time.Sleep(250 * time.Millisecond)
		rec, _, err := get()
		if err != nil {
			r.t.Errorf("replay: reading the record of node IDs %d-%d: %v", rs, rs+etcdClaim-1, err)
			return time.Time{}, false
		}
		if time.Since(saved) >= 2*time.Second && string(rec) != string(savedRec) {
			break
		}
		if time.Since(saved) > 15*time.Second {
			r.t.Errorf("replay: %s wrote no newer record of node IDs %d-%d in %.0fs", s.name, rs, rs+etcdClaim-1, time.Since(saved).Seconds())
			return time.Time{}, false
		}
	}
	t0 := time.Now()
	_, err = r.cli.Txn(rctx).Then(clientv3.OpDelete(claimKey(rs)), clientv3.OpPut(recKey, string(savedRec)), clientv3.OpPut(markerKey, string(savedMarker))).Commit()
	if err != nil {
		r.t.Fatalf("replay: putting the saved values back: %v", err)
	}
	f.claimants++
	cl := f.launch(fmt.Sprintf("c%d", f.claimants), "claimant", "started as "+s.name+"'s older record was put back")
	f.event("replay: the record of node IDs %d-%d and the marker saved %.1fs ago put back over %s (%s), its claim deleted; %s launched",
		rs, rs+etcdClaim-1, t0.Sub(saved).Seconds(), s.name, s.pidString(), cl.name)
	f.expect(s, t0, t0.Add(within(30*time.Second)), "replay", lease503)
	if !r.awaitClaimant(cl, s, t0, r.ttl+10*time.Second, within(40*time.Second), r.growPool) {
		return time.Now(), true
	}
	r.note("replay", time.Since(t0))
	// The claimant waits the takeover wait (rule 14), or the horizon if the
	// marker put back no longer matches the records others wrote since.
	f.event("replay: %s ready %.1fs after the replay", cl.name, readyAfter(cl, t0))
	return time.Now(), true
}
