//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package statedir

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake"
)

const t0 = 1_750_000_000

// used leaves a state directory as a crashed holder would: it claimed and
// renewed blocks 0 and 1, and died without releasing them. It returns the
// directory's path and the holder's promise.
func used(t *testing.T) (string, int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state")
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fixedClock{}
	clk.sec.Store(t0)
	s := clk.use(newSource(t, d, Options{Nodes: 128, LastNode: 1023}))
	l, err := s.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	clk.sec.Add(3)
	if l, err = s.Renew(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	closeAll(s.claim.files) // SIGKILL: the kernel drops the locks, nothing is written
	return path, l.End
}

// reopen opens path afresh, as a restarted process does, on a clock at now.
func reopen(t *testing.T, path string, now int64, opts Options) (*Source, *fixedClock) {
	t.Helper()
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fixedClock{}
	clk.sec.Store(now)
	return clk.use(newSource(t, d, opts)), clk
}

func sumLine(body string) string {
	sum := sha256.Sum256([]byte(body))
	return "sum " + hex.EncodeToString(sum[:]) + "\n"
}

// Every way of losing or damaging the state makes the next holder wait out
// the longest promise instead of issuing at once on the dead process's
// node IDs.
func TestLostHistoryIsWaitedOut(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, state string)
	}{
		{"state file deleted", func(t *testing.T, state string) {
			if err := os.Remove(state); err != nil {
				t.Fatal(err)
			}
		}},
		{"only the header line left", func(t *testing.T, state string) {
			os.WriteFile(state, []byte(stateHeader+"\n"), 0o600)
		}},
		{"cut inside the first record", func(t *testing.T, state string) {
			data, _ := os.ReadFile(state)
			i := strings.Index(string(data), "\n0 ")
			os.WriteFile(state, data[:i+3], 0o600)
		}},
		{"cut at a line boundary, checksum gone", func(t *testing.T, state string) {
			data, _ := os.ReadFile(state)
			i := strings.Index(string(data), "\nsum ")
			os.WriteFile(state, data[:i+1], 0o600)
		}},
		{"record edited", func(t *testing.T, state string) {
			data, _ := os.ReadFile(state)
			os.WriteFile(state, []byte(strings.Replace(string(data), "\n0 ", "\n5 ", 1)), 0o600)
		}},
		{"repeated records appended", func(t *testing.T, state string) {
			f, _ := os.OpenFile(state, os.O_APPEND|os.O_WRONLY, 0)
			fmt.Fprintf(f, "0 %d %d\n1 %d %d\n", t0, t0-5, t0, t0-5)
			f.Close()
		}},
		{"an older version's file, no checksum", func(t *testing.T, state string) {
			os.WriteFile(state, []byte(stateHeaderOld+"\n"), 0o600)
		}},
		{"emptied", func(t *testing.T, state string) {
			os.WriteFile(state, nil, 0o600)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path, promise := used(t)
			c.damage(t, filepath.Join(path, "state"))
			now := int64(t0 + 4)
			s, _ := reopen(t, path, now, Options{Nodes: 128, LastNode: 1023})
			var waited time.Duration
			sleep := s.sleep
			s.sleep = func(ctx context.Context, d time.Duration) error { waited += d; return sleep(ctx, d) }
			l, err := s.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			want := now + int64(DefaultHorizon/time.Second) + 1
			if l.Start < want || l.Start <= promise {
				t.Errorf("lease %v starts at %d, want no earlier than %d (now + horizon + 1; the dead holder promised %d)", l, l.Start, want, promise)
			}
			if l.FirstNode == 0 && waited == 0 {
				t.Errorf("took the dead holder's node IDs without waiting")
			}
			if waited < 10*time.Second {
				t.Errorf("waited %v, want the horizon", waited)
			}
			// What it wrote is a valid file later starts accept.
			data, _ := os.ReadFile(filepath.Join(path, "state"))
			if _, err := parseState(data); err != nil {
				t.Errorf("rewritten state refused: %v\n%s", err, data)
			}
		})
	}
}

