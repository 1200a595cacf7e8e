//go:build chaos

package chaos

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/internal/testserver"
)

// chaosRun is one seeded schedule of events played on a fleet: what the
// etcd and PostgreSQL runs share. Each event does its damage, undoes it if
// it is undone, and says when; the run then waits until the fleet issues
// again, and at the end checks every ID.
type chaosRun struct {
	t     *testing.T
	f     *fleet
	rng   *mrand.Rand
	began time.Time
	// cipher decrypts the fleet's IDs; claim is the node IDs of a block.
	cipher *randflake.Sparx64
	claim  int64
	// ttl is the longest lease TTL of any member launched so far: the
	// bounds that hold for every member (an outage, a quorum loss) take
	// it.
	ttl time.Duration
	// bounds are the time bounds the IDs are checked against.
	bounds []bound
	// recovered says, per event, how long after it the fleet issued again.
	recovered []string
	// done lists the events played, in order, with their durations.
	done []doneEvent
	// horizons describe what each wipe, rollback or restore cost.
	horizons []string
}

type doneEvent struct {
	kind string
	d    time.Duration // 0: none to report
}

// newSecret returns a new fleet secret and the cipher of its IDs.
func newSecret(t *testing.T) ([]byte, *randflake.Sparx64) {
	secret := make([]byte, 16)
	rand.Read(secret)
	cipher, err := randflake.NewSparx64(secret)
	if err != nil {
		t.Fatal(err)
	}
	return secret, cipher
}

func newRun(t *testing.T, f *fleet, stream uint64) *chaosRun {
	return &chaosRun{t: t, f: f, rng: mrand.New(mrand.NewPCG(uint64(seed), stream)), began: time.Now()}
}

// schedule returns the required events in a random order, then n extra
// events drawn from extras.
func (r *chaosRun) schedule(required, extras []string, n int) []string {
	events := slices.Clone(required)
	r.rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	for range n {
		events = append(events, extras[r.rng.IntN(len(extras))])
	}
	r.f.event("schedule (seed %d): %s", seed, strings.Join(events, ", "))
	return events
}

// play plays the events, one after another with a random gap of
// minGap to minGap+spread before each. The first required events always
// run; the others only while the budget lasts. do plays one event and
// returns when its damage was undone (zero: when it returned), or ok false
// if it could not be played (no target).
func (r *chaosRun) play(events []string, required int, budget, minGap, spread time.Duration, do func(ev string) (restored time.Time, ok bool)) {
	start := time.Now()
	for i, ev := range events {
		if i >= required && time.Since(start) > budget {
			r.f.event("schedule time budget spent: %s skipped", strings.Join(events[i:], ", "))
			return
		}
		time.Sleep(minGap + upTo(r.rng, spread))
		restored, ok := do(ev)
		if !ok {
			continue
		}
		if restored.IsZero() {
			restored = time.Now()
		}
		if lat, ok := r.f.waitProgress(restored, within(30*time.Second)); ok {
			r.recovered = append(r.recovered, fmt.Sprintf("%s %.1fs", ev, lat.Seconds()))
		} else {
			r.t.Errorf("the fleet issued no ID within %v after the %s ended at %.1fs", within(30*time.Second), ev, restored.Sub(r.f.start).Seconds())
			r.recovered = append(r.recovered, ev+" never")
		}
	}
}

// note records an event played, with its duration (0: none).
func (r *chaosRun) note(kind string, d time.Duration) {
	r.done = append(r.done, doneEvent{kind, d})
}

// noteLast sets the duration of the last event noted.
func (r *chaosRun) noteLast(d time.Duration) {
	if len(r.done) > 0 {
		r.done[len(r.done)-1].d = d
	}
}

