//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package statedir

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/lease"
)

func openTest(t *testing.T) *Dir {
	t.Helper()
	d, err := Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The tests spend most of their time waiting out horizons in real time,
// not computing: unless -test.parallel was given, let more of them wait
// at once than there are processors.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "32")
	}
	os.Exit(m.Run())
}

// quiet is the tests' logger.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newSource(t *testing.T, d *Dir, opts Options) *Source {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	s, err := d.Source(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testClock is a clock for the engine (Options.now): it runs with real
// time from a chosen second, and jumps when the test says so. (The engine
// sleeps in real time, so a clock that stood still would never let a wait
// end.)
type testClock struct {
	anchor time.Time
	base   int64
	jump   atomic.Int64 // seconds
}

func newClock(base int64) *testClock { return &testClock{anchor: time.Now(), base: base} }

func (c *testClock) now() time.Time {
	return time.Unix(c.base+c.jump.Load(), 0).Add(time.Since(c.anchor))
}

func (c *testClock) sec() int64 { return c.now().Unix() }

// running returns the real time since the clock started at its base
// second (at the start of that second, on a clock that did not jump).
func (c *testClock) running() time.Duration { return time.Since(c.anchor) }

// add makes the clock jump by sec seconds.
func (c *testClock) add(sec int64) { c.jump.Add(sec) }

// on returns opts with the clock as the engine's.
func (c *testClock) on(opts Options) Options {
	opts.now = c.now
	return opts
}

// kill drops the source's claim as the kernel does when its process is
// killed: the locks go, nothing is written. The source is not used again.
func kill(t *testing.T, s *Source) {
	t.Helper()
	c := s.store.current()
	if c == nil {
		t.Fatal("kill: the source holds no claim")
	}
	c.release()
}

// acquire acquires a lease and returns it with the real time it took.
// (Acquire waits only for a lease whose Start is still ahead: a lease
// starting no later than the engine's second before the call came
// without a wait.)
func acquire(t *testing.T, s *Source) (randflake.Lease, time.Duration) {
	t.Helper()
	slow := slowdown.Start()
	limit := slow.Stretch(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	began := time.Now()
	l, err := s.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire (given %v; %s): %v", limit, slow, err)
	}
	return l, time.Since(began)
}

func TestOpenCreatesPrivateSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b")
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Created() {
		t.Error("Created() is false on first use")
	}
	if d2, err := Open(path); err != nil || d2.Created() {
		t.Errorf("second Open: Created() = %v, %v; want false", d2 != nil && d2.Created(), err)
	}
	if d.Path() != path || len(d.Secret()) != 16 {
		t.Fatalf("path %q, secret of %d bytes", d.Path(), len(d.Secret()))
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v, %v", fi.Mode().Perm(), err)
	}
	fi, err = os.Stat(filepath.Join(path, "secret"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("secret mode %v, %v", fi.Mode().Perm(), err)
	}
	data, _ := os.ReadFile(filepath.Join(path, "secret"))
	if got := strings.TrimSpace(string(data)); got != hex.EncodeToString(d.Secret()) {
		t.Error("secret file does not hold the secret in hexadecimal")
	}
	again, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Secret()) != string(d.Secret()) {
		t.Error("a second Open made another secret")
	}
	s := d.Secret()
	s[0] ^= 1
	if string(s) == string(d.Secret()) {
		t.Error("Secret returned the directory's own slice")
	}
}

// Concurrent first uses agree on one secret.
func TestOpenConcurrentFirstUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	secrets := make([]string, 8)
	var wg sync.WaitGroup
	for i := range secrets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := Open(path)
			if err != nil {
				t.Error(err)
				return
			}
			secrets[i] = string(d.Secret())
		}()
	}
	wg.Wait()
	for _, s := range secrets {
		if s != secrets[0] {
			t.Fatal("processes opening a new directory at once got different secrets")
		}
	}
}

