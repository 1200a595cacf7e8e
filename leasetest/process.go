package leasetest

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/lease"
)

// Holders in processes of their own, for tests that SIGKILL one: the test
// binary runs itself as the holder. Its TestMain calls HolderMain first,
// which, in a process StartHolder started, opens the store, runs a leased
// generator under load, tells the parent its lease on its standard output
// and writes every ID it issues to a file, one write per batch, so that
// a SIGKILL loses none it handed out; in any other process HolderMain
// returns at once:
//
//	func TestMain(m *testing.M) {
//		leasetest.HolderMain(func(arg string) (lease.BlockStore, error) {
//			return openMyStore(arg) // arg: what StartHolder was given
//		})
//		os.Exit(m.Run())
//	}
//
// The parent starts it with StartHolder, waits for its lease, lets it
// issue, kills it half-way through a second (KillMidSecond), and checks
// its IDs (IDs) with a Checker against its successor's.

// holderEnv carries a holder's spec, in JSON, to the child process.
const holderEnv = "RANDFLAKE_LEASETEST_HOLDER"

// Exit codes of a holder process that got no lease.
const (
	exitError         = 3
	exitNoFreeNodes   = 4
	exitClockBehind   = 5
	exitFleetMismatch = 6
)

// HolderConfig describes a holder process.
type HolderConfig struct {
	// Name names the holder in the parent's failures and logs.
	Name string
	// Arg is given to the child's open function (the one passed to
	// HolderMain): which store to open, in whatever form the module's
	// tests choose (an endpoint and a prefix, a DSN and a table, a
	// directory).
	Arg string
	// Secret is the fleet secret (nil: Secret()). It reaches the child
	// through its environment, never its arguments or output.
	Secret []byte
	// Layout and Blocks configure the child's BlockSource.
	Layout lease.BlockLayout
	Blocks int64
	// Horizon is BlockSourceConfig.Horizon (0: the store's promise).
	Horizon time.Duration
	// Run is how long the holder issues IDs before it closes its
	// generator (releasing its lease) and exits; 0: until it is killed
	// (it exits by itself after two minutes).
	Run time.Duration
}

// holderSpec is what the child is told.
type holderSpec struct {
	Arg     string
	Secret  string // hex
	Layout  lease.BlockLayout
	Blocks  int64
	Horizon time.Duration
	Run     time.Duration
	Out     string // the file of its IDs
}

// idRecordSize is the size of one ID in the file: the ID and the Unix
// nanosecond it was handed out, little-endian.
const idRecordSize = 16

// HolderMain runs the holder and exits if this process was started by
// StartHolder; otherwise it returns at once. Call it first in TestMain,
// with the function that opens the module's store from HolderConfig.Arg.
func HolderMain(open func(arg string) (lease.BlockStore, error)) {
	raw, ok := os.LookupEnv(holderEnv)
	if !ok {
		return
	}
	os.Unsetenv(holderEnv)
	err := runHolder(raw, open)
	code := exitError
	switch {
	case err == nil:
		os.Exit(0)
	case errors.Is(err, lease.ErrNoFreeNodes):
		code = exitNoFreeNodes
	case errors.Is(err, lease.ErrClockBehind):
		code = exitClockBehind
	case errors.Is(err, lease.ErrFleetMismatch):
		code = exitFleetMismatch
	}
	fmt.Println("ERR", strings.ReplaceAll(err.Error(), "\n", " "))
	os.Exit(code)
}

