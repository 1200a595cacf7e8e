//go:build unix

package uniqueid

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/internal/testserver"
)

// The interoperability test runs the real Apache httpd, as packaged by
// Debian ("apache2"), with mod_unique_id. It installs nothing: without
// httpd it skips, unless RANDFLAKE_REQUIRE_APACHE=1, in which case it fails.
// RANDFLAKE_APACHE_BIN and RANDFLAKE_APACHE_MODULES override the binary
// (default /usr/sbin/apache2) and the module directory (default
// /usr/lib/apache2/modules).

type apacheInstall struct {
	bin      string
	modules  string
	builtins map[string]bool // modules compiled into the binary, e.g. "mod_log_config.c"
}

func findApache(t *testing.T) apacheInstall {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("RANDFLAKE_REQUIRE_APACHE") == "1" {
			t.Fatalf("%s (RANDFLAKE_REQUIRE_APACHE=1)", msg)
		}
		t.Skipf("%s; install Debian's apache2 package (or run .ci/apache-interop.sh) to run this test", msg)
	}
	a := apacheInstall{bin: os.Getenv("RANDFLAKE_APACHE_BIN"), modules: os.Getenv("RANDFLAKE_APACHE_MODULES")}
	if a.bin == "" {
		a.bin = "/usr/sbin/apache2"
	}
	if a.modules == "" {
		a.modules = "/usr/lib/apache2/modules"
	}
	if _, err := os.Stat(a.bin); err != nil {
		fail("Apache httpd not found: %v", err)
	}
	if _, err := os.Stat(filepath.Join(a.modules, "mod_unique_id.so")); err != nil {
		fail("mod_unique_id not found: %v", err)
	}
	out, err := exec.Command(a.bin, "-l").Output()
	if err != nil {
		fail("%s -l: %v", a.bin, err)
	}
	a.builtins = make(map[string]bool)
	for _, f := range strings.Fields(string(out)) {
		a.builtins[f] = true
	}
	return a
}

// loadModules returns LoadModule lines for the modules the test needs that
// are not compiled in.
func (a apacheInstall) loadModules(t *testing.T) string {
	var b strings.Builder
	for _, m := range []struct{ id, file, builtin string }{
		{"mpm_prefork_module", "mod_mpm_prefork.so", "prefork.c"},
		{"unixd_module", "mod_unixd.so", "mod_unixd.c"},
		{"authz_core_module", "mod_authz_core.so", "mod_authz_core.c"},
		{"log_config_module", "mod_log_config.so", "mod_log_config.c"},
		{"alias_module", "mod_alias.so", "mod_alias.c"},
		{"headers_module", "mod_headers.so", "mod_headers.c"},
		{"unique_id_module", "mod_unique_id.so", "mod_unique_id.c"},
	} {
		if a.builtins[m.builtin] {
			continue
		}
		path := filepath.Join(a.modules, m.file)
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("module %s: %v", m.id, err)
		}
		fmt.Fprintf(&b, "LoadModule %s %s\n", m.id, path)
	}
	return b.String()
}

// unprivilegedUser returns User and Group directives for running httpd as
// root, which refuses to serve requests as root.
func unprivilegedUser(t *testing.T) string {
	if os.Geteuid() != 0 {
		return "" // httpd keeps the current user
	}
	for _, name := range []string{"www-data", "nobody", "daemon"} {
		if u, err := user.Lookup(name); err == nil && u.Uid != "0" {
			return fmt.Sprintf("User #%s\nGroup #%s\n", u.Uid, u.Gid)
		}
	}
	t.Fatal("running as root, but found no unprivileged user (www-data, nobody, daemon) for httpd")
	return ""
}

// httpdServer is a running httpd.
type httpdServer struct {
	dir, pidFile, accessLog, errorLog string
	url                               string
	cmd                               *exec.Cmd
	done                              chan struct{} // closed when cmd has exited
	waitErr                           error
	output                            bytes.Buffer
}

