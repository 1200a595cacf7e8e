package main

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
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

// Every format, verified (decoded, no duplicate) and counted, gets
// exactly the IDs asked for from the real handler.
func TestLoadFormats(t *testing.T) {
	url := loadService(t)
	for _, format := range []string{"json", "text", "binary"} {
		for _, verify := range []bool{true, false} {
			for _, batch := range []int{1, 1000} {
				rep, err := loadTest(context.Background(), loadConfig{URL: url, Format: format, Batch: batch, Concurrency: 2,
					Duration: 10 * time.Second, Requests: 20, Verify: verify})
				if err != nil {
					t.Fatalf("%s, verify %v, batch %d: %v", format, verify, batch, err)
				}
				if rep.Requests != 20 || rep.IDs != 20*batch || rep.Verified != verify || (!verify && rep.Bytes == 0) {
					t.Errorf("%s, verify %v, batch %d: %+v", format, verify, batch, rep)
				}
				if format == "binary" && !verify && rep.Bytes != int64(8*20*batch) {
					t.Errorf("binary: %d bytes for %d IDs", rep.Bytes, rep.IDs)
				}
			}
		}
	}
}

// An answer that is not what was asked for fails the run with a message
// that says so; a 503 of kind exhausted is counted and waited out.
func TestLoadBadAnswers(t *testing.T) {
	for _, c := range []struct {
		name   string
		format string
		h      http.HandlerFunc
		want   string
	}{
		{"wrong type", "binary", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(make([]byte, 8))
		}, `Content-Type "application/json", want application/octet-stream`},
		{"too few IDs", "binary", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(make([]byte, 16))
		}, "asked for 4 IDs, got 2 (16 bytes)"},
		{"short body", "binary", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", "32")
			w.Write(make([]byte, 20))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}, "reading the answer after 20 bytes: unexpected EOF"},
		{"JSON of 3", "json", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"ids":["a","b","c"]}`))
		}, "asked for 4 IDs, got 3"},
		{"error", "json", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			w.Write([]byte(`{"error":"count must be at most 2","kind":"bad_request"}`))
		}, `400 Bad Request: {"error":"count must be at most 2","kind":"bad_request"}`},
	} {
		ts := httptest.NewServer(c.h)
		_, err := loadTest(context.Background(), loadConfig{URL: ts.URL, Format: c.format, Batch: 4, Concurrency: 1, Duration: 10 * time.Second, Requests: 3})
		ts.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
	var calls atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 2 {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(503)
			w.Write([]byte(`{"error":"unavailable: this second's IDs are used up; retry in a second","kind":"exhausted"}`))
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(make([]byte, 8))
	}))
	defer ts.Close()
	rep, err := loadTest(context.Background(), loadConfig{URL: ts.URL, Format: "binary", Batch: 1, Concurrency: 1, Duration: 10 * time.Second, Requests: 4})
	if err != nil || rep.Requests != 3 || rep.Refused != 1 || !strings.Contains(rep.String(), "1 requests refused: the second's IDs used up") {
		t.Errorf("with one 503 exhausted: %+v, %v", rep, err)
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

// randflake load over HTTPS, with a client certificate or a token, in
// every format, verified and counted.
func TestLoadTLS(t *testing.T) {
	tokens, err := server.ParseIssueTokens([]byte("loader loader-token-0123456789\n"))
	if err != nil {
		t.Fatal(err)
	}
	url, _, dir := tlsLoadService(t, server.Config{IssueTokens: tokens})
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("loader-token-0123456789\n"), 0o600)
	withCert, err := clientTLS(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	withoutCert, err := clientTLS(filepath.Join(dir, "ca.pem"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	token, err := readLoadToken(tokenFile)
	if err != nil || token != "loader-token-0123456789" {
		t.Fatalf("token %q, %v", token, err)
	}
	for _, c := range []struct {
		name  string
		tls   *tls.Config
		token string
	}{{"certificate", withCert, ""}, {"token", withoutCert, token}} {
		for _, format := range []string{"json", "binary"} {
			for _, verify := range []bool{true, false} {
				rep, err := loadTest(context.Background(), loadConfig{URL: url, Format: format, Batch: 100, Concurrency: 2,
					Duration: 10 * time.Second, Requests: 10, Verify: verify, TLS: c.tls, Token: c.token})
				if err != nil || rep.Requests != 10 || rep.IDs != 1000 {
					t.Errorf("%s, %s, verify %v: %+v, %v", c.name, format, verify, rep, err)
				}
			}
		}
	}
	// Neither: the service's 401 fails the run, and says so.
	for _, verify := range []bool{true, false} {
		_, err := loadTest(context.Background(), loadConfig{URL: url, Batch: 1, Concurrency: 1, Duration: 10 * time.Second, Requests: 1, Verify: verify, TLS: withoutCert})
		if err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("without a certificate or token, verify %v: %v; want the 401", verify, err)
		}
	}
}

// A 429 (over the client's share) is counted and waited out as its
// Retry-After asks, verified and not.
func TestLoadQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 429's Retry-After of 2 s, twice: not in -short")
	}
	t.Parallel()
	for _, verify := range []bool{true, false} {
		// A service of its own each time, with a full share: 100 IDs,
		// refilled at 50 a second.
		url, _, dir := tlsLoadService(t, server.Config{ClientRate: 50, ClientBurst: 100})
		cfg, err := clientTLS(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		rep, err := loadTest(context.Background(), loadConfig{URL: url, Format: "json", Batch: 100, Concurrency: 1,
			Duration: 20 * time.Second, Requests: 3, Verify: verify, TLS: cfg})
		if err != nil || rep.Requests != 2 || rep.Quota != 1 || !strings.Contains(rep.String(), "1 requests over the client's share (429)") {
			t.Errorf("verify %v: %+v, %v; want 2 requests served and one 429 counted", verify, rep, err)
		}
		// The 429 asks for 2 s (100 IDs at 50 a second).
		if d := time.Since(start); d < 1900*time.Millisecond {
			t.Errorf("verify %v: done in %v, without waiting out the 429", verify, d)
		}
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
