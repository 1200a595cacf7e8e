package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake/cmd/randflake/internal/tlstest"
	"github.com/randflake/randflake/etcdlease"
	"github.com/randflake/randflake/etcdlease/etcdtest"
)

// The end-to-end tests of serve against a secured etcd: the real etcd
// program (Debian's etcd-server) with TLS on its client URL and client
// certificates required, and one with authentication enabled by the
// real etcdctl (Debian's etcd-client); the real binary on both, with
// --etcd-cacert, --etcd-cert, --etcd-key, --etcd-user and
// --etcd-password-file, and their variables.

// securedEtcd is a single-member etcd that a test runs with TLS or
// authentication, stopped by its process ID when the test ends.
type securedEtcd struct {
	t        *testing.T
	etcdctl  string
	endpoint string // HOST:PORT of the client URL
	scheme   string // "https" or "http"
	ctlFlags []string
	log      string
}

// etcdTLS is the TLS of a securedEtcd: its server certificate and, if
// clientCA is set, the CA its clients' certificates must come from
// (--client-cert-auth).
type etcdTLS struct {
	dir      string
	server   tlstest.Pair
	ca       *tlstest.CA
	clientCA *tlstest.CA
	// ctlPair is the client certificate etcdctl uses.
	ctlPair *tlstest.Pair
}

// startSecuredEtcd starts etcd on free loopback ports, with TLS on its
// client URL if tc is set, and returns once /health says it serves.
func startSecuredEtcd(t *testing.T, tc *etcdTLS) *securedEtcd {
	t.Helper()
	return startSecuredEtcdAt(t, tc, closedPort(t))
}

// startSecuredEtcdAt is startSecuredEtcd with the client address client
// (HOST:PORT).
func startSecuredEtcdAt(t *testing.T, tc *etcdTLS, client string) *securedEtcd {
	t.Helper()
	etcd, etcdctl, err := etcdtest.Find()
	if errors.Is(err, etcdtest.ErrNotFound) && !etcdtest.Required() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("/dev/shm", "etcd-e2e-")
	if err != nil {
		dir = t.TempDir()
	} else {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	peer := closedPort(t)
	s := &securedEtcd{t: t, etcdctl: etcdctl, endpoint: client, scheme: "http", log: filepath.Join(dir, "etcd.log")}
	args := []string{"--name", "e2e", "--data-dir", filepath.Join(dir, "data"),
		"--listen-peer-urls", "http://" + peer, "--initial-advertise-peer-urls", "http://" + peer,
		"--initial-cluster", "e2e=http://" + peer, "--initial-cluster-state", "new",
		"--heartbeat-interval", "10", "--election-timeout", "100",
		"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn"}
	// Its own transport: http.DefaultTransport checks answers against
	// serve's OpenAPI document.
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{}}
	if tc != nil {
		s.scheme = "https"
		certFile, keyFile := tc.server.WriteFiles(t, tc.dir, "etcd-server.crt", "etcd-server.key")
		caFile := filepath.Join(tc.dir, "etcd-ca.crt")
		writeFileT(t, caFile, tc.ca.PEM, 0o644)
		args = append(args, "--cert-file", certFile, "--key-file", keyFile)
		s.ctlFlags = []string{"--cacert=" + caFile}
		tcfg := &tls.Config{RootCAs: tc.ca.Pool()}
		if tc.clientCA != nil {
			clientCAFile := filepath.Join(tc.dir, "etcd-client-ca.crt")
			writeFileT(t, clientCAFile, tc.clientCA.PEM, 0o644)
			args = append(args, "--client-cert-auth", "--trusted-ca-file", clientCAFile)
			pair := tc.clientCA.Client(t, "etcdctl")
			tc.ctlPair = &pair
			cf, kf := pair.WriteFiles(t, tc.dir, "etcdctl.crt", "etcdctl.key")
			s.ctlFlags = append(s.ctlFlags, "--cert="+cf, "--key="+kf)
			tcfg.Certificates = []tls.Certificate{pair.TLS(t)}
		}
		hc.Transport = &http.Transport{TLSClientConfig: tcfg}
	}
	url := s.scheme + "://" + client
	args = append(args, "--listen-client-urls", url, "--advertise-client-urls", url)
	lf, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	cmd := exec.Command(etcd, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	limit := within(startupTimeout)
	deadline := time.Now().Add(limit)
	for {
		resp, err := hc.Get(url + "/health")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if bytes.Contains(b, []byte(`"health":"true"`)) {
				return s
			}
			err = fmt.Errorf("%s: %s", resp.Status, b)
		}
		select {
		case <-done:
			t.Fatalf("etcd exited: %v\n%s", cmd.ProcessState, s.logTail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd not healthy after %v (%s): %v\n%s", limit, slowness(), err, s.logTail())
		}
	}
}

func (s *securedEtcd) logTail() string {
	b, _ := os.ReadFile(s.log)
	return string(b[max(0, len(b)-4096):])
}

// url is the client URL, SCHEME://HOST:PORT.
func (s *securedEtcd) url() string { return s.scheme + "://" + s.endpoint }

// ctl runs etcdctl against the server with args (after the server's TLS
// flags) and fails the test if it fails.
func (s *securedEtcd) ctl(args ...string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.etcdctl, slices.Concat([]string{"--endpoints=" + s.url(), "--dial-timeout=5s", "--command-timeout=10s"}, s.ctlFlags, args)...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("etcdctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func writeFileT(t *testing.T, path string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
}

// outputs collects everything the processes of a test printed, to look
// for a secret in it at the end.
type outputs struct {
	texts []string
}

func (o *outputs) add(s ...string) { o.texts = append(o.texts, s...) }

// check fails t if any output holds one of secrets.
func (o *outputs) check(t *testing.T, secrets ...string) {
	t.Helper()
	n := 0
	for _, text := range o.texts {
		n += len(text)
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("a password appears in an output:\n%s", text)
			}
		}
	}
	t.Logf("%d outputs (%d bytes) searched for %d passwords: none found", len(o.texts), n, len(secrets))
}