// startHTTPD starts httpd on a free loopback port, and on another while
// the port it was given turns out taken by another program.
func startHTTPD(t *testing.T, a apacheInstall) *httpdServer {
	t.Helper()
	var s *httpdServer
	err := testserver.StartOnFreePorts("httpd", 1, func(ports []int) error {
		var err error
		s, err = tryHTTPD(t, a, ports[0])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tryHTTPD starts httpd on port and waits until it serves; an error wraps
// testserver.ErrPortTaken if httpd could not bind the port.
func tryHTTPD(t *testing.T, a apacheInstall, port int) (*httpdServer, error) {
	t.Helper()
	dir := t.TempDir()
	s := &httpdServer{
		dir:       dir,
		pidFile:   filepath.Join(dir, "httpd.pid"),
		accessLog: filepath.Join(dir, "access.log"),
		errorLog:  filepath.Join(dir, "error.log"),
		url:       fmt.Sprintf("http://127.0.0.1:%d", port),
		done:      make(chan struct{}),
	}
	runDir := filepath.Join(dir, "run")
	if err := os.Mkdir(runDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Several prefork children, so that requests spread over processes
	// with different roots. Every request is answered 204 by mod_alias,
	// which needs no files the unprivileged children would have to read.
	conf := fmt.Sprintf(`ServerRoot %[1]q
DefaultRuntimeDir %[2]q
PidFile %[3]q
ErrorLog %[4]q
LogLevel warn
ServerName 127.0.0.1
Listen 127.0.0.1:%[5]d
%[6]s%[7]s
StartServers 4
MinSpareServers 4
MaxSpareServers 8
ServerLimit 8
MaxRequestWorkers 8
MaxConnectionsPerChild 0
KeepAlive Off
Timeout 10
DocumentRoot %[1]q
LogFormat "%%{UNIQUE_ID}e %%P %%{%%s}t %%{X-Test-Seq}i %%>s" uniqueid
CustomLog %[8]q uniqueid
Header always set Unique-Id "%%{UNIQUE_ID}e"
<Location />
    Require all granted
</Location>
Redirect 204 /
`, dir, runDir, s.pidFile, s.errorLog, port, a.loadModules(t), unprivilegedUser(t), s.accessLog)
	confPath := filepath.Join(dir, "httpd.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}

	s.cmd = exec.Command(a.bin, "-f", confPath, "-DFOREGROUND")
	s.cmd.Stdout, s.cmd.Stderr = &s.output, &s.output
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting httpd: %w", err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() { s.stop(t) })

	// Ready within 20 s on idle cores; the bound is stretched by how
	// slowly this process runs meanwhile.
	slow := slowdown.Start()
	for start := time.Now(); ; {
		select {
		case <-s.done:
			out, log := s.output.String(), s.readErrorLog()
			if strings.Contains(out+log, "Address already in use") {
				return nil, fmt.Errorf("httpd on port %d: %w:\n%s\n%s", port, testserver.ErrPortTaken, out, log)
			}
			return nil, fmt.Errorf("httpd exited during startup: %v\n%s\n%s", s.waitErr, out, log)
		default:
		}
		_, perr := os.Stat(s.pidFile)
		c, derr := net.DialTimeout("tcp", s.url[len("http://"):], time.Second)
		if derr == nil {
			c.Close()
			if perr == nil {
				return s, nil
			}
		}
		if limit := slow.Stretch(20 * time.Second); time.Since(start) > limit {
			return nil, fmt.Errorf("httpd not ready after %v (pid file: %v, dial: %v; %s)\n%s", limit, perr, derr, slow, s.readErrorLog())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *httpdServer) readErrorLog() string {
	b, _ := os.ReadFile(s.errorLog)
	return string(b)
}

// stop brings httpd down the way an operator would: SIGTERM to the process
// named in its own pid file, then waiting for it to exit. As a last resort
// (a test bug, not httpd behaviour) it kills the process group it started.
func (s *httpdServer) stop(t *testing.T) {
	select {
	case <-s.done:
		return
	default:
	}
	b, err := os.ReadFile(s.pidFile)
	pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	switch {
	case err != nil || perr != nil:
		t.Errorf("reading httpd pid file: %v %v", err, perr)
	case pid != s.cmd.Process.Pid:
		t.Errorf("pid file names %d, but httpd is %d", pid, s.cmd.Process.Pid)
	default:
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Errorf("SIGTERM to httpd %d: %v", pid, err)
		}
	}
	slow := slowdown.Start()
	for start := time.Now(); ; {
		select {
		case <-s.done:
			return
		case <-time.After(100 * time.Millisecond):
		}
		if limit := slow.Stretch(20 * time.Second); time.Since(start) > limit {
			t.Errorf("httpd did not exit within %v of SIGTERM (%s); killing its process group", limit, slow)
			syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
			return
		}
	}
}

// sent is what the client saw of one request.
type sent struct {
	before, after int64 // Unix seconds around the exchange
	header        string
}

// hammer sends n requests from several goroutines over fresh connections
// (keep-alive off), so that several httpd children serve them.
func hammer(t *testing.T, url string, first, n int, out map[int]sent) {
	t.Helper()
	client := &http.Client{
		Timeout:   15 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true},
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	next := make(chan int)
	for w := 0; w < 12; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range next {
				req, _ := http.NewRequestWithContext(context.Background(), "GET", fmt.Sprintf("%s/r/%d", url, seq), nil)
				req.Header.Set("X-Test-Seq", strconv.Itoa(seq))
				before := time.Now().Unix()
				resp, err := client.Do(req)
				after := time.Now().Unix()
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					resp.Body.Close()
					if resp.StatusCode != http.StatusNoContent {
						errs = append(errs, fmt.Errorf("request %d: status %s", seq, resp.Status))
					}
					out[seq] = sent{before, after, resp.Header.Get("Unique-Id")}
				}
				mu.Unlock()
			}
		}()
	}
	for seq := first; seq < first+n; seq++ {
		next <- seq
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// logged is one access log line.
type logged struct {
	token string
	pid   int
	sec   int64
	seq   int
}

// logLines counts the complete lines of the access log.
func logLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

func readAccessLog(t *testing.T, path string) []logged {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []logged
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 5 {
			t.Fatalf("unexpected log line %q", sc.Text())
		}
		var l logged
		var e1, e2, e3 error
		l.token = fs[0]
		l.pid, e1 = strconv.Atoi(fs[1])
		l.sec, e2 = strconv.ParseInt(fs[2], 10, 64)
		l.seq, e3 = strconv.Atoi(fs[3])
		if err := errors.Join(e1, e2, e3); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// currentForm checks the outward form of a Current token without using
// this package's parser: 27 characters of the URL-safe base64 alphabet,
// the last of which has its two unused bits clear.
func currentForm(s string) error {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	if len(s) != 27 {
		return fmt.Errorf("%q: length %d, want 27", s, len(s))
	}
	for i := 0; i < len(s); i++ {
		v := strings.IndexByte(alphabet, s[i])
		if v < 0 {
			return fmt.Errorf("%q: %q at %d outside the URL-safe alphabet", s, s[i], i)
		}
		if i == 26 && v&3 != 0 {
			return fmt.Errorf("%q: last character has unused bits set", s)
		}
	}
	return nil
}

func TestApacheInterop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Apache httpd: not in -short")
	}
	a := findApache(t)
	ver, _ := exec.Command(a.bin, "-v").Output()
	t.Logf("using %s: %s", a.bin, strings.SplitN(string(ver), "\n", 2)[0])

	s := startHTTPD(t, a)
	requests := make(map[int]sent)
	const batch = 240
	n := 0
	for round := 0; round < 5; round++ {
		hammer(t, s.url, n, batch, requests)
		n += batch
		// Stop once several children have served requests.
		if pids := childrenInLog(t, s.accessLog); pids >= 3 || (round >= 2 && pids >= 2) {
			break
		}
	}
	// httpd logs a request after it has answered it: wait until every
	// answered request is logged (a stop kills the children at once, and
	// one that had answered but not logged yet would lose its line).
	logWait := slowdown.Start()
	for start := time.Now(); logLines(t, s.accessLog) < n; time.Sleep(20 * time.Millisecond) {
		if limit := logWait.Stretch(10 * time.Second); time.Since(start) > limit {
			t.Errorf("the access log has %d lines for %d answered requests after %v (%s)", logLines(t, s.accessLog), n, limit, logWait)
			break
		}
	}
	s.stop(t)
	if t.Failed() {
		t.FailNow()
	}
	if el := s.readErrorLog(); strings.Contains(el, ":error]") || strings.Contains(el, ":crit]") {
		t.Errorf("httpd error log reports errors:\n%s", el)
	}

	lines := readAccessLog(t, s.accessLog)
	if len(lines) != n {
		t.Fatalf("access log has %d lines for %d requests", len(lines), n)
	}

	type child struct {
		root      [RootLen]byte
		counters  []uint16
		threadIdx map[uint32]int
	}
	children := make(map[int]*child)
	rootOwner := make(map[[RootLen]byte]int)
	tokens := make(map[string]bool)
	var sample Token
	for _, l := range lines {
		if err := currentForm(l.token); err != nil {
			t.Fatalf("httpd token: %v", err)
		}
		tok, err := Parse(l.token)
		if err != nil {
			t.Fatalf("Parse(%q) of an httpd token: %v", l.token, err)
		}
		if tok.Layout != Current {
			t.Fatalf("httpd token %q parsed as %v, want current", l.token, tok.Layout)
		}
		if got := tok.String(); got != l.token {
			t.Fatalf("String() = %q, want the httpd token %q byte for byte", got, l.token)
		}
		if !Valid(l.token) {
			t.Fatalf("Valid(%q) = false; Middleware would not trust it", l.token)
		}
		if tokens[l.token] {
			t.Fatalf("httpd repeated token %q", l.token)
		}
		tokens[l.token] = true
		// The timestamp is the request's second as httpd logged it, and
		// within the client's view of the exchange.
		if tok.Time.Unix() != l.sec {
			t.Fatalf("token %q: timestamp %d, httpd logged the request at %d", l.token, tok.Time.Unix(), l.sec)
		}
		r, ok := requests[l.seq]
		if !ok {
			t.Fatalf("log line for unknown request %d", l.seq)
		}
		if l.sec < r.before || l.sec > r.after {
			t.Fatalf("request %d: timestamp %d outside the client's [%d, %d]", l.seq, l.sec, r.before, r.after)
		}
		if r.header != l.token {
			t.Fatalf("request %d: response header %q, log %q", l.seq, r.header, l.token)
		}
		// The root is fixed per child and differs between children.
		c := children[l.pid]
		if c == nil {
			c = &child{root: tok.Root, threadIdx: make(map[uint32]int)}
			children[l.pid] = c
			if other, dup := rootOwner[tok.Root]; dup {
				t.Fatalf("children %d and %d share root %x", other, l.pid, tok.Root)
			}
			rootOwner[tok.Root] = l.pid
		}
		if tok.Root != c.root {
			t.Fatalf("child %d changed root from %x to %x", l.pid, c.root, tok.Root)
		}
		c.counters = append(c.counters, tok.Counter)
		c.threadIdx[tok.ThreadIndex]++
		sample = tok
	}
	if len(children) < 2 {
		t.Fatalf("only %d httpd child served the %d requests; cannot compare roots", len(children), n)
	}
	// Each child is single-threaded under prefork and logs its requests in
	// the order it served them: the counter advances by one per request,
	// modulo 65535 (httpd 2.4 never emits 65535).
	pids := make([]int, 0, len(children))
	for pid := range children {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	for _, pid := range pids {
		c := children[pid]
		for i := 1; i < len(c.counters); i++ {
			if c.counters[i] != uint16((uint32(c.counters[i-1])+1)%65535) {
				t.Fatalf("child %d: counter %d follows %d", pid, c.counters[i], c.counters[i-1])
			}
		}
		t.Logf("child %d: root %x, %d requests, counter %d..%d, thread indices %v",
			pid, c.root, len(c.counters), c.counters[0], c.counters[len(c.counters)-1], c.threadIdx)
	}
	t.Logf("%d requests, %d children, %d distinct tokens; e.g. %s = %v root %x counter %d thread %d",
		n, len(children), len(tokens), sample, sample.Time.Format(time.RFC3339), sample.Root, sample.Counter, sample.ThreadIndex)

	// This package's Current tokens have the same form as httpd's: same
	// length and alphabet, clear unused bits, the timestamp in the same
	// place (so a token made for the same second shares httpd's first five
	// characters, which hold 30 of the timestamp's 32 bits), then a root
	// fixed per process and a counter advancing by one per token.
	g, err := NewCurrent()
	if err != nil {
		t.Fatal(err)
	}
	var prev Token
	for i, l := range lines {
		httpdTok, _ := Parse(l.token)
		ours := string(g.AppendAt(nil, httpdTok.Time))
		if err := currentForm(ours); err != nil {
			t.Fatalf("our token: %v", err)
		}
		if ours[:5] != l.token[:5] {
			t.Fatalf("same second, different prefix: ours %q, httpd %q", ours, l.token)
		}
		tok, err := Parse(ours)
		if err != nil || tok.Layout != Current || tok.String() != ours {
			t.Fatalf("our token %q: %+v, %v", ours, tok, err)
		}
		if !tok.Time.Equal(httpdTok.Time) || tok.Root != g.Root() {
			t.Fatalf("our token %q: time %v root %x; want %v %x", ours, tok.Time, tok.Root, httpdTok.Time, g.Root())
		}
		if i > 0 && tok.Counter != uint16((uint32(prev.Counter)+1)%65535) {
			t.Fatalf("our counter %d follows %d", tok.Counter, prev.Counter)
		}
		if rootOwner[tok.Root] != 0 {
			t.Fatalf("our root %x equals an httpd child's", tok.Root)
		}
		prev = tok
	}
	now := time.Now().Unix()
	ours, _ := Parse(string(g.Append(nil)))
	if d := ours.Time.Unix() - now; d < 0 || d > 1 {
		t.Fatalf("Append stamped %d at %d", ours.Time.Unix(), now)
	}
}

// childrenInLog counts the distinct httpd child pids in the access log.
func childrenInLog(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pids := make(map[string]bool)
	for _, line := range strings.Split(string(b), "\n") {
		if fs := strings.Fields(line); len(fs) > 1 {
			pids[fs[1]] = true
		}
	}
	return len(pids)
}