func TestSecretChecks(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	raw := []byte("0123456789abcde\xff") // not all text: a key
	if s, err := LoadSecret(write("raw", raw, 0o600)); err != nil || string(s) != string(raw) {
		t.Errorf("raw secret: %q, %v", s, err)
	}
	if s, err := LoadSecret(write("hex", []byte(hex.EncodeToString(raw)+"\n"), 0o400)); err != nil || string(s) != string(raw) {
		t.Errorf("hex secret: %q, %v", s, err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660, 0o644} {
		p := write("open", []byte(hex.EncodeToString(raw)), mode)
		if os.Geteuid() == 0 {
			// Root's file in a group of ours would be accepted (fsGroup).
			os.Chown(p, 0, foreignGroup(t))
		}
		_, err := LoadSecret(p)
		if err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %v: %v, want a refusal", mode, err)
		}
	}
	secretText := "zz" + hex.EncodeToString(raw)[2:]
	_, err := LoadSecret(write("bad", []byte(secretText), 0o600))
	if err == nil || strings.Contains(err.Error(), secretText) || strings.Contains(err.Error(), secretText[2:]) {
		t.Errorf("malformed secret: %v (must fail without showing the contents)", err)
	}
	if _, err := LoadSecret(write("short", []byte("abc"), 0o600)); err == nil {
		t.Error("short secret accepted")
	}
	if _, err := LoadSecret(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing secret: %v", err)
	}

	// Open refuses a readable secret and a directory others can write.
	sd := filepath.Join(dir, "sd")
	if _, err := Open(sd); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(sd, "secret"), 0o644)
	if _, err := Open(sd); err == nil {
		t.Error("Open accepted a world-readable secret")
	}
	os.Chmod(filepath.Join(sd, "secret"), 0o600)
	os.Chmod(sd, 0o777)
	if _, err := Open(sd); err == nil {
		t.Error("Open accepted a world-writable directory")
	}
}

func TestDefaultPath(t *testing.T) {
	t.Setenv("RANDFLAKE_STATE_DIR", "/x/rf")
	if p, _ := DefaultPath(); p != "/x/rf" {
		t.Errorf("with RANDFLAKE_STATE_DIR: %q", p)
	}
	t.Setenv("RANDFLAKE_STATE_DIR", "")
	t.Setenv("XDG_STATE_HOME", "/x/state")
	if p, _ := DefaultPath(); p != "/x/state/randflake" {
		t.Errorf("with XDG_STATE_HOME: %q", p)
	}
	t.Setenv("XDG_STATE_HOME", "relative")
	t.Setenv("HOME", "/home/u")
	p, err := DefaultPath()
	if err != nil || !strings.HasSuffix(p, "randflake") || !filepath.IsAbs(p) {
		t.Errorf("default: %q, %v", p, err)
	}
}

func TestSourceOptions(t *testing.T) {
	d := openTest(t)
	s := newSource(t, d, Options{})
	if s.nodes != DefaultNodes || s.first != 0 || s.last != randflake.MaxNode || s.horizon != 10 {
		t.Errorf("defaults: %+v", s)
	}
	info := s.Store().Info()
	if info.Name != "state directory "+d.Path() || info.EndFor != nil || info.Promise != DefaultHorizon || !info.Durable || info.MaxClockSkew != 0 {
		t.Errorf("store info %+v", info)
	}
	if l := s.Store().Layout(); l != (lease.BlockLayout{FirstNode: 0, LastNode: randflake.MaxNode, Size: BlockSize}) {
		t.Errorf("layout %+v", l)
	}
	s = newSource(t, d, Options{Nodes: 65, Horizon: 1500 * time.Millisecond, FirstNode: 128, LastNode: 383})
	if s.nodes != 128 || s.horizon != 2 || s.Store().Info().Promise != 2*time.Second {
		t.Errorf("rounding: nodes %d, horizon %d, promise %v", s.nodes, s.horizon, s.Store().Info().Promise)
	}
	if l := s.Store().Layout(); l != (lease.BlockLayout{FirstNode: 128, LastNode: 383, Size: BlockSize}) {
		t.Errorf("layout %+v", l)
	}
	for _, c := range []struct {
		o     Options
		store bool // bad for a Store too (a Store ignores Nodes)
	}{
		{Options{FirstNode: 1, LastNode: 63}, true},
		{Options{FirstNode: 0, LastNode: 64}, true},
		{Options{FirstNode: 64, LastNode: 63}, true},
		{Options{LastNode: randflake.MaxNode + 64}, true},
		{Options{Nodes: -1}, false},
		{Options{Nodes: 128, FirstNode: 0, LastNode: 63}, false},
		{Options{Horizon: -time.Second}, true},
	} {
		if _, err := d.Source(c.o); err == nil {
			t.Errorf("Source(%+v) accepted", c.o)
		}
		if _, err := d.Store(c.o); (err == nil) == c.store {
			t.Errorf("Store(%+v): %v", c.o, err)
		}
	}
}