func runHolder(raw string, open func(string) (lease.BlockStore, error)) error {
	var spec holderSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return fmt.Errorf("the holder's spec: %w", err)
	}
	secret, err := hex.DecodeString(spec.Secret)
	if err != nil {
		return errors.New("the holder's secret is not hex")
	}
	store, err := open(spec.Arg)
	if err != nil {
		return fmt.Errorf("opening the store: %w", err)
	}
	src, err := lease.NewBlockSource(store, lease.BlockSourceConfig{
		Secret: secret, Layout: spec.Layout, Blocks: spec.Blocks, Horizon: spec.Horizon})
	if err != nil {
		return err
	}
	out, err := os.OpenFile(spec.Out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := randflake.NewLeased(ctx, randflake.LeasedConfig{Secret: secret, Source: src, Shards: 2})
	if err != nil {
		return err
	}
	last := g.Lease()
	fmt.Println(formatLease("LEASE", last))
	run := spec.Run
	if run <= 0 {
		run = 2 * time.Minute
	}
	batch := make([]int64, 32)
	buf := make([]byte, idRecordSize*len(batch))
	for deadline := time.Now().Add(run); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		now := uint64(time.Now().UnixNano())
		n, _ := g.GenerateBatch(batch)
		for i, id := range batch[:n] {
			binary.LittleEndian.PutUint64(buf[idRecordSize*i:], uint64(id))
			binary.LittleEndian.PutUint64(buf[idRecordSize*i+8:], now)
		}
		if _, err := out.Write(buf[:idRecordSize*n]); err != nil {
			return err
		}
		if l := g.Lease(); l != last {
			last = l
			fmt.Println(formatLease("LEASE", l))
		}
	}
	if err := g.Close(ctx); err != nil {
		return fmt.Errorf("closing the generator: %w", err)
	}
	fmt.Println(formatLease("DONE", g.Lease()))
	return nil
}

func formatLease(word string, l randflake.Lease) string {
	return fmt.Sprintf("%s %d %d %d %d", word, l.FirstNode, l.LastNode, l.Start, l.End)
}

// Holder is a holder process started by StartHolder.
type Holder struct {
	t      testing.TB
	name   string
	cmd    *exec.Cmd
	out    string
	first  chan struct{} // closed at the first lease
	exited chan struct{} // closed once the process has been reaped

	mu     sync.Mutex
	leases []randflake.Lease // the claims reported, each with its latest end
	done   bool              // it reported DONE
	errMsg string            // its ERR line
	err    error             // its exit status, once exited is closed
}

// StartHolder starts a holder process: the test binary again, whose
// TestMain calls HolderMain. It is killed, if still running, when t ends.
func StartHolder(t testing.TB, c HolderConfig) *Holder {
	t.Helper()
	if c.Secret == nil {
		c.Secret = Secret()
	}
	if c.Name == "" {
		c.Name = "holder"
	}
	h := &Holder{t: t, name: c.Name, out: filepath.Join(t.TempDir(), "ids"), first: make(chan struct{}), exited: make(chan struct{})}
	spec, err := json.Marshal(holderSpec{Arg: c.Arg, Secret: hex.EncodeToString(c.Secret), Layout: c.Layout,
		Blocks: c.Blocks, Horizon: c.Horizon, Run: c.Run, Out: h.out})
	if err != nil {
		t.Fatal(err)
	}
	// -test.run=^$: a binary whose TestMain does not call HolderMain runs
	// no test, and the parent reports that it got no lease.
	h.cmd = exec.Command(os.Args[0], "-test.run=^$", "-test.count=1")
	h.cmd.Env = append(os.Environ(), holderEnv+"="+string(spec))
	h.cmd.Stderr = os.Stderr
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("starting holder %s: %v", c.Name, err)
	}
	go h.read(stdout)
	t.Cleanup(func() {
		h.cmd.Process.Kill()
		<-h.exited
	})
	return h
}

// read follows the holder's output until it exits, then reaps it.
func (h *Holder) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	var once sync.Once
	for sc.Scan() {
		line := sc.Text()
		word, rest, _ := strings.Cut(line, " ")
		var l randflake.Lease
		switch word {
		case "LEASE", "DONE":
			if _, err := fmt.Sscanf(rest, "%d %d %d %d", &l.FirstNode, &l.LastNode, &l.Start, &l.End); err != nil {
				continue
			}
			h.mu.Lock()
			h.note(l)
			h.done = h.done || word == "DONE"
			h.mu.Unlock()
			once.Do(func() { close(h.first) })
		case "ERR":
			h.mu.Lock()
			h.errMsg = rest
			h.mu.Unlock()
		}
	}
	err := h.cmd.Wait()
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
	close(h.exited)
}

