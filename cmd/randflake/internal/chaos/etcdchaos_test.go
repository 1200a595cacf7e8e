//go:build chaos

package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/etcdlease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const (
	etcdTTL     = 3 * time.Second // --etcd-ttl of every server
	etcdClaim   = 16              // --claim: node IDs per server
	etcdServers = 4
	// No event starts after this much of the schedule has run, except the
	// ones every run must have.
	etcdBudget = 80 * time.Second
)

// The free pool. Only the lowest node ranges are free; every other range
// is claimed for good by a stand-in key, as if the rest of a large fleet
// held it. So the test's processes must hand node IDs to one another: a
// replacement takes over the range of the process it replaces once that
// process's claim has lapsed, and a claimant started while a server is
// paused or cut off takes over the paused server's range.
type pool struct {
	cli  *clientv3.Client
	free int // ranges 0..free-1 are free
}

func claimKey(node int64) string {
	return fmt.Sprintf("%sclaim/%06d", etcdlease.DefaultPrefix, node)
}

// block claims every range from first on with a stand-in key.
func (p *pool) block(ctx context.Context, first int) error {
	var ops []clientv3.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := p.cli.Txn(ctx).Then(ops...).Commit()
		ops = ops[:0]
		return err
	}
	for r := int64(first); r*etcdClaim <= randflake.MaxNode; r++ {
		ops = append(ops, clientv3.OpPut(claimKey(r*etcdClaim), "held for good by the chaos test: not part of the free pool"))
		if len(ops) == 128 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	p.free = first
	return flush()
}