// The package's errors are the engine's, so errors.Is matches either.
func TestErrorsAreTheEngines(t *testing.T) {
	for _, c := range []struct{ ours, engine error }{
		{ErrClockBehind, lease.ErrClockBehind},
		{ErrNoFreeNodes, lease.ErrNoFreeNodes},
		{ErrFleetMismatch, lease.ErrFleetMismatch},
		{ErrHistoryRolledBack, lease.ErrHistoryRolledBack},
	} {
		if c.ours != c.engine {
			t.Errorf("%v is not the engine's %v", c.ours, c.engine)
		}
	}
}

// Claims in one process (separate open files) are disjoint as between
// processes; a full range refuses; a release frees the nodes at once.
func TestDisjointClaims(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	ctx := context.Background()
	opts := Options{Nodes: 64, LastNode: 255, Horizon: 2 * time.Second}
	var srcs []*Source
	var leases []randflake.Lease
	seen := map[int64]bool{}
	for range 4 {
		s := newSource(t, d, opts)
		// The lease covers the horizon from the second of the call on
		// (read before it, so a test descheduled after it costs nothing).
		before := time.Now().Unix()
		l, err := s.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Nodes() != 64 || l.End < l.Start || l.End < before+int64(opts.Horizon/time.Second) {
			t.Errorf("lease %+v, claimed at second %d with a %v horizon", l, before, opts.Horizon)
		}
		if seen[l.FirstNode] {
			t.Errorf("node range %d-%d handed out twice", l.FirstNode, l.LastNode)
		}
		seen[l.FirstNode] = true
		srcs = append(srcs, s)
		leases = append(leases, l)
	}
	extra := newSource(t, d, opts)
	if _, err := extra.Acquire(ctx); !errors.Is(err, ErrNoFreeNodes) {
		t.Fatalf("fifth claim: %v, want ErrNoFreeNodes", err)
	}
	if _, err := srcs[0].Acquire(ctx); err == nil {
		t.Error("a source acquired a second lease")
	}
	// Renewal moves the end forward (the clock must move on first).
	time.Sleep(1100 * time.Millisecond)
	r, err := srcs[1].Renew(ctx, leases[1])
	if err != nil || r.End <= leases[1].End || r.Start != leases[1].Start || r.FirstNode != leases[1].FirstNode {
		t.Errorf("Renew: %+v, %v (was %+v)", r, err, leases[1])
	}
	if err := srcs[2].Release(ctx, leases[2], leases[2].Start+1); err != nil {
		t.Fatal(err)
	}
	if err := srcs[2].Release(ctx, leases[2], 0); err == nil {
		t.Error("double release accepted")
	}
	if _, err := srcs[2].Renew(ctx, leases[2]); err == nil {
		t.Error("renewal of a released lease accepted")
	}
	l, err := extra.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.FirstNode != leases[2].FirstNode || l.Start != leases[2].Start+2 {
		t.Errorf("took over %+v, want nodes %d- from second %d", l, leases[2].FirstNode, leases[2].Start+2)
	}
}

const t0 = 1_750_000_000

