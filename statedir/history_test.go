//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package statedir

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/internal/slowdown"
)

// unknownWait is what unknown history costs: DefaultHorizon, and the lease
// starts the second after.
const unknownWait = int64(DefaultHorizon/time.Second) + 1

// used leaves a state directory as a crashed holder would: it claimed and
// renewed blocks 0 and 1, and died without releasing them. It returns the
// directory's path, the holder's promise, the state file as it was after
// the claim, before the renewal (an older copy), and the second a restart's
// clock starts from.
func used(t *testing.T) (path string, promise int64, older []byte, restart int64) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "state")
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock(t0)
	s := newSource(t, d, clk.on(Options{Nodes: 128, LastNode: 1023}))
	l, _ := acquire(t, s)
	if l.FirstNode != 0 {
		t.Fatalf("first lease %v, want node IDs from 0", l)
	}
	older = must(os.ReadFile(d.statePath()))
	clk.add(3)
	if l, err = s.Renew(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	kill(t, s) // SIGKILL: the kernel drops the locks, nothing is written
	// A restart's clock is not behind the dead holder's: t0+4, or later
	// if the holder's clock (real time from t0, plus 3 s) got further
	// before the kill, as on a loaded machine.
	return path, l.End, older, max(t0+4, clk.sec())
}

// reopen opens path afresh, as a restarted process does, on a clock
// running from now.
func reopen(t *testing.T, path string, now int64, opts Options) (*Source, *testClock) {
	t.Helper()
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock(now)
	return newSource(t, d, clk.on(opts)), clk
}

// withSum replaces the checksum of a state file's text by a valid one for
// what comes before it (or adds one), as someone who knows the format
// would.
func withSum(text string) []byte {
	if i := strings.LastIndex(text, "\nsum "); i >= 0 {
		text = text[:i+1]
	}
	sum := sha256.Sum256([]byte(text))
	return []byte(text + "sum " + hex.EncodeToString(sum[:]) + "\n")
}

// editLine applies edit to the first line starting with prefix.
func editLine(t *testing.T, text, prefix string, edit func(string) string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			lines[i] = edit(l)
			return strings.Join(lines, "\n")
		}
	}
	t.Fatalf("no line %q in\n%s", prefix, text)
	return ""
}

var untilField = regexp.MustCompile(`^(record 0 rfb1 0 63 )(\d+)`)

// lowerUntil moves the first block's recorded second back by an hour.
func lowerUntil(l string) string {
	m := untilField.FindStringSubmatch(l)
	if m == nil {
		return l + "?"
	}
	u, _ := strconv.ParseInt(m[2], 10, 64)
	return m[1] + strconv.FormatInt(u-3600, 10) + l[len(m[0]):]
}