// With the history intact, the dead holder's node IDs are avoided and no
// one waits; and a brand-new directory needs no wait.
func TestCompleteHistoryNeedsNoWait(t *testing.T) {
	path, promise := used(t)
	s, _ := reopen(t, path, t0+4, Options{Nodes: 128, LastNode: 1023})
	s.sleep = func(ctx context.Context, d time.Duration) error {
		t.Errorf("waited %v with an intact state", d)
		return nil
	}
	l, err := s.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if l.FirstNode == 0 || l.Start > t0+4 {
		t.Errorf("lease %v: want other node IDs than the dead holder's (promise %d), at once", l, promise)
	}

	d := openTest(t)
	clk := &fixedClock{}
	clk.sec.Store(t0)
	fresh := clk.use(newSource(t, d, Options{Nodes: 64}))
	fresh.sleep = s.sleep
	if l, err := fresh.Acquire(context.Background()); err != nil || l.Start > t0 {
		t.Errorf("brand-new directory: %v, %v; want a lease from now", l, err)
	}
}

// A secret from outside the directory may have been used before the
// directory existed: a container restarted on an empty directory with its
// fleet secret waits, and so does any process that joins it before the
// first one is done waiting.
func TestExternalSecretWaitsInNewDirectory(t *testing.T) {
	d := openTest(t)
	clk := &fixedClock{}
	clk.sec.Store(t0)
	opts := Options{Nodes: 64, LastNode: 127, ExternalSecret: true}
	a := clk.use(newSource(t, d, opts))
	// A second process joins while the first waits.
	var lb randflake.Lease
	var errB error
	a.sleep = func(ctx context.Context, dur time.Duration) error {
		b, _ := reopen(t, d.path, t0+1, Options{Nodes: 64, LastNode: 127})
		lb, errB = b.Acquire(context.Background())
		return clk.sleep(ctx, dur)
	}
	l, err := a.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(t0 + 11); l.Start < want {
		t.Errorf("external secret, empty directory: lease starts at %d, want >= %d", l.Start, want)
	}
	if errB != nil || lb.Start < t0+11 || lb.FirstNode == l.FirstNode {
		t.Errorf("second process: %v, %v; want other node IDs from >= %d", lb, errB, t0+11)
	}
}

// Seconds outside the lifetime of Randflake IDs: an edited file fails its
// checksum and is waited out; a forged one with a valid checksum is
// refused; neither is issued on at once, and no file is rewritten into a
// state later starts refuse.
func TestOutOfRangeSecondsRefused(t *testing.T) {
	for _, until := range []string{"9223372036854775807", "9223372036854775806", "-1", "0", fmt.Sprint(int64(randflake.MaxTimestamp) + 1)} {
		body := stateHeader + "\nhistory own\nunrecorded " + fmt.Sprint(int64(randflake.Epoch)) + "\n0 " + fmt.Sprint(t0) + " " + until + "\n"
		t.Run("forged "+until, func(t *testing.T) {
			d := openTest(t)
			os.WriteFile(d.statePath(), []byte(body+sumLine(body)), 0o600)
			clk := &fixedClock{}
			clk.sec.Store(t0 + 1)
			s := clk.use(newSource(t, d, Options{Nodes: 64, LastNode: 63}))
			if l, err := s.Acquire(context.Background()); !errors.Is(err, ErrCorruptState) {
				t.Errorf("Acquire: %v, %v; want ErrCorruptState", l, err)
			}
		})
		t.Run("edited "+until, func(t *testing.T) {
			d := openTest(t)
			os.WriteFile(d.statePath(), []byte(body+"sum 00\n"), 0o600)
			clk := &fixedClock{}
			clk.sec.Store(t0 + 1)
			s := clk.use(newSource(t, d, Options{Nodes: 64, LastNode: 63}))
			l, err := s.Acquire(context.Background())
			if err != nil || l.Start < t0+12 || l.Start > randflake.MaxTimestamp {
				t.Errorf("Acquire: %v, %v; want a lease after the horizon", l, err)
			}
			data, _ := os.ReadFile(d.statePath())
			if _, err := parseState(data); err != nil {
				t.Errorf("rewritten state refused: %v", err)
			}
		})
	}
	// A block used up to the last second of the lifetime is never handed
	// out again, and the directory says so.
	body := stateHeader + "\nhistory own\nunrecorded " + fmt.Sprint(int64(randflake.Epoch)) + "\n0 " + fmt.Sprint(t0) + " " + fmt.Sprint(int64(randflake.MaxTimestamp)) + "\n"
	d := openTest(t)
	os.WriteFile(d.statePath(), []byte(body+sumLine(body)), 0o600)
	clk := &fixedClock{}
	clk.sec.Store(t0 + 1)
	s := clk.use(newSource(t, d, Options{Nodes: 64, LastNode: 127}))
	if l, err := s.Acquire(context.Background()); err != nil || l.FirstNode != 64 {
		t.Errorf("with block 0 used up: %v, %v; want block 1", l, err)
	}
	s2 := clk.use(newSource(t, d, Options{Nodes: 64, LastNode: 127}))
	if _, err := s2.Acquire(context.Background()); !errors.Is(err, ErrNoFreeNodes) {
		t.Errorf("with block 0 used up and block 1 held: %v, want ErrNoFreeNodes", err)
	}
	// A clock outside the lifetime is refused.
	clk.sec.Store(randflake.Epoch - 1)
	s3 := clk.use(newSource(t, openTest(t), Options{Nodes: 64}))
	if _, err := s3.Acquire(context.Background()); err == nil || !strings.Contains(err.Error(), "lifetime") {
		t.Errorf("clock before the epoch: %v", err)
	}
}