// A claimant taking over a crashed process's nodes starts after its
// promise; one taking over released nodes starts after their last second.
func TestTakeoverStartsAfterRecord(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	ctx := context.Background()
	clk := newClock(t0)
	opts := clk.on(Options{Nodes: 64, LastNode: 63, Horizon: 5 * time.Second})
	a := newSource(t, d, opts)
	before := clk.sec()
	la, _ := acquire(t, a)
	if la.Start != randflake.Epoch+1 || la.End < before+5 || la.End > clk.sec()+5 {
		t.Errorf("first lease %+v, want a start at the epoch and an end 5s from now (%d)", la, before)
	}
	clk.add(3)
	before = clk.sec()
	la, err := a.Renew(ctx, la)
	if err != nil || la.End < before+5 || la.End > clk.sec()+5 {
		t.Fatalf("Renew: %+v, %v; want an end 5s from %d", la, err, before)
	}
	kill(t, a)
	clk.add(10) // past the promise: no wait
	b := newSource(t, d, opts)
	lb, _ := acquire(t, b)
	if lb.Start != la.End+1 || lb.End < lb.Start {
		t.Errorf("after a crash: %+v, want a start at %d", lb, la.End+1)
	}
	clk.add(10)
	if err := b.Release(ctx, lb, lb.Start+4); err != nil {
		t.Fatal(err)
	}
	c := newSource(t, d, opts)
	lc, _ := acquire(t, c)
	if lc.Start != lb.Start+5 {
		t.Errorf("after a release: start %d, want %d", lc.Start, lb.Start+5)
	}
	// Releasing without having issued keeps the predecessor's bound.
	if err := c.Release(ctx, lc, 0); err != nil {
		t.Fatal(err)
	}
	if lc2, _ := acquire(t, c); lc2.Start != lc.Start {
		t.Errorf("after an unused lease: %+v, want start %d", lc2, lc.Start)
	}
}

// A claimant of a crashed process's only range, while its promise runs,
// holds the range and waits for the promise to pass: in real time, as
// long as the promise has left.
func TestTakeoverWaitsForPromise(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a dead holder's 1 s promise: not in -short")
	}
	t.Parallel()
	d := openTest(t)
	opts := Options{Nodes: 64, LastNode: 63, Horizon: time.Second}
	a := newSource(t, d, opts)
	la, _ := acquire(t, a)
	kill(t, a)
	b := newSource(t, d, opts)
	lb, took := acquire(t, b)
	returned := time.Now()
	if lb.Start != la.End+1 {
		t.Errorf("lease %+v, want a start right after the dead holder's promise %d", lb, la.End)
	}
	// It waited in real time until the promise had passed: Acquire
	// returned no earlier than the start of the second after it.
	if promised := time.Unix(la.End+1, 0); returned.Before(promised) {
		t.Errorf("Acquire returned at %v after waiting %v, before the dead holder's promise passed at %v", returned, took, promised)
	}
	t.Logf("waited %v for the dead holder's promise (horizon 1s)", took.Round(time.Millisecond))
}

// Free nodes whose record has passed are preferred to a crashed process's
// nodes still under its promise.
func TestPrefersNodesPastTheirRecord(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	clk := newClock(t0)
	opts := clk.on(Options{Nodes: 64, LastNode: 127, Horizon: 10 * time.Second})
	a := newSource(t, d, opts)
	la, _ := acquire(t, a)
	kill(t, a)
	clk.add(2)
	b := newSource(t, d, opts)
	from := clk.sec()
	lb, took := acquire(t, b)
	if lb.FirstNode == la.FirstNode || lb.Start > from {
		t.Errorf("took %+v after %v, called at second %d; want the other, unused range at once (crashed: %+v)", lb, took, from, la)
	}
	clk.add(10)
	c := newSource(t, d, opts)
	lc, _ := acquire(t, c)
	if lc.FirstNode != la.FirstNode || lc.Start != la.End+1 {
		t.Errorf("took %+v, want the crashed range after %d", lc, la.End)
	}
}

