package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/client"
	"github.com/randflake/randflake/internal/loadclient"
)

// The end-to-end tests run the real binary, built once by TestMain.
var binary string

const testSecretHex = "000102030405060708090a0b0c0d0e0f"

// e2eParallel is how many tests that call t.Parallel run at once unless
// -test.parallel says otherwise: they mostly wait on the processes and
// servers they start, not on the CPU, so more than the cores' count of
// them run at once.
const e2eParallel = 6

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(e2eParallel))
	}
	dir, err := os.MkdirTemp("", "randflake-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "randflake")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the binary: %v\n%s", err, out)
		os.Exit(1)
	}
	report, err := setUpContract()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if !report() && code == 0 {
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

func runBinary(t *testing.T, stdin string, env []string, args ...string) result {
	t.Helper()
	return runBinaryContext(t, context.Background(), stdin, env, args...)
}

// runBinaryContext is runBinary, killing the process when ctx is done.
func runBinaryContext(t *testing.T, ctx context.Context, stdin string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

var secretEnv = []string{"RANDFLAKE_SECRET=" + testSecretHex, "RANDFLAKE_SECRET_FILE=", "RANDFLAKE_STATE_DIR="}

func testCipher(t *testing.T) *randflake.Sparx64 {
	c, err := randflake.NewSparx64([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestGenPipedIntoInspect(t *testing.T) {
	t.Parallel()
	before := time.Now().Unix()
	gen := runBinary(t, "", secretEnv, "gen", "-n", "2000", "--nodes", "3-4")
	if gen.code != 0 {
		t.Fatalf("gen: %d %s", gen.code, gen.stderr)
	}
	ids := strings.Fields(gen.stdout)
	if checkUnique(t, ids, 2000, nil); t.Failed() {
		t.FailNow()
	}
	ins := runBinary(t, gen.stdout, secretEnv, "inspect", "--json")
	if ins.code != 0 {
		t.Fatalf("inspect: %d %s", ins.code, ins.stderr)
	}
	lines := strings.Split(strings.TrimSpace(ins.stdout), "\n")
	if len(lines) != 2000 {
		t.Fatalf("inspect printed %d lines", len(lines))
	}
	after := time.Now().Unix()
	for _, l := range lines {
		var v struct {
			Timestamp, Node int64
		}
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatal(err)
		}
		if v.Node < 3 || v.Node > 4 || v.Timestamp < before || v.Timestamp > after+1 {
			t.Fatalf("inspect: %s (window %d..%d)", l, before, after)
		}
	}
}

func TestGenFormats(t *testing.T) {
	t.Parallel()
	r := runBinary(t, "", secretEnv, "gen", "-n", "5", "--format", "int", "--nodes", "7")
	c := testCipher(t)
	for _, f := range strings.Fields(r.stdout) {
		var id int64
		if _, err := fmt.Sscan(f, &id); err != nil {
			t.Fatal(err)
		}
		if raw := c.DecryptID(uint64(id)); (raw>>17)&randflake.MaxNode != 7 {
			t.Fatalf("int ID %d is not from node 7", id)
		}
	}
	r = runBinary(t, "", secretEnv, "gen", "-n", "3", "--format", "json", "--nodes", "7")
	var ids []randflake.ID
	if err := json.Unmarshal([]byte(r.stdout), &ids); err != nil || len(ids) != 3 {
		t.Fatalf("json: %q %v", r.stdout, err)
	}
	r = runBinary(t, "", secretEnv, "gen", "-n", "0", "--format", "json", "--nodes", "7")
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("json of 0 IDs: %q", r.stdout)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{}, {"nope"}, {"gen", "-n", "-1"}, {"gen", "--format", "xml"}, {"gen", "--bogus"},
		{"gen", "--nodes", "5-3"}, {"gen", "--nodes", "x"}, {"gen", "--nodes", "1-2", "--etcd", "h:1"},
		{"inspect"}, {"keygen"}, {"uniqueid"}, {"uniqueid", "frob"}, {"serve", "--max-count", "0"},
		{"load", "--url", "http://example.com"}, {"gen", "extra"},
	} {
		r := runBinary(t, "", secretEnv, args...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, r.code, r.stderr)
		}
	}
	// Help goes to standard output, for a pager.
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"help", "gen"}, {"help", "uniqueid", "gen"}, {"gen", "--help"}, {"inspect", "-h"},
		{"serve", "--help"}, {"keygen", "--help"}, {"bench", "--help"}, {"load", "--help"}, {"uniqueid", "--help"}, {"uniqueid", "parse", "-h"},
		{"completion", "--help"}, {"version", "--help"}} {
		r := runBinary(t, "", secretEnv, args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "usage: randflake ") || r.stderr != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	// A usage error is said once, on standard error.
	for _, args := range [][]string{{"gen", "-n", "abc"}, {"gen", "--bogus"}, {"inspect", "--bogus"}, {"uniqueid", "gen", "-n", "x"}} {
		r := runBinary(t, "", secretEnv, args...)
		if r.code != 2 || r.stdout != "" || strings.Count(r.stderr, "flag") != 1 || strings.Count(r.stderr, "\n") != 2 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
}

func TestInspectReportsEachBadID(t *testing.T) {
	t.Parallel()
	gen := runBinary(t, "", secretEnv, "gen", "-n", "2", "--nodes", "9")
	ids := strings.Fields(gen.stdout)
	r := runBinary(t, "", secretEnv, "inspect", ids[0], "not-an-id", ids[1], "vvvvvvvvvvvvvv")
	if r.code != 1 {
		t.Fatalf("exit %d", r.code)
	}
	if n := strings.Count(r.stdout, "node=9"); n != 2 {
		t.Fatalf("%d good IDs printed: %q", n, r.stdout)
	}
	if !strings.Contains(r.stderr, "not-an-id") || !strings.Contains(r.stderr, "vvvvvvvvvvvvvv") {
		t.Fatalf("stderr %q", r.stderr)
	}
}

func TestKeygenAndSecretFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "secret")
	r := runBinary(t, "", nil, "keygen", "--out", path)
	if r.code != 0 {
		t.Fatalf("keygen: %d %s", r.code, r.stderr)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("secret file mode %v, %v", st.Mode().Perm(), err)
	}
	key, _ := os.ReadFile(path)
	if r.stdout != "" || strings.Contains(r.stderr, strings.TrimSpace(string(key))) {
		t.Fatal("keygen printed the secret")
	}
	if r := runBinary(t, "", nil, "keygen", "--out", path); r.code != 1 {
		t.Fatalf("overwrite without --force: exit %d", r.code)
	}
	env := []string{"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=" + path}
	if r := runBinary(t, "", env, "gen", "--nodes", "1"); r.code != 0 {
		t.Fatalf("gen with the new secret file: %d %s", r.code, r.stderr)
	}
	os.Chmod(path, 0o644)
	r = runBinary(t, "", env, "gen", "--nodes", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "chmod 600") || strings.Contains(r.stderr, strings.TrimSpace(string(key))) {
		t.Fatalf("world-readable secret: exit %d, %q", r.code, r.stderr)
	}
	// To standard output only when it is not a terminal (here: a pipe).
	r = runBinary(t, "", nil, "keygen", "--out", "-")
	if r.code != 0 || len(strings.TrimSpace(r.stdout)) != 32 {
		t.Fatalf("keygen --out -: %d %q", r.code, r.stdout)
	}
}

