package main

import (
	"crypto/tls"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/cmd/randflake/internal/server"
	"github.com/randflake/randflake/cmd/randflake/internal/tlstest"
)

// loadService is the real service handler on a loopback port, over 64
// node IDs.
func loadService(t *testing.T) string {
	t.Helper()
	now := time.Now().Unix()
	g, err := randflake.NewSharded(randflake.ShardedConfig{Secret: []byte("0123456789abcdef"), LastNode: 63, LeaseStart: now - 1, LeaseEnd: now + 3600})
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Config{Generator: g, LeaseEnd: func() int64 { return now + 3600 }})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(s)
	s.Configure(ts.Config)
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.URL
}

// load against the real handler, in every format, verified (decoded, no
// duplicate) and counted: the report it prints.
func TestLoadFormats(t *testing.T) {
	url := loadService(t)
	for _, format := range []string{"json", "text", "binary"} {
		for _, verify := range []bool{true, false} {
			args := []string{"--url", url, "--format", format, "--batch", "1000", "--concurrency", "2", "--requests", "20",
				"--duration", "60s", "--verify=" + strconv.FormatBool(verify)}
			code, out := runLoad(t, args...)
			want := format + ", batch 1000: requests 20, IDs 20000 (no duplicate within 1048576 consecutive IDs), "
			if !verify {
				want = format + ", batch 1000: requests 20, IDs 20000 (counted, not decoded), "
			}
			if code != 0 || !strings.HasPrefix(out, want) || !strings.Contains(out, "\nthroughput ") ||
				!strings.Contains(out, "\nlatency p50 ") || verify == strings.Contains(out, " MB/s") {
				t.Errorf("load %s: exit %d:\n%s", strings.Join(args, " "), code, out)
			}
		}
	}
}

// tlsLoadService is the real service over TLS (HTTP/2 and HTTP/1.1)
// requiring client certificates of ca and, without one, a token: what
// load's --cacert, --cert, --key and --token-file are for.
func tlsLoadService(t *testing.T, cfg server.Config) (url string, ca *tlstest.CA, dir string) {
	t.Helper()
	now := time.Now().Unix()
	g, err := randflake.NewSharded(randflake.ShardedConfig{Secret: []byte("0123456789abcdef"), LastNode: 63, LeaseStart: now - 1, LeaseEnd: now + 3600})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Generator, cfg.LeaseEnd = g, func() int64 { return now + 3600 }
	s, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ca = tlstest.NewCA(t, "load test CA")
	dir = t.TempDir()
	os.WriteFile(filepath.Join(dir, "ca.pem"), ca.PEM, 0o644)
	ca.Client(t, "loader").WriteFiles(t, dir, "client.pem", "client-key.pem")
	ts := httptest.NewUnstartedServer(s)
	s.Configure(ts.Config)
	ts.EnableHTTP2 = true
	ts.TLS = &tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{ca.Server(t, "randflake").TLS(t)},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool(),
	}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts.URL, ca, dir
}

// randflake load over HTTPS, with --cacert and a client certificate
// (--cert, --key) or a token (--token-file), verified and counted; with
// neither, the service's 401 fails the run and says so.
func TestLoadTLS(t *testing.T) {
	tokens, err := server.ParseIssueTokens([]byte("loader loader-token-0123456789\n"))
	if err != nil {
		t.Fatal(err)
	}
	url, _, dir := tlsLoadService(t, server.Config{IssueTokens: tokens})
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("loader-token-0123456789\n"), 0o600)
	ca := []string{"--url", url, "--cacert", filepath.Join(dir, "ca.pem")}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"certificate", []string{"--cert", filepath.Join(dir, "client.pem"), "--key", filepath.Join(dir, "client-key.pem")}},
		{"token", []string{"--token-file", tokenFile}},
	} {
		for _, verify := range []string{"--verify=true", "--verify=false"} {
			args := append(append(append([]string{}, ca...), c.args...), verify, "--format", "binary", "--batch", "100",
				"--concurrency", "2", "--requests", "10", "--duration", "60s")
			if code, out := runLoad(t, args...); code != 0 || !strings.HasPrefix(out, "binary, batch 100: requests 10, IDs 1000 (") {
				t.Errorf("%s, %s: exit %d:\n%s", c.name, verify, code, out)
			}
		}
	}
	if code, out := runLoad(t, append(ca, "--requests", "1")...); code != 1 || !strings.Contains(out, "401") {
		t.Errorf("without a certificate or token: exit %d, %q; want exit 1 and the 401", code, out)
	}
}

// load against the real service's 429 (over the client's share): counted,
// and said in the report.
func TestLoadQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 429's Retry-After of 2 s: not in -short")
	}
	t.Parallel()
	// A full share: 100 IDs, refilled at 50 a second.
	url, _, dir := tlsLoadService(t, server.Config{ClientRate: 50, ClientBurst: 100})
	code, out := runLoad(t, "--url", url, "--cacert", filepath.Join(dir, "ca.pem"), "--cert", filepath.Join(dir, "client.pem"),
		"--key", filepath.Join(dir, "client-key.pem"), "--batch", "100", "--concurrency", "1", "--requests", "3", "--duration", "20s")
	if code != 0 || !strings.Contains(out, "requests 2, IDs 200 (") || !strings.Contains(out, "; 1 requests over the client's share (429)") {
		t.Errorf("exit %d:\n%s\nwant 2 requests served and one 429 counted", code, out)
	}
}

// load's TLS and token flags: usage errors, and files refused with the
// reason.
func TestLoadTLSFlags(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open-token")
	os.WriteFile(open, []byte("token-0123456789abcdef\n"), 0o644)
	spaced := filepath.Join(dir, "spaced-token")
	os.WriteFile(spaced, []byte("token 0123456789abcdef\n"), 0o600)
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("hello\n"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--cert", notPEM}, 2, "--cert and --key go together"},
		{[]string{"--cacert", notPEM}, 2, "--cacert, --cert and --key need an https --url"},
		{[]string{"--url", "ftp://127.0.0.1:1"}, 2, "--url must be an http or https URL"},
		{[]string{"--url", "https://example.com"}, 2, "--url must point at this machine"},
		{[]string{"--url", "https://127.0.0.1:1", "--cacert", notPEM}, 1, "--cacert " + notPEM + ": no PEM certificate in it"},
		{[]string{"--url", "https://127.0.0.1:1", "--cacert", filepath.Join(dir, "missing.pem")}, 1, "--cacert: statedir: open"},
		{[]string{"--token-file", open}, 1, "chmod 600"},
		{[]string{"--token-file", spaced}, 1, "want one token, without white space inside"},
	} {
		var stdout, stderr strings.Builder
		code := run(&env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }, isTerminal: func(any) bool { return false }},
			append([]string{"load", "--requests", "1"}, c.args...))
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("load %q: exit %d, %q; want exit %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
		if strings.Contains(stderr.String(), "0123456789abcdef") {
			t.Errorf("load %q: the message %q quotes the token", c.args, stderr.String())
		}
	}
}
