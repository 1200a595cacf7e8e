package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/testserver"
	"go.uber.org/zap"
)

// ownStateEnv is an environment with a state directory of its own and no
// explicit secret: the directory's secret is used.
func ownStateEnv(t *testing.T) (dir string, env []string) {
	dir = t.TempDir()
	return dir, []string{"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=", "RANDFLAKE_STATE_DIR=" + dir}
}

// exitWithin waits up to d (stretched by within) for p to exit and
// returns its exit status, or fails.
func exitWithin(t *testing.T, p *serveProcess, d time.Duration) int {
	t.Helper()
	d = within(d)
	select {
	case err := <-p.done:
		p.done <- err
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("waiting for the process: %v", err)
		}
		return 0
	case <-time.After(d):
		t.Fatalf("still running %v later (%s); logs:\n%s", d, slowness(), p.logs.String())
		return -1
	}
}

// requireNoLeak fails if an answer to a client reveals a path, a
// package's error or an operating-system error.
func requireNoLeak(t *testing.T, what string, body []byte, extra ...string) {
	t.Helper()
	for _, leak := range append([]string{"/", "statedir", "etcdlease", "randflake:", "lock file", "deadline", "connection refused"}, extra...) {
		if bytes.Contains(body, []byte(leak)) {
			t.Errorf("%s: the answer %q reveals %q", what, body, leak)
		}
	}
}

// waitStatus polls GET /v1/ids until it answers status, for up to d
// (stretched by within), and returns the body.
func waitStatus(t *testing.T, p *serveProcess, status int, d time.Duration) []byte {
	t.Helper()
	d = within(d)
	deadline := time.Now().Add(d)
	for {
		resp, err := http.Get(p.url + "/v1/ids?count=10")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == status {
				return body
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d within %v (%s; last: %v); logs:\n%s", status, d, slowness(), err, p.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A lost lease (its lock files removed under the running process) is a
// 503 of kind lease with a generic message; the log says what happened.
// The process claims every node ID, so that the new lease it takes at once
// is on the same ones and starts only after their promise.
func TestServeLostLeaseIsLogged(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a lease renewal (about 3 s) and its loss: not in -short")
	}
	t.Parallel()
	dir, env := ownStateEnv(t)
	p := startServeEnv(t, env, "--claim", "131072")
	fetch(t, p, 10)
	// Until then the lease is renewed about every 3 s, and has 10 s at
	// most left.
	limit := within(15 * time.Second)
	deadline := time.Now().Add(limit)
	for {
		mfs := scrape(t, p.url)
		renewed, _ := metricValue(mfs, "randflake_lease_renewals_total")
		failed, _ := metricValue(mfs, "randflake_lease_renewal_failures_total")
		left, _ := metricValue(mfs, "randflake_lease_seconds_remaining")
		if failed != 0 || left < 1 || left > 11 {
			t.Fatalf("before the loss: %v renewal failures, %v seconds left; want 0 and 1 to 11", failed, left)
		}
		if renewed >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no renewal counted within %v (%s)", limit, slowness())
		}
		time.Sleep(200 * time.Millisecond)
	}
	blocks, err := filepath.Glob(filepath.Join(dir, "blocks", "*"))
	if err != nil || len(blocks) == 0 {
		t.Fatalf("lock files: %v %v", blocks, err)
	}
	for _, b := range blocks {
		os.Remove(b)
	}
	body := waitStatus(t, p, 503, 30*time.Second)
	var e map[string]string
	if err := json.Unmarshal(body, &e); err != nil || len(e) != 2 || e["kind"] != "lease" || e["error"] == "" {
		t.Fatalf("503 body %q; want exactly a JSON error of kind lease", body)
	}
	requireNoLeak(t, "lost lease", body, dir)
	waitLog(t, p, regexp.MustCompile(`level=ERROR msg="randflake: lease lost.*lock file of node IDs`), 10*time.Second)
	waitLog(t, p, regexp.MustCompile(`level=ERROR msg="issuing IDs failed" kind=lease count=10 err=`), 10*time.Second)
	if failed, _ := metricValue(scrape(t, p.url), "randflake_lease_renewal_failures_total"); failed < 1 {
		t.Errorf("the lost lease is not counted as a failed renewal: %v", failed)
	}
}

// An etcd outage: renewals fail and are logged with the error, the IDs
// stop at the lease's end, and clients get a 503 of kind lease without the
// error; the etcd client's own warnings come out in the process's format.
func TestServeEtcdOutageIsLogged(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out an etcd lease (--etcd-ttl 3s) after etcd stops: not in -short")
	}
	t.Parallel()
	stopEtcd, endpoint := startEtcdServer(t)
	p := startServe(t, "--etcd", endpoint, "--claim", "4", "--etcd-ttl", "3s", "--etcd-horizon", "9s", "--log-format", "json")
	fetch(t, p, 100)
	stopEtcd()
	body := waitStatus(t, p, 503, 30*time.Second)
	var eb map[string]string
	if err := json.Unmarshal(body, &eb); err != nil || len(eb) != 2 || eb["kind"] != "lease" {
		t.Fatalf("503 body %q; want exactly a JSON error of kind lease", body)
	}
	requireNoLeak(t, "etcd outage", body, endpoint, "keep-alive")
	// The lease can end while a renewal is still waiting on the stopped
	// etcd (a loaded machine): the failure is counted when that renewal
	// gives up, which the WARN line follows.
	waitLog(t, p, regexp.MustCompile(`"level":"WARN","msg":"randflake: lease renewal failed[^"]*".*"err":"[^"]*etcd`), 10*time.Second)
	waitLog(t, p, regexp.MustCompile(`"level":"ERROR","msg":"issuing IDs failed","kind":"lease","count":10,"err":"`), 10*time.Second)
	mfs := scrape(t, p.url)
	if failed, _ := metricValue(mfs, "randflake_lease_renewal_failures_total"); failed < 1 {
		t.Errorf("randflake_lease_renewal_failures_total = %v after a renewal failure was logged, want at least 1", failed)
	}
	if left, ok := metricValue(mfs, "randflake_lease_seconds_remaining"); !ok || left != 0 {
		t.Errorf("randflake_lease_seconds_remaining = %v (present: %v) past the lease's end, want 0", left, ok)
	}
	for _, l := range strings.Split(strings.TrimSpace(p.logs.String()), "\n") {
		if !json.Valid([]byte(l)) {
			t.Errorf("not a JSON log line: %q", l)
		}
	}
}

