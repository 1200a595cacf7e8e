package pglease

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/leasetest"
)

// The process tests run holders in real processes: the test binary runs
// itself with RANDFLAKE_PGLEASE_HELPER set to MODE|DSN|TABLE|FILE|HOLDER,
// and TestHelperProcess then claims node IDs, prints its lease and writes
// every ID it issues to FILE (one write per batch). Mode "gen" issues for
// 1.5 s, releases and exits; mode "hold" issues until it is killed.
func TestHelperProcess(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("helper process for the process tests")
	}
	f := strings.Split(spec, "|")
	mode, dsn, table, out, holder := f[0], f[1], f[2], f[3], f[4]
	cfg := Config{DSN: dsn, Secret: testSecret, Table: table, Nodes: 16, LastNode: 63, TTL: testTTL, MaxClockSkew: testSkew, Holder: holder}
	run := 1500 * time.Millisecond
	if mode == "hold" {
		cfg.LastNode, run = 15, 30*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := NewLeased(ctx, testSecret, cfg)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	l := g.Lease()
	fmt.Printf("LEASE %d %d %d %d\n", l.FirstNode, l.LastNode, l.Start, l.End)
	w, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	batch := make([]int64, 32)
	buf := make([]byte, 8*len(batch))
	for deadline := time.Now().Add(run); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		n, _ := g.GenerateBatch(batch)
		for i, id := range batch[:n] {
			binary.LittleEndian.PutUint64(buf[8*i:], uint64(id))
		}
		w.Write(buf[:8*n])
	}
	w.Close()
	if err := g.Close(ctx); err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	l = g.Lease()
	fmt.Printf("DONE %d %d %d %d\n", l.FirstNode, l.LastNode, l.Start, l.End)
	os.Exit(0)
}

// helper is a running helper process.
type helper struct {
	cmd    *exec.Cmd
	out    string
	leases chan randflake.Lease
	exited chan struct{} // closed when the process has been reaped
	err    error         // its exit status, once exited is closed
}

func startHelper(t *testing.T, mode, dsn, table, holder string) *helper {
	t.Helper()
	h := &helper{out: filepath.Join(t.TempDir(), "ids"), leases: make(chan randflake.Lease, 2), exited: make(chan struct{})}
	h.cmd = exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	h.cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join([]string{mode, dsn, table, h.out, holder}, "|"))
	h.cmd.Stderr = os.Stderr
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.cmd.Process.Kill()
		<-h.exited
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l randflake.Lease
			if _, err := fmt.Sscanf(sc.Text(), "LEASE %d %d %d %d", &l.FirstNode, &l.LastNode, &l.Start, &l.End); err == nil {
				h.leases <- l
			} else if _, err := fmt.Sscanf(sc.Text(), "DONE %d %d %d %d", &l.FirstNode, &l.LastNode, &l.Start, &l.End); err == nil {
				h.leases <- l
			} else if !strings.HasPrefix(sc.Text(), "PASS") && !strings.HasPrefix(sc.Text(), "ok") {
				t.Logf("%s: %s", holder, sc.Text())
			}
		}
		h.err = h.cmd.Wait()
		close(h.exited)
	}()
	return h
}

// lease returns the helper's first lease.
func (h *helper) lease(t *testing.T) randflake.Lease {
	t.Helper()
	select {
	case l := <-h.leases:
		return l
	case <-h.exited:
		select {
		case l := <-h.leases:
			return l
		default:
		}
		t.Fatalf("the helper exited without a lease: %v", h.err)
	case <-time.After(30 * time.Second):
		t.Fatal("no lease from the helper process in 30s")
	}
	panic("unreachable")
}