// startServeSecured starts serve with env added and args, and fails
// unless it serves within 60 seconds (a first claim on a new etcd waits
// out unknown history, about 10 s with --etcd-ttl 3s).
func startServeSecured(t *testing.T, env []string, args ...string) *serveProcess {
	t.Helper()
	p := spawnServe(t, env, args...)
	m := waitLog(t, p, addrRE, 60*time.Second)
	p.url = "http://" + m[1] + m[2]
	return p
}

// disjointIDs fetches n IDs from each process and checks that all are
// different and that no node ID is used by two of them. It returns the
// IDs.
func disjointIDs(t *testing.T, env []string, n int, ps ...*serveProcess) []string {
	t.Helper()
	var all []string
	owner := map[int64]int{}
	for i, p := range ps {
		ids := fetch(t, p, n)
		all = append(all, ids...)
		for node := range nodesOf(t, env, ids) {
			if j, ok := owner[node]; ok {
				t.Fatalf("node %d used by processes %d and %d", node, j, i)
			}
			owner[node] = i
		}
	}
	if checkUnique(t, all, n*len(ps), nil); t.Failed() {
		t.FailNow()
	}
	return all
}

// serveFails runs serve with env and args, which must end with status 1
// within 60 seconds, and returns its standard error.
func serveFails(t *testing.T, env []string, args ...string) string {
	t.Helper()
	start := time.Now()
	r := runBinaryTimeout(t, 60*time.Second, env, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	if r.code != 1 {
		t.Fatalf("serve %s: exit %d after %v, want 1; stderr:\n%s", strings.Join(args, " "), r.code, time.Since(start).Round(time.Millisecond), r.stderr)
	}
	t.Logf("serve %s: exit 1 after %v: %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), lastLine(r.stderr))
	return r.stderr
}

// lastLine returns the last line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// wantAll fails t unless s holds every one of parts.
func wantAll(t *testing.T, what, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Errorf("%s: %q is missing from:\n%s", what, p, s)
		}
	}
}