// Every way of losing, damaging or rolling back the state makes the next
// holder wait out the longest promise instead of issuing at once on the
// dead process's node IDs.
func TestLostHistoryIsWaitedOut(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the 10 s horizon of unknown history: not in -short")
	}
	t.Parallel()
	cases := []struct {
		name    string
		damage  func(t *testing.T, dir string, older []byte)
		corrupt bool // the damaged file is kept as state.corrupt
	}{
		{"state file deleted", func(t *testing.T, dir string, _ []byte) {
			must(0, os.Remove(filepath.Join(dir, "state")))
		}, false},
		{"state and blocks/ deleted", func(t *testing.T, dir string, _ []byte) {
			must(0, os.Remove(filepath.Join(dir, "state")))
			must(0, os.RemoveAll(filepath.Join(dir, "blocks")))
		}, false},
		{"only the header line left", func(t *testing.T, dir string, _ []byte) {
			writeState(t, dir, []byte(stateHeader+"\n"))
		}, true},
		{"cut inside the first record", func(t *testing.T, dir string, _ []byte) {
			data := readState(t, dir)
			i := strings.Index(string(data), "\nrecord 0 ")
			writeState(t, dir, data[:i+15])
		}, true},
		{"cut at a line boundary, checksum gone", func(t *testing.T, dir string, _ []byte) {
			data := readState(t, dir)
			i := strings.Index(string(data), "\nsum ")
			writeState(t, dir, data[:i+1])
		}, true},
		{"record edited", func(t *testing.T, dir string, _ []byte) {
			writeState(t, dir, []byte(editLine(t, string(readState(t, dir)), "record 0 ", lowerUntil)))
		}, true},
		{"record edited, checksum made valid", func(t *testing.T, dir string, _ []byte) {
			writeState(t, dir, withSum(editLine(t, string(readState(t, dir)), "record 0 ", lowerUntil)))
		}, false},
		{"record deleted, checksum made valid", func(t *testing.T, dir string, _ []byte) {
			writeState(t, dir, withSum(editLine(t, string(readState(t, dir)), "record 0 ", func(string) string { return "# gone" })))
		}, false},
		{"marker deleted, checksum made valid", func(t *testing.T, dir string, _ []byte) {
			writeState(t, dir, withSum(editLine(t, string(readState(t, dir)), "marker ", func(string) string { return "# gone" })))
		}, false},
		{"marker edited, checksum made valid", func(t *testing.T, dir string, _ []byte) {
			writeState(t, dir, withSum(editLine(t, string(readState(t, dir)), "marker ", func(l string) string {
				return strings.Replace(l, "unknown=", "unknown=1", 1)
			})))
		}, false},
		{"repeated records appended", func(t *testing.T, dir string, _ []byte) {
			data := string(readState(t, dir))
			line := regexp.MustCompile(`(?m)^record 0 .*\n`).FindString(data)
			writeState(t, dir, []byte(data+line+line))
		}, true},
		{"an older version's file", func(t *testing.T, dir string, _ []byte) {
			body := "randflake statedir 2\nhistory own\nunrecorded " + fmt.Sprint(int64(randflake.Epoch)) + "\n"
			sum := sha256.Sum256([]byte(body))
			writeState(t, dir, []byte(body+"sum "+hex.EncodeToString(sum[:])+"\n"))
		}, true},
		{"the first version's file", func(t *testing.T, dir string, _ []byte) {
			writeState(t, dir, []byte("randflake statedir 1\n0 1750000000 1750000005\n"))
		}, true},
		{"emptied", func(t *testing.T, dir string, _ []byte) {
			writeState(t, dir, nil)
		}, true},
		{"an older state file put back alone", func(t *testing.T, dir string, older []byte) {
			writeState(t, dir, older)
		}, false},
		{"an older state file put back, blocks/ deleted", func(t *testing.T, dir string, older []byte) {
			writeState(t, dir, older)
			must(0, os.RemoveAll(filepath.Join(dir, "blocks")))
		}, false},
		{"crash between the generation and the state write", func(t *testing.T, dir string, _ []byte) {
			f := must(os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR, 0))
			defer f.Close()
			g := must(readGeneration(f))
			must(0, writeGeneration(f, g+1))
		}, false},
		{"lock file emptied", func(t *testing.T, dir string, _ []byte) {
			must(0, os.Truncate(filepath.Join(dir, "lock"), 0))
		}, false},
		{"lock file unreadable", func(t *testing.T, dir string, _ []byte) {
			must(0, os.WriteFile(filepath.Join(dir, "lock"), []byte("gen x\n"), 0o600))
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path, promise, older, now := used(t)
			c.damage(t, path, older)
			s, clk := reopen(t, path, now, Options{Nodes: 128, LastNode: 1023})
			l, took := acquire(t, s)
			if l.Start < now+unknownWait || l.Start <= promise {
				t.Errorf("lease %v starts at %d, want no earlier than %d (now + horizon + 1; the dead holder promised %d)", l, l.Start, now+unknownWait, promise)
			}
			// The clock ran in real time from the restart at second
			// now: Acquire returned no earlier than its lease's start,
			// the horizon later.
			if got := clk.sec(); got < l.Start {
				t.Errorf("Acquire returned at second %d after waiting %v, before its lease's start %d", got, took, l.Start)
			}
			if ran := clk.running(); ran < time.Duration(unknownWait)*time.Second {
				t.Errorf("Acquire returned %v after the restart, having waited %v; want the horizon (%ds)", ran, took, unknownWait)
			}
			// What it wrote is a valid file later starts accept.
			data := readState(t, path)
			if _, err := parseState(data); err != nil {
				t.Errorf("rewritten state refused: %v\n%s", err, data)
			}
			_, err := os.Stat(filepath.Join(path, "state.corrupt"))
			if c.corrupt && err != nil {
				t.Errorf("no copy of the damaged file: %v", err)
			}
			// Once waited out, the history is known again: the next
			// process does not wait.
			s2, clk2 := reopen(t, path, clk.sec(), Options{Nodes: 128, LastNode: 1023})
			from := clk2.sec()
			l2, took2 := acquire(t, s2)
			if l2.Start > from {
				t.Errorf("after the wait, the next process, at second %d, got %v after %v; want a lease from then or earlier, at once", from, l2, took2)
			}
			runtime.KeepAlive(s) // the first process still holds its blocks
			t.Logf("waited %v", took.Round(100*time.Millisecond))
		})
	}
}

