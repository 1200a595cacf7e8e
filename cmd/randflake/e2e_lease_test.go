package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// fetch returns count IDs from a running serve, as decimal strings. A 503
// (the server between leases, its renewal late on a slow store) is tried
// again after its Retry-After, as the client package does, for up to
// fetchRetryTimeout stretched by this process's slowdown; each retry is
// logged. Any other answer, or a 503 past that, fails the test with the
// answer's body and the end of the process's log.
func fetch(t *testing.T, p *serveProcess, count int) []string {
	t.Helper()
	limit := within(fetchRetryTimeout)
	deadline := time.Now().Add(limit)
	for {
		ids, status, body, retry, err := fetchOnce(p, count)
		if err == nil && status == 200 {
			return ids
		}
		if status == http.StatusServiceUnavailable && time.Now().Add(retry).Before(deadline) {
			t.Logf("fetch from %s: 503, tried again in %v: %s", p.url, retry, strings.TrimSpace(body))
			time.Sleep(retry)
			continue
		}
		t.Fatalf("fetch of %d IDs from %s: status %d, error %v, body %q (503s retried for %v, %s); the process's log ends:\n%s",
			count, p.url, status, err, body, limit, slowness(), logTail(p.logs.String(), 20))
	}
}

// fetchRetryTimeout is how long, on idle cores, fetch keeps trying a serve
// that answers 503.
const fetchRetryTimeout = 15 * time.Second

// fetchOnce makes one request for count IDs. It returns the IDs of a 200,
// or the status, the start of the body and the delay a 503 asks for.
func fetchOnce(p *serveProcess, count int) (ids []string, status int, body string, retry time.Duration, err error) {
	resp, err := http.Get(p.url + "/v1/ids?format=int&count=" + strconv.Itoa(count))
	if err != nil {
		return nil, 0, "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		retry = 200 * time.Millisecond
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			retry = time.Duration(s) * time.Second
		}
		return nil, resp.StatusCode, string(b), retry, nil
	}
	var got struct{ IDs []string }
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		return nil, 200, "", 0, err
	}
	if len(got.IDs) != count {
		return nil, 200, "", 0, fmt.Errorf("%d IDs, want %d", len(got.IDs), count)
	}
	return got.IDs, 200, "", 0, nil
}

// logTail returns the last n lines of a process's log.
func logTail(log string, n int) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// nodesOf inspects IDs with the binary and returns the node IDs seen.
func nodesOf(t *testing.T, env []string, ids []string) map[int64]int {
	t.Helper()
	args := []string{"inspect", "--json"}
	for _, id := range ids {
		args = append(args, "+"+id)
	}
	r := runBinary(t, "", env, args...)
	if r.code != 0 {
		t.Fatalf("inspect: %d %s", r.code, r.stderr)
	}
	nodes := map[int64]int{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var v struct{ Node int64 }
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatal(err)
		}
		nodes[v.Node]++
	}
	return nodes
}

// stop sends SIGTERM to serve and fails unless it exits 0 within 15s
// (stretched by within).
func stop(t *testing.T, p *serveProcess) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	limit := within(15 * time.Second)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("serve exited with %v: %s", err, p.logs.String())
		}
	case <-time.After(limit):
		t.Fatalf("serve did not stop within %v of SIGTERM (%s); logs:\n%s", limit, slowness(), p.logs.String())
	}
}