// serve on an etcd that requires TLS and client certificates: two
// processes, one configured by flags and one by variables, with the
// client key and CA in a Kubernetes Secret volume, claim disjoint node
// IDs; a missing client certificate, one from another CA, a CA that does
// not vouch for etcd's certificate, and an https:// endpoint with only
// the system's CAs each end serve with status 1 and a message naming what
// failed.
func TestServeEtcdTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the etcd server program: not in -short")
	}
	t.Parallel()
	dir := t.TempDir()
	ca, clientCA := tlstest.NewCA(t, "etcd server CA"), tlstest.NewCA(t, "etcd client CA")
	tc := &etcdTLS{dir: dir, server: ca.Server(t, "etcd"), ca: ca, clientCA: clientCA}
	srv := startSecuredEtcd(t, tc)

	client := clientCA.Client(t, "randflake")
	vol := newKubeletVolume(t, filepath.Join(dir, "volume"), 0o600, -1, map[string]string{
		"ca.crt": string(ca.PEM), "tls.crt": string(client.CertPEM), "tls.key": string(client.KeyPEM),
	})
	common := []string{"--claim", "4", "--etcd-ttl", "3s", "--etcd-horizon", "9s"}
	flags := slices.Concat(common, []string{"--etcd", srv.endpoint,
		"--etcd-cacert", vol.path("ca.crt"), "--etcd-cert", vol.path("tls.crt"), "--etcd-key", vol.path("tls.key")})
	env := append(slices.Clone(secretEnv), "RANDFLAKE_ETCD="+srv.url(),
		"RANDFLAKE_ETCD_CACERT="+vol.path("ca.crt"), "RANDFLAKE_ETCD_CERT="+vol.path("tls.crt"), "RANDFLAKE_ETCD_KEY="+vol.path("tls.key"))

	start := time.Now()
	a := startServeSecured(t, secretEnv, flags...)
	firstClaim := time.Since(start)
	b := startServeSecured(t, env, common...)
	ids := disjointIDs(t, secretEnv, 2000, a, b)
	t.Logf("%d IDs from 2 processes over TLS with client certificates, none twice, no node ID shared; the first claim on the new etcd took %v",
		len(ids), firstClaim.Round(time.Millisecond))
	stop(t, a)
	stop(t, b)
	// What etcd holds now was written through TLS: the claims' keys.
	if keys := srv.ctl("get", "--prefix", "--keys-only", etcdlease.DefaultPrefix); !strings.Contains(keys, etcdlease.DefaultPrefix+"marker") {
		t.Errorf("etcd holds no marker under %s:\n%s", etcdlease.DefaultPrefix, keys)
	}

	other := tlstest.NewCA(t, "another CA")
	stranger := other.Client(t, "randflake")
	strangerCert, strangerKey := stranger.WriteFiles(t, dir, "stranger.crt", "stranger.key")
	otherCA := filepath.Join(dir, "other-ca.crt")
	writeFileT(t, otherCA, other.PEM, 0o644)

	t.Run("no client certificate", func(t *testing.T) {
		msg := serveFails(t, secretEnv, slices.Concat(common, []string{"--etcd", srv.endpoint, "--etcd-cacert", vol.path("ca.crt")})...)
		wantAll(t, "serve without a client certificate", msg, srv.endpoint, "refused the TLS connection", "--etcd-cert")
	})
	t.Run("client certificate of another CA", func(t *testing.T) {
		msg := serveFails(t, secretEnv, slices.Concat(common, []string{"--etcd", srv.endpoint, "--etcd-cacert", vol.path("ca.crt"),
			"--etcd-cert", strangerCert, "--etcd-key", strangerKey})...)
		wantAll(t, "serve with a client certificate etcd does not trust", msg, srv.endpoint, "refused the TLS connection", "bad certificate")
	})
	t.Run("wrong CA", func(t *testing.T) {
		msg := serveFails(t, secretEnv, slices.Concat(common, []string{"--etcd", srv.endpoint, "--etcd-cacert", otherCA,
			"--etcd-cert", vol.path("tls.crt"), "--etcd-key", vol.path("tls.key")})...)
		wantAll(t, "serve with a CA that did not sign etcd's certificate", msg, srv.endpoint, "server certificate is not trusted", "--etcd-cacert", "unknown authority")
	})
	t.Run("system CAs", func(t *testing.T) {
		msg := serveFails(t, secretEnv, slices.Concat(common, []string{"--etcd", srv.url()})...)
		wantAll(t, "serve on https:// with the system's CAs", msg, srv.url(), "server certificate is not trusted")
	})
	t.Run("plain etcd", func(t *testing.T) {
		plain := startSecuredEtcd(t, nil)
		msg := serveFails(t, secretEnv, slices.Concat(common, []string{"--etcd", plain.endpoint, "--etcd-cacert", vol.path("ca.crt")})...)
		wantAll(t, "serve with TLS on an etcd without", msg, plain.endpoint, "http:// endpoint without --etcd-cacert")
	})
}