func readState(t *testing.T, dir string) []byte {
	t.Helper()
	return must(os.ReadFile(filepath.Join(dir, "state")))
}

func writeState(t *testing.T, dir string, data []byte) {
	t.Helper()
	must(0, os.WriteFile(filepath.Join(dir, "state"), data, 0o600))
}

// With the history intact, the dead holder's node IDs are avoided and no
// one waits; and a brand-new directory needs no wait.
func TestCompleteHistoryNeedsNoWait(t *testing.T) {
	t.Parallel()
	path, promise, _, restart := used(t)
	s, clk := reopen(t, path, restart, Options{Nodes: 128, LastNode: 1023})
	from := clk.sec()
	l, took := acquire(t, s)
	if l.FirstNode == 0 || l.Start > from {
		t.Errorf("lease %v after %v, called at second %d: want other node IDs than the dead holder's (promise %d), at once", l, took, from, promise)
	}

	d := openTest(t)
	clk = newClock(t0)
	fresh := newSource(t, d, clk.on(Options{Nodes: 64}))
	from = clk.sec()
	if l, took := acquire(t, fresh); l.Start > from {
		t.Errorf("brand-new directory, called at second %d: %v after %v; want a lease from then or earlier, at once", from, l, took)
	}
}

// A secret from outside the directory may have been used before the
// directory existed: a container restarted on an empty directory with its
// fleet secret waits, and so does any process that joins it before the
// first one is done waiting.
func TestExternalSecretWaitsInNewDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the 10 s horizon of unknown history: not in -short")
	}
	t.Parallel()
	d := openTest(t)
	clk := newClock(t0)
	opts := Options{Nodes: 64, LastNode: 127, ExternalSecret: true}
	a := newSource(t, d, clk.on(opts))
	// A second process, on the directory's own secret, joins while the
	// first waits.
	type result struct {
		l   randflake.Lease
		err error
	}
	// It joins once the first holds its claim, which it does while it
	// waits (a fixed pause let it come first on a loaded machine), on a
	// clock not behind the first's.
	joined := make(chan result, 1)
	go func() {
		slow := slowdown.Start()
		for start := time.Now(); a.store.current() == nil; time.Sleep(10 * time.Millisecond) {
			if limit := slow.Stretch(10 * time.Second); time.Since(start) > limit {
				joined <- result{err: fmt.Errorf("the first process held no claim after %v (%s)", limit, slow)}
				return
			}
		}
		b, _ := reopen(t, d.path, clk.sec(), Options{Nodes: 64, LastNode: 127})
		ctx, cancel := context.WithTimeout(context.Background(), slowdown.Stretch(60*time.Second))
		defer cancel()
		l, err := b.Acquire(ctx)
		joined <- result{l, err}
	}()
	l, _ := acquire(t, a)
	if want := t0 + unknownWait; l.Start < want {
		t.Errorf("external secret, empty directory: lease starts at %d, want >= %d", l.Start, want)
	}
	b := <-joined
	if b.err != nil || b.l.Start < t0+unknownWait || b.l.FirstNode == l.FirstNode {
		t.Errorf("second process: %v, %v; want other node IDs from >= %d", b.l, b.err, t0+unknownWait)
	}
}

// A state file that passes its checksum but holds values this package
// never writes is refused at once with ErrCorruptState, naming the file,
// and left as it is.
func TestForgedStateRefused(t *testing.T) {
	t.Parallel()
	header := stateHeader + "\ngeneration 1\nhistory own\n"
	for name, body := range map[string]string{
		"negative generation":      stateHeader + "\ngeneration -1\nhistory own\n",
		"generation not a number":  stateHeader + "\ngeneration x\nhistory own\n",
		"generation overflowing":   stateHeader + "\ngeneration 9223372036854775808\nhistory own\n",
		"generation with a sign":   stateHeader + "\ngeneration +1\nhistory own\n",
		"no generation":            stateHeader + "\nhistory own\n",
		"no history":               stateHeader + "\ngeneration 1\n",
		"history of no one":        stateHeader + "\ngeneration 1\nhistory mine\n",
		"a record off its block":   header + "record 65 x\n",
		"a record past the nodes":  header + "record 131072 x\n",
		"a negative record":        header + "record -64 x\n",
		"a record twice":           header + "record 0 x\nrecord 0 y\n",
		"a marker twice":           header + "marker x\nmarker y\n",
		"a generation twice":       header + "generation 2\n",
		"an unknown line":          header + "unrecorded 1750000000\n",
		"fresh with a marker":      header + "fresh\nmarker x\n",
		"fresh with records":       header + "fresh\nrecord 0 x\n",
		"fresh with an argument":   header + "fresh yes\n",
		"a record without a value": header + "record 0\n",
	} {
		t.Run(name, func(t *testing.T) {
			d := openTest(t)
			data := withSum(body)
			writeState(t, d.path, data)
			clk := newClock(t0 + 1)
			s := newSource(t, d, clk.on(Options{Nodes: 64, LastNode: 63}))
			expectRefusal(t, name, d.statePath(), "impossible values", func() error {
				l, err := s.Acquire(context.Background())
				if err == nil {
					return fmt.Errorf("accepted: lease %v", l)
				}
				if !errors.Is(err, ErrCorruptState) {
					return fmt.Errorf("%w (not ErrCorruptState)", err)
				}
				return err
			})
			if got := readState(t, d.path); string(got) != string(data) {
				t.Errorf("the forged file was rewritten:\n%s", got)
			}
		})
	}
}

