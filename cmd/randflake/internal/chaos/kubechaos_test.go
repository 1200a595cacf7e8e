//go:build chaos

package chaos

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/randflake/randflake/kubelease"
	"github.com/randflake/randflake/kubelease/kubetest"
)

const (
	// kubeTTL is --kube-ttl of every server, kubeSkew its
	// --kube-max-clock-skew: the shortest TTL that bound allows, as in
	// the command's own Kubernetes tests.
	kubeTTL  = 6 * time.Second
	kubeSkew = 100 * time.Millisecond
	// kubeClaim is --claim: 32 blocks in all, so that the stand-ins are
	// few objects.
	kubeClaim   = 4096
	kubeServers = 4
	// kubeWait is the horizon a claim waits out when the history is
	// unknown: the horizon (one TTL) plus the clock bound, in whole
	// seconds (docs/leases.md, rule 5).
	kubeWait = 7
	// kubeLongTTL is the TTL and horizon of the member with a longer TTL
	// than the rest.
	kubeLongTTL = 8 * time.Second
	kubeBudget  = 60 * time.Second
)

// kubeRun is the Kubernetes run's state besides the fleet.
type kubeRun struct {
	*chaosRun
	ctx context.Context
	c   *kubetest.Cluster
	pl  *kubePool
}

// TestChaosKubernetes runs 4 `randflake serve --node-source kubernetes`
// processes on a real kube-apiserver (kubetest: its own etcd), with
// clients fetching IDs continuously, under a seeded schedule: a member
// with a longer TTL first, then SIGKILLs with replacements, a restart of
// the API server, a wipe of every Lease object of the fleet right after a
// SIGKILL, a replay of a running holder's saved Lease object and the
// fleet marker through the API, and a process under another fleet's
// secret.
func TestChaosKubernetes(t *testing.T) {
	c := kubetest.New(t)
	ns := c.Namespace(t, "chaos")
	dir := t.TempDir()
	kc, err := c.Kubeconfig(dir, kubetest.User, "", ns)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pl := &kubePool{c: c, ns: ns, free: kubeServers}
	bctx, cancel := kubeCall(ctx)
	_, err = pl.block(bctx)
	cancel()
	if err != nil {
		t.Fatalf("claiming the blocks outside the free pool: %v", err)
	}
	secret, cipher := newSecret(t)
	f := newFleet(t, fleetConfig{
		name: "kube",
		env:  append(baseEnv(), "RANDFLAKE_SECRET="+hex.EncodeToString(secret), "RANDFLAKE_STATE_DIR="+t.TempDir()),
		args: func(s *server) ([]string, func(), error) {
			return []string{"--node-source", "kubernetes", "--kubeconfig", kc, "--claim", strconv.Itoa(kubeClaim),
				"--kube-ttl", kubeTTL.String(), "--kube-horizon", kubeTTL.String(), "--kube-max-clock-skew", kubeSkew.String(),
				"--shutdown-timeout", "5s"}, func() {}, nil
		},
		clients:      []clientSpec{{1, 5 * time.Millisecond}, {100, 10 * time.Millisecond}, {1000, 50 * time.Millisecond}},
		readyTimeout: 40 * time.Second,
		requestLimit: 2 * time.Second,
	})
	r := &kubeRun{chaosRun: newRun(t, f, 0x6b75), ctx: ctx, c: c, pl: pl}
	r.cipher, r.claim, r.ttl = cipher, kubeClaim, kubeTTL
	f.event("kube-apiserver at %s, namespace %s; %d servers, TTL %v, %d node IDs each; free pool: node IDs 0-%d, the rest claimed by stand-in Lease objects",
		c.Addr(), ns, kubeServers, kubeTTL, kubeClaim, kubeServers*kubeClaim-1)
	// A namespace without the fleet's objects is not "fresh" (it cannot
	// be told from one whose objects were deleted): the first claims wait
	// out unknown history once, together.
	for i := 1; i <= kubeServers; i++ {
		f.launch(fmt.Sprintf("s%d", i), "initial", "")
	}
	d := within(60 * time.Second)
	if starting := f.waitStarted(d); len(starting) > 0 {
		t.Fatalf("%d servers not ready after %v; %s: %s", len(starting), d, starting[0].name, starting[0].logTail(10))
	}
	f.event("the first claims waited out unknown history (no fleet marker yet, horizon %ds): servers ready %s after launch", kubeWait, readySpan(f.all()))

	required := []string{"kill", "apirestart", "wipe", "replay", "otherfleet"}
	events := append([]string{"longttl"}, r.schedule(required, []string{"kill", "apirestart"}, r.rng.IntN(2))...)
	r.play(events, len(required)+1, kubeBudget, time.Second, 2*time.Second, r.do)

	head := func(rep *report) string {
		return fmt.Sprintf("chaos kube: seed %d, kube-apiserver, %d servers (+%d replacements, +%d claimants), TTL %v; %s; %s, %.0fs",
			seed, kubeServers, f.replacements, f.claimants, kubeTTL, r.eventsLine(), rep.idLine(), time.Since(r.began).Seconds())
	}
	r.finish(checkConfig{secret: secret, rangeSize: kubeClaim, poolNodes: pl.free * kubeClaim}, head, nil, 100_000)
}