// eventsLine sums up the events played: "kill×2, pause 4.2s, wipe×1".
func (r *chaosRun) eventsLine() string {
	var kinds []string
	count := map[string]int{}
	ds := map[string][]string{}
	for _, e := range r.done {
		if count[e.kind] == 0 {
			kinds = append(kinds, e.kind)
		}
		count[e.kind]++
		if e.d > 0 {
			ds[e.kind] = append(ds[e.kind], fmt.Sprintf("%.1fs", e.d.Seconds()))
		}
	}
	var parts []string
	for _, k := range kinds {
		p := fmt.Sprintf("%s×%d", k, count[k])
		if len(ds[k]) > 0 {
			p += " " + strings.Join(ds[k], " ")
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "no events"
	}
	return strings.Join(parts, ", ")
}

// killMidSecond waits until about half-way through a second, while s
// issues IDs in it, and SIGKILLs s's process. It returns the time of the
// kill and the state s was in (see server.kill).
func killMidSecond(s *server) (time.Time, string) {
	now := time.Now()
	next := now.Truncate(time.Second).Add(time.Second + 500*time.Millisecond)
	if next.Sub(now) > time.Second {
		next = next.Add(-time.Second)
	}
	time.Sleep(time.Until(next))
	at := time.Now()
	return at, s.kill()
}

// serverRange returns the first node ID of the block s issued its last ID
// on, if it issued any.
func (r *chaosRun) serverRange(s *server) (int64, bool) {
	if s.coll.lastOK.Load() == 0 {
		return 0, false
	}
	_, node, _ := split(r.cipher.DecryptID(s.coll.lastID.Load()))
	return node / r.claim * r.claim, true
}

// killThen SIGKILLs a server issuing IDs half-way through a second, does
// the event's damage at once (damage returns what it did, for the
// timeline; nil: nothing more than the kill), then starts a replacement at
// once. It returns the replacement and the time the damage began (the
// kill's, without damage); ok is false if no server was issuing IDs.
func (r *chaosRun) killThen(ev string, damage func() (string, error)) (rep *server, at time.Time, ok bool) {
	f := r.f
	s := f.pickIssuing(r.rng)
	if s == nil {
		f.event("%s: no server issuing IDs", ev)
		return nil, time.Time{}, false
	}
	rs, _ := r.serverRange(s)
	pid := s.pidString()
	killed, _ := killMidSecond(s)
	at = time.Now()
	did := ""
	if damage != nil {
		d, err := damage()
		if err != nil {
			r.t.Fatalf("%s: %v", ev, err)
		}
		did = fmt.Sprintf("; %.0fms later, %s", float64(at.Sub(killed).Microseconds())/1000, d)
	} else {
		at = killed
	}
	f.replacements++
	rep = f.launch(fmt.Sprintf("r%d", f.replacements), "replacement", "replaces "+s.name+" ("+ev+")")
	r.note(ev, 0)
	f.event("%s: SIGKILL %s (%s, node IDs %d-%d) at %.3f past the second%s; replacement %s launched",
		ev, s.name, pid, rs, rs+r.claim-1, float64(killed.Nanosecond())/1e9, did, rep.name)
	return rep, at, true
}

// farFuture is the end of a bound that lasts to the end of the run.
var farFuture = time.Now().Add(24 * time.Hour)

// horizon completes an event that made the fleet's history unknown at
// since (a wipe, a rollback of records, a restore): claims made after it
// wait out the horizon, wait seconds, so the fleet issues nothing new for
// a while. It checks that every server serving or starting issues once the
// horizon has passed, within wait + 25 s, marks the clients' 503s of the
// wait as expected, and, if rep is the process started at once after the
// event, adds the bound that none of its IDs carries a second before
// since + wait + 1 (a claim made at since or later waits until then:
// docs/leases.md, rule 5). It returns when the fleet issues again.
func (r *chaosRun) horizon(ev string, since time.Time, wait int64, rep *server) time.Time {
	after := time.Unix(since.Unix()+wait, 0)
	if rep != nil {
		r.bounds = append(r.bounds, bound{s: rep, from: since, until: farFuture, min: since.Unix() + wait + 1,
			what: fmt.Sprintf("%s, started at once after the %s at %.1fs", rep.name, ev, since.Sub(r.f.start).Seconds())})
	}
	more := within(25 * time.Second)
	idle := r.f.waitAllIssuing(after, time.Until(after.Add(more)), "serving", "starting")
	back := time.Now()
	r.f.expect(nil, since, back.Add(time.Second), ev, lease503)
	for _, s := range idle {
		r.t.Errorf("after the %s at %.1fs, %s issued no ID in the %ds of the horizon and %v more (state %s); its clients' errors: %s; log: %s",
			ev, since.Sub(r.f.start).Seconds(), s.name, wait, more, s.getState(), s.errorSummary(), s.logTail(5))
	}
	line := fmt.Sprintf("%s at %.1fs: horizon %ds; every server issuing again %.1fs after it", ev, since.Sub(r.f.start).Seconds(), wait, back.Sub(since).Seconds())
	if rep != nil {
		line += fmt.Sprintf(" (%s, started at once, ready %.1fs after it)", rep.name, readyAfter(rep, since))
	}
	r.horizons = append(r.horizons, line)
	r.f.event("%s", line)
	return back
}

// readyAfter returns how long after t the server became ready, or -1.
func readyAfter(s *server, t time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.readyAt.IsZero() {
		return -1
	}
	return s.readyAt.Sub(t).Seconds()
}

// finish ends the run: every server started must become ready and issue
// IDs, then the servers get SIGTERM, and every ID received is checked. It
// prints the summary, head first, then extra lines, and fails the test on
// every error found, and if fewer than minIDs IDs were checked.
func (r *chaosRun) finish(cfg checkConfig, head func(*report) string, extra []string, minIDs int) {
	f, t := r.f, r.t
	if starting := f.waitStarted(within(30 * time.Second)); len(starting) > 0 {
		for _, s := range starting {
			t.Errorf("%s (%s) never became ready: start failures %s; log: %s", s.name, s.note, s.failSummary(), s.logTail(5))
		}
	}
	settle := time.Now()
	for _, s := range f.waitAllIssuing(settle, within(30*time.Second)) {
		t.Errorf("%s issued no ID in the %.0fs after the schedule ended (state %s); its clients' errors: %s; log: %s",
			s.name, time.Since(settle).Seconds(), s.getState(), s.errorSummary(), s.logTail(5))
	}
	time.Sleep(time.Second)
	f.event("schedule done; stopping the servers (SIGTERM)")
	f.stop(10 * time.Second)

	cfg.bounds, cfg.start = append(cfg.bounds, r.bounds...), f.start
	rep := analyze(f.all(), cfg)
	if len(r.recovered) > 0 {
		extra = append(extra, "fleet issuing again after each event: "+strings.Join(r.recovered, ", "))
	}
	for _, h := range r.horizons {
		extra = append(extra, "unknown history waited out: "+h)
	}
	if len(cfg.bounds) > 0 {
		extra = append(extra, fmt.Sprintf("time bounds: %d checked, %s", len(cfg.bounds), violations(len(rep.bounds))))
	}
	f.summarize(rep, head(rep), extra, cfg.rangeSize)
	for _, e := range rep.errors {
		t.Error(e)
	}
	f.requireProgress(t, rep, minIDs)
}

// upTo returns a random duration in [0, d).
func upTo(rng *mrand.Rand, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rng.Int64N(int64(d)))
}

