package leasetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/lease"
)

// sinceStart measures the process's slowdown from its start (the package's
// first use); its Stretch is the one place the suite and the helpers stretch their
// bounds from.
var sinceStart = slowdown.Start()

// env is one subtest's store and the processes it runs on it.
type env struct {
	t    *testing.T
	h    Harness
	s    *Store
	info lease.StoreInfo
	runs int64 // runs of h.Blocks blocks in the layout
	wait int64 // seconds a claim on unknown history waits at least
	// takeover is the seconds any claim waits after it (rule 14 of
	// docs/leases.md: lease.TakeoverWait), unknown history aside.
	takeover int64
	budget   time.Duration // how long any one wait of the subtest may take on idle cores (see limit)
	check    *Checker
	sign     signer
	log      *slog.Logger
	logw     *testWriter

	filled []*proc // the fillers, once started

	mu sync.Mutex
	n  int // processes opened
}

func newEnv(t *testing.T, h Harness) *env {
	s := h.New(t)
	if s == nil || s.Open == nil {
		t.Fatal("leasetest: Harness.New returned no Store, or a Store without Open")
	}
	e := &env{t: t, h: h, s: s, runs: h.Layout.Count() / h.Blocks, check: NewChecker(t, Secret()), sign: newSigner(Secret())}
	e.logw = newTestWriter(t)
	e.log = slog.New(slog.NewTextHandler(e.logw, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e.info = e.open(Process{Name: "probe"}).Info()
	if e.info.Promise <= 0 || !e.info.Durable {
		t.Fatalf("leasetest: %s: the suite checks durable stores with a positive promise, not %+v", e.info.Name, e.info)
	}
	e.wait = ceilSeconds(e.info.Promise)
	e.takeover = ceilSeconds(lease.TakeoverWait(e.info))
	e.budget = 4*time.Duration(e.wait)*time.Second + 4*e.info.MaxClockSkew + 20*time.Second
	return e
}

// limit is the budget stretched by the measured slowdown: how long a wait
// of the subtest may take now.
func (e *env) limit() time.Duration { return sinceStart.Stretch(e.budget) }

func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// testWriter writes log lines to the test's log until the test ends, and
// keeps them for logged.
type testWriter struct {
	mu    sync.Mutex
	t     *testing.T
	done  bool
	lines []string
}

func newTestWriter(t *testing.T) *testWriter {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

// Write logs one line.
func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	line := strings.TrimSuffix(string(p), "\n")
	w.lines = append(w.lines, line)
	if !w.done {
		w.t.Log(line)
	}
	return len(p), nil
}

// unknownHistory is what the engine logs when it finds the history
// unknown (and makes a claim wait it out).
const unknownHistory = "the history of the node IDs is unknown"

// waitingMsg is what the engine logs when a claim waits for its start.
const waitingMsg = "waiting for the previous holder's last second to pass"

// lastLoggedAt returns the time of process's last log line holding text.
func (e *env) lastLoggedAt(process, text string) (time.Time, bool) {
	w := e.logw
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range slices.Backward(w.lines) {
		if !strings.Contains(l, "process="+process+" ") || !strings.Contains(l, text) {
			continue
		}
		v, _, _ := strings.Cut(strings.TrimPrefix(l, "time="), " ")
		if at, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return at, true
		}
	}
	return time.Time{}, false
}

// logged reports whether process logged a line holding text.
func (e *env) logged(process, text string) bool {
	w := e.logw
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.lines {
		if strings.Contains(l, "process="+process+" ") && strings.Contains(l, text) {
			return true
		}
	}
	return false
}

// need skips the subtest if a hook it needs is missing.
func (e *env) need(hook string, ok bool) {
	e.t.Helper()
	if !ok {
		e.t.Skipf("the store provides no %s hook", hook)
	}
}

// name returns a new process name.
func (e *env) name(prefix string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	return fmt.Sprintf("%s-%d", prefix, e.n)
}

// open opens a handle as a new process would.
func (e *env) open(p Process) lease.BlockStore {
	e.t.Helper()
	if p.Layout == (lease.BlockLayout{}) {
		p.Layout = e.h.Layout
	}
	s, err := e.s.Open(e.t, p)
	if err != nil {
		e.t.Fatalf("opening the store for %s: %v", p.Name, err)
	}
	if s == nil {
		e.t.Fatalf("opening the store for %s: no store and no error", p.Name)
	}
	return s
}

// opts says how a process is started.
type opts struct {
	ahead   time.Duration // the process's clock is this far ahead
	addr    string        // connect through this address
	layout  lease.BlockLayout
	idle    bool          // no load (a process that only holds its node IDs)
	waitFor bool          // retry while every block is held (a successor waiting for a claim to lapse)
	horizon time.Duration // the fleet's horizon (0: the store's promise)
	secret  []byte        // the fleet secret (nil: Secret())
}

// proc is a process: a store handle, its BlockSource and, once started, a
// leased generator under load.
type proc struct {
	e     *env
	name  string
	o     opts
	store lease.BlockStore // as Open returned it (the Kill hook's argument)
	timed *timedStore
	src   *lease.BlockSource
	g     *randflake.Leased
	col   *Collector
	took  time.Duration   // from the start of NewLeased to its return
	held  randflake.Lease // its first lease

	mu   sync.Mutex
	errs []error   // the generator's source errors (OnError)
	lost time.Time // when it first reported its claim lost
}

// now returns the process's clock.
func (p *proc) now() time.Time { return time.Now().Add(p.o.ahead) }

// newProc opens a process's handle and block source.
func (e *env) newProc(prefix string, o opts) *proc {
	e.t.Helper()
	p := &proc{e: e, name: e.name(prefix), o: o}
	pr := Process{Name: p.name, Addr: o.addr, Layout: o.layout}
	if o.ahead != 0 {
		pr.Now = p.now
	}
	p.store = e.open(pr)
	p.timed = &timedStore{BlockStore: p.store}
	layout := o.layout
	if layout == (lease.BlockLayout{}) {
		layout = e.h.Layout
	}
	secret := o.secret
	if secret == nil {
		secret = Secret()
	}
	src, err := lease.NewBlockSource(p.timed, lease.BlockSourceConfig{
		Secret: secret, Layout: layout, Blocks: e.h.Blocks, Horizon: o.horizon, Now: p.now, Logger: e.log.With("process", p.name)})
	if err != nil {
		e.t.Fatalf("%s: NewBlockSource: %v", p.name, err)
	}
	p.src = src
	return p
}

// start starts a process with a leased generator, under load unless
// o.idle; it fails the test if the process gets no lease.
func (e *env) start(prefix string, o opts) *proc {
	e.t.Helper()
	p := e.newProc(prefix, o)
	if err := p.lease(); err != nil {
		e.t.Fatalf("%s: no lease: %v", p.name, err)
	}
	return p
}

// lease starts p's leased generator: NewLeased, tried again after a
// transient failure (Harness.Transient), and while every block is held
// if p.o.waitFor or after such a failure, within the subtest's budget.
func (p *proc) lease() error {
	e := p.e
	ctx, cancel := context.WithTimeout(context.Background(), e.limit())
	defer cancel()
	cfg := randflake.LeasedConfig{Secret: Secret(), Source: p.src, Shards: 2, OnError: p.onError,
		Logger: e.log.With("process", p.name)}
	if p.o.ahead != 0 {
		cfg.TimeSource = func() int64 { return p.now().Unix() }
	}
	began := time.Now()
	transient := 0
	for {
		g, err := randflake.NewLeased(ctx, cfg)
		if err == nil {
			p.took = time.Since(began)
			p.g, p.held = g, g.Lease()
			break
		}
		if ctx.Err() != nil {
			return err
		}
		if e.transient(err) && transient < MaxTransient {
			transient++
			e.t.Logf("%s: its claim failed on a slow store (%v); claiming again (%d of at most %d)", p.name, err, transient, MaxTransient)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		// A claim that failed on a slow store may have been applied, its
		// answer lost: that claim holds its blocks until it lapses, so
		// after one, no free node IDs is waited out as for p.o.waitFor.
		if (!p.o.waitFor && transient == 0) || !errors.Is(err, lease.ErrNoFreeNodes) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), sinceStart.Stretch(5*time.Second))
		defer cancel()
		p.g.Close(ctx)
	})
	if !p.o.idle {
		p.col = Collect(p.name, p.g)
	}
	return nil
}