// do plays one event.
func (r *kubeRun) do(ev string) (time.Time, bool) {
	switch ev {
	case "kill":
		_, _, ok := r.killThen("kill", nil)
		return time.Time{}, ok
	case "apirestart":
		return r.apiRestart()
	case "wipe":
		return r.wipe()
	case "replay":
		return r.replay()
	case "longttl":
		return r.longer([]string{"--kube-ttl", kubeLongTTL.String(), "--kube-horizon", kubeLongTTL.String()}, kubeLongTTL, r.grow)
	case "otherfleet":
		return r.otherFleet()
	}
	r.t.Fatalf("unknown event %q", ev)
	return time.Time{}, false
}

// grow frees one more block.
func (r *kubeRun) grow(why string) {
	gctx, cancel := kubeCall(r.ctx)
	defer cancel()
	first, err := r.pl.grow(gctx)
	r.freed(why, first, err)
}

// apiRestart stops kube-apiserver and starts it again on the same etcd.
// The servers' renewals fail meanwhile: each stops issuing at its lease's
// end, and goes on once a renewal succeeds again.
func (r *kubeRun) apiRestart() (time.Time, bool) {
	f := r.f
	t0 := time.Now()
	if err := r.c.RestartAPIServer(); err != nil {
		r.t.Fatalf("restarting kube-apiserver: %v", err)
	}
	started := time.Now()
	limit := within(30 * time.Second)
	idle := f.waitAllIssuing(started, limit)
	back := time.Now()
	for _, s := range idle {
		r.t.Errorf("%s issued no ID within %v after kube-apiserver was started again; its clients' errors: %s; log: %s", s.name, limit, s.errorSummary(), s.logTail(5))
	}
	f.expect(nil, t0, back.Add(time.Second), "API server restart", lease503)
	r.note("apirestart", started.Sub(t0))
	f.event("kube-apiserver restarted in %.1fs; every server issuing again %.1fs after", started.Sub(t0).Seconds(), back.Sub(started).Seconds())
	return started, true
}