// A block used up to the last second of the lifetime is never handed out
// again; a clock outside the lifetime is refused.
func TestLifetimeBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := openTest(t)
	end := newClock(randflake.MaxTimestamp - 5)
	a := newSource(t, d, end.on(Options{Nodes: 64, LastNode: 127}))
	la, _ := acquire(t, a)
	if la.FirstNode != 0 || la.End != randflake.MaxTimestamp {
		t.Fatalf("lease %v, want block 0 to the last second", la)
	}
	if err := a.Release(ctx, la, la.End); err != nil {
		t.Fatal(err)
	}
	b := newSource(t, d, end.on(Options{Nodes: 64, LastNode: 127}))
	if l, _ := acquire(t, b); l.FirstNode != 64 {
		t.Errorf("with block 0 used up: %v; want block 1", l)
	}
	c := newSource(t, d, end.on(Options{Nodes: 64, LastNode: 127}))
	if _, err := c.Acquire(ctx); !errors.Is(err, ErrNoFreeNodes) {
		t.Errorf("with block 0 used up and block 1 held: %v, want ErrNoFreeNodes", err)
	}
	early := newClock(randflake.Epoch - 1)
	e := newSource(t, openTest(t), early.on(Options{Nodes: 64}))
	if _, err := e.Acquire(ctx); err == nil || !strings.Contains(err.Error(), "lifetime") {
		t.Errorf("clock before the epoch: %v", err)
	}
}

var unknownField = regexp.MustCompile(`(?m)^marker rfm1 .* unknown=(\d+) `)

// markedUnknown returns the second up to which the state's marker says the
// history is unknown (a field of the engine's marker, which is readable
// text).
func markedUnknown(t *testing.T, dir string) int64 {
	t.Helper()
	m := unknownField.FindSubmatch(readState(t, dir))
	if m == nil {
		t.Fatalf("no marker in\n%s", readState(t, dir))
	}
	return must(strconv.ParseInt(string(m[1]), 10, 64))
}