// --log-format json makes every line JSON; --access-log adds one line per
// request, without the query string.
func TestServeLogFormatAndAccessLog(t *testing.T) {
	t.Parallel()
	p := startServe(t, "--nodes", "0-63", "--log-format", "json", "--access-log")
	fetch(t, p, 3)
	http.Get(p.url + "/nope?password=hunter2")
	stop(t, p)
	var access []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(p.logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON log line: %q", l)
		}
		if m["log"] == "access" {
			access = append(access, m)
		}
	}
	// startServe polled /readyz until it answered 200.
	var ids, nope map[string]any
	for _, m := range access {
		switch m["path"] {
		case "/v1/ids":
			ids = m
		case "/nope":
			nope = m
		}
	}
	if ids == nil || ids["status"] != 200.0 || ids["method"] != "GET" || ids["bytes"].(float64) <= 0 || ids["remote"] == "" || ids["duration"] == nil {
		t.Errorf("access line of /v1/ids: %v", ids)
	}
	if nope == nil || nope["status"] != 404.0 || nope["kind"] != "not_found" {
		t.Errorf("access line of /nope: %v", nope)
	}
	if strings.Contains(p.logs.String(), "hunter2") || strings.Contains(p.logs.String(), "count=3") {
		t.Errorf("the log holds a query string:\n%s", p.logs.String())
	}
	if r := runBinary(t, "", secretEnv, "serve", "--log-format", "xml"); r.code != 2 || !strings.Contains(r.stderr, "--log-format") {
		t.Errorf("--log-format xml: exit %d, %q", r.code, r.stderr)
	}
	if r := runBinary(t, "", secretEnv, "serve", "--help"); !strings.Contains(r.stdout, "-log-format") || !strings.Contains(r.stdout, "-access-log") {
		t.Errorf("serve --help lacks the logging flags: %q", r.stdout)
	}
}