// wait waits for a "gen" helper to exit successfully and returns its IDs.
func (h *helper) wait(t *testing.T) []leasetest.Issued {
	t.Helper()
	select {
	case <-h.exited:
		if h.err != nil {
			t.Fatalf("helper: %v", h.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the helper did not exit in 30s")
	}
	return h.ids(t)
}

func (h *helper) ids(t *testing.T) []leasetest.Issued {
	t.Helper()
	data, err := os.ReadFile(h.out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	ids := make([]leasetest.Issued, len(data)/8)
	for i := range ids {
		ids[i].ID = int64(binary.LittleEndian.Uint64(data[8*i:]))
	}
	return ids
}

// waitIDs waits up to 10 seconds for the helper to have written n IDs.
func (h *helper) waitIDs(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(h.out); err == nil && fi.Size() >= int64(8*n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the helper issued fewer than %d IDs in 10s", n)
		}
	}
}

// kill kills the helper with SIGKILL and waits until it is gone.
func (h *helper) kill(t *testing.T) {
	t.Helper()
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the helper lived 10s after SIGKILL")
	}
}

// A holder killed with SIGKILL keeps its node IDs until its claim's TTL
// passes, by the server's clock; then another claimant takes them over and
// issues IDs that start strictly after the killed holder's last second.
func TestKilledHolder(t *testing.T) {
	t.Parallel()
	srv := server(t)
	pool := newPool(t, srv.DSN())
	table := newTable(t, pool, "killed")
	h := startHelper(t, "hold", srv.DSN(), table, "doomed")
	l1 := h.lease(t)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(h.out); err == nil && fi.Size() > 8*32*20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the helper issued no IDs")
		}
	}
	// Let it renew at least once, so its recorded second is ahead of its
	// start.
	time.Sleep(time.Second)
	cfg := Config{Pool: pool, Secret: testSecret, Table: table, Nodes: 16, LastNode: 15, TTL: testTTL, MaxClockSkew: testSkew, Holder: "successor"}
	ctx := context.Background()
	if _, err := NewLeased(ctx, testSecret, cfg); !errors.Is(err, ErrNoFreeNodes) {
		t.Fatalf("claim while the helper lives: %v, want ErrNoFreeNodes", err)
	}
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-h.exited
	killedAt := time.Now()
	var left float64
	if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 FROM `+table).Scan(&left); err != nil {
		t.Fatal(err)
	}
	expiresIn := time.Duration(left * float64(time.Second))
	var g *randflake.Leased
	var err error
	for {
		g, err = NewLeased(ctx, testSecret, cfg)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNoFreeNodes) {
			t.Fatal(err)
		}
		if time.Since(killedAt) > 3*testTTL {
			t.Fatal("the killed holder's node IDs not free 3 TTLs after SIGKILL")
		}
		time.Sleep(50 * time.Millisecond)
	}
	takenAt := time.Since(killedAt)
	defer g.Close(ctx)
	// The last renewal was at most a renewal interval (a third of the
	// validity, under a second) before the kill.
	if takenAt < testTTL-time.Second {
		t.Errorf("node IDs taken over %v after SIGKILL, before the TTL could pass", takenAt)
	}
	if takenAt < expiresIn-10*time.Millisecond {
		t.Errorf("node IDs taken over %v after SIGKILL, before the claim expired (%v after it)", takenAt, expiresIn)
	}
	c := leasetest.Collect("g", g)
	time.Sleep(500 * time.Millisecond)
	ids2 := c.Stop()
	ids1 := h.ids(t)
	check := checker(t)
	max1 := check.Add("the killed holder", ids1).Last
	min2 := check.Add("the successor", ids2, g.Lease()).First
	l2 := g.Lease()
	if l2.FirstNode != l1.FirstNode {
		t.Fatalf("the successor got %v, not the killed holder's node IDs %v", l2, l1)
	}
	if l2.Start <= max1 || min2 <= max1 {
		t.Errorf("the successor's lease %v (first ID at second %d) does not start after the killed holder's last second %d", l2, min2, max1)
	}
	if len(ids1) == 0 || len(ids2) == 0 {
		t.Errorf("IDs: %d from the killed holder, %d from the successor", len(ids1), len(ids2))
	}
	t.Logf("taken over %v after SIGKILL (the claim had %v left at the kill, TTL %v); the killed holder's last second %d, the successor's lease starts at %d; %d + %d IDs, none twice",
		takenAt.Round(time.Millisecond), expiresIn.Round(time.Millisecond), testTTL, max1, l2.Start, len(ids1), len(ids2))
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
