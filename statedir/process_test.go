//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package statedir

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/internal/slowdown"
)

// The tests below run generators in real processes: the test binary runs
// itself with RANDFLAKE_STATEDIR_HELPER set, and TestHelperProcess then
// claims node IDs from the state directory it names, prints its lease,
// writes every ID it issues to a file (one write per batch, so an ID
// written before a SIGKILL is on disk) and releases the lease when done.

const helperEnv = "RANDFLAKE_STATEDIR_HELPER"

// Exit codes of the helper.
const (
	exitNoFreeNodes = 4
	exitOtherError  = 3
)

func TestHelperProcess(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("helper process for the multi-process tests")
	}
	// spec: dir, last node, run time ("kill": until killed), output file.
	f := strings.Split(spec, "|")
	last, _ := strconv.ParseInt(f[1], 10, 64)
	ctx, cancel := context.WithTimeout(context.Background(), slowdown.Stretch(20*time.Second))
	defer cancel()
	g, err := NewLeased(ctx, f[0], Options{Nodes: 64, LastNode: last, Horizon: 2 * time.Second, Shards: 2})
	if err != nil {
		fmt.Println("ERR", err)
		if errors.Is(err, ErrNoFreeNodes) {
			os.Exit(exitNoFreeNodes)
		}
		os.Exit(exitOtherError)
	}
	l := g.Lease()
	fmt.Printf("LEASE %d %d %d %d\n", l.FirstNode, l.LastNode, l.Start, l.End)
	out, err := os.OpenFile(f[3], os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(exitOtherError)
	}
	var stop time.Time
	if f[2] == "kill" {
		stop = time.Now().Add(15 * time.Second) // the parent kills it before
	} else {
		d, _ := time.ParseDuration(f[2])
		stop = time.Now().Add(d)
	}
	batch := make([]int64, 64)
	buf := make([]byte, 8*len(batch))
	for time.Now().Before(stop) {
		n, err := g.GenerateBatch(batch)
		// A second used up, or a lease that ran out before its renewal
		// (a machine stalled for longer than the 2 s horizon: the
		// generator stops issuing until a renewal succeeds), pauses the
		// load, as a service answers 503 then; anything else ends it.
		if err != nil && !errors.Is(err, randflake.ErrResourceExhausted) && !errors.Is(err, randflake.ErrInvalidLease) {
			fmt.Println("ERR", err)
			os.Exit(exitOtherError)
		}
		for i, id := range batch[:n] {
			binary.LittleEndian.PutUint64(buf[8*i:], uint64(id))
		}
		if _, err := out.Write(buf[:8*n]); err != nil {
			fmt.Println("ERR", err)
			os.Exit(exitOtherError)
		}
		time.Sleep(time.Millisecond)
	}
	if err := g.Close(ctx); err != nil {
		fmt.Println("ERR", err)
		os.Exit(exitOtherError)
	}
	fmt.Println("CLOSED")
	os.Exit(0)
}

// helper is a running helper process.
type helper struct {
	cmd   *exec.Cmd
	out   string // file of IDs
	lease chan randflake.Lease
	lines chan string // other output lines
}