// closedPort returns a loopback address nothing listens on, never the
// same twice and outside the kernel's range for ports of its choosing, so
// that no other test's server or connection takes it before the server
// meant for it (if any) binds it.
func closedPort(t *testing.T) string {
	t.Helper()
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

var waitingForEtcd = regexp.MustCompile(`msg="still waiting for node IDs from etcd" endpoints=(\S+) waited=(\S+)`)

// firstNotice checks the first waiting notice m (waitingForEtcd's
// submatches) of a process started at start: it names addr, and came
// about a second into the wait by the process's own clock (waited=, 1s
// or a little more where the machine is slow), not after later ones.
func firstNotice(t *testing.T, m []string, addr string, start time.Time) {
	t.Helper()
	waited, err := time.ParseDuration(m[2])
	if most := within(2 * time.Second); err != nil || m[1] != addr || waited < time.Second || waited > most {
		t.Errorf("first notice %v after the start: %q; want endpoints=%s and waited= from 1s to %v (%s)", time.Since(start).Round(time.Millisecond), m[0], addr, most, slowness())
	}
}

// stoppedAtOnce checks that p, signalled at t0 during a wait with no end,
// exited with status code and the message want, at once: within 2 s
// (stretched by within).
func stoppedAtOnce(t *testing.T, p *serveProcess, t0 time.Time, code int, want string) {
	t.Helper()
	got := exitWithin(t, p, 5*time.Second)
	took := time.Since(t0)
	if most := within(2 * time.Second); got != code || took > most || !strings.Contains(p.logs.String(), want) {
		t.Errorf("after the signal: exit %d after %v, want %d within %v (%s) and %q; logs:\n%s", got, took, code, most, slowness(), want, p.logs.String())
	}
}

// With etcd unreachable, gen and serve say within about a second that
// they are waiting for etcd, and at which endpoints, and keep saying so.
// A signal during the wait stops them at once.
func TestWaitingForEtcdIsReported(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out notices 5 s apart: not in -short")
	}
	t.Parallel()
	addr := closedPort(t)
	t.Run("gen", func(t *testing.T) {
		start := time.Now()
		p := spawn(t, secretEnv, "gen", "--etcd", addr, "--wait", "30s")
		m := waitLog(t, p, waitingForEtcd, 5*time.Second)
		firstNotice(t, m, addr, start)
		waitLog(t, p, regexp.MustCompile(`msg="still waiting for node IDs from etcd" endpoints=\S+ waited=(?:[5-9]|1[0-9])s`), 20*time.Second)
		t0 := time.Now()
		p.cmd.Process.Signal(os.Interrupt)
		stoppedAtOnce(t, p, t0, 1, "interrupted while waiting for node IDs")
	})
	t.Run("gen --wait", func(t *testing.T) {
		r := runBinary(t, "", secretEnv, "gen", "--etcd", addr, "--wait", "2s")
		if r.code != 1 || !strings.Contains(r.stderr, "no node IDs within --wait 2s") || !waitingForEtcd.MatchString(r.stderr) {
			t.Errorf("gen --wait 2s: exit %d, stderr:\n%s", r.code, r.stderr)
		}
	})
	t.Run("serve", func(t *testing.T) {
		start := time.Now()
		p := spawnServe(t, secretEnv, "--etcd", addr)
		m := waitLog(t, p, waitingForEtcd, 5*time.Second)
		firstNotice(t, m, addr, start)
		t0 := time.Now()
		p.cmd.Process.Signal(syscall.SIGTERM)
		stoppedAtOnce(t, p, t0, 0, "stopped while waiting for node IDs")
	})
}

var (
	waitingForStart = regexp.MustCompile(`msg="randflake: waiting for the (?:lease to start|previous holder)[^"]*"(?: store="[^"]*")? nodes=(\S+) start=(\S+)`)
	leaseAcquired   = regexp.MustCompile(`msg="randflake: lease acquired" nodes=(\S+) start=(\S+)`)
)