// grow frees the next range and returns its first node ID.
func (p *pool) grow(ctx context.Context) (int64, error) {
	first := int64(p.free) * etcdClaim
	var err error
	for try := 0; try < 20; try++ {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = p.cli.Delete(cctx, claimKey(first))
		cancel()
		if err == nil {
			p.free++
			return first, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return 0, err
}

// claim returns the value of the claim key of node, and whether it exists.
func (p *pool) claim(ctx context.Context, node int64) (string, bool, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := p.cli.Get(cctx, claimKey(node))
	if err != nil {
		return "", false, err
	}
	if len(resp.Kvs) == 0 {
		return "", false, nil
	}
	return string(resp.Kvs[0].Value), true, nil
}

// checkClientCompat runs what etcdlease does against the cluster under a
// prefix of its own, so that an etcd server the client cannot work with
// fails here, with the operation named: Get with a prefix, lease grant,
// keep-alive and revoke, and the compare-and-swap transactions on key
// ranges of claims, promises and releases.
func checkClientCompat(t *testing.T, cli *clientv3.Client, version string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fail := func(what string, err error) {
		t.Fatalf("etcd client %s against etcd %s: %s: %v", "v3.7", version, what, err)
	}
	const prefix = "/chaos-compat/"
	if _, err := cli.Get(ctx, prefix, clientv3.WithPrefix()); err != nil {
		fail("Get with prefix", err)
	}
	g, err := cli.Grant(ctx, 5)
	if err != nil {
		fail("lease Grant", err)
	}
	if _, err := cli.KeepAliveOnce(ctx, g.ID); err != nil {
		fail("lease KeepAliveOnce", err)
	}
	if _, err := cli.Revoke(ctx, g.ID); err != nil {
		fail("lease Revoke", err)
	}
	src := func() *etcdlease.Source {
		s, err := etcdlease.New(etcdlease.Config{Client: cli, Prefix: prefix, Nodes: 4, FirstNode: 0, LastNode: 7, TTL: 3 * time.Second})
		if err != nil {
			fail("etcdlease.New", err)
		}
		return s
	}
	a, b, c := src(), src(), src()
	la, err := a.Acquire(ctx)
	if err != nil {
		fail("etcdlease Acquire (grant, claim transaction comparing a key range)", err)
	}
	lb, err := b.Acquire(ctx)
	if err != nil {
		fail("etcdlease Acquire of the second range", err)
	}
	if la.FirstNode == lb.FirstNode {
		t.Fatalf("etcd %s: two claims on node IDs %d-%d: the transaction's range comparison did not hold", version, la.FirstNode, la.LastNode)
	}
	if _, err := c.Acquire(ctx); !errors.Is(err, etcdlease.ErrNoFreeNodes) {
		t.Fatalf("etcd %s: a third claim on two ranges: %v, want ErrNoFreeNodes", version, err)
	}
	if la, err = a.Renew(ctx, la); err != nil {
		fail("etcdlease Renew (keep-alive, promise transaction)", err)
	}
	if err := a.Release(ctx, la, time.Now().Unix()); err != nil {
		fail("etcdlease Release (transaction, revoke)", err)
	}
	if err := b.Release(ctx, lb, time.Now().Unix()); err != nil {
		fail("etcdlease Release", err)
	}
	if _, err := cli.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
		fail("Delete with prefix", err)
	}
}

type etcdStats struct {
	kills                    int
	pauses, partitions       []time.Duration
	memberDown, quorumDown   []time.Duration
	recovered                []string
	takeovers, takeoverFails int
}

func durations(ds []time.Duration) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%.1fs", d.Seconds()))
	}
	return strings.Join(parts, " ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// TestChaosEtcd runs 4 `randflake serve --etcd` processes, each reaching a
// 3-member etcd cluster through TCP proxies of its own, under a seeded
// schedule of SIGKILLs with replacements, SIGSTOPs and partitions longer
// than the TTL, an etcd member crash and a quorum loss.
func TestChaosEtcd(t *testing.T) {
	etcdBin := needEtcd(t)
	began := time.Now()
	rng := mrand.New(mrand.NewPCG(uint64(seed), 0xe7cd))
	version := etcdVersion(etcdBin)
	secret := make([]byte, 16)
	rand.Read(secret)
	cipher, err := randflake.NewSparx64(secret)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	c, err := newCluster(etcdBin, t.TempDir(), 3, fmt.Sprintf("randflake-chaos-%d", seed))
	if err != nil {
		t.Fatal(err)
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
	checkClientCompat(t, cli, version)
	pl := &pool{cli: cli}
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = pl.block(bctx, etcdServers)
	cancel()
	if err != nil {
		t.Fatalf("claiming the node ranges outside the free pool: %v", err)
	}

	stateDir := t.TempDir()
	f := newFleet(t, fleetConfig{
		name: "etcd",
		env:  append(baseEnv(), "RANDFLAKE_SECRET="+hex.EncodeToString(secret), "RANDFLAKE_STATE_DIR="+stateDir),
		args: func(s *server) ([]string, func(), error) {
			var ps []*proxy
			var eps []string
			undo := func() {
				for _, p := range ps {
					p.close()
				}
			}
			for _, ep := range c.endpoints() {
				p, err := newProxy(ep)
				if err != nil {
					undo()
					return nil, nil, err
				}
				ps = append(ps, p)
				eps = append(eps, p.addr)
			}
			s.mu.Lock()
			s.proxies = ps
			s.mu.Unlock()
			return []string{"--etcd", strings.Join(eps, ","), "--etcd-ttl", etcdTTL.String(),
				"--claim", strconv.Itoa(etcdClaim), "--shutdown-timeout", "5s"}, undo, nil
		},
		clients:      []clientSpec{{1, 5 * time.Millisecond}, {100, 10 * time.Millisecond}, {1000, 50 * time.Millisecond}},
		readyTimeout: 40 * time.Second,
		requestLimit: 2 * time.Second,
	})
	f.event("etcd %s, 3 members (client ports %s); %d servers, TTL %v, %d node IDs each; free pool: node IDs 0-%d, the rest claimed by stand-ins",
		version, strings.Join(c.endpoints(), " "), etcdServers, etcdTTL, etcdClaim, etcdServers*etcdClaim-1)
	for i := 1; i <= etcdServers; i++ {
		f.launch(fmt.Sprintf("s%d", i), "initial", "")
	}
	if starting := f.waitStarted(60 * time.Second); len(starting) > 0 {
		t.Fatalf("%d servers not ready after 60s; %s: %s", len(starting), starting[0].name, starting[0].logTail(10))
	}

	events := []string{"kill", "kill", "pause", "partition", "member", "quorum"}
	rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	required := len(events)
	kinds := []string{"kill", "pause", "partition", "member", "quorum"}
	for range 2 + rng.IntN(3) {
		events = append(events, kinds[rng.IntN(len(kinds))])
	}
	f.event("schedule (seed %d): %s", seed, strings.Join(events, ", "))

	var st etcdStats
	var bounds []bound
	serverRange := func(s *server) (int64, bool) {
		if s.coll.lastOK.Load() == 0 {
			return 0, false
		}
		_, node, _ := split(cipher.DecryptID(s.coll.lastID.Load()))
		return node / etcdClaim * etcdClaim, true
	}
	holderName := func(v string) string {
		for _, s := range f.all() {
			if p := s.proc(); p != nil && strings.Contains(v, fmt.Sprintf("pid %d ", p.pid())) {
				return s.name
			}
		}
		return "another process"
	}
	// takeOver waits for the claim of s on node range rs to lapse, launches
	// a claimant, and waits until the range has a new holder.
	takeOver := func(s *server, rs int64, known bool, old string, since time.Time) string {
		if !known {
			time.Sleep(etcdTTL + time.Second)
			f.claimants++
			cl := f.launch(fmt.Sprintf("c%d", f.claimants), "claimant", "started while "+s.name+" was cut off")
			return fmt.Sprintf("%s's node range unknown; %s launched", s.name, cl.name)
		}
		lapsed := false
		for time.Since(since) < etcdTTL+5*time.Second {
			v, ok, err := pl.claim(ctx, rs)
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
			st.takeoverFails++
			return fmt.Sprintf("claim on %d-%d still held after %.1fs; %s launched", rs, rs+etcdClaim-1, lapse.Seconds(), cl.name)
		}
		for time.Since(since) < etcdTTL+8*time.Second {
			v, ok, err := pl.claim(ctx, rs)
			if err == nil && ok && v != old {
				st.takeovers++
				return fmt.Sprintf("claim on %d-%d lapsed after %.1fs; %s launched; range claimed by %s after %.1fs",
					rs, rs+etcdClaim-1, lapse.Seconds(), cl.name, holderName(v), time.Since(since).Seconds())
			}
			time.Sleep(50 * time.Millisecond)
		}
		st.takeoverFails++
		return fmt.Sprintf("claim on %d-%d lapsed after %.1fs; %s launched; nobody claimed the range within %.1fs",
			rs, rs+etcdClaim-1, lapse.Seconds(), cl.name, time.Since(since).Seconds())
	}
	growPool := func(why string) {
		first, err := pl.grow(ctx)
		if err != nil {
			t.Errorf("freeing another node range: %v", err)
			return
		}
		f.event("node IDs %d-%d freed (%s)", first, first+etcdClaim-1, why)
	}

	chaosStart := time.Now()
	for i, ev := range events {
		if i >= required && time.Since(chaosStart) > etcdBudget {
			f.event("schedule time budget spent: %s skipped", strings.Join(events[i:], ", "))
			break
		}
		time.Sleep(time.Second + upTo(rng, 3*time.Second))
		var restored time.Time // when the event's damage was undone
		switch ev {
		case "kill":
			s := f.pickIssuing(rng)
			if s == nil {
				f.event("SIGKILL: no server issuing IDs")
				continue
			}
			rs, _ := serverRange(s)
			s.kill()
			st.kills++
			f.replacements++
			r := f.launch(fmt.Sprintf("r%d", f.replacements), "replacement", "replaces "+s.name)
			f.event("SIGKILL %s (%s, node IDs %d-%d); replacement %s launched", s.name, s.pidString(), rs, rs+etcdClaim-1, r.name)
		case "pause":
			s := f.pickIssuing(rng)
			if s == nil {
				f.event("SIGSTOP: no server issuing IDs")
				continue
			}
			rs, known := serverRange(s)
			old, _, _ := pl.claim(ctx, rs)
			dur := etcdTTL + time.Second + upTo(rng, 2*time.Second)
			s.setState("paused")
			s.proc().signal(syscall.SIGSTOP)
			t0 := time.Now()
			f.event("SIGSTOP %s (%s, node IDs %d-%d) for %.1fs", s.name, s.pidString(), rs, rs+etcdClaim-1, dur.Seconds())
			what := takeOver(s, rs, known, old, t0)
			time.Sleep(time.Until(t0.Add(dur)))
			s.proc().signal(syscall.SIGCONT)
			restored = time.Now()
			s.setState("serving")
			paused := restored.Sub(t0)
			s.addEpisode("SIGSTOP", t0, restored)
			st.pauses = append(st.pauses, paused)
			f.event("SIGCONT %s after %.1fs; %s", s.name, paused.Seconds(), what)
			growPool("for " + s.name + " to claim again")
		case "partition":
			s := f.pickIssuing(rng)
			if s == nil {
				f.event("partition: no server issuing IDs")
				continue
			}
			rs, known := serverRange(s)
			old, _, _ := pl.claim(ctx, rs)
			dur := etcdTTL + time.Second + upTo(rng, 2*time.Second)
			s.setState("cut")
			s.mu.Lock()
			ps := s.proxies
			s.mu.Unlock()
			for _, p := range ps {
				p.cut()
			}
			tc := time.Now()
			f.event("partition: %s (node IDs %d-%d) cut off from etcd for %.1fs", s.name, rs, rs+etcdClaim-1, dur.Seconds())
			what := takeOver(s, rs, known, old, tc)
			time.Sleep(time.Until(tc.Add(dur)))
			tr := time.Now()
			restored = tr
			for _, p := range ps {
				if err := p.restore(); err != nil {
					t.Errorf("restoring the proxy of %s: %v", s.name, err)
				}
			}
			s.setState("serving")
			st.partitions = append(st.partitions, tr.Sub(tc))
			s.addEpisode("cut off from etcd", tc, tr)
			// The last keep-alive that can have succeeded was sent before
			// tc: the lease end is at most tc + TTL - margin - 1s.
			bounds = append(bounds, bound{s: s, from: tc, until: tr, max: tc.Add(etcdTTL).Unix() - 1,
				what: fmt.Sprintf("%s cut off from etcd at %.1fs", s.name, tc.Sub(f.start).Seconds())})
			f.event("partition of %s healed after %.1fs; %s", s.name, tr.Sub(tc).Seconds(), what)
			growPool("for " + s.name + " to claim again")
		case "member":
			li := c.leader(ctx, cli)
			killLeader, other := rng.IntN(2) == 0, rng.IntN(2)
			m := c.members[(li+1+other)%len(c.members)]
			role := "a follower"
			if li < 0 {
				m, role = c.members[other], "a member (no leader known)"
			} else if killLeader {
				m, role = c.members[li], "the leader"
			}
			dur := 2*time.Second + upTo(rng, 3*time.Second)
			m.kill()
			t0 := time.Now()
			f.event("SIGKILL etcd %s (%s) for %.1fs", m.name, role, dur.Seconds())
			time.Sleep(dur)
			restored = time.Now()
			if err := m.start(); err != nil {
				t.Fatal(err)
			}
			hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := waitHealthy(hctx, m)
			cancel()
			if err != nil {
				t.Errorf("after restarting etcd %s: %v", m.name, err)
			}
			st.memberDown = append(st.memberDown, restored.Sub(t0))
			f.event("etcd %s restarted after %.1fs, healthy %.1fs later", m.name, restored.Sub(t0).Seconds(), time.Since(restored).Seconds())
		case "quorum":
			li := c.leader(ctx, cli)
			keepLeader, other := rng.IntN(2) == 0, rng.IntN(2)
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
			dur := 3*time.Second + upTo(rng, 3*time.Second)
			a.kill()
			b.kill()
			tl := time.Now()
			f.event("quorum lost: SIGKILL etcd %s and %s (%s) for %.1fs", a.name, b.name, how, dur.Seconds())
			time.Sleep(dur)
			restored = time.Now()
			lastBefore := time.Unix(0, f.lastOK.Load())
			for _, m := range []*member{a, b} {
				if err := m.start(); err != nil {
					t.Fatal(err)
				}
			}
			// A leader that lost its quorum may renew leases until it
			// steps down, at most two election timeouts later.
			bounds = append(bounds, bound{from: tl, until: restored, max: tl.Add(2*electionTimeout+etcdTTL).Unix() - 1,
				what: fmt.Sprintf("quorum lost at %.1fs", tl.Sub(f.start).Seconds())})
			hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := waitHealthy(hctx, c.members...)
			cancel()
			if err != nil {
				t.Errorf("after restoring the quorum: %v", err)
			}
			st.quorumDown = append(st.quorumDown, restored.Sub(tl))
			f.event("etcd %s and %s restarted after %.1fs (the last ID before was fetched %.1fs after the loss); cluster healthy %.1fs later",
				a.name, b.name, restored.Sub(tl).Seconds(), lastBefore.Sub(tl).Seconds(), time.Since(restored).Seconds())
		}
		if restored.IsZero() {
			restored = time.Now()
		}
		if lat, ok := f.waitProgress(restored, 30*time.Second); ok {
			st.recovered = append(st.recovered, fmt.Sprintf("%s %.1fs", ev, lat.Seconds()))
		} else {
			t.Errorf("the fleet issued no ID within 30s after the %s ended at %.1fs", ev, restored.Sub(f.start).Seconds())
			st.recovered = append(st.recovered, ev+" never")
		}
	}

	// Settle: every server started gets its node IDs and issues again.
	if starting := f.waitStarted(30 * time.Second); len(starting) > 0 {
		for _, s := range starting {
			t.Errorf("%s (%s) never became ready: start failures %s; log: %s", s.name, s.note, s.failSummary(), s.logTail(5))
		}
	}
	settle := time.Now()
	idle := f.waitAllIssuing(settle, 30*time.Second)
	for _, s := range idle {
		t.Errorf("%s issued no ID in the %.0fs after the schedule ended (state %s); its clients' errors: %s; log: %s",
			s.name, time.Since(settle).Seconds(), s.getState(), s.errorSummary(), s.logTail(5))
	}
	time.Sleep(2 * time.Second)
	f.event("schedule done; stopping the servers (SIGTERM)")
	f.stop(10 * time.Second)

	r := analyze(f.all(), checkConfig{
		secret: secret, rangeSize: etcdClaim, poolNodes: int64(pl.free) * etcdClaim,
		bounds: bounds, start: f.start,
	})
	head := fmt.Sprintf("chaos etcd: seed %d, etcd %s, 3 members, %d servers (+%d replacements, +%d claimants), TTL %v; %s, %s, %s, %s, %s; %s, %s",
		seed, version, etcdServers, f.replacements, f.claimants, etcdTTL,
		plural(st.kills, "SIGKILL", "SIGKILLs"),
		withDurations(plural(len(st.pauses), "pause", "pauses"), st.pauses),
		withDurations(plural(len(st.partitions), "partition", "partitions"), st.partitions),
		withDurations(plural(len(st.memberDown), "member restart", "member restarts"), st.memberDown),
		withDurations(plural(len(st.quorumDown), "quorum loss", "quorum losses"), st.quorumDown),
		f.idLine(r), fmt.Sprintf("%.0fs", time.Since(began).Seconds()))
	lines := []string{
		"takeovers while the holder was alive but cut off: " + strconv.Itoa(st.takeovers) + ifNonZero(st.takeoverFails, " (%d did not happen)"),
		"fleet issuing again after each event: " + strings.Join(st.recovered, ", "),
		fmt.Sprintf("time bounds: %d checked (partitions and quorum losses), %s", len(bounds), violations(len(r.bounds))),
	}
	f.summarize(r, head, lines, etcdClaim)
	for _, e := range r.errors {
		t.Error(e)
	}
	f.requireProgress(t, r, 100_000)
}

func withDurations(s string, ds []time.Duration) string {
	if len(ds) == 0 {
		return s
	}
	return s + " " + durations(ds)
}

func ifNonZero(n int, format string) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(format, n)
}

func violations(n int) string {
	if n == 0 {
		return "none violated"
	}
	return fmt.Sprintf("%d violated", n)
}

// upTo returns a random duration in [0, d).
func upTo(rng *mrand.Rand, d time.Duration) time.Duration {
	return time.Duration(rng.Int64N(int64(d)))
}