func (p *proc) onError(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs = append(p.errs, err)
	if p.lost.IsZero() && errors.Is(err, randflake.ErrLeaseLost) {
		p.lost = time.Now()
	}
}

// lostAt returns when the generator first reported its claim lost.
func (p *proc) lostAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// errors returns the source errors the generator reported.
func (p *proc) errors() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.errs...)
}

// first returns the first lease the process got.
func (p *proc) first() randflake.Lease { return p.col.Leases()[0] }

// stop stops the load and closes the generator (releasing its lease), and
// returns its IDs, checked.
func (p *proc) stop() Span {
	p.e.t.Helper()
	sp := p.e.check.AddCollector(p.col)
	p.close()
	return sp
}

// close closes an idle process's generator, releasing its lease.
//
// A release that finds the claim gone fails the test, unless the lease
// the generator held had ended by the time the release returned: then
// its renewals or the release itself did not reach the store in time (a
// loaded machine starves the store or the process for seconds), the
// store let the claim lapse as it should, and the generator, which stops
// at the lease's end, issued nothing after it (the IDs' checks see to
// that). A claim gone while the lease still ran would let another holder
// in early: that fails.
func (p *proc) close() {
	p.e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sinceStart.Stretch(5*time.Second))
	defer cancel()
	held := p.g.Lease()
	began := p.now()
	err := p.g.Close(ctx)
	if err == nil {
		return
	}
	ended := p.now()
	if p.e.transient(err) {
		// The release step did not finish in time on a slow store: the
		// generator has abandoned the claim, its promise standing, as
		// a process whose release timed out would.
		p.e.t.Logf("%s: Close from %s to %s: %v: a slow store (%s); the claim is abandoned, its promise (to %v's end) standing",
			p.name, began.Format("15:04:05.000"), ended.Format("15:04:05.000"), err, slowness(), held)
		return
	}
	if errors.Is(err, randflake.ErrLeaseLost) && ended.Unix() > held.End {
		p.e.t.Logf("%s: Close from %s to %s: %v: the lease it held, %v, had ended by then, its renewals late (errors reported: %v); the store let the claim lapse",
			p.name, began.Format("15:04:05.000"), ended.Format("15:04:05.000"), err, held, p.errors())
		return
	}
	p.e.t.Errorf("%s: Close from %s to %s: %v (the lease it held, %v, had not ended)", p.name, began.Format("15:04:05.000"), ended.Format("15:04:05.000"), err, held)
}