func TestUniqueIDCommands(t *testing.T) {
	r := runBinary(t, "", nil, "uniqueid", "gen", "-n", "3")
	toks := strings.Fields(r.stdout)
	if r.code != 0 || len(toks) != 3 || len(toks[0]) != 27 {
		t.Fatalf("uniqueid gen: %d %q", r.code, r.stdout)
	}
	r = runBinary(t, "", nil, "uniqueid", "gen", "--layout", "classic", "--addr", "192.0.2.7")
	if r.code != 0 || len(strings.TrimSpace(r.stdout)) != 24 {
		t.Fatalf("classic: %d %q", r.code, r.stdout)
	}
	p := runBinary(t, "", nil, "uniqueid", "parse", strings.TrimSpace(r.stdout), toks[0], "garbage")
	if p.code != 1 || !strings.Contains(p.stdout, "addr=192.0.2.7") || !strings.Contains(p.stdout, "root=") || !strings.Contains(p.stderr, "garbage") {
		t.Fatalf("parse: %d %q %q", p.code, p.stdout, p.stderr)
	}
}

// serveProcess is a running `randflake serve`.
type serveProcess struct {
	cmd  *exec.Cmd
	url  string
	logs *syncBuffer
	done chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var addrRE = regexp.MustCompile(`msg=serving addr=(\S+)|"msg":"serving","addr":"([^"]+)"`)

// spawnServe starts `randflake serve` on a port of the kernel's choice
// with env added to the environment and returns at once.
func spawnServe(t *testing.T, env []string, args ...string) *serveProcess {
	t.Helper()
	return spawn(t, env, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
}

// spawn starts the binary with args and env added to the environment,
// collecting its standard error, and returns at once.
func spawn(t *testing.T, env []string, args ...string) *serveProcess {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	return startProcess(t, cmd)
}

// startProcess starts cmd, collecting its standard error, returns at once,
// and kills it when t ends.
func startProcess(t *testing.T, cmd *exec.Cmd) *serveProcess {
	t.Helper()
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProcess{cmd: cmd, logs: logs, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		err := <-p.done
		p.done <- err
	})
	return p
}

// waitLog waits up to timeout (stretched by within) for a line of p's
// standard error that matches re and returns its submatches.
func waitLog(t *testing.T, p *serveProcess, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	limit := within(timeout)
	deadline := time.Now().Add(limit)
	for {
		if m := re.FindStringSubmatch(p.logs.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line matching %q within %v (%s); logs:\n%s", re, limit, slowness(), p.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startServe starts serve with secretEnv and args, and returns once it
// answers /readyz.
func startServe(t *testing.T, args ...string) *serveProcess {
	t.Helper()
	return startServeEnv(t, secretEnv, args...)
}

// startServeEnv is startServe with env in place of secretEnv. The process
// has startupTimeout (stretched by within) to log its address and answer
// /readyz with 200.
func startServeEnv(t *testing.T, env []string, args ...string) *serveProcess {
	t.Helper()
	return waitServing(t, spawnServe(t, env, args...))
}

// waitServing waits until the serve process p, just spawned, logs its
// address and answers /readyz, within startupTimeout (stretched by the
// slowdown), and returns it; otherwise it fails the test with the log.
func waitServing(t *testing.T, p *serveProcess) *serveProcess {
	t.Helper()
	limit := within(startupTimeout)
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if m := addrRE.FindStringSubmatch(p.logs.String()); m != nil {
			p.url = "http://" + m[1] + m[2]
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	logs := p.logs
	if p.url == "" {
		t.Fatalf("serve did not log its address within %v (%s): %s", limit, slowness(), logs.String())
	}
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get(p.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("serve not ready within %v (%s; /readyz last: %s): %s", limit, slowness(), last, logs.String())
	return nil
}

// checkUnique fails unless ids holds want IDs without duplicates, and
// says which of the two went wrong: a short count with the first error,
// duplicates with their values and counts.
func checkUnique(t *testing.T, ids []string, want int, firstErr error) {
	t.Helper()
	for _, p := range uniqueProblems(ids, want, firstErr) {
		t.Error(p)
	}
}

// uniqueProblems is what checkUnique reports.
func uniqueProblems(ids []string, want int, firstErr error) []string {
	var out []string
	if len(ids) != want {
		out = append(out, fmt.Sprintf("got %d IDs, want %d; first error: %v", len(ids), want, firstErr))
	} else if firstErr != nil {
		out = append(out, fmt.Sprintf("all %d IDs arrived, but: %v", want, firstErr))
	}
	seen := make(map[string]int, len(ids))
	for _, id := range ids {
		seen[id]++
	}
	var dups []string
	for id, n := range seen {
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%s ×%d", id, n))
		}
	}
	if len(dups) > 0 {
		slices.Sort(dups)
		out = append(out, fmt.Sprintf("%d duplicate IDs among %d: %s", len(dups), len(ids), strings.Join(dups[:min(len(dups), 10)], ", ")))
	}
	return out
}

// A short count is reported as one, duplicates as duplicates.
func TestUniquenessReport(t *testing.T) {
	short := uniqueProblems([]string{"a", "b", "c"}, 5, errors.New("EOF"))
	if len(short) != 1 || short[0] != "got 3 IDs, want 5; first error: EOF" {
		t.Errorf("short count: %q", short)
	}
	dup := uniqueProblems([]string{"a", "b", "a", "c", "b", "a"}, 6, nil)
	if len(dup) != 1 || dup[0] != "2 duplicate IDs among 6: a ×3, b ×2" {
		t.Errorf("duplicates: %q", dup)
	}
	if p := uniqueProblems([]string{"a", "b"}, 2, nil); p != nil {
		t.Errorf("no problem: %q", p)
	}
}

// getIDs fetches count IDs with hc and checks the answer's shape.
func getIDs(hc *http.Client, url string, count int) ([]string, error) {
	resp, err := hc.Get(url + "/v1/ids?count=" + fmt.Sprint(count))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading a batch of %d: %w", count, err)
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("batch of %d: status %d: %s", count, resp.StatusCode, body)
	}
	var got struct{ IDs []string }
	if err := json.Unmarshal(body, &got); err != nil {
		return nil, fmt.Errorf("batch of %d: %w", count, err)
	}
	if len(got.IDs) != count {
		return got.IDs, fmt.Errorf("batch of %d held %d IDs", count, len(got.IDs))
	}
	return got.IDs, nil
}

// rawHTTP sends req as it is on a new connection to the serve at url and
// returns the answer's status, content type and body.
func rawHTTP(t *testing.T, url, req string) (int, string, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	go io.WriteString(conn, req)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%.40q…: %v", req, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%.40q…: reading the body: %v", req, err)
	}
	checkRaw(t, req, resp.StatusCode, resp.Header, body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), body
}

// headOfSize is a request head for path of exactly size bytes.
func headOfSize(path string, size int) string {
	head := "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: "
	return head + strings.Repeat("a", size-len(head)-len("\r\n\r\n")) + "\r\n\r\n"
}

func TestServeEndToEnd(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("inspection-token-0123456789\n"), 0o600)
	p := startServe(t, "--nodes", "0-255", "--inspect-token-file", tokenFile)

	t.Run("batches unique across clients", func(t *testing.T) {
		const clients, requests, batch = 8, 25, 2000
		var mu sync.Mutex
		var all []string
		var firstErr error
		var wg sync.WaitGroup
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range requests {
					ids, err := getIDs(http.DefaultClient, p.url, batch)
					mu.Lock()
					all = append(all, ids...)
					if err != nil && firstErr == nil {
						firstErr = fmt.Errorf("client %d, request %d: %w", c, r, err)
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
		}
		wg.Wait()
		checkUnique(t, all, clients*requests*batch, firstErr)
	})

	t.Run("bad input", func(t *testing.T) {
		for path, want := range map[string]struct {
			status int
			kind   string
		}{
			"/v1/ids?count=0": {400, "bad_request"}, "/v1/ids?count=-1": {400, "bad_request"},
			"/v1/ids?count=x": {400, "bad_request"}, "/v1/ids?count=10001": {400, "bad_request"},
			"/v1/ids?count=": {400, "bad_request"}, "/v1/ids?count=%zz": {400, "bad_request"},
			"/v1/ids?count=1;count=2": {400, "bad_request"}, "/v1/ids?count=1&count=2": {400, "bad_request"},
			"/v1/ids?count=1&secret=x": {400, "bad_request"}, "/elsewhere": {404, "not_found"},
			"/./healthz": {404, "not_found"}, "//healthz": {404, "not_found"}, "/v1//ids": {404, "not_found"},
			"/v1/ids/abc": {401, "unauthorized"},
		} {
			status, ctype, body := rawHTTP(t, p.url, "GET "+path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			var e struct{ Error, Kind string }
			if status != want.status || ctype != "application/json" || json.Unmarshal(body, &e) != nil || e.Kind != want.kind || e.Error == "" {
				t.Errorf("%s: %d %s %q, want %d with a JSON error of kind %s", path, status, ctype, body, want.status, want.kind)
			}
		}
		resp, err := http.Post(p.url+"/v1/ids", "text/plain", nil)
		if err != nil || resp.StatusCode != 405 {
			t.Errorf("POST: %v %v", resp.StatusCode, err)
		}
		resp, err = http.Head(p.url + "/v1/ids?count=10000")
		if err != nil || resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET" {
			t.Errorf("HEAD /v1/ids: %v %v", resp, err)
		}
		// Request heads: 16 KiB pass; past 16 KiB and net/http's 4 KiB
		// read buffer, net/http's plain-text 431.
		for _, c := range []struct{ size, status int }{{16000, 200}, {16384, 200}, {20481, 431}, {24000, 431}, {64 << 10, 431}} {
			status, ctype, body := rawHTTP(t, p.url, headOfSize("/healthz", c.size))
			if status != c.status || (status == 431 && (!strings.HasPrefix(ctype, "text/plain") || !strings.Contains(string(body), "431"))) {
				t.Errorf("head of %d bytes: %d %s %q, want %d", c.size, status, ctype, body, c.status)
			}
		}
		req, _ := http.NewRequest("GET", p.url+"/v1/ids", nil)
		req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
		resp, err = http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 431 {
			t.Errorf("oversized header: %v %v", resp, err)
		}
	})

	t.Run("inspect with token", func(t *testing.T) {
		resp, _ := http.Get(p.url + "/v1/ids?count=1&format=int")
		var got struct{ IDs []string }
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		req, _ := http.NewRequest("GET", p.url+"/v1/ids/"+got.IDs[0], nil)
		req.Header.Set("Authorization", "Bearer inspection-token-0123456789")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("inspect: %v %v", resp, err)
		}
		var v struct{ Node int64 }
		json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if v.Node < 0 || v.Node > 255 {
			t.Fatalf("node %d", v.Node)
		}
	})

	t.Run("client prefetch", func(t *testing.T) {
		c, err := client.New(client.Config{URL: p.url, BatchSize: 500})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		seen := map[int64]bool{}
		cipher := testCipher(t)
		for range 3000 {
			id, err := c.Next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if seen[id] {
				t.Fatalf("duplicate %d", id)
			}
			seen[id] = true
			if node := (cipher.DecryptID(uint64(id)) >> 17) & randflake.MaxNode; node > 255 {
				t.Fatalf("node %d", node)
			}
		}
	})

	t.Run("load test", func(t *testing.T) {
		// Bounded in requests, not time: a loaded machine completes them
		// all, later.
		const requests = 20
		for _, batch := range []int{1, 100, 10000} {
			rep, err := loadTest(context.Background(), loadConfig{URL: p.url, Batch: batch, Concurrency: 2, Requests: requests, Duration: min(within(30*time.Second), loadclient.MaxDuration), Verify: true})
			if err != nil {
				t.Fatalf("batch %d: %v", batch, err)
			}
			if rep.Requests != requests || rep.IDs != requests*batch || rep.Deadline {
				t.Fatalf("batch %d: %+v; want %d requests of %d IDs each, verified, before the deadline", batch, rep, requests, batch)
			}
			t.Logf("batch %5d: %.0f IDs/s, p99 %v", batch, rep.IDsPerSecond(), rep.percentile(99))
		}
	})
}

// A client that does not finish its request head within --header-timeout
// is cut off. (A short timeout has a serve of its own: it also closes
// fresh keep-alive connections that a client's pool holds unused for
// longer, which would fail other tests' requests.)
func TestServeHeaderTimeout(t *testing.T) {
	t.Parallel()
	p := startServe(t, "--nodes", "0-63", "--header-timeout", "1s")
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /v1/ids HTTP/1.1\r\nHost: x\r\n") // never finishes the head
	// The read deadline is what the connection would stay open without
	// the header timeout: well past it, however slow the machine.
	limit := within(10 * time.Second)
	conn.SetReadDeadline(time.Now().Add(limit))
	start := time.Now()
	b, err := io.ReadAll(conn)
	if took := time.Since(start); err != nil || took < 500*time.Millisecond {
		t.Fatalf("connection not closed by the 1s header timeout: %v after %v (read deadline %v, %s)", err, took, limit, slowness())
	}
	if len(b) != 0 {
		t.Fatalf("answer to an unfinished head: %q", b)
	}
}

// SIGTERM while requests are in flight: they complete, the server exits 0.
func TestServeGracefulShutdown(t *testing.T) {
	t.Parallel()
	p := startServe(t, "--nodes", "0-63")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	completed, refused := 0, 0
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				resp, err := http.Get(p.url + "/v1/ids?count=10000")
				if err != nil {
					mu.Lock()
					refused++
					mu.Unlock()
					return // the listener is gone
				}
				var got struct{ IDs []string }
				err = json.NewDecoder(resp.Body).Decode(&got)
				resp.Body.Close()
				n := len(got.IDs)
				if resp.StatusCode != 200 || n != 10000 || err != nil {
					t.Errorf("during shutdown: status %d, %d IDs, %v", resp.StatusCode, n, err)
					return
				}
				mu.Lock()
				completed++
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	stop(t, p) // SIGTERM, and the process must exit 0
	wg.Wait()
	if completed == 0 || !strings.Contains(p.logs.String(), "msg=stopped") {
		t.Fatalf("completed %d requests; logs %s", completed, p.logs.String())
	}
	t.Logf("%d requests completed, %d clients refused after shutdown", completed, refused)
}

// SIGTERM while clients hold connections that have sent no request yet
// (one just connected, a TLS handshake not begun): those connections are
// closed at once and the server exits 0 within a --shutdown-timeout
// shorter than the 5 s net/http alone waits for a first request.
func TestServeShutdownClosesSilentConnections(t *testing.T) {
	t.Parallel()
	p := startServe(t, "--nodes", "0-63", "--shutdown-timeout", "2s")
	addr := strings.TrimPrefix(p.url, "http://")
	var silent []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	// One accept loop takes connections in order: once a later one is
	// answered, the silent ones have been accepted.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get(p.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	stop(t, p) // SIGTERM, and the process must exit 0
	for i, c := range silent {
		c.SetReadDeadline(time.Now().Add(within(5 * time.Second)))
		n, err := c.Read(make([]byte, 1))
		if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("silent connection %d after the shutdown: read %d bytes, %v; want it closed by the server", i, n, err)
		}
	}
}

func TestBench(t *testing.T) {
	t.Parallel()
	r := runBinary(t, "", nil, "bench", "--quick", "--json")
	if r.code != 0 {
		t.Fatalf("bench: %d %s", r.code, r.stderr)
	}
	var out struct {
		Selected string
		Results  []benchResult
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatal(err)
	}
	if out.Selected != randflake.Kernel() || len(out.Results) != len(randflake.Kernels()) {
		t.Fatalf("bench: %+v", out)
	}
	for i, res := range out.Results {
		if res.Kernel != randflake.Kernels()[i] || res.Single <= 0 || res.Batch <= 0 || res.Generate <= 0 || res.GenBatch <= 0 || res.Parallel <= 0 {
			t.Fatalf("bench result %+v", res)
		}
	}
	if n := strings.Count(r.stderr, "measuring kernel"); n != len(out.Results) {
		t.Fatalf("progress lines: %q", r.stderr)
	}
}