// Started before its etcd, serve with TLS and client certificates waits
// for it, says so, and serves once etcd is up; SIGTERM during the wait,
// with TLS or with a user to authenticate, stops it cleanly within 2s.
func TestServeEtcdTLSWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the etcd server program: not in -short")
	}
	t.Parallel()
	dir := t.TempDir()
	ca, clientCA := tlstest.NewCA(t, "etcd CA"), tlstest.NewCA(t, "etcd client CA")
	caFile := filepath.Join(dir, "ca.crt")
	writeFileT(t, caFile, ca.PEM, 0o644)
	certFile, keyFile := clientCA.Client(t, "randflake").WriteFiles(t, dir, "c.crt", "c.key")
	addr := closedPort(t)
	args := []string{"--etcd", addr, "--etcd-cacert", caFile, "--etcd-cert", certFile, "--etcd-key", keyFile, "--claim", "4", "--etcd-ttl", "3s", "--etcd-horizon", "9s"}
	stopped := spawnServe(t, secretEnv, args...)
	p := spawnServe(t, secretEnv, args...)
	// One that authenticates (without TLS) waits as well.
	pwFile := filepath.Join(dir, "password")
	writeFileT(t, pwFile, []byte("pw-never-shown-7781"), 0o600)
	authAddr := closedPort(t)
	stoppedAuth := spawnServe(t, secretEnv, "--etcd", authAddr, "--etcd-user", "randflake", "--etcd-password-file", pwFile)
	for q, want := range map[*serveProcess]string{stopped: addr, p: addr, stoppedAuth: authAddr} {
		if m := waitLog(t, q, waitingForEtcd, 10*time.Second); m[1] != want {
			t.Errorf("waiting notice names %s, want %s", m[1], want)
		}
	}
	for _, q := range []*serveProcess{stopped, stoppedAuth} {
		t0 := time.Now()
		q.cmd.Process.Signal(syscall.SIGTERM)
		stoppedAtOnce(t, q, t0, 0, "stopped while waiting for node IDs")
	}
	startSecuredEtcdAt(t, &etcdTLS{dir: dir, server: ca.Server(t, "etcd"), ca: ca, clientCA: clientCA}, addr)
	m := waitLog(t, p, addrRE, 60*time.Second)
	p.url = "http://" + m[1] + m[2]
	checkUnique(t, fetch(t, p, 1000), 1000, nil)
	stop(t, p)
}

// etcdAuthSetup enables authentication in srv the way an operator does
// with etcdctl: a root user, a user for randflake whose role may read and
// write the prefix only, and auth enable.
func etcdAuthSetup(srv *securedEtcd, rootPassword, user, password, prefix string) {
	srv.ctl("user", "add", "root:"+rootPassword)
	srv.ctl("user", "add", user+":"+password)
	srv.ctl("role", "add", "randflake-leases")
	srv.ctl("role", "grant-permission", "randflake-leases", "--prefix=true", "readwrite", prefix)
	srv.ctl("user", "grant-role", user, "randflake-leases")
	srv.ctl("auth", "enable")
}