func startHelper(t *testing.T, dir string, last int64, run string) *helper {
	t.Helper()
	h := &helper{
		out:   filepath.Join(t.TempDir(), "ids"),
		lease: make(chan randflake.Lease, 1),
		lines: make(chan string, 16),
	}
	h.cmd = exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	h.cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%d|%s|%s", helperEnv, dir, last, run, h.out))
	h.cmd.Stderr = os.Stderr
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if h.cmd.ProcessState == nil {
			h.cmd.Process.Kill()
			h.cmd.Wait()
		}
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			var l randflake.Lease
			if _, err := fmt.Sscanf(line, "LEASE %d %d %d %d", &l.FirstNode, &l.LastNode, &l.Start, &l.End); err == nil {
				h.lease <- l
				continue
			}
			select {
			case h.lines <- line:
			default:
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	return h
}

// waitLease waits for the helper's lease.
func (h *helper) waitLease(t *testing.T) randflake.Lease {
	t.Helper()
	// The helper waits out at most its 2 s horizon and a second; the
	// bound only ends a wait for one that never comes.
	slow := slowdown.Start()
	for start := time.Now(); ; {
		select {
		case l := <-h.lease:
			return l
		case <-time.After(100 * time.Millisecond):
		}
		if limit := slow.Stretch(20 * time.Second); time.Since(start) > limit {
			t.Fatalf("no lease from the helper process within %v (%s)", limit, slow)
		}
	}
}

// wait waits for the helper to exit and returns its exit code.
func (h *helper) wait(t *testing.T) int {
	t.Helper()
	err := h.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ee.ExitCode() == exitOtherError {
			t.Errorf("helper failed: %s", <-h.lines)
		}
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// ids reads the IDs the helper wrote.
func (h *helper) ids(t *testing.T) []int64 {
	t.Helper()
	data, err := os.ReadFile(h.out)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(data)/8)
	for i := range ids {
		ids[i] = int64(binary.LittleEndian.Uint64(data[8*i:]))
	}
	return ids
}

// stats checks IDs against the set of all IDs seen and the lease, and
// returns their oldest and newest seconds.
func stats(t *testing.T, name string, c *randflake.Sparx64, seen map[int64]string, ids []int64, l randflake.Lease) (minTS, maxTS int64) {
	t.Helper()
	if len(ids) == 0 {
		t.Fatalf("%s issued no IDs", name)
	}
	for _, id := range ids {
		if other, dup := seen[id]; dup {
			t.Fatalf("ID %d issued by %s and %s", id, other, name)
		}
		seen[id] = name
		raw := c.DecryptID(uint64(id))
		ts := int64(raw>>34) + randflake.Epoch
		node := int64(raw>>17) & randflake.MaxNode
		if node < l.FirstNode || node > l.LastNode || ts < l.Start {
			t.Fatalf("%s issued an ID at second %d on node %d, outside its lease %+v", name, ts, node, l)
		}
		if minTS == 0 || ts < minTS {
			minTS = ts
		}
		maxTS = max(maxTS, ts)
	}
	return minTS, maxTS
}

func cipherOf(t *testing.T, dir string) *randflake.Sparx64 {
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := randflake.NewSparx64(d.Secret())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Several processes at once get disjoint node IDs and issue distinct IDs.
func TestProcessesClaimDisjointNodes(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := filepath.Join(t.TempDir(), "state")
	var hs []*helper
	for range 3 {
		hs = append(hs, startHelper(t, dir, 255, "1500ms"))
	}
	c := cipherOf(t, dir)
	seen := map[int64]string{}
	ranges := map[int64]bool{}
	for i, h := range hs {
		l := h.waitLease(t)
		if ranges[l.FirstNode] {
			t.Errorf("node range %d-%d held by two processes", l.FirstNode, l.LastNode)
		}
		ranges[l.FirstNode] = true
		if code := h.wait(t); code != 0 {
			t.Fatalf("process %d exited with %d", i, code)
		}
		stats(t, fmt.Sprintf("process %d", i), c, seen, h.ids(t), l)
	}
	t.Logf("%d IDs from 3 processes, no duplicate", len(seen))
}

// One range of node IDs, four processes in turn: a second claimant is
// refused while the first lives; the first is killed with SIGKILL; the
// next takes its node IDs over, starting after the promise the killed one
// recorded; a last one starts right after the second's clean release.
func TestProcessKilledTakeover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := filepath.Join(t.TempDir(), "state")
	c := cipherOf(t, dir)
	seen := map[int64]string{}

	first := startHelper(t, dir, 63, "kill")
	l1 := first.waitLease(t)
	slow := slowdown.Start()
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(first.out); err == nil && fi.Size() >= 64*8*20 {
			break
		}
		if limit := slow.Stretch(10 * time.Second); time.Since(start) > limit {
			t.Fatalf("the first process issued no IDs within %v (%s)", limit, slow)
		}
	}

	refused := startHelper(t, dir, 63, "100ms")
	if code := refused.wait(t); code != exitNoFreeNodes {
		t.Fatalf("a second claimant exited with %d while the first held the node IDs, want %d", code, exitNoFreeNodes)
	}

	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.wait(t)
	killedAt := time.Now()
	_, max1 := stats(t, "the killed process", c, seen, first.ids(t), l1)

	second := startHelper(t, dir, 63, "1s")
	l2 := second.waitLease(t)
	if l2.FirstNode != l1.FirstNode || l2.Start <= max1 {
		t.Fatalf("took over %+v after the killed process's %+v (newest second %d)", l2, l1, max1)
	}
	if code := second.wait(t); code != 0 {
		t.Fatalf("second process exited with %d", code)
	}
	min2, max2 := stats(t, "the process taking over", c, seen, second.ids(t), l2)
	if min2 <= max1 {
		t.Fatalf("the process taking over issued second %d, not after the killed one's %d", min2, max1)
	}

	third := startHelper(t, dir, 63, "300ms")
	l3 := third.waitLease(t)
	if l3.Start != max2+1 {
		t.Errorf("after a clean release the lease starts at %d, want %d", l3.Start, max2+1)
	}
	if code := third.wait(t); code != 0 {
		t.Fatalf("third process exited with %d", code)
	}
	min3, _ := stats(t, "the third process", c, seen, third.ids(t), l3)
	if min3 <= max2 {
		t.Fatalf("third process issued second %d, not after %d", min3, max2)
	}
	t.Logf("%d IDs, no duplicate; %.1fs from the SIGKILL to the end", len(seen), time.Since(killedAt).Seconds())
}