// kill stops the load and kills the process's handle as a crash would,
// and returns its IDs, checked, and its last lease.
func (p *proc) kill() (Span, randflake.Lease) {
	p.e.t.Helper()
	ids := p.col.Stop()
	p.e.s.Kill(p.e.t, p.store)
	leases := p.col.Leases()
	sp := p.e.check.Add(p.name, ids, leases...)
	return sp, leases[len(leases)-1]
}

// runFor lets the load run for d, and then until the process has issued
// IDs and renewed its lease at least once.
func (p *proc) runFor(d time.Duration) {
	p.e.t.Helper()
	time.Sleep(d)
	first := p.first()
	began := time.Now()
	for {
		n, _ := p.col.Count()
		if l := p.col.Leases(); n > 0 && l[len(l)-1].End > first.End {
			return
		}
		if limit := p.e.limit(); time.Since(began) > limit {
			p.e.t.Fatalf("%s: after %v, %d IDs issued and the lease %v never renewed (errors: %v; %s)",
				p.name, limit.Round(time.Millisecond), n, first, p.col.Errors(), slowness())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// timedStore notes when the first claim of its process was made: the
// Update that returned it read the store (called its fn) for the last
// time no earlier than begun, and had applied by done.
type timedStore struct {
	lease.BlockStore
	mu          sync.Mutex
	begun, done time.Time
}

// Update runs the step, noting when the first claim was made: begun is
// when the step last called fn, with the view that decided the claim (a
// step on a loaded machine or a busy store may call it seconds after it
// began, or call it again after a conflict).
func (s *timedStore) Update(ctx context.Context, held lease.StoreClaim, all bool, fn func(*lease.StoreView) (*lease.StoreChanges, error)) (lease.StoreClaim, error) {
	var begun time.Time
	c, err := s.BlockStore.Update(ctx, held, all, func(v *lease.StoreView) (*lease.StoreChanges, error) {
		begun = time.Now()
		return fn(v)
	})
	if err == nil && held == nil && c != nil {
		s.mu.Lock()
		if s.begun.IsZero() {
			s.begun, s.done = begun, time.Now()
		}
		s.mu.Unlock()
	}
	return c, err
}

// claimed returns when the first claim was made (zero if none).
func (s *timedStore) claimed() (begun, done time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.begun, s.done
}

// fillers starts idle processes holding every run but one, so that the
// next claim has only that one left; it returns them.
func (e *env) fillers() []*proc {
	e.t.Helper()
	e.filled = e.claimAtOnce(e.runs-1, "filler", opts{idle: true})
	return e.filled
}

// claimAtOnce starts n processes claiming at the same time, and fails the
// test if one gets no lease; it returns them.
func (e *env) claimAtOnce(n int64, prefix string, o opts) []*proc {
	e.t.Helper()
	ps := make([]*proc, n)
	var wg sync.WaitGroup
	errs := make([]error, len(ps))
	for i := range ps {
		ps[i] = e.newProc(prefix, o)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = ps[i].lease()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			e.t.Fatalf("%s, one of %d processes claiming at once, got no lease: %v", ps[i].name, n, err)
		}
	}
	return ps
}

// killedHolder starts a holder, lets it issue for a second under load and
// kills it half-way through a second; it returns the seconds the holder
// used and its lease.
func (e *env) killedHolder() (Span, randflake.Lease) {
	k := e.start("doomed", opts{})
	k.runFor(time.Second)
	midSecond()
	return k.kill()
}

// outliveCopy starts a holder, lets it issue 100 IDs, takes a copy of the
// store with save (the hook Store.Save or Store.Rollback, named hook)
// while the holder runs, and lets the holder issue for its promise and
// 1.5 s more, so that it has used seconds the copy does not cover. It
// returns the holder, running, and what puts the copy back.
func (e *env) outliveCopy(prefix, hook string, save func(*testing.T) func(*testing.T)) (*proc, func(*testing.T)) {
	e.need(hook, save != nil)
	p := e.start(prefix, opts{})
	p.col.WaitCount(e.t, 100, e.budget)
	putBack := save(e.t)
	p.runFor(e.info.Promise + 1500*time.Millisecond)
	return p, putBack
}

// midSecond sleeps until about 500 ms past a second boundary.
//
// A sleep that overran on a loaded machine, past 900 ms or into the next
// second, is tried again at the next second, up to ten times.
func midSecond() {
	for range 10 {
		now := time.Now()
		at := now.Truncate(time.Second).Add(500 * time.Millisecond)
		if at.Before(now.Add(20 * time.Millisecond)) {
			at = at.Add(time.Second)
		}
		time.Sleep(time.Until(at))
		if now := time.Now(); now.Unix() == at.Unix() && now.Sub(at) < 400*time.Millisecond {
			return
		}
	}
}

// blockOf returns the first node ID of the block of node.
func (e *env) blockOf(node int64) int64 {
	l := e.h.Layout
	return l.FirstNode + (node-l.FirstNode)/l.Size*l.Size
}

// perBlock returns the newest second of a span on each block.
func (e *env) perBlock(sp Span) map[int64]int64 {
	m := map[int64]int64{}
	for node, last := range sp.Nodes {
		f := e.blockOf(node)
		m[f] = max(m[f], last)
	}
	return m
}

// blocksOf returns the first node IDs of the blocks of a lease.
func (e *env) blocksOf(l randflake.Lease) []int64 {
	var fs []int64
	for f := l.FirstNode; f <= l.LastNode; f += e.h.Layout.Size {
		fs = append(fs, f)
	}
	return fs
}

// record reads and parses a block's record through the hook.
func (e *env) record(first int64) (recordFields, error) {
	e.t.Helper()
	raw := e.s.ReadRecord(e.t, first)
	if raw == nil {
		return recordFields{}, fmt.Errorf("node IDs from %d have no record", first)
	}
	r, err := e.sign.parse(raw)
	if err == nil && (r.first != first || r.last != first+e.h.Layout.Size-1) {
		err = fmt.Errorf("the record of node IDs from %d names node IDs %d-%d", first, r.first, r.last)
	}
	return r, err
}

// acquire runs one claim of a bare BlockSource within the budget.
func (p *proc) acquire() (randflake.Lease, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.e.limit())
	defer cancel()
	return p.src.Acquire(ctx)
}

// renew renews a bare BlockSource's lease within the budget.
func (p *proc) renew(l randflake.Lease) (randflake.Lease, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.e.limit())
	defer cancel()
	return p.src.Renew(ctx, l)
}