// Waiting costs nothing: a process stopped (or restarted) while it waits
// for its lease to start has extended no promise, so the next one starts
// at the same second, not Horizon later.
func TestWaitExtendsNoPromise(t *testing.T) {
	path, promise := used(t)
	os.Remove(filepath.Join(path, "state"))
	var starts []int64
	for i := 0; i < 3; i++ {
		s, _ := reopen(t, path, t0+4, Options{Nodes: 1024, LastNode: 1023})
		ctx, cancel := context.WithCancel(context.Background())
		s.sleep = func(context.Context, time.Duration) error { cancel(); return ctx.Err() } // SIGTERM during the wait
		if _, err := s.Acquire(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("restart %d: Acquire: %v, want the cancellation", i, err)
		}
		st, _ := parseState(must(os.ReadFile(filepath.Join(path, "state"))))
		starts = append(starts, st.until(0)+1)
	}
	s, _ := reopen(t, path, t0+4, Options{Nodes: 1024, LastNode: 1023})
	l, err := s.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range starts {
		if st != l.Start {
			t.Errorf("restart %d during the wait moved the start to %d; the final lease starts at %d", i, st, l.Start)
		}
	}
	if l.Start <= promise {
		t.Errorf("lease %v starts within the dead holder's promise %d", l, promise)
	}
	// The cancelled waits held and then freed the blocks: the final claim
	// got all of them.
	if l.FirstNode != 0 || l.LastNode != 1023 {
		t.Errorf("lease %v, want all node IDs", l)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A brand-new directory gets its state with its secret: processes that
// open it at once, on its own secret, never wait. A process on a secret
// from outside waits once; after that the state says so and the others on
// that secret do not.
func TestNewDirectoryHistory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	noWait := func(ctx context.Context, d time.Duration) error {
		t.Errorf("waited %v", d)
		return nil
	}
	for i := 0; i < 3; i++ {
		s, _ := reopen(t, path, t0, Options{Nodes: 64, LastNode: 1023})
		s.sleep = noWait
		if l, err := s.Acquire(context.Background()); err != nil || l.Start > t0 {
			t.Errorf("process %d on the directory's own secret: %v, %v; want a lease from now", i, l, err)
		}
	}
	ext, clk := reopen(t, path, t0, Options{Nodes: 64, LastNode: 1023, ExternalSecret: true})
	l, err := ext.Acquire(context.Background())
	if err != nil || l.Start < t0+11 {
		t.Errorf("first process on an outside secret: %v, %v; want a wait", l, err)
	}
	ext2, _ := reopen(t, path, clk.sec.Load(), Options{Nodes: 64, LastNode: 1023, ExternalSecret: true})
	ext2.sleep = noWait
	if l, err := ext2.Acquire(context.Background()); err != nil {
		t.Errorf("second process on the outside secret: %v, %v; want no wait", l, err)
	}
}