// note records a lease: a new claim, or a later end of one; h.mu is held.
func (h *Holder) note(l randflake.Lease) {
	for i := range h.leases {
		if h.leases[i].SameClaim(l) {
			h.leases[i].End = max(h.leases[i].End, l.End)
			return
		}
	}
	h.leases = append(h.leases, l)
}

// Lease waits up to timeout, stretched by the measured slowdown, for the
// holder's first lease and returns it; it fails the test if the holder
// exits first or the time runs out.
func (h *Holder) Lease(timeout time.Duration) randflake.Lease {
	h.t.Helper()
	m := slowdown.Start()
	timer := time.NewTimer(sinceStart.Stretch(timeout))
	defer timer.Stop()
	select {
	case <-h.first:
		return h.Leases()[0]
	case <-h.exited:
		select {
		case <-h.first:
			return h.Leases()[0]
		default:
		}
		h.t.Fatalf("holder %s exited without a lease: %v", h.name, h.exitError())
	case <-timer.C:
		h.t.Fatalf("holder %s reported no lease within %v (%s)", h.name, sinceStart.Stretch(timeout).Round(time.Millisecond), m)
	}
	return randflake.Lease{}
}

// Leases returns the claims the holder reported so far, each with the
// latest end it reported.
func (h *Holder) Leases() []randflake.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]randflake.Lease(nil), h.leases...)
}

// WaitIDs waits up to timeout, stretched by the measured slowdown, for
// the holder to have written n IDs.
func (h *Holder) WaitIDs(n int, timeout time.Duration) {
	h.t.Helper()
	m, began := slowdown.Start(), time.Now()
	for ; ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(h.out); err == nil && fi.Size() >= int64(idRecordSize*n) {
			return
		}
		select {
		case <-h.exited:
			h.t.Fatalf("holder %s exited before issuing %d IDs: %v", h.name, n, h.exitError())
		default:
		}
		if limit := m.Stretch(timeout); time.Since(began) > limit {
			h.t.Fatalf("holder %s issued fewer than %d IDs in %v (%s)", h.name, n, limit.Round(time.Millisecond), m)
		}
	}
}

// KillMidSecond sends SIGKILL about 500 ms past a second boundary, while
// the holder issues IDs in that second, waits for it to die, and returns
// the time of the kill.
func (h *Holder) KillMidSecond() time.Time {
	h.t.Helper()
	midSecond()
	return h.Kill()
}

// ClaimAfterKill calls claim until it succeeds, once a holder was killed
// at killedAt, every poll while claim is refused with ErrNoFreeNodes, and
// fails t on any other error or if claim still fails within of the kill,
// stretched by the measured slowdown.
// It returns the generator and how long after the kill the last refusal
// came (0 if none did): what a test compares with the killed claim's TTL.
func ClaimAfterKill(t testing.TB, killedAt time.Time, within, poll time.Duration, claim func() (*randflake.Leased, error)) (*randflake.Leased, time.Duration) {
	t.Helper()
	var refused time.Duration
	m := slowdown.Start()
	for {
		g, err := claim()
		if err == nil {
			return g, refused
		}
		if !errors.Is(err, lease.ErrNoFreeNodes) {
			t.Fatal(err)
		}
		if limit := m.Stretch(within); time.Since(killedAt) > limit {
			t.Fatalf("the killed holder's node IDs not free %v after SIGKILL (%s)", limit.Round(time.Millisecond), m)
		}
		refused = time.Since(killedAt)
		time.Sleep(poll)
	}
}