// Waiting costs nothing: a process stopped (or restarted) while it waits
// for its lease to start has extended no promise, so the next one starts
// at the same second, not Horizon later.
func TestWaitExtendsNoPromise(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the 10 s horizon of unknown history: not in -short")
	}
	t.Parallel()
	path, promise, _, restart := used(t)
	must(0, os.Remove(filepath.Join(path, "state")))
	var unknown []int64
	for i := 0; i < 3; i++ {
		if i > 0 {
			waitFree(t, path, fmt.Sprintf("after restart %d's cancelled wait", i-1))
		}
		s, _ := reopen(t, path, restart+int64(i), Options{Nodes: 1024, LastNode: 1023})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond) // SIGTERM during the wait
		_, err := s.Acquire(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("restart %d: Acquire: %v, want the cancellation", i, err)
		}
		unknown = append(unknown, markedUnknown(t, path))
	}
	waitFree(t, path, "after restart 2's cancelled wait")
	s, _ := reopen(t, path, restart+2, Options{Nodes: 1024, LastNode: 1023})
	l, _ := acquire(t, s)
	for i, u := range unknown {
		if u+1 != l.Start {
			t.Errorf("restart %d during the wait moved the start to %d; the final lease starts at %d", i, u+1, l.Start)
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

// waitFree waits until no block of the directory at path is held, and
// fails naming when and which if some still are after 5 s (stretched by
// the measured slowdown). A block's lock is freed when its file is closed,
// but a child process forked meanwhile (another test's, on its way to
// exec) holds a copy of the file until its exec: on a loaded machine the
// block then reads as held for a moment after its release.
func waitFree(t *testing.T, path, when string) {
	t.Helper()
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	slow := slowdown.Start()
	deadline := time.Now().Add(slow.Stretch(5 * time.Second))
	for {
		held, err := d.heldBlocks(0, randflake.MaxNode)
		if err != nil {
			t.Fatal(err)
		}
		if len(held) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: blocks %v still held after %v (%s)", when, slices.Sorted(maps.Keys(held)), slow.Stretch(5*time.Second), slow)
		}
		time.Sleep(10 * time.Millisecond)
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
	if testing.Short() {
		t.Skip("waits out the 10 s horizon of unknown history: not in -short")
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state")
	var holders []*Source
	for i := 0; i < 3; i++ {
		s, clk := reopen(t, path, t0, Options{Nodes: 64, LastNode: 1023})
		from := clk.sec()
		if l, took := acquire(t, s); l.Start > from {
			t.Errorf("process %d on the directory's own secret, called at second %d: %v after %v; want a lease from then or earlier, at once", i, from, l, took)
		}
		holders = append(holders, s)
	}
	defer runtime.KeepAlive(holders) // they hold their blocks to the end
	if st, err := parseState(readState(t, path)); err != nil || st.external || st.fresh {
		t.Errorf("state after claims on the own secret: %+v, %v; want history own, not fresh", st, err)
	}
	ext, clk := reopen(t, path, t0, Options{Nodes: 64, LastNode: 1023, ExternalSecret: true})
	l, took := acquire(t, ext)
	if l.Start < t0+unknownWait {
		t.Errorf("first process on an outside secret: %v after %v; want a wait", l, took)
	}
	if st, err := parseState(readState(t, path)); err != nil || !st.external {
		t.Errorf("state after the outside secret's wait: %+v, %v; want history external", st, err)
	}
	ext2, clk2 := reopen(t, path, clk.sec(), Options{Nodes: 64, LastNode: 1023, ExternalSecret: true})
	from := clk2.sec()
	if l, took := acquire(t, ext2); l.Start > from {
		t.Errorf("second process on the outside secret, called at second %d: %v after %v; want no wait", from, l, took)
	}
	own, clk3 := reopen(t, path, clk.sec(), Options{Nodes: 64, LastNode: 1023})
	from = clk3.sec()
	if l, took := acquire(t, own); l.Start > from {
		t.Errorf("a process on the own secret after that, called at second %d: %v after %v; want no wait", from, l, took)
	}
}

// A state file put back from an older copy under a running holder: its
// next renewal finds the generation gone back, drops the lease
// (ErrLeaseLost, ErrHistoryRolledBack) and its lock files, and marks the
// history unknown, so the next claim, its own included, waits out the
// horizon.
func TestRollbackUnderHolder(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the 10 s horizon of unknown history: not in -short")
	}
	t.Parallel()
	ctx := context.Background()
	d := openTest(t)
	clk := newClock(time.Now().Unix())
	opts := clk.on(Options{Nodes: 64, LastNode: 63})
	a := newSource(t, d, opts)
	l, _ := acquire(t, a)
	older := readState(t, d.path)
	clk.add(1)
	if l2, err := a.Renew(ctx, l); err != nil || l2.End <= l.End {
		t.Fatalf("Renew: %v, %v", l2, err)
	} else {
		l = l2
	}
	writeState(t, d.path, older)
	clk.add(1)
	_, err := a.Renew(ctx, l)
	if !errors.Is(err, randflake.ErrLeaseLost) || !errors.Is(err, ErrHistoryRolledBack) {
		t.Fatalf("Renew after the rollback: %v; want ErrLeaseLost and ErrHistoryRolledBack", err)
	}
	if a.store.current() != nil {
		t.Error("the lost claim still holds its lock files")
	}
	// The only block is free again, after the horizon.
	before := clk.sec()
	la, took := acquire(t, a)
	if la.Start < before+unknownWait-1 || la.Start <= l.End {
		t.Errorf("after the rollback: %v after %v; want a wait of the horizon from %d (the holder promised %d)", la, took, before, l.End)
	}
	t.Logf("the holder lost its lease at once; the next claim waited %v", took.Round(100*time.Millisecond))
}

// A directory used with another node range is refused, not guessed at.
func TestOtherRangeRefused(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	a := newSource(t, d, Options{Nodes: 64, LastNode: 127})
	acquire(t, a)
	b := newSource(t, d, Options{Nodes: 64, FirstNode: 128, LastNode: 255})
	if l, err := b.Acquire(context.Background()); !errors.Is(err, ErrFleetMismatch) {
		t.Errorf("another range on the same directory: %v, %v; want ErrFleetMismatch", l, err)
	}
	// Another claim size within the same range is fine.
	c := newSource(t, d, Options{Nodes: 64, LastNode: 127})
	acquire(t, c)
}