// initialise makes a first claim and releases it, so that the store has
// a marker (and a store that is not fresh has had its unknown history
// waited out).
func (e *env) initialise() {
	e.t.Helper()
	p := e.newProc("setup", opts{})
	l, err := p.acquire()
	if err != nil {
		e.t.Fatalf("the first claim: %v", err)
	}
	p.release(l)
}

// transient reports whether err is a step the store did not finish in
// time (Harness.Transient), not an answer.
func (e *env) transient(err error) bool { return e.h.Transient != nil && e.h.Transient(err) }

// release releases a bare BlockSource's lease, reporting no second used,
// and fails the test on an error tryRelease does not log.
func (p *proc) release(l randflake.Lease) {
	p.e.t.Helper()
	if err := p.tryRelease(l); err != nil {
		p.e.t.Fatalf("%s: Release: %v", p.name, err)
	}
}

// tryRelease releases a bare BlockSource's lease, reporting no second
// used. A release step the store did not finish in time is logged, not
// returned: the source has then abandoned the claim (its promise stands,
// and the claim is released or lapses), as a process whose release timed
// out on a slow store would.
func (p *proc) tryRelease(l randflake.Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), sinceStart.Stretch(10*time.Second))
	defer cancel()
	err := p.src.Release(ctx, l, 0)
	if err != nil && p.e.transient(err) {
		p.e.t.Logf("%s: its release of %v failed on a slow store (%v, %s): the claim is abandoned, its promise standing", p.name, l, err, slowness())
		return nil
	}
	return err
}

// waited checks that a lease claimed at second from (on the claimant's
// clock) starts only after unknown history was waited out.
func (e *env) waited(who string, l randflake.Lease, from int64) {
	e.t.Helper()
	if l.Start < from+e.wait+1 {
		e.t.Errorf("%s's lease %v starts at %d, %d s after its claim at %d: unknown history was not waited out (the promise is %v)",
			who, l, l.Start, l.Start-from, from, e.info.Promise)
	}
}

// slowness describes the process's measured slowdown, for a failure
// message.
func slowness() string {
	return fmt.Sprintf("this process ran %.1f× slower than on idle cores", sinceStart.Factor())
}
