package etcdlease

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const testTTL = 3 * time.Second

func TestConfig(t *testing.T) {
	cli := &clientv3.Client{}
	s, err := New(Config{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	if s.prefix != DefaultPrefix || s.nodes != DefaultNodes || s.first != 0 || s.last != randflake.MaxNode || s.ttl != 10 || s.promise != 30 || s.holder == "" {
		t.Errorf("defaults: %+v", s)
	}
	if s, _ := New(Config{Client: cli, TTL: 3500 * time.Millisecond, Promise: time.Second}); s.ttl != 4 || s.promise != 4 {
		t.Errorf("rounding: ttl %d, promise %d", s.ttl, s.promise)
	}
	for _, c := range []Config{
		{},
		{Client: cli, Nodes: MaxNodes + 1},
		{Client: cli, Nodes: -1},
		{Client: cli, FirstNode: 10, LastNode: 5},
		{Client: cli, LastNode: randflake.MaxNode + 1},
		{Client: cli, Nodes: 16, FirstNode: 0, LastNode: 7},
		{Client: cli, TTL: 2 * time.Second},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// The lease end is the last whole second ending a margin before the etcd
// lease can expire.
func TestEndFor(t *testing.T) {
	for _, c := range []struct {
		t0  time.Time
		ttl int64
		end int64
	}{
		{time.Unix(100, 0), 3, 101},                     // expiry 103, margin 0.3s: last second 101 (ends at 102)
		{time.Unix(100, 400e6), 3, 102},                 // stop at 103.1
		{time.Unix(100, 200e6), 3, 101},                 // stop at 102.9
		{time.Unix(100, 0), 10, 108},                    // stop at 109
		{time.Unix(100, 999e6), 10, 108},                // stop at 109.999
		{time.Unix(1750000000, 0), 60, 1750000000 + 53}, // stop at +54
	} {
		end := endFor(c.t0, c.ttl)
		if end != c.end {
			t.Errorf("endFor(%v, %d) = %d, want %d", c.t0, c.ttl, end, c.end)
		}
		if stop := time.Unix(end+1, 0); stop.After(c.t0.Add(time.Duration(c.ttl)*time.Second - margin(c.ttl))) {
			t.Errorf("endFor(%v, %d): issuing until %v, past the margin", c.t0, c.ttl, stop)
		}
	}
}

// Several claimants get disjoint node IDs; one more is refused while they
// live; a released range passes at once to the next claimant, which starts
// after the last second used.
func TestDisjointClaimsAndRefusal(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	cli := newClient(t, srv.endpoint())
	cfg := Config{Client: cli, Prefix: "/disjoint/", Nodes: 16, LastNode: 63, TTL: testTTL}
	var gens []*randflake.Leased
	var cols []*collector
	ranges := map[int64]bool{}
	for range 4 {
		g := newLeased(t, cfg)
		l := g.Lease()
		if ranges[l.FirstNode] || l.Nodes() != 16 {
			t.Fatalf("lease %v overlaps another or has the wrong size", l)
		}
		ranges[l.FirstNode] = true
		gens = append(gens, g)
		cols = append(cols, collect(g))
	}
	extra, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := extra.Acquire(ctx); !errors.Is(err, ErrNoFreeNodes) {
		t.Fatalf("fifth claimant: %v, want ErrNoFreeNodes", err)
	}
	time.Sleep(time.Second)
	check := newIDCheck(t)
	var maxTS []int64
	for i, c := range cols {
		_, mx := check.add(fmt.Sprintf("generator %d", i), c.stop(), gens[i].Lease())
		maxTS = append(maxTS, mx)
	}
	released := gens[1].Lease()
	if err := gens[1].Close(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := extra.Acquire(ctx)
	if err != nil {
		t.Fatalf("claim right after a release: %v", err)
	}
	if l.FirstNode != released.FirstNode || l.Start != maxTS[1]+1 {
		t.Errorf("took over %v, want nodes %d- from second %d", l, released.FirstNode, maxTS[1]+1)
	}
	if err := extra.Release(ctx, l, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d IDs from 4 generators, no duplicate", len(check.seen))
}

// While etcd is down the generators issue IDs until their lease ends (no
// later than their etcd leases could expire) and none after; when etcd
// comes back they resume.
func TestEtcdStopAndRestart(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	cli := newClient(t, srv.endpoint())
	cfg := Config{Client: cli, Prefix: "/restart/", Nodes: 16, LastNode: 31, TTL: testTTL}
	g1, g2 := newLeased(t, cfg), newLeased(t, cfg)
	c1, c2 := collect(g1), collect(g2)
	time.Sleep(700 * time.Millisecond)

	stoppedAt := time.Now()
	srv.stop()
	time.Sleep(testTTL + 500*time.Millisecond)
	for i, c := range []*collector{c1, c2} {
		_, last := c.count()
		// The lease end is at most TTL - margin after the last keep-alive,
		// sent before etcd stopped; allow for scheduling delays.
		if limit := stoppedAt.Add(testTTL - margin(3) + 200*time.Millisecond); last.After(limit) {
			t.Errorf("generator %d issued an ID at %v, %v after etcd stopped", i, last, last.Sub(stoppedAt))
		}
	}
	_, err := g1.Generate()
	var le *randflake.LeaseError
	if !errors.Is(err, randflake.ErrInvalidLease) || !errors.As(err, &le) {
		t.Fatalf("Generate with etcd down: %v, want a *randflake.LeaseError", err)
	}
	t.Logf("with etcd down: %v", err)

	restartedAt := time.Now()
	srv.start()
	for i, c := range []*collector{c1, c2} {
		for {
			if _, last := c.count(); last.After(restartedAt) {
				t.Logf("generator %d resumed %v after the restart", i, last.Sub(restartedAt).Round(time.Millisecond))
				break
			}
			if time.Since(restartedAt) > 20*time.Second {
				t.Fatalf("generator %d did not resume within 20s of etcd's restart: %v", i, c.errs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(300 * time.Millisecond)
	check := newIDCheck(t)
	check.add("generator 1", c1.stop(), g1.Lease())
	check.add("generator 2", c2.stop(), g2.Lease())
	t.Logf("%d IDs, no duplicate", len(check.seen))
}

// A holder cut off from etcd (its connections dropped, as in a network
// partition) stops issuing before another claimant can take its node IDs;
// the other claimant starts after its last second; when the partition
// heals, the first finds its lease lost and claims node IDs again once
// they are free, after the second's last second.
func TestPartition(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	p := newProxy(t, srv.endpoint())
	cliA := newClient(t, p.addr)
	cliB := newClient(t, srv.endpoint())
	cfgA := Config{Client: cliA, Prefix: "/partition/", Nodes: 16, LastNode: 15, TTL: testTTL, Promise: testTTL, Holder: "A"}
	cfgB := cfgA
	cfgB.Client, cfgB.Holder = cliB, "B"
	gA := newLeased(t, cfgA)
	cA := collect(gA)
	time.Sleep(500 * time.Millisecond)

	ctx := context.Background()
	if _, err := NewLeased(ctx, testSecret, cfgB); !errors.Is(err, ErrNoFreeNodes) {
		t.Fatalf("claim while A holds the node IDs: %v, want ErrNoFreeNodes", err)
	}
	cutAt := time.Now()
	p.cut()
	// The moment A's claim disappears (its etcd lease expired) is the
	// earliest another process could claim its node IDs.
	var freedAt time.Time
	for {
		resp, err := cliB.Get(ctx, "/partition/claim/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == 0 {
			freedAt = time.Now()
			break
		}
		if time.Since(cutAt) > 3*testTTL {
			t.Fatal("A's claim still there 3 TTLs after the partition")
		}
		time.Sleep(20 * time.Millisecond)
	}
	gB, err := NewLeased(ctx, testSecret, cfgB)
	if err != nil {
		t.Fatal(err)
	}
	nA, lastA := cA.count()
	if !lastA.Before(freedAt) {
		t.Fatalf("A issued an ID at %v, after its node IDs were free at %v", lastA, freedAt)
	}
	t.Logf("A stopped %v after the cut; its node IDs were free %v after it",
		lastA.Sub(cutAt).Round(time.Millisecond), freedAt.Sub(cutAt).Round(time.Millisecond))
	if freedAt.Sub(cutAt) < testTTL-time.Second {
		t.Errorf("A's node IDs free %v after the cut, before its TTL could pass", freedAt.Sub(cutAt))
	}
	cB := collect(gB)
	time.Sleep(500 * time.Millisecond)

	// Heal the partition: A's lease has expired, B holds the node IDs.
	p.restore(t)
	time.Sleep(time.Second)
	if n, _ := cA.count(); n != nA {
		t.Fatalf("A issued %d IDs while B held its node IDs", n-nA)
	}
	idsB := cB.stop()
	if err := gB.Close(ctx); err != nil {
		t.Fatal(err)
	}
	releasedAt := time.Now()
	for {
		if n, _ := cA.count(); n > nA {
			break
		}
		if time.Since(releasedAt) > 15*time.Second {
			t.Fatalf("A issued nothing 15s after B released the node IDs: %v", cA.errs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	idsA := cA.stop()
	check := newIDCheck(t)
	_, maxA1 := check.add("A before the partition", idsA[:nA], randflake.Lease{})
	minB, maxB := check.add("B", idsB, gB.Lease())
	minA2, _ := check.add("A after the partition", idsA[nA:], gA.Lease())
	if minB <= maxA1 || minA2 <= maxB {
		t.Errorf("seconds overlap: A up to %d, B %d-%d, A again from %d", maxA1, minB, maxB, minA2)
	}
	t.Logf("%d IDs, no duplicate", len(check.seen))
}

// Thousands of claims and releases by concurrent claimants on a few
// ranges leave no claim and no etcd lease behind, and every claim starts
// after the seconds its predecessors recorded.
func TestClaimReleaseCycles(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	cli := newClient(t, srv.endpoint())
	cfg := Config{Client: cli, Prefix: "/cycles/", Nodes: 16, LastNode: 31, TTL: testTTL}
	const workers, cycles = 4, 500
	ctx := context.Background()
	var mu sync.Mutex
	recorded := map[int64]int64{} // first node -> second recorded at release
	var wg sync.WaitGroup
	var refusals int
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := cfg
			cfg.Holder = fmt.Sprintf("worker %d", w)
			s, err := New(cfg)
			if err != nil {
				t.Error(err)
				return
			}
			for i := 0; i < cycles; i++ {
				l, err := s.Acquire(ctx)
				if errors.Is(err, ErrNoFreeNodes) {
					mu.Lock()
					refusals++
					mu.Unlock()
					i--
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if prev := recorded[l.FirstNode]; l.Start <= prev {
					t.Errorf("lease %v starts at or before the recorded second %d", l, prev)
				}
				mu.Unlock()
				last := time.Now().Unix()
				if last < l.Start {
					last = 0
				}
				mu.Lock()
				recorded[l.FirstNode] = max(last, l.Start-1)
				mu.Unlock()
				if err := s.Release(ctx, l, last); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	claims, err := cli.Get(ctx, "/cycles/claim/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	leases, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if claims.Count != 0 || len(leases.Leases) != 0 {
		t.Errorf("after %d cycles: %d claim keys and %d etcd leases left", workers*cycles, claims.Count, len(leases.Leases))
	}
	for range 2 {
		s, _ := New(cfg)
		if _, err := s.Acquire(ctx); err != nil {
			t.Fatalf("after %d cycles: %v", workers*cycles, err)
		}
	}
	t.Logf("%d claim/release cycles (%d refusals while 4 claimants shared 2 ranges)", workers*cycles, refusals)
}

// The killed-holder test runs the holder in a real process: the test binary
// runs itself with RANDFLAKE_ETCDLEASE_HELPER set, and TestHelperProcess
// then claims node IDs on the etcd it names, prints its lease and writes
// every ID it issues to a file (one write per batch) until it is killed.
const helperEnv = "RANDFLAKE_ETCDLEASE_HELPER"

func TestHelperProcess(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("helper process for TestKilledHolder")
	}
	f := strings.Split(spec, "|") // endpoint, output file
	cli := newClient(t, f[0])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := NewLeased(ctx, testSecret, Config{Client: cli, Prefix: "/killed/", Nodes: 16, LastNode: 15, TTL: testTTL, Promise: testTTL, Holder: "doomed"})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	l := g.Lease()
	fmt.Printf("LEASE %d %d %d %d\n", l.FirstNode, l.LastNode, l.Start, l.End)
	out, err := os.OpenFile(f[1], os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	batch := make([]int64, 32)
	buf := make([]byte, 8*len(batch))
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		n, _ := g.GenerateBatch(batch)
		for i, id := range batch[:n] {
			binary.LittleEndian.PutUint64(buf[8*i:], uint64(id))
		}
		out.Write(buf[:8*n])
	}
	os.Exit(0)
}

// A holder killed with SIGKILL keeps its node IDs until its etcd lease's
// TTL passes; then another claimant takes them over and issues IDs that
// start after the killed holder's last second.
func TestKilledHolder(t *testing.T) {
	t.Parallel()
	srv := startEtcd(t)
	out := filepath.Join(t.TempDir(), "ids")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+srv.endpoint()+"|"+out)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	leases := make(chan randflake.Lease, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l randflake.Lease
			if _, err := fmt.Sscanf(sc.Text(), "LEASE %d %d %d %d", &l.FirstNode, &l.LastNode, &l.Start, &l.End); err == nil {
				leases <- l
			} else {
				t.Logf("helper: %s", sc.Text())
			}
		}
	}()
	var l1 randflake.Lease
	select {
	case l1 = <-leases:
	case <-time.After(30 * time.Second):
		t.Fatal("no lease from the helper process")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(out); err == nil && fi.Size() > 8*32*20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the helper issued no IDs")
		}
	}
	// Let it renew at least once, so its promise is ahead of its start.
	time.Sleep(time.Second)

	cli := newClient(t, srv.endpoint())
	cfg := Config{Client: cli, Prefix: "/killed/", Nodes: 16, LastNode: 15, TTL: testTTL, Holder: "successor"}
	ctx := context.Background()
	if _, err := NewLeased(ctx, testSecret, cfg); !errors.Is(err, ErrNoFreeNodes) {
		t.Fatalf("claim while the helper lives: %v, want ErrNoFreeNodes", err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killedAt := time.Now()
	var g *randflake.Leased
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
	// The last keep-alive was at most a renewal interval (under a second
	// with a 3s TTL) before the kill.
	if takenAt < testTTL-time.Second {
		t.Errorf("node IDs taken over %v after SIGKILL, before the TTL could pass", takenAt)
	}
	c := collect(g)
	time.Sleep(500 * time.Millisecond)
	ids2 := c.stop()

	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	ids1 := make([]issued, len(data)/8)
	for i := range ids1 {
		ids1[i].id = int64(binary.LittleEndian.Uint64(data[8*i:]))
	}
	check := newIDCheck(t)
	_, max1 := check.add("the killed holder", ids1, l1)
	min2, _ := check.add("the successor", ids2, g.Lease())
	if l2 := g.Lease(); l2.Start <= max1 || min2 <= max1 {
		t.Errorf("the successor's lease %v (first ID at second %d) does not start after the killed holder's last second %d", l2, min2, max1)
	}
	if len(ids2) == 0 {
		t.Error("the successor issued no IDs")
	}
	t.Logf("taken over %v after SIGKILL; %d + %d IDs, no duplicate", takenAt.Round(time.Millisecond), len(ids1), len(ids2))
}