// stoppedBefore checks that p, signalled at t0 during a wait for the
// moment until, exited with status code and the message want before
// until came: it did not wait it out.
func stoppedBefore(t *testing.T, p *serveProcess, t0, until time.Time, code int, want string) {
	t.Helper()
	if !t0.Before(until) {
		t.Fatalf("the signal went at %v, after the wait's end %v: this test was too slow to signal during it (%s)", t0.Format(time.RFC3339Nano), until.Format(time.RFC3339), slowness())
	}
	got := exitWithin(t, p, 30*time.Second)
	exited := time.Now()
	if got != code || !exited.Before(until) || !strings.Contains(p.logs.String(), want) {
		t.Errorf("after the signal: exit %d at %v, %v after it; want %d before the wait's end %v, and %q; logs:\n%s",
			got, exited.Format(time.RFC3339Nano), exited.Sub(t0).Round(time.Millisecond), code, until.Format(time.RFC3339), want, p.logs.String())
	}
}

// A state directory whose state file is gone makes serve wait for its
// lease to start. SIGTERM during that wait ends it before the lease's
// start (at once, not waiting it out), status 0, and releases the node
// IDs so that the next serve's lease starts no later than the first
// one's would have.
func TestServeStopsDuringLeaseWait(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a lease's unknown history (about 10 s): not in -short")
	}
	t.Parallel()
	dir, env := ownStateEnv(t)
	first := startServeEnv(t, env)
	fetch(t, first, 10)
	stop(t, first)
	if err := os.Remove(filepath.Join(dir, "state")); err != nil {
		t.Fatal(err)
	}

	p := spawnServe(t, env)
	m := waitLog(t, p, waitingForStart, 20*time.Second)
	nodes, start := m[1], m[2]
	leaseStart, err := time.Parse(time.RFC3339, start)
	if err != nil {
		t.Fatalf("the notice's start=%s: %v", start, err)
	}
	t0 := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	stoppedBefore(t, p, t0, leaseStart, 0, "stopped while waiting for node IDs")

	q := spawnServe(t, env)
	m = waitLog(t, q, leaseAcquired, 20*time.Second)
	if m[1] != nodes || m[2] > start {
		t.Errorf("the next serve's lease: nodes %s from %s; the stopped one's: nodes %s from %s", m[1], m[2], nodes, start)
	}
	t.Logf("stopped serve's lease started at %s, the next one's at %s", start, m[2])
}

// historyUnknown is the notice of a wait for a store whose history is
// unknown, with the moment it ends.
var historyUnknown = regexp.MustCompile(`msg="randflake: the history of the node IDs is unknown[^"]*" .*until=(\S+)`)

// gen stops at an interrupt during the wait too, with status 1, before
// the wait's end.
func TestGenStopsDuringLeaseWait(t *testing.T) {
	t.Parallel()
	dir, env := ownStateEnv(t)
	if r := runBinary(t, "", env, "gen"); r.code != 0 {
		t.Fatalf("gen: %d %s", r.code, r.stderr)
	}
	os.Remove(filepath.Join(dir, "state"))
	p := spawn(t, env, "gen", "-n", "5")
	m := waitLog(t, p, historyUnknown, 10*time.Second)
	until, err := time.Parse(time.RFC3339, m[1])
	if err != nil {
		t.Fatalf("the notice's until=%s: %v", m[1], err)
	}
	waitLog(t, p, regexp.MustCompile(`msg="still waiting for node IDs from the state directory"`), 10*time.Second)
	t0 := time.Now()
	p.cmd.Process.Signal(os.Interrupt)
	stoppedBefore(t, p, t0, until, 1, "interrupted while waiting for node IDs")
}