// A clock behind a block's record is refused that block: with no other
// block free, Acquire fails with ErrClockBehind; with another free block,
// it takes that one.
func TestClockBehindRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, last := range []int64{63, 127} {
		d := openTest(t)
		clk := newClock(t0)
		opts := clk.on(Options{Nodes: 64, LastNode: last, Horizon: 5 * time.Second})
		a := newSource(t, d, opts)
		la, _ := acquire(t, a)
		if err := a.Release(ctx, la, la.Start); err != nil {
			t.Fatal(err)
		}
		clk.add(-2) // the machine restarts with its clock stepped back
		l, err := a.Acquire(ctx)
		switch {
		case last == 63 && !errors.Is(err, ErrClockBehind):
			t.Fatalf("one block, the clock stepped back: %v, %v; want ErrClockBehind", l, err)
		case last == 127 && (err != nil || l.FirstNode != 64):
			t.Fatalf("two blocks, the clock stepped back: %v, %v; want the block it never used", l, err)
		case err == nil:
			if err := a.Release(ctx, l, 0); err != nil {
				t.Fatal(err)
			}
		}
		clk.add(2)
		if l, err := a.Acquire(ctx); err != nil || l.FirstNode != 0 {
			t.Fatalf("Acquire once the clock caught up: %v, %v; want block 0 again", l, err)
		}
	}
}

// A holder whose clock jumped an hour ahead costs only the blocks it
// touched: processes with the true clock take other blocks at once, and
// only a process for which every free block carries such a record is
// refused (ErrClockBehind). (With the directory-wide check of earlier
// versions, every process on the directory was refused for the hour.)
func TestClockAheadCostsOnlyItsBlocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := openTest(t)
	ahead := newClock(time.Now().Unix() + 3600)
	opts := Options{Nodes: 128, LastNode: 511}
	// One holder an hour ahead claims blocks and is killed, another
	// claims blocks and exits cleanly after issuing up to its end.
	a1 := newSource(t, d, ahead.on(opts))
	l1, _ := acquire(t, a1)
	kill(t, a1)
	a2 := newSource(t, d, ahead.on(opts))
	l2, _ := acquire(t, a2)
	if err := a2.Release(ctx, l2, l2.End); err != nil {
		t.Fatal(err)
	}
	touched := map[int64]bool{l1.FirstNode: true, l2.FirstNode: true}
	var held []*Source
	for i := range 2 {
		b := newSource(t, d, opts)
		now := time.Now().Unix()
		lb, took := acquire(t, b)
		if touched[lb.FirstNode] || lb.Start > now {
			t.Fatalf("process %d on the true clock: lease %+v after %v; want untouched blocks at once, from second %d of the call or earlier; the clock ahead used %v and %v",
				i, lb, took, now, l1, l2)
		}
		t.Logf("process %d on the true clock: %v at once (%v)", i, lb, took.Round(time.Millisecond))
		held = append(held, b)
	}
	// The free blocks now all carry the hour-ahead clock's records.
	c := newSource(t, d, opts)
	if l, err := c.Acquire(ctx); !errors.Is(err, ErrClockBehind) {
		t.Fatalf("with only the clock ahead's blocks free: %v, %v; want ErrClockBehind", l, err)
	}
	runtime.KeepAlive(held) // their lock files stay open
	// A clock past those records uses them, after their seconds.
	later := newClock(time.Now().Unix() + 3600 + 60)
	e := newSource(t, d, later.on(opts))
	le, _ := acquire(t, e)
	if !touched[le.FirstNode] || le.Start > later.sec() {
		t.Errorf("a clock past the records: %v; want one of the blocks the clock ahead used", le)
	}
	if le.FirstNode == l2.FirstNode && le.Start != l2.End+1 || le.FirstNode == l1.FirstNode && le.Start != l1.End+1 {
		t.Errorf("lease %v does not start right after the record (%v, %v)", le, l1, l2)
	}
}

// Removing a lock file under a holder loses its lease rather than letting
// a second process lock a new file for the same nodes.
func TestTamperedLockFileLosesLease(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	ctx := context.Background()
	clk := newClock(t0)
	s := newSource(t, d, clk.on(Options{Nodes: 128, LastNode: 127}))
	l, _ := acquire(t, s)
	if err := os.Remove(d.blockPath(64)); err != nil {
		t.Fatal(err)
	}
	clk.add(1)
	if _, err := s.Renew(ctx, l); !errors.Is(err, randflake.ErrLeaseLost) {
		t.Fatalf("Renew: %v, want ErrLeaseLost", err)
	}
	if s.store.current() != nil {
		t.Error("the lost claim still holds its lock files")
	}
	clk.add(20)
	if l2, _ := acquire(t, s); l2.Start <= l.End {
		t.Errorf("after the loss: %v, want a start after the lost lease's promise %d", l2, l.End)
	}
}