func violations(n int) string {
	if n == 0 {
		return "none violated"
	}
	return fmt.Sprintf("%d violated", n)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// longer launches a member whose TTL and horizon are longer than the
// fleet's (extra: its flags; ttl: its TTL), frees a block for it (grow),
// and waits until it issues IDs. It runs to the end, spared by the events
// aimed at one server, so that the wipes, restores, rollbacks and replays
// after it find a member whose promises reach further than the others'
// and whose claims the others, after a wipe, know nothing of: each
// newcomer then waits only its own horizon (docs/leases.md, rules 13 and
// 14), and the member must stop issuing within its detection bound.
func (r *chaosRun) longer(extra []string, ttl time.Duration, grow func(why string)) (time.Time, bool) {
	f := r.f
	grow("for the member with a longer TTL")
	s := f.launchWith("long", "longer", "a longer TTL: "+strings.Join(extra, " "), extra)
	r.ttl = max(r.ttl, ttl)
	t0 := time.Now()
	d := within(60 * time.Second)
	for s.coll.lastOK.Load() == 0 {
		if time.Since(t0) > d {
			r.t.Errorf("longttl: the member with %s issued no ID within %v of its launch (state %s); log: %s",
				strings.Join(extra, " "), d, s.getState(), s.logTail(5))
			return time.Time{}, false
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.note("longttl", time.Since(t0))
	f.event("longttl: %s (%s) issuing %.1fs after launch; it stays to the end", s.name, strings.Join(extra, " "), time.Since(t0).Seconds())
	return time.Now(), true
}

// otherFleet starts one serve process on the fleet's store under another
// secret, as a second fleet pointed at the same prefix or table by mistake
// would be. It must exit 1 within 10 s naming another fleet's secret (the
// conformance suite's AnotherFleet checks that it writes nothing), and the
// fleet must not pause: no client error window is
// expected for it (a 503 of any server meanwhile fails the run), and every
// server serving issues again after the newcomer has exited.
func (r *chaosRun) otherFleet() (time.Time, bool) {
	f := r.f
	other := make([]byte, 16)
	rand.Read(other)
	env := make([]string, 0, len(f.cfg.env))
	for _, kv := range f.cfg.env {
		if !strings.HasPrefix(kv, "RANDFLAKE_SECRET=") && !strings.HasPrefix(kv, "RANDFLAKE_STATE_DIR=") {
			env = append(env, kv)
		}
	}
	env = append(env, "RANDFLAKE_SECRET="+hex.EncodeToString(other), "RANDFLAKE_STATE_DIR="+r.t.TempDir())
	stranger := &server{f: f, name: "other-fleet"}
	args, undo, err := f.cfg.args(stranger)
	if err != nil {
		r.t.Fatalf("otherfleet: %v", err)
	}
	defer undo()
	port, err := testserver.FreePort()
	if err != nil {
		r.t.Fatalf("otherfleet: %v", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logPath := filepath.Join(f.dir, "other-fleet.log")
	// Start from a fleet that issues: a server still claiming again after
	// an earlier event (a partition, then a quorum loss) answers 503 lease
	// meanwhile, which would be taken for this event's.
	if idle := f.waitAllIssuing(time.Now(), within(30*time.Second)); len(idle) > 0 {
		var names []string
		for _, s := range idle {
			names = append(names, s.name)
		}
		f.event("otherfleet: %s issued nothing within %v; starting anyway", strings.Join(names, ", "), within(30*time.Second))
	}
	t0 := time.Now()
	p, err := startProc("other-fleet", logPath, env, binary, append([]string{"serve", "--listen", addr}, args...)...)
	if err != nil {
		r.t.Fatalf("otherfleet: %v", err)
	}
	limit := within(10 * time.Second)
	select {
	case <-p.done:
	case <-time.After(limit):
		r.t.Errorf("otherfleet: a serve process under another secret still runs %v after its start (want exit 1 within 10 s); log: %s", limit, p.tail(5))
		p.kill()
	}
	took := time.Since(t0)
	if e := p.exit(); e != "exit 1" {
		r.t.Errorf("otherfleet: a serve process under another secret ended with %s, want exit 1; log: %s", e, p.tail(5))
	}
	if last := p.lastLine(); !strings.Contains(last, "another fleet's secret") {
		r.t.Errorf("otherfleet: the last log line of a serve process under another secret does not name another fleet's secret: %s", last)
	}
	exited := time.Now()
	d := within(10 * time.Second)
	for _, s := range f.waitAllIssuing(exited, d) {
		r.t.Errorf("otherfleet: %s issued no ID within %v after the process under another secret exited; its clients' errors: %s; log: %s",
			s.name, d, s.errorSummary(), s.logTail(5))
	}
	again := time.Since(exited)
	// Requests sent before the exit may still be answered after it.
	time.Sleep(time.Second)
	n := f.unexplainedBetween(t0, time.Now(), lease503)
	if n > 0 {
		r.t.Errorf("otherfleet: the fleet's clients got %d answers %q while a process under another secret started and exited: the fleet paused", n, lease503)
	}
	r.note("otherfleet", took)
	f.event("otherfleet: a serve process under another secret (%s) ended with %s %.1fs after its start: %s; every server serving issued again %.1fs after; %s meanwhile",
		stranger.name, p.exit(), took.Seconds(), startFailure(p), again.Seconds(), plural(n, "answer 503 lease", "answers 503 lease"))
	return time.Now(), true
}

// awaitClaimant waits until cl, a claimant launched at t0 when the block of
// the running holder s was made to look free (a replay), is ready. Another
// block is freed (grow) only once cl is ready, or once growAfter has
// passed (time for s to stop and claim its block again), so that the two
// contend for the one block first. It reports false, having failed the
// test, if cl is not ready within limit.
func (r *chaosRun) awaitClaimant(cl, s *server, t0 time.Time, growAfter, limit time.Duration, grow func(why string)) bool {
	grown := false
	for readyAfter(cl, t0) < 0 {
		if !grown && time.Since(t0) > growAfter {
			grow("for " + cl.name + " or " + s.name)
			grown = true
		}
		if time.Since(t0) > limit {
			r.t.Errorf("replay: the claimant %s not ready %v after the replay (state %s); log: %s", cl.name, limit, cl.getState(), cl.logTail(5))
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !grown {
		grow("for " + s.name + " to claim again")
	}
	return true
}

// pickHolder returns a server issuing IDs, picked at random, and the first
// node ID of the block it issues on; ok is false (said in the timeline for
// the event ev) if there is none, or its block is not known yet.
func (r *chaosRun) pickHolder(ev string) (s *server, first int64, ok bool) {
	if s = r.f.pickIssuing(r.rng); s == nil {
		r.f.event("%s: no server issuing IDs", ev)
		return nil, 0, false
	}
	if first, ok = r.serverRange(s); !ok {
		r.f.event("%s: %s's block unknown", ev, s.name)
	}
	return s, first, ok
}

// freed reports a block freed from the first node ID first for why, or
// fails the test with the error of freeing it.
func (r *chaosRun) freed(why string, first int64, err error) {
	if err != nil {
		r.t.Errorf("freeing another block: %v", err)
		return
	}
	r.f.event("node IDs %d-%d freed (%s)", first, first+r.claim-1, why)
}