// Secret and token files are read through ReadPrivateFile: a FIFO or a
// device is refused at once with a message naming it, never waited on or
// read without bound, and an all-zero secret is refused from every source.
func TestPrivateFilesAndWeakSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	special := []string{fifo, "/dev/zero"}
	dev := filepath.Join(dir, "zero")
	if err := syscall.Mknod(dev, syscall.S_IFCHR|0o600, 1<<8|5); err == nil { // /dev/zero's numbers on Linux
		special = append(special, dev)
	} else {
		t.Logf("no private character device (%v): tested with /dev/zero only", err)
	}
	clean := []string{"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=", "RANDFLAKE_STATE_DIR=" + t.TempDir()}
	run := func(env []string, args ...string) result {
		start := time.Now()
		r := runBinaryTimeout(t, 20*time.Second, env, args...)
		if took, most := time.Since(start), within(10*time.Second); took > most {
			t.Errorf("%v took %v, want at most %v (%s): a special file waited on?", args, took, most, slowness())
		}
		return r
	}
	for _, f := range special {
		for _, c := range []struct {
			env  []string
			args []string
		}{
			{clean, []string{"gen", "--nodes", "1", "--secret-file", f}},
			{append(clean[:1:1], "RANDFLAKE_SECRET_FILE="+f, clean[2]), []string{"gen", "--nodes", "1"}},
			{secretEnv, []string{"serve", "--nodes", "1", "--inspect-token-file", f}},
			{append(slicesClone(secretEnv), "RANDFLAKE_INSPECT_TOKEN_FILE="+f), []string{"serve", "--nodes", "1"}},
		} {
			r := run(c.env, c.args...)
			if r.code != 1 || !strings.Contains(r.stderr, f) || strings.Contains(r.stderr, "fatal error") || strings.Contains(r.stderr, "goroutine") {
				t.Errorf("%v with %s: exit %d, stderr %q", c.args, f, r.code, r.stderr)
			}
		}
	}
	zeroHex := filepath.Join(dir, "zero.hex")
	os.WriteFile(zeroHex, []byte(strings.Repeat("0", 32)+"\n"), 0o600)
	zeroRaw := filepath.Join(dir, "zero.raw")
	os.WriteFile(zeroRaw, make([]byte, 16), 0o600)
	stateDir := t.TempDir()
	os.WriteFile(filepath.Join(stateDir, "secret"), []byte(strings.Repeat("0", 32)+"\n"), 0o600)
	for name, env := range map[string][]string{
		"$RANDFLAKE_SECRET":      {"RANDFLAKE_SECRET=" + strings.Repeat("0", 32), "RANDFLAKE_SECRET_FILE=", clean[2]},
		"hex file":               {"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=" + zeroHex, clean[2]},
		"raw file":               {"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=" + zeroRaw, clean[2]},
		"state directory secret": {"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=", "RANDFLAKE_STATE_DIR=" + stateDir},
	} {
		for _, args := range [][]string{{"gen"}, {"gen", "--nodes", "1"}, {"inspect", "3vgoe12ccb8gh"}} {
			r := run(env, args...)
			if r.code != 1 || !strings.Contains(r.stderr, "all zeros") || r.stdout != "" {
				t.Errorf("all-zero secret from %s, %v: exit %d, stdout %q, stderr %q", name, args, r.code, r.stdout, r.stderr)
			}
		}
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// runBinaryTimeout is runBinary, killing the process after d (stretched
// by within).
func runBinaryTimeout(t *testing.T, d time.Duration, env []string, args ...string) result {
	t.Helper()
	d = within(d)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	r := runBinaryContext(t, ctx, "", env, args...)
	if ctx.Err() != nil {
		t.Errorf("%v: killed after %v (%s); stderr %q", args, d, slowness(), r.stderr)
	}
	return r
}

// The etcd client's zap logger writes warnings and errors, with their
// fields, to the slog logger, and nothing below.
func TestZapToSlog(t *testing.T) {
	var buf bytes.Buffer
	z := zapToSlog(slog.New(slog.NewJSONHandler(&buf, nil)))
	z.Info("not shown")
	z.Debug("not shown either")
	z.With(zap.String("endpoint", "127.0.0.1:1")).Named("balancer").Warn("retrying", zap.Int("attempt", 3), zap.Error(io.ErrUnexpectedEOF))
	z.Error("failed")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || strings.Contains(buf.String(), "not shown") {
		t.Fatalf("log:\n%s", buf.String())
	}
	var w map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &w); err != nil || w["level"] != "WARN" || w["msg"] != "retrying" ||
		w["endpoint"] != "127.0.0.1:1" || w["attempt"] != 3.0 || w["error"] != "unexpected EOF" || w["logger"] != "balancer" {
		t.Errorf("warning: %s (%v)", lines[0], err)
	}
	if !strings.Contains(lines[1], `"level":"ERROR","msg":"failed"`) {
		t.Errorf("error: %s", lines[1])
	}
}