// Thousands of claim/release cycles from several goroutines leave no
// claims behind: every range can be claimed at the end.
func TestClaimReleaseCyclesDoNotLeak(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	ctx := context.Background()
	opts := Options{Nodes: 64, LastNode: 127}
	const workers = 4
	cycles := 300
	if testing.Short() {
		cycles = 60 // each cycle writes and syncs the state: seconds
	}
	var wg sync.WaitGroup
	var busy, behind atomic.Int64
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newSource(t, d, opts)
			for i := 0; i < cycles; i++ {
				l, err := s.Acquire(ctx)
				if errors.Is(err, ErrNoFreeNodes) || errors.Is(err, ErrClockBehind) {
					// ErrClockBehind: the engine reads its clock before
					// waiting for the directory's lock, so a worker that
					// read it just before a second began finds the block
					// another one released in that second "ahead" of it.
					if errors.Is(err, ErrClockBehind) {
						behind.Add(1)
					}
					busy.Add(1)
					i--
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(i%3) * time.Millisecond) // hold it a moment
				if err := s.Release(ctx, l, 0); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var held []randflake.Lease
	for range 2 {
		s := newSource(t, d, opts)
		l, err := s.Acquire(ctx)
		if err != nil {
			t.Fatalf("after %d cycles: %v", workers*cycles, err)
		}
		held = append(held, l)
	}
	if held[0].FirstNode == held[1].FirstNode {
		t.Errorf("overlapping claims %v", held)
	}
	entries, _ := os.ReadDir(filepath.Join(d.path, "blocks"))
	if len(entries) != 2 {
		t.Errorf("%d lock files, want 2", len(entries))
	}
	t.Logf("%d cycles, %d refusals (%d of them ErrClockBehind) while 4 workers shared 2 ranges", workers*cycles, busy.Load(), behind.Load())
}

// NewLeased on a state directory: a restarted generator starts after its
// predecessor's last second and its IDs never collide with them.
func TestNewLeasedRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state")
	ctx := context.Background()
	opts := Options{Nodes: 64, LastNode: 63, Horizon: 2 * time.Second, Logger: quiet}
	seen := map[int64]bool{}
	var prevMax int64
	for run := range 2 {
		g, err := NewLeased(ctx, path, opts)
		if err != nil {
			t.Fatal(err)
		}
		l := g.Lease()
		if run > 0 && l.Start != prevMax+1 {
			t.Errorf("run %d starts at %d, want %d", run, l.Start, prevMax+1)
		}
		var minTS, maxTS int64
		batch := make([]int64, 500)
		// A machine that starves the renewals lets the 2 s lease end
		// before it is renewed: generation stops until it is (the bound,
		// stretched by the measured slowdown, ends a wait for a renewal
		// that never comes).
		slow := slowdown.Start()
		var stopped time.Time // when generation stopped, if it did
		for i := 0; i < 20; {
			n, err := g.GenerateBatch(batch)
			switch {
			case err == nil:
				i, stopped = i+1, time.Time{}
			case !errors.Is(err, randflake.ErrInvalidLease):
				t.Fatal(err)
			case stopped.IsZero():
				stopped = time.Now()
			case time.Since(stopped) > slow.Stretch(10*time.Second):
				t.Fatalf("run %d: no IDs for %v (%s): %v", run, time.Since(stopped).Round(time.Millisecond), slow, err)
			default:
				time.Sleep(10 * time.Millisecond)
			}
			for _, id := range batch[:n] {
				if seen[id] {
					t.Fatalf("duplicate ID %d", id)
				}
				seen[id] = true
				ts, node, _, _ := g.Inspect(id)
				if node < 0 || node > 63 {
					t.Fatalf("node %d", node)
				}
				if minTS == 0 || ts < minTS {
					minTS = ts
				}
				maxTS = max(maxTS, ts)
			}
		}
		if minTS <= prevMax {
			t.Errorf("run %d issued second %d, not after the previous run's %d", run, minTS, prevMax)
		}
		if err := g.Close(ctx); err != nil {
			t.Fatal(err)
		}
		prevMax = maxTS
	}
}