// serve on an etcd with authentication enabled (over TLS, as it should
// be): two processes, one configured by flags and one by variables, with
// the password in a Kubernetes Secret volume, claim disjoint node IDs; a
// wrong password, an unknown user, a missing user and a user without
// rights on the prefix each end serve with status 1 and a message naming
// what failed. No output of any run, nor the metrics, holds a password.
func TestServeEtcdAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the etcd server program: not in -short")
	}
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "etcd CA")
	srv := startSecuredEtcd(t, &etcdTLS{dir: dir, server: ca.Server(t, "etcd"), ca: ca})
	const (
		rootPassword  = "root-pw-never-shown-5521"
		password      = "rf-pw-never-shown-8830"
		wrongPassword = "wrong-pw-never-shown-1177"
	)
	etcdAuthSetup(srv, rootPassword, "randflake", password, etcdlease.DefaultPrefix)
	srv.ctlFlags = append(srv.ctlFlags, "--user=root:"+rootPassword)

	vol := newKubeletVolume(t, filepath.Join(dir, "volume"), 0o600, -1, map[string]string{
		"ca.crt": string(ca.PEM), "password": password + "\n", "wrong": wrongPassword,
	})
	var out outputs
	defer out.check(t, password, wrongPassword, rootPassword)

	common := []string{"--claim", "4", "--etcd-ttl", "3s", "--etcd-horizon", "9s"}
	flags := slices.Concat(common, []string{"--etcd", srv.endpoint, "--etcd-cacert", vol.path("ca.crt"),
		"--etcd-user", "randflake", "--etcd-password-file", vol.path("password")})
	env := append(slices.Clone(secretEnv), "RANDFLAKE_ETCD="+srv.url(), "RANDFLAKE_ETCD_CACERT="+vol.path("ca.crt"),
		"RANDFLAKE_ETCD_USER=randflake", "RANDFLAKE_ETCD_PASSWORD_FILE="+vol.path("password"))

	start := time.Now()
	a := startServeSecured(t, secretEnv, flags...)
	firstClaim := time.Since(start)
	b := startServeSecured(t, env, common...)
	ids := disjointIDs(t, secretEnv, 2000, a, b)
	metrics := scrapeText(t, a.url+"/metrics")
	out.add(metrics)
	t.Logf("%d IDs from 2 processes authenticated to etcd, none twice, no node ID shared; the first claim on the new etcd took %v",
		len(ids), firstClaim.Round(time.Millisecond))
	stop(t, a)
	stop(t, b)
	out.add(a.logs.String(), b.logs.String())

	t.Run("wrong password", func(t *testing.T) {
		msg := serveFails(t, secretEnv, slices.Concat(common, []string{"--etcd", srv.endpoint, "--etcd-cacert", vol.path("ca.crt"),
			"--etcd-user", "randflake", "--etcd-password-file", vol.path("wrong")})...)
		out.add(msg)
		wantAll(t, "serve with a wrong password", msg, srv.endpoint, "--etcd-user randflake", "authentication failed")
	})
	t.Run("unknown user", func(t *testing.T) {
		msg := serveFails(t, secretEnv, slices.Concat(common, []string{"--etcd", srv.endpoint, "--etcd-cacert", vol.path("ca.crt"),
			"--etcd-user", "nobody", "--etcd-password-file", vol.path("password")})...)
		out.add(msg)
		wantAll(t, "serve as an unknown user", msg, srv.endpoint, "--etcd-user nobody", "authentication failed")
	})
	t.Run("no user", func(t *testing.T) {
		msg := serveFails(t, secretEnv, slices.Concat(common, []string{"--etcd", srv.endpoint, "--etcd-cacert", vol.path("ca.crt")})...)
		out.add(msg)
		wantAll(t, "serve without a user on an etcd with authentication", msg, srv.endpoint, "user name is empty", "give --etcd-user and --etcd-password-file")
	})
	t.Run("no rights on the prefix", func(t *testing.T) {
		msg := serveFails(t, secretEnv, slices.Concat(flags, []string{"--etcd-prefix", "/elsewhere/"})...)
		out.add(msg)
		wantAll(t, "serve as a user without rights on --etcd-prefix", msg, srv.endpoint, "permission denied", "--etcd-user randflake needs readwrite", "--etcd-prefix /elsewhere/")
	})
}

// serve authenticated to an etcd without TLS works, and warns that the
// password crosses the network in the clear.
func TestServeEtcdAuthWithoutTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the etcd server program: not in -short")
	}
	t.Parallel()
	srv := startSecuredEtcd(t, nil)
	const password = "plain-pw-never-shown-4410"
	etcdAuthSetup(srv, "root-"+password, "randflake", password, etcdlease.DefaultPrefix)
	file := filepath.Join(t.TempDir(), "password")
	writeFileT(t, file, []byte(password), 0o600)
	p := startServeSecured(t, secretEnv, "--etcd", srv.endpoint, "--claim", "4", "--etcd-ttl", "3s", "--etcd-horizon", "9s",
		"--etcd-user", "randflake", "--etcd-password-file", file)
	checkUnique(t, fetch(t, p, 1000), 1000, nil)
	stop(t, p)
	wantAll(t, "serve authenticated without TLS", p.logs.String(), "without TLS")
	var out outputs
	out.add(p.logs.String())
	out.check(t, password)
}