// countDuplicates adds ids to seen and returns how many were there
// already.
func countDuplicates(seen map[int64]string, name string, ids []int64) int {
	dups := 0
	for _, id := range ids {
		if _, dup := seen[id]; dup {
			dups++
			continue
		}
		seen[id] = name
	}
	return dups
}

// A busy process is SIGKILLed in the middle of a second, its state is
// lost, damaged or rolled back, and a new process starts at once on the
// same node IDs: it waits out the horizon instead of reissuing the dead
// process's IDs.
func TestKilledThenStateLost(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts processes")
	}
	// Each fault gets the directory and a copy of the state file taken
	// while the killed process was running.
	faults := []struct {
		name  string
		fault func(dir string, older []byte) error
	}{
		{"state deleted", func(dir string, _ []byte) error {
			return os.Remove(filepath.Join(dir, "state"))
		}},
		{"state and blocks/ deleted", func(dir string, _ []byte) error {
			if err := os.Remove(filepath.Join(dir, "state")); err != nil {
				return err
			}
			return os.RemoveAll(filepath.Join(dir, "blocks"))
		}},
		{"header only", func(dir string, _ []byte) error {
			return os.WriteFile(filepath.Join(dir, "state"), []byte(stateHeader+"\n"), 0o600)
		}},
		{"cut in the first record", func(dir string, _ []byte) error {
			path := filepath.Join(dir, "state")
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			i := strings.Index(string(data), "\nrecord 0 ")
			if i < 0 {
				return fmt.Errorf("no record of block 0 in\n%s", data)
			}
			return os.WriteFile(path, data[:i+20], 0o600)
		}},
		{"records repeated", func(dir string, _ []byte) error {
			path := filepath.Join(dir, "state")
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			line := regexp.MustCompile(`(?m)^record 0 .*\n`).Find(data)
			if line == nil {
				return fmt.Errorf("no record of block 0 in\n%s", data)
			}
			return os.WriteFile(path, append(append(data, line...), line...), 0o600)
		}},
		{"an older state copied back", func(dir string, older []byte) error {
			return os.WriteFile(filepath.Join(dir, "state"), older, 0o600)
		}},
		{"an older state copied back, blocks/ deleted", func(dir string, older []byte) error {
			if err := os.WriteFile(filepath.Join(dir, "state"), older, 0o600); err != nil {
				return err
			}
			return os.RemoveAll(filepath.Join(dir, "blocks"))
		}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "state")
			c := cipherOf(t, dir)
			first := startHelper(t, dir, 63, "kill")
			l1 := first.waitLease(t)
			// Let it issue for a while, keeping a copy of the state it
			// wrote early on, then kill it half-way through a second, more
			// than its horizon (2s) later: the copy's promises no longer
			// cover the seconds it used.
			time.Sleep(300 * time.Millisecond)
			older, err := os.ReadFile(filepath.Join(dir, "state"))
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(3200 * time.Millisecond)
			now := time.Now()
			time.Sleep(now.Truncate(time.Second).Add(1500 * time.Millisecond).Sub(now))
			if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			first.wait(t)
			killedAt := time.Now()
			if err := f.fault(dir, older); err != nil {
				t.Fatal(err)
			}
			second := startHelper(t, dir, 63, "1500ms")
			l2 := second.waitLease(t)
			waited := time.Since(killedAt)
			if code := second.wait(t); code != 0 {
				t.Fatalf("second process exited with %d", code)
			}
			ids1, ids2 := first.ids(t), second.ids(t)
			seen := map[int64]string{}
			dups := countDuplicates(seen, "the killed process", ids1) + countDuplicates(seen, "the process after the fault", ids2)
			if dups > 0 {
				t.Errorf("%d duplicate IDs among %d", dups, len(ids1)+len(ids2))
			}
			_, max1 := stats(t, "the killed process", c, map[int64]string{}, ids1, l1)
			min2, _ := stats(t, "the process after the fault", c, map[int64]string{}, ids2, l2)
			if l2.FirstNode != l1.FirstNode {
				t.Fatalf("the successor got %v, not the killed process's node IDs %v", l2, l1)
			}
			if min2 <= max1 {
				t.Fatalf("after the fault (%s), the new process issued second %d on the killed one's node IDs, which used seconds up to %d", f.name, min2, max1)
			}
			t.Logf("%s: %d IDs (%d before the SIGKILL, %d after), %d duplicates; the successor's lease came %.1fs after the SIGKILL, its first second %ds after the killed one's last",
				f.name, len(ids1)+len(ids2), len(ids1), len(ids2), dups, waited.Seconds(), min2-max1)
		})
	}
}