// wipe SIGKILLs a server issuing IDs half-way through a second, deletes
// every Lease object of the fleet at once (the marker and every claim and
// record, the running servers' too), puts the stand-ins back, and starts a
// replacement at once. Every claim made after the wipe waits out the
// horizon; the running servers find their objects gone at their next
// renewal and claim again.
func (r *kubeRun) wipe() (time.Time, bool) {
	wctx, cancel := kubeCall(r.ctx)
	defer cancel()
	rep, tw, ok := r.killThen("wipe", func() (string, error) {
		t0 := time.Now()
		taken, err := r.pl.wipe(wctx)
		if err != nil {
			return "", err
		}
		if taken > 0 {
			r.t.Errorf("after the wipe, %d blocks outside the free pool were claimed before the stand-ins were back", taken)
		}
		return fmt.Sprintf("every Lease object of the fleet deleted; stand-ins back after %.1fs", time.Since(t0).Seconds()), nil
	})
	if !ok {
		return time.Time{}, false
	}
	back := r.horizon("wipe", tw, kubeWait, rep)
	r.noteLast(back.Sub(tw))
	return back, true
}

// replay saves the Lease object of the block a running server holds and
// the fleet's object, waits until the saved claim has lapsed by its own
// renewal time (TTL + 1 s) and the server has written a newer record,
// then puts both back through the API (an operator applying saved
// manifests): the block's object as it was, its claim lapsed, its record
// older; the fleet's marker older. A claimant is launched at once, the
// holder's block the only free one. The holder must find its object not
// what it wrote at its next renewal and stop; the check of the IDs finds
// any (second, node ID) the holder and the claimant shared.
func (r *kubeRun) replay() (time.Time, bool) {
	f := r.f
	s, rs, ok := r.pickHolder("replay")
	if !ok {
		return time.Time{}, false
	}
	block := kubelease.BlockName(kubelease.DefaultName, rs)
	rctx, cancel := context.WithTimeout(r.ctx, within(60*time.Second))
	defer cancel()
	savedBlock, err := r.pl.get(rctx, block)
	if err != nil {
		r.t.Errorf("replay: saving %s: %v", block, err)
		return time.Time{}, false
	}
	savedFleet, err := r.pl.get(rctx, kubelease.DefaultName)
	if err != nil {
		r.t.Errorf("replay: saving %s: %v", kubelease.DefaultName, err)
		return time.Time{}, false
	}
	saved := time.Now()
	for {
		time.Sleep(250 * time.Millisecond)
		cur, err := r.pl.get(rctx, block)
		if err != nil {
			r.t.Errorf("replay: reading %s: %v", block, err)
			return time.Time{}, false
		}
		if time.Since(saved) > kubeTTL+time.Second && annotation(cur, kubelease.AnnotationRecord) != annotation(savedBlock, kubelease.AnnotationRecord) {
			break
		}
		if time.Since(saved) > kubeTTL+15*time.Second {
			r.t.Errorf("replay: %s wrote no newer record on %s in %.0fs", s.name, block, time.Since(saved).Seconds())
			return time.Time{}, false
		}
	}
	t0 := time.Now()
	if err := r.pl.putBack(rctx, savedBlock); err != nil {
		r.t.Fatalf("replay: putting %s back: %v", block, err)
	}
	if err := r.pl.putBack(rctx, savedFleet); err != nil {
		r.t.Fatalf("replay: putting %s back: %v", kubelease.DefaultName, err)
	}
	f.claimants++
	cl := f.launch(fmt.Sprintf("c%d", f.claimants), "claimant", "started as "+s.name+"'s older Lease object was put back")
	f.event("replay: %s and %s as saved %.1fs ago put back over %s (%s, node IDs %d-%d) in %.2fs; %s launched",
		block, kubelease.DefaultName, t0.Sub(saved).Seconds(), s.name, s.pidString(), rs, rs+kubeClaim-1, time.Since(t0).Seconds(), cl.name)
	f.expect(s, t0, t0.Add(within(40*time.Second)), "replay", lease503)
	if !r.awaitClaimant(cl, s, t0, r.ttl+kubeWait*time.Second+5*time.Second, within(50*time.Second), r.grow) {
		return time.Now(), true
	}
	r.note("replay", time.Since(t0))
	f.event("replay: %s ready %.1fs after the replay", cl.name, readyAfter(cl, t0))
	return time.Now(), true
}