// scrapeText returns the body of GET url.
func scrapeText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// The flags of a secured etcd that do not go together, or lack --etcd,
// are usage errors (status 2) naming the flags, from the command line and
// from the variables; files that cannot be used end serve with status 1
// naming the flag and the file, never showing a password.
func TestEtcdSecurityFlagsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "CA")
	caFile := filepath.Join(dir, "ca.crt")
	writeFileT(t, caFile, ca.PEM, 0o644)
	pair := ca.Client(t, "randflake")
	certFile, keyFile := pair.WriteFiles(t, dir, "c.crt", "c.key")
	const password = "pw-never-shown-3319"
	pwFile := filepath.Join(dir, "password")
	writeFileT(t, pwFile, []byte(password+"\n"), 0o600)
	open := filepath.Join(dir, "open-password")
	writeFileT(t, open, []byte(password), 0o644)
	os.Chmod(open, 0o644)
	openKey := filepath.Join(dir, "open.key")
	writeFileT(t, openKey, pair.KeyPEM, 0o644)
	os.Chmod(openKey, 0o644)
	empty := filepath.Join(dir, "empty")
	writeFileT(t, empty, []byte("\n"), 0o600)
	twoLines := filepath.Join(dir, "two-lines")
	writeFileT(t, twoLines, []byte(password+"\nsecond-line\n"), 0o600)
	addr := closedPort(t)

	usage := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"cacert without etcd", nil, []string{"--etcd-cacert", caFile}, "are for --etcd"},
		{"user without etcd", nil, []string{"--etcd-user", "u", "--etcd-password-file", pwFile}, "are for --etcd"},
		{"cert without key", nil, []string{"--etcd", addr, "--etcd-cert", certFile}, "--etcd-cert and --etcd-key go together"},
		{"key without cert", nil, []string{"--etcd", addr, "--etcd-key", keyFile}, "--etcd-cert and --etcd-key go together"},
		{"user without password", nil, []string{"--etcd", addr, "--etcd-user", "u"}, "--etcd-user and --etcd-password-file go together"},
		{"password without user", nil, []string{"--etcd", addr, "--etcd-password-file", pwFile}, "--etcd-user and --etcd-password-file go together"},
		{"http endpoint with TLS", nil, []string{"--etcd", "http://" + addr, "--etcd-cacert", caFile}, "is not TLS"},
		{"variables", []string{"RANDFLAKE_ETCD=" + addr, "RANDFLAKE_ETCD_USER=u"}, nil, "$RANDFLAKE_ETCD_USER"},
	}
	for _, c := range usage {
		t.Run(c.name, func(t *testing.T) {
			r := runBinaryTimeout(t, 20*time.Second, append(slices.Clone(secretEnv), c.env...), append([]string{"serve", "--listen", "127.0.0.1:0"}, c.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, want 2 and %q in:\n%s", r.code, c.want, r.stderr)
			}
		})
	}

	files := []struct {
		name string
		args []string
		want []string
	}{
		{"password readable by others", []string{"--etcd-user", "u", "--etcd-password-file", open}, []string{"--etcd-password-file", open}},
		{"empty password", []string{"--etcd-user", "u", "--etcd-password-file", empty}, []string{"--etcd-password-file", "empty"}},
		{"password of two lines", []string{"--etcd-user", "u", "--etcd-password-file", twoLines}, []string{"--etcd-password-file", "more than one line"}},
		{"missing password file", []string{"--etcd-user", "u", "--etcd-password-file", filepath.Join(dir, "none")}, []string{"--etcd-password-file", "none"}},
		{"key readable by others", []string{"--etcd-cert", certFile, "--etcd-key", openKey}, []string{"--etcd-key", openKey}},
		{"CA file without a certificate", []string{"--etcd-cacert", pwFile}, []string{"--etcd-cacert", "no PEM certificate"}},
		{"key of another certificate", []string{"--etcd-cert", certFile, "--etcd-key", writeOtherKey(t, ca, dir)}, []string{"--etcd-cert", "--etcd-key", "does not match"}},
	}
	for _, c := range files {
		t.Run(c.name, func(t *testing.T) {
			r := runBinaryTimeout(t, 20*time.Second, secretEnv, append([]string{"serve", "--listen", "127.0.0.1:0", "--etcd", addr}, c.args...)...)
			if r.code != 1 {
				t.Errorf("exit %d, want 1:\n%s", r.code, r.stderr)
			}
			wantAll(t, c.name, r.stderr, c.want...)
			if strings.Contains(r.stderr, password) || strings.Contains(r.stderr, "second-line") {
				t.Errorf("the password file's content is shown:\n%s", r.stderr)
			}
		})
	}
}

// writeOtherKey writes the key of a new certificate of ca into dir and
// returns its path.
func writeOtherKey(t *testing.T, ca *tlstest.CA, dir string) string {
	_, key := ca.Client(t, "other").WriteFiles(t, dir, "other.crt", "other.key")
	return key
}
