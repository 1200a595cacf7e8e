//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package statedir

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake"
)

func openTest(t *testing.T) *Dir {
	t.Helper()
	d, err := Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	return d
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

// fixedClock is a settable clock for Source.now.
type fixedClock struct{ sec atomic.Int64 }

func (c *fixedClock) now() time.Time { return time.Unix(c.sec.Load(), 0) }

// sleep moves the clock on by d, rounded up to whole seconds.
func (c *fixedClock) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.sec.Add(int64((d + time.Second - 1) / time.Second))
	return nil
}

// use makes s run on the clock.
func (c *fixedClock) use(s *Source) *Source {
	s.now, s.sleep = c.now, c.sleep
	return s
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
	raw := []byte("0123456789abcdef")
	if s, err := LoadSecret(write("raw", raw, 0o600)); err != nil || string(s) != string(raw) {
		t.Errorf("raw secret: %q, %v", s, err)
	}
	if s, err := LoadSecret(write("hex", []byte("  "+hex.EncodeToString(raw)+"\n"), 0o400)); err != nil || string(s) != string(raw) {
		t.Errorf("hex secret: %q, %v", s, err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660, 0o644} {
		_, err := LoadSecret(write("open", []byte(hex.EncodeToString(raw)), mode))
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
	s = newSource(t, d, Options{Nodes: 65, Horizon: 1500 * time.Millisecond, FirstNode: 128, LastNode: 383})
	if s.nodes != 128 || s.horizon != 2 {
		t.Errorf("rounding: nodes %d, horizon %d", s.nodes, s.horizon)
	}
	for _, o := range []Options{
		{FirstNode: 1, LastNode: 63},
		{FirstNode: 0, LastNode: 64},
		{FirstNode: 64, LastNode: 63},
		{LastNode: randflake.MaxNode + 64},
		{Nodes: -1},
		{Nodes: 128, FirstNode: 0, LastNode: 63},
		{Horizon: -time.Second},
	} {
		if _, err := d.Source(o); err == nil {
			t.Errorf("%+v accepted", o)
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
		l, err := s.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Nodes() != 64 || l.End < l.Start || l.End < time.Now().Unix()+1 {
			t.Errorf("lease %+v", l)
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

// A claimant taking over a crashed process's nodes starts after its
// promise; one taking over released nodes starts after their last second.
func TestTakeoverStartsAfterRecord(t *testing.T) {
	d := openTest(t)
	ctx := context.Background()
	clk := &fixedClock{}
	clk.sec.Store(1_750_000_000)
	opts := Options{Nodes: 64, LastNode: 63, Horizon: 5 * time.Second}
	a := clk.use(newSource(t, d, opts))
	la, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if la.Start != randflake.Epoch+1 || la.End != 1_750_000_005 {
		t.Errorf("first lease %+v", la)
	}
	clk.sec.Add(3)
	if la, err = a.Renew(ctx, la); err != nil || la.End != 1_750_000_008 {
		t.Fatalf("Renew: %+v, %v", la, err)
	}
	// Crash: the kernel drops the locks, nothing is written.
	closeAll(a.claim.files)
	b := clk.use(newSource(t, d, opts))
	lb, err := b.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Start != la.End+1 || lb.End < lb.Start {
		t.Errorf("after a crash: %+v, want a start at %d", lb, la.End+1)
	}
	clk.sec.Add(10)
	if err := b.Release(ctx, lb, lb.Start+4); err != nil {
		t.Fatal(err)
	}
	c := clk.use(newSource(t, d, opts))
	lc, err := c.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lc.Start != lb.Start+5 {
		t.Errorf("after a release: start %d, want %d", lc.Start, lb.Start+5)
	}
	// Releasing without having issued keeps the predecessor's bound.
	if err := c.Release(ctx, lc, 0); err != nil {
		t.Fatal(err)
	}
	if lc2, err := c.Acquire(ctx); err != nil || lc2.Start != lc.Start {
		t.Errorf("after an unused lease: %+v, %v, want start %d", lc2, err, lc.Start)
	}
}

// Free nodes whose record has passed are preferred to a crashed process's
// nodes still under its promise.
func TestPrefersNodesPastTheirRecord(t *testing.T) {
	d := openTest(t)
	ctx := context.Background()
	clk := &fixedClock{}
	clk.sec.Store(1_750_000_000)
	opts := Options{Nodes: 64, LastNode: 127, Horizon: 10 * time.Second}
	a := clk.use(newSource(t, d, opts))
	la, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	closeAll(a.claim.files) // crash
	clk.sec.Add(2)
	b := clk.use(newSource(t, d, opts))
	lb, err := b.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lb.FirstNode == la.FirstNode || lb.Start > clk.sec.Load() {
		t.Errorf("took %+v, want the other, unused range (crashed: %+v)", lb, la)
	}
	c := clk.use(newSource(t, d, opts))
	lc, err := c.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lc.FirstNode != la.FirstNode || lc.Start != la.End+1 {
		t.Errorf("took %+v, want the crashed range after %d", lc, la.End)
	}
}

// A clock behind the state's newest record is refused.
func TestClockBehindRefused(t *testing.T) {
	d := openTest(t)
	ctx := context.Background()
	clk := &fixedClock{}
	clk.sec.Store(1_750_000_000)
	opts := Options{Nodes: 64, LastNode: 127, Horizon: 5 * time.Second}
	a := clk.use(newSource(t, d, opts))
	la, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, la, 1_750_000_000); err != nil {
		t.Fatal(err)
	}
	clk.sec.Add(-2) // the machine restarts with its clock stepped back
	if _, err := a.Acquire(ctx); !errors.Is(err, ErrClockBehind) {
		t.Fatalf("Acquire with the clock stepped back: %v, want ErrClockBehind", err)
	}
	clk.sec.Add(2)
	if _, err := a.Acquire(ctx); err != nil {
		t.Fatalf("Acquire once the clock caught up: %v", err)
	}
}

// Removing a lock file under a holder loses its lease rather than letting
// a second process lock a new file for the same nodes.
func TestTamperedLockFileLosesLease(t *testing.T) {
	d := openTest(t)
	ctx := context.Background()
	s := newSource(t, d, Options{Nodes: 128, LastNode: 127})
	l, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(d.blockPath(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Renew(ctx, l); !errors.Is(err, randflake.ErrLeaseLost) {
		t.Fatalf("Renew: %v, want ErrLeaseLost", err)
	}
	if _, err := s.Acquire(ctx); err != nil {
		t.Fatalf("Acquire after the loss: %v", err)
	}
}

// Thousands of claim/release cycles from several goroutines leave no
// claims behind: every range can be claimed at the end.
func TestClaimReleaseCyclesDoNotLeak(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	ctx := context.Background()
	opts := Options{Nodes: 64, LastNode: 127}
	const workers, cycles = 4, 300
	var wg sync.WaitGroup
	var busy atomic.Int64
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newSource(t, d, opts)
			for i := 0; i < cycles; i++ {
				l, err := s.Acquire(ctx)
				if errors.Is(err, ErrNoFreeNodes) {
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
	t.Logf("%d cycles, %d refusals while 4 workers shared 2 ranges", workers*cycles, busy.Load())
}

// NewLeased on a state directory: a restarted generator starts after its
// predecessor's last second and its IDs never collide with them.
func TestNewLeasedRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state")
	ctx := context.Background()
	opts := Options{Nodes: 64, LastNode: 63, Horizon: 2 * time.Second}
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
		for range 20 {
			n, err := g.GenerateBatch(batch)
			if err != nil {
				t.Fatal(err)
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