// CheckSuccessor checks the successor g that took over the node IDs of
// the killed holder, whose lease was was: it runs g under load (a
// Collector, "the successor") until it has issued n IDs, waiting up to
// timeout, stretched by the measured slowdown; proves its IDs and the
// killed holder's unique with a Checker under secret; and fails t unless
// g's lease is on the killed holder's node IDs and starts, as its first
// ID does, after the killed holder's last second. It returns the Checker,
// for the test's log.
func CheckSuccessor(t testing.TB, secret []byte, killed *Holder, was randflake.Lease, g Generator, n int, timeout time.Duration) *Checker {
	t.Helper()
	c := Collect("the successor", g)
	c.WaitCount(t, n, timeout)
	check := NewChecker(t, secret)
	dead := check.Add("the killed holder", killed.IDs(), killed.Leases()...)
	next := check.AddCollector(c)
	if l := g.Lease(); l.FirstNode != was.FirstNode || l.Start <= dead.Last || next.First <= dead.Last {
		t.Errorf("the successor's lease %v (first ID at second %d) does not start after the killed holder's last second %d on its node IDs", l, next.First, dead.Last)
	}
	return check
}

// Kill sends SIGKILL now, waits for the holder to die, and returns the
// time of the kill.
func (h *Holder) Kill() time.Time {
	h.t.Helper()
	at := time.Now()
	if err := h.cmd.Process.Kill(); err != nil {
		select {
		case <-h.exited:
			h.t.Fatalf("holder %s had exited before it was killed: %v", h.name, h.exitError())
		default:
			h.t.Fatalf("killing holder %s: %v", h.name, err)
		}
	}
	<-h.exited
	return at
}

// Wait waits up to timeout, stretched by the measured slowdown, for a
// holder with a Run time to exit, and
// returns nil if it closed its generator and exited cleanly. An error
// says why not; it wraps ErrNoFreeNodes, ErrClockBehind or
// ErrFleetMismatch when the holder got no lease for that reason.
func (h *Holder) Wait(timeout time.Duration) error {
	m := slowdown.Start()
	timer := time.NewTimer(sinceStart.Stretch(timeout))
	defer timer.Stop()
	select {
	case <-h.exited:
	case <-timer.C:
		return fmt.Errorf("holder %s still running after %v (%s)", h.name, sinceStart.Stretch(timeout).Round(time.Millisecond), m)
	}
	h.mu.Lock()
	done := h.done
	h.mu.Unlock()
	if err := h.exitError(); err != nil || !done {
		return errors.Join(err, fmt.Errorf("holder %s did not finish", h.name))
	}
	return nil
}

// exitError describes how the holder exited: nil for a clean exit.
func (h *Holder) exitError() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		return nil
	}
	var reason error
	var ee *exec.ExitError
	if errors.As(h.err, &ee) {
		switch ee.ExitCode() {
		case exitNoFreeNodes:
			reason = lease.ErrNoFreeNodes
		case exitClockBehind:
			reason = lease.ErrClockBehind
		case exitFleetMismatch:
			reason = lease.ErrFleetMismatch
		}
	}
	msg := h.errMsg
	if msg == "" {
		msg = "no error reported (did its TestMain call leasetest.HolderMain?)"
	}
	if reason != nil {
		return fmt.Errorf("%w: %s (%v)", reason, msg, h.err)
	}
	return fmt.Errorf("%s (%v)", msg, h.err)
}

// IDs returns every ID the holder wrote, with the time it handed each
// out. Call it once the holder has exited or been killed.
func (h *Holder) IDs() []Issued {
	h.t.Helper()
	data, err := os.ReadFile(h.out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		h.t.Fatal(err)
	}
	ids := make([]Issued, len(data)/idRecordSize)
	for i := range ids {
		rec := data[idRecordSize*i:]
		ids[i] = Issued{ID: int64(binary.LittleEndian.Uint64(rec)), At: time.Unix(0, int64(binary.LittleEndian.Uint64(rec[8:])))}
	}
	return ids
}