// With no configuration at all, serve creates the state directory and its
// secret, claims node IDs, and a second process on the same machine gets
// other node IDs; inspect reads both with the directory's secret.
func TestServeWithoutConfiguration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := []string{"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=", "RANDFLAKE_STATE_DIR=" + dir}
	a := startServeEnv(t, env)
	// b also has a RANDFLAKE_KERNEL it cannot honour, which it logs.
	b := startServeEnv(t, append(slices.Clone(env), "RANDFLAKE_KERNEL=no-such-kernel"))
	// The first use of the directory is logged, with its path, once.
	if logA, logB := a.logs.String(), b.logs.String(); !strings.Contains(logA, firstUseNotice) || !strings.Contains(logA, dir) || strings.Contains(logB, firstUseNotice) {
		t.Errorf("first use: logs of a:\n%s\nof b:\n%s", logA, logB)
	}
	if logA, logB := a.logs.String(), b.logs.String(); strings.Contains(logA, "RANDFLAKE_KERNEL") || !strings.Contains(logB, "RANDFLAKE_KERNEL not honoured") {
		t.Errorf("RANDFLAKE_KERNEL: logs of a:\n%s\nof b:\n%s", logA, logB)
	}
	idsA, idsB := fetch(t, a, 500), fetch(t, b, 500)
	all := append(slices.Clone(idsA), idsB...)
	if checkUnique(t, all, 1000, nil); t.Failed() {
		t.FailNow() // across the two processes
	}
	na, nb := nodesOf(t, env, idsA), nodesOf(t, env, idsB)
	for n := range na {
		if nb[n] > 0 {
			t.Fatalf("node %d used by both processes", n)
		}
	}
	st, err := os.Stat(dir + "/secret")
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v %v", st, err)
	}
	stop(t, a)
	stop(t, b)
}

// startEtcd runs a single-member etcd in the test process on loopback
// ports chosen by the kernel, with its logs silenced and short raft ticks,
// and returns its client endpoint.
func startEtcd(t *testing.T) string {
	t.Helper()
	_, endpoint := startEtcdServer(t)
	return endpoint
}

// startEtcdServer is startEtcd, returning a function that stops the
// server too.
func startEtcdServer(t *testing.T) (stop func(), endpoint string) {
	t.Helper()
	// Ports no other test's server or connection takes meanwhile.
	port := func() url.URL { return url.URL{Scheme: "http", Host: closedPort(t)} }
	var (
		e      *embed.Etcd
		client url.URL
		err    error
	)
	// A port taken between its check and etcd's bind: new ports, as
	// testserver.StartOnFreePorts does for the servers it starts.
	for try := 0; try < 5; try++ {
		cfg := embed.NewConfig()
		cfg.Name = "e2e"
		cfg.Dir = t.TempDir()
		var peer url.URL
		client, peer = port(), port()
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.InitialCluster = cfg.Name + "=" + peer.String()
		cfg.TickMs, cfg.ElectionMs = 10, 100
		cfg.UnsafeNoFsync = true
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		if e, err = embed.StartEtcd(cfg); !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	stop = sync.OnceFunc(e.Close)
	t.Cleanup(stop)
	limit := within(startupTimeout)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(limit):
		t.Fatalf("etcd not ready within %v (%s)", limit, slowness())
	}
	return stop, client.Host
}

// serve --etcd: two processes claim disjoint node IDs from a real etcd and
// release them on SIGTERM, after which a third process can take them.
func TestServeWithEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out etcd leases (--etcd-ttl 3s) and their unknown history: not in -short")
	}
	t.Parallel()
	endpoint := startEtcd(t)
	args := []string{"--etcd", endpoint, "--claim", "4", "--etcd-ttl", "3s", "--etcd-horizon", "9s"}
	a := startServe(t, args...)
	b := startServe(t, args...)
	idsA, idsB := fetch(t, a, 2000), fetch(t, b, 2000)
	all := append(slices.Clone(idsA), idsB...)
	if checkUnique(t, all, 4000, nil); t.Failed() {
		t.FailNow() // across the two processes
	}
	na, nb := nodesOf(t, secretEnv, idsA), nodesOf(t, secretEnv, idsB)
	if len(na) > 4 || len(nb) > 4 {
		t.Fatalf("more node IDs than claimed: %v %v", na, nb)
	}
	for n := range na {
		if nb[n] > 0 {
			t.Fatalf("node %d used by both processes", n)
		}
	}
	stop(t, a)
	c := startServe(t, args...)
	idsC := fetch(t, c, 100)
	all = append(all, idsC...)
	if checkUnique(t, all, 4100, nil); t.Failed() {
		t.FailNow() // after the takeover
	}
	stop(t, b)
	stop(t, c)
	// Without an explicit secret --etcd refuses to start.
	r := runBinary(t, "", []string{"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=", "RANDFLAKE_STATE_DIR=" + t.TempDir()}, "serve", "--etcd", endpoint)
	if r.code != 2 || !strings.Contains(r.stderr, "shared secret") {
		t.Fatalf("serve --etcd without a secret: %d %q", r.code, r.stderr)
	}
}
