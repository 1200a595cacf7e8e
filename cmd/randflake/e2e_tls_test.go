package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake/client"
	"github.com/randflake/randflake/cmd/randflake/internal/tlstest"
)

// The end-to-end tests of serve's TLS: the real binary, real curl and the
// Go client, over HTTPS with HTTP/2 and HTTP/1.1, with client
// certificates, certificates replaced under the running process, and the
// plain-HTTP operations listener.

// needCurl returns curl's path, or skips the test outside CI.
func needCurl(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("curl is required under CI: %v", err)
		}
		t.Skipf("curl is not installed: %v", err)
	}
	return path
}

// curlResult is what curl got: the last answer's status, protocol
// version, headers and body, or curl's exit status and message.
type curlResult struct {
	code    int // curl's exit status
	stderr  string
	status  int
	version string // "1.1" or "2"
	header  http.Header
	body    []byte
}

// runCurl runs curl with args and a URL, writing the answer's head and
// body to files that it reads back.
func runCurl(t *testing.T, args ...string) curlResult {
	t.Helper()
	curl := needCurl(t)
	dir := t.TempDir()
	head, body := filepath.Join(dir, "head"), filepath.Join(dir, "body")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, curl, append([]string{"-sS", "--max-time", "20", "-D", head, "-o", body, "-w", "%{http_code} %{http_version}"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := curlResult{stderr: errb.String(), header: http.Header{}}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	fmt.Sscan(out.String(), &r.status, &r.version)
	r.body, _ = os.ReadFile(body)
	if h, err := os.ReadFile(head); err == nil {
		// The last head: curl writes one per answer it read.
		blocks := strings.Split(strings.TrimSpace(string(h)), "\r\n\r\n")
		sc := bufio.NewScanner(strings.NewReader(blocks[len(blocks)-1]))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && !strings.HasPrefix(k, "HTTP/") {
				r.header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
			}
		}
	}
	return r
}

// checkCurl checks an answer curl got to GET url against the contract.
func checkCurl(t *testing.T, url string, r curlResult) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = contract.check(req, r.status, r.header, r.body)
	record(err)
	if err != nil {
		t.Error(err)
	}
}

// tlsSetup is a CA with a server certificate for serve and files for it.
type tlsSetup struct {
	ca               *tlstest.CA
	dir              string
	caFile           string // the CA certificate
	certFile         string // serve's certificate
	keyFile          string // and its key
	clientCert       string // a client certificate with the common name "billing"
	clientKey        string
	otherClientCert  string // a client certificate of another CA
	otherClientKey   string
	serverCertSerial string
}

func newTLSSetup(t *testing.T) *tlsSetup {
	t.Helper()
	s := &tlsSetup{ca: tlstest.NewCA(t, "randflake test CA"), dir: t.TempDir()}
	s.caFile = filepath.Join(s.dir, "ca.pem")
	if err := os.WriteFile(s.caFile, s.ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	server := s.ca.Server(t, "randflake-1")
	s.serverCertSerial = server.Cert.SerialNumber.String()
	s.certFile, s.keyFile = server.WriteFiles(t, s.dir, "tls.crt", "tls.key")
	s.clientCert, s.clientKey = s.ca.Client(t, "billing").WriteFiles(t, s.dir, "billing.crt", "billing.key")
	s.otherClientCert, s.otherClientKey = tlstest.NewCA(t, "another CA").Client(t, "mallory").WriteFiles(t, s.dir, "mallory.crt", "mallory.key")
	return s
}

// tlsClient is an HTTP client trusting s's CA, presenting pair if given,
// over HTTP/2 if h2, whose answers are checked against the contract.
func (s *tlsSetup) tlsClient(t *testing.T, pair *tlstest.Pair, h2 bool) (*http.Client, *http.Transport) {
	t.Helper()
	cfg := &tls.Config{RootCAs: s.ca.Pool()}
	if pair != nil {
		cfg.Certificates = []tls.Certificate{pair.TLS(t)}
	}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: h2}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: contractTransport{base: tr}, Timeout: 20 * time.Second}, tr
}

var opsAddrRE = regexp.MustCompile(`msg="serving operations" addr=(\S+)`)

// startServeTLS starts serve with args and waits until its operations
// listener (--ops-listen, added here) says it is ready. It sets p.url to
// the https URL of the main listener and returns the operations URL.
func startServeTLS(t *testing.T, env []string, args ...string) (*serveProcess, string) {
	t.Helper()
	p := spawnServe(t, append(slicesClone(secretEnv), env...), append([]string{"--ops-listen", "127.0.0.1:0"}, args...)...)
	m := waitLog(t, p, addrRE, startupTimeout)
	p.url = "https://" + m[1] + m[2]
	ops := "http://" + waitLog(t, p, opsAddrRE, 10*time.Second)[1]
	limit := within(startupTimeout)
	deadline := time.Now().Add(limit)
	for {
		resp, err := http.Get(ops + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p, ops
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready within %v (%s): %v\n%s", limit, slowness(), err, p.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// HTTPS with HTTP/2 by ALPN (curl --http2 reports HTTP/2) and HTTP/1.1;
// TLS 1.2 at least; no plain HTTP on the main address; the operations
// listener serves the probes and the metrics in plain HTTP, and nothing
// else; net/http's 431 over both protocols; the Go client gets unique IDs
// over HTTP/2.
func TestServeTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs curl: not in -short")
	}
	t.Parallel()
	s := newTLSSetup(t)
	p, ops := startServeTLS(t, nil, "--nodes", "0-63", "--tls-cert-file", s.certFile, "--tls-key-file", s.keyFile)

	r := runCurl(t, "--cacert", s.caFile, "--http2", p.url+"/v1/ids?count=3")
	if r.code != 0 || r.status != 200 || r.version != "2" {
		t.Fatalf("curl --http2: exit %d (%s), status %d, HTTP/%s; want 200 over HTTP/2", r.code, r.stderr, r.status, r.version)
	}
	checkCurl(t, p.url+"/v1/ids?count=3", r)
	r = runCurl(t, "--cacert", s.caFile, "--http1.1", "-H", "Accept: text/plain", p.url+"/v1/ids?count=3")
	if r.code != 0 || r.status != 200 || r.version != "1.1" || len(strings.Fields(string(r.body))) != 3 {
		t.Errorf("curl --http1.1: exit %d (%s), status %d, HTTP/%s, %q", r.code, r.stderr, r.status, r.version, r.body)
	}
	// The server's certificate is verified by curl, for 127.0.0.1 and for
	// localhost, and refused by a curl that does not trust its CA.
	if r := runCurl(t, "--cacert", s.caFile, strings.Replace(p.url, "127.0.0.1", "localhost", 1)+"/healthz"); r.code != 0 || r.status != 200 {
		t.Errorf("curl to localhost: exit %d (%s), status %d", r.code, r.stderr, r.status)
	}
	if r := runCurl(t, p.url+"/healthz"); r.code == 0 {
		t.Errorf("curl without the CA: status %d, want a verification failure", r.status)
	}
	// Plain HTTP on the TLS address gets net/http's 400, no ID.
	if r := runCurl(t, strings.Replace(p.url, "https://", "http://", 1)+"/v1/ids"); r.status != 400 || bytes.Contains(r.body, []byte(`"ids"`)) {
		t.Errorf("plain HTTP to the TLS address: exit %d, status %d, %q", r.code, r.status, r.body)
	}
	// TLS 1.1 is refused; the Go client would speak it if let.
	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.ca.Pool(), MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}}}
	if resp, err := old.Get(p.url + "/healthz"); err == nil {
		resp.Body.Close()
		t.Errorf("a TLS 1.1 client was served: %s", resp.Status)
	} else if !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("TLS 1.1: %v; want a protocol version alert", err)
	}

	// The operations listener: plain HTTP, probes and metrics only; the
	// metrics are no longer on the main address.
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200, "/v1/ids": 404, "/openapi.yaml": 404} {
		r := runCurl(t, ops+path)
		if r.code != 0 || r.status != want {
			t.Errorf("curl %s%s: exit %d (%s), status %d, want %d", ops, path, r.code, r.stderr, r.status, want)
		}
		if path == "/metrics" && !bytes.Contains(r.body, []byte("\nrandflake_ids_issued_total 6\n")) {
			t.Errorf("the operations listener's metrics lack the 6 IDs issued over TLS")
		}
	}
	if r := runCurl(t, "--cacert", s.caFile, p.url+"/metrics"); r.status != 404 {
		t.Errorf("/metrics on the main address with --ops-listen: %d, want 404", r.status)
	}
	if r := runCurl(t, "--cacert", s.caFile, p.url+"/readyz"); r.status != 200 {
		t.Errorf("/readyz on the main address: %d, want 200", r.status)
	}

	// Heads too large: net/http's 431, in text over HTTP/1.1 and in HTML
	// over HTTP/2 (two fields of 9,000 bytes: 18 KiB of header list).
	big := strings.Repeat("a", 24000)
	r = runCurl(t, "--cacert", s.caFile, "--http1.1", "-H", "X-Big: "+big, p.url+"/v1/ids")
	if r.status != 431 || r.version != "1.1" || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Errorf("24,000-byte header over HTTP/1.1: exit %d (%s), %d HTTP/%s %q", r.code, r.stderr, r.status, r.version, r.header.Get("Content-Type"))
	}
	checkCurl(t, p.url+"/v1/ids", r)
	nine := strings.Repeat("b", 9000)
	r = runCurl(t, "--cacert", s.caFile, "--http2", "-H", "X-One: "+nine, "-H", "X-Two: "+nine, p.url+"/healthz")
	if r.status != 431 || r.version != "2" || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
		t.Errorf("two 9,000-byte headers over HTTP/2: exit %d (%s), %d HTTP/%s %q", r.code, r.stderr, r.status, r.version, r.header.Get("Content-Type"))
	}
	checkCurl(t, p.url+"/healthz", r)
	r = runCurl(t, "--cacert", s.caFile, "--http2", "-H", "X-One: "+strings.Repeat("c", 7000), p.url+"/healthz")
	if r.status != 200 || r.version != "2" {
		t.Errorf("a 7,000-byte header over HTTP/2: exit %d (%s), %d HTTP/%s", r.code, r.stderr, r.status, r.version)
	}

	// The Go client over HTTP/2: batches unique.
	hc, _ := s.tlsClient(t, nil, true)
	c, err := client.New(client.Config{URL: p.url, HTTPClient: hc, BatchSize: 5000})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var ids []string
	for range 20 {
		batch, err := c.Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range batch {
			ids = append(ids, fmt.Sprint(id))
		}
	}
	checkUnique(t, ids, 20*5000, nil)
	resp, err := hc.Get(p.url + "/healthz")
	if err != nil || resp.ProtoMajor != 2 {
		t.Fatalf("Go client: %v %v, want HTTP/2", resp, err)
	}
	resp.Body.Close()
	stop(t, p)
}

// --tls-client-ca-file: no connection without a certificate of its CAs;
// with one, the client is its common name (in the access log and the
// metrics), and the certificate is enough to issue beside an issue tokens
// file.
func TestServeMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs curl: not in -short")
	}
	t.Parallel()
	s := newTLSSetup(t)
	tokens := filepath.Join(s.dir, "tokens")
	os.WriteFile(tokens, []byte("alice alice-token-0123456789\n"), 0o600)
	p, ops := startServeTLS(t, nil, "--nodes", "0-63", "--tls-cert-file", s.certFile, "--tls-key-file", s.keyFile,
		"--tls-client-ca-file", s.caFile, "--issue-tokens-file", tokens, "--access-log")
	r := runCurl(t, "--cacert", s.caFile, "--http2", "--cert", s.clientCert, "--key", s.clientKey, p.url+"/v1/ids?count=7")
	if r.code != 0 || r.status != 200 || r.version != "2" {
		t.Fatalf("curl with the client certificate: exit %d (%s), %d HTTP/%s %q", r.code, r.stderr, r.status, r.version, r.body)
	}
	checkCurl(t, p.url+"/v1/ids?count=7", r)
	for what, args := range map[string][]string{
		"without a certificate":            {"--cacert", s.caFile, p.url + "/healthz"},
		"with a certificate of another CA": {"--cacert", s.caFile, "--cert", s.otherClientCert, "--key", s.otherClientKey, p.url + "/healthz"},
	} {
		if r := runCurl(t, args...); r.code == 0 || r.status != 0 {
			t.Errorf("curl %s: exit %d, status %d; want no connection", what, r.code, r.status)
		}
	}
	// The Go client, with a certificate whose identity is its first DNS
	// name, and with alice's token as well as a certificate.
	orders := s.ca.Client(t, "", "orders.example")
	hc, _ := s.tlsClient(t, &orders, true)
	c, err := client.New(client.Config{URL: p.url, HTTPClient: hc, BatchSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ids, err := c.Fetch(context.Background()); err != nil || len(ids) != 100 {
		t.Fatalf("Go client with a certificate: %d IDs, %v", len(ids), err)
	}
	ac, err := client.New(client.Config{URL: p.url, HTTPClient: hc, BatchSize: 5, Token: "alice-token-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	if ids, err := ac.Fetch(context.Background()); err != nil || len(ids) != 5 {
		t.Fatalf("Go client with a certificate and alice's token: %d IDs, %v", len(ids), err)
	}
	mfs := scrape(t, ops)
	for client, want := range map[string]float64{"billing": 7, "orders.example": 100, "alice": 5} {
		if got, _ := metricValue(mfs, "randflake_client_ids_issued_total", "client", client); got != want {
			t.Errorf("randflake_client_ids_issued_total{client=%q} = %v, want %v", client, got, want)
		}
	}
	waitLog(t, p, regexp.MustCompile(`msg=request log=access method=GET path=/v1/ids status=200 .*client=billing`), 10*time.Second)
	waitLog(t, p, regexp.MustCompile(`msg=request log=access method=GET path=/v1/ids status=200 .*client=orders.example`), 10*time.Second)
	waitLog(t, p, regexp.MustCompile(`msg="TLS certificate loaded" .*client_certificates=true`), time.Second)
	stop(t, p)
}

// writeAtomically replaces path with data as an editor or cert-manager
// would: a new file renamed over the old one.
func writeAtomically(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// servedSerial makes a new connection to url and returns the serial number
// of the certificate served on it.
func servedSerial(t *testing.T, s *tlsSetup, url string) string {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.ca.Pool()}, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url + "/healthz")
	if err != nil {
		t.Fatalf("new connection: %v", err)
	}
	resp.Body.Close()
	return resp.TLS.PeerCertificates[0].SerialNumber.String()
}

// waitSerial waits up to 15 s (stretched by within) until new
// connections get the certificate of serial.
func waitSerial(t *testing.T, s *tlsSetup, p *serveProcess, serial string) {
	t.Helper()
	limit := within(15 * time.Second)
	deadline := time.Now().Add(limit)
	for {
		got := servedSerial(t, s, p.url)
		if got == serial {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("new connections still get certificate %s, not %s, %v later (%s); logs:\n%s", got, serial, limit, slowness(), p.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// keptAlive is a keep-alive connection, HTTP/1.1 or HTTP/2: get makes a
// request and fails unless it went over the same connection, with the
// certificate it was made with. The HTTP/1.1 connection is the test's own
// (a TLS connection it writes requests on), so that only the server can
// close it: net/http's client drops a keep-alive connection whose
// request's write it has not seen end within 50 ms of the response,
// which a loaded machine can make it do.
type keptAlive struct {
	name   string
	hc     *http.Client // HTTP/2
	conn   *tls.Conn    // HTTP/1.1
	br     *bufio.Reader
	serial string
	local  string    // the connection's local address: the server logs it as remote
	opened time.Time // when its first request was answered
}

func openKeptAlive(t *testing.T, s *tlsSetup, url string, h2 bool) *keptAlive {
	t.Helper()
	k := &keptAlive{name: map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2]}
	if h2 {
		k.hc, _ = s.tlsClient(t, nil, true)
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { k.local = i.Conn.LocalAddr().String() }})
		req, _ := http.NewRequestWithContext(ctx, "GET", url+"/v1/ids?count=1", nil)
		resp, err := k.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("HTTP/2 connection speaks %s", resp.Proto)
		}
		k.serial = resp.TLS.PeerCertificates[0].SerialNumber.String()
	} else {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{RootCAs: s.ca.Pool(), NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		k.conn, k.br, k.local = conn, bufio.NewReader(conn), conn.LocalAddr().String()
		k.serial = conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
		if status, err := k.get1(url); err != nil || status != 200 {
			t.Fatalf("HTTP/1.1 connection: status %d, %v", status, err)
		}
	}
	k.opened = time.Now()
	return k
}

// get1 makes a request on the HTTP/1.1 connection and reads its answer
// whole, within 20 s.
func (k *keptAlive) get1(url string) (int, error) {
	k.conn.SetDeadline(time.Now().Add(20 * time.Second))
	defer k.conn.SetDeadline(time.Time{})
	req, _ := http.NewRequest("GET", url+"/v1/ids?count=1", nil)
	if err := req.Write(k.conn); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(k.br, req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return resp.StatusCode, err
	}
	if resp.Close {
		return resp.StatusCode, errors.New("the server answered with Connection: close")
	}
	return resp.StatusCode, nil
}

func (k *keptAlive) get(t *testing.T, p *serveProcess) {
	t.Helper()
	var (
		reused bool
		status int
		serial string
		err    error
	)
	if k.conn != nil {
		status, err = k.get1(p.url)
		reused, serial = err == nil, k.conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	} else {
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
		req, _ := http.NewRequestWithContext(ctx, "GET", p.url+"/v1/ids?count=1", nil)
		var resp *http.Response
		if resp, err = k.hc.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status, serial = resp.StatusCode, resp.TLS.PeerCertificates[0].SerialNumber.String()
		}
	}
	if !reused || status != 200 || serial != k.serial {
		// What the server said of the connection (it logs the closes it
		// makes, naming the client's address) tells why it is gone.
		var said []string
		for _, line := range strings.Split(p.logs.String(), "\n") {
			if strings.Contains(line, k.local) {
				said = append(said, line)
			}
		}
		t.Errorf("%s: reused %v, status %d, certificate %s, error %v; want the open connection (%s, opened %v ago), 200, certificate %s; the server's log of it: %q",
			k.name, reused, status, serial, err, k.local, time.Since(k.opened).Round(time.Millisecond), k.serial, said)
	}
}

// Certificates replaced on disk are served to new connections within the
// poll interval, while open keep-alive connections (HTTP/1.1 and HTTP/2)
// go on; files that do not make a certificate are logged and the current
// one stays; SIGHUP reloads at once and says so.
func TestServeCertificateRotation(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the certificate files' 2 s polls, several times: not in -short")
	}
	t.Parallel()
	s := newTLSSetup(t)
	p, _ := startServeTLS(t, nil, "--nodes", "0-63", "--tls-cert-file", s.certFile, "--tls-key-file", s.keyFile)
	if got := servedSerial(t, s, p.url); got != s.serverCertSerial {
		t.Fatalf("serving certificate %s, want %s", got, s.serverCertSerial)
	}
	h1, h2 := openKeptAlive(t, s, p.url, false), openKeptAlive(t, s, p.url, true)

	second := s.ca.Server(t, "randflake-2")
	writeAtomically(t, s.keyFile, second.KeyPEM, 0o600)
	writeAtomically(t, s.certFile, second.CertPEM, 0o644)
	waitSerial(t, s, p, second.Cert.SerialNumber.String())
	waitLog(t, p, regexp.MustCompile(`msg="TLS certificate reloaded" subject="CN=randflake-2" .*trigger="file change"`), 5*time.Second)
	h1.get(t, p)
	h2.get(t, p)

	// Bad files: a key of another certificate, a certificate file that
	// is not PEM, a key file that is world-readable. Each is logged once
	// and the second certificate stays.
	third := s.ca.Server(t, "randflake-3")
	for _, c := range []struct {
		name string
		do   func()
		want string
	}{
		{"a key that does not match", func() { writeAtomically(t, s.keyFile, third.KeyPEM, 0o600) }, "private key does not match public key"},
		{"a certificate that is not PEM", func() { writeAtomically(t, s.certFile, []byte("not a certificate\n"), 0o644) }, "failed to find any PEM data in certificate input"},
		{"a world-readable key", func() { os.Chmod(s.keyFile, 0o644) }, "chmod 600"},
	} {
		before := strings.Count(p.logs.String(), "TLS files not reloaded")
		c.do()
		limit := within(10 * time.Second)
		for deadline := time.Now().Add(limit); strings.Count(p.logs.String(), "TLS files not reloaded") == before; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no failed reload logged within %v (%s); logs:\n%s", c.name, limit, slowness(), p.logs.String())
			}
		}
		lines := regexp.MustCompile(`level=WARN msg="TLS files not reloaded; the current certificate stays" trigger="file change" err=.*`).FindAllString(p.logs.String(), -1)
		if len(lines) == 0 || !strings.Contains(lines[len(lines)-1], c.want) {
			t.Errorf("%s: logged %q, want the reason %q", c.name, lines, c.want)
		}
		if got := servedSerial(t, s, p.url); got != second.Cert.SerialNumber.String() {
			t.Errorf("after %s: serving %s, want the second certificate still", c.name, got)
		}
	}
	// The same bad content is not logged again at every poll.
	n := strings.Count(p.logs.String(), "TLS files not reloaded")
	time.Sleep(2*reloadInterval + 500*time.Millisecond)
	if m := strings.Count(p.logs.String(), "TLS files not reloaded"); m != n {
		t.Errorf("the same failure logged %d more times", m-n)
	}
	if bytes.Contains([]byte(p.logs.String()), third.KeyPEM[30:60]) || bytes.Contains([]byte(p.logs.String()), second.KeyPEM[30:60]) {
		t.Error("the log holds a private key")
	}

	// Good files and SIGHUP: reloaded (by the signal, or by the poll just
	// before it, after which the signal finds them unchanged).
	os.Chmod(s.keyFile, 0o600)
	writeAtomically(t, s.certFile, third.CertPEM, 0o644)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, regexp.MustCompile(`msg="TLS (certificate reloaded" subject="CN=randflake-3" .*trigger=SIGHUP|files unchanged" trigger=SIGHUP)`), 10*time.Second)
	waitSerial(t, s, p, third.Cert.SerialNumber.String())
	h1.get(t, p)
	h2.get(t, p)
	// A SIGHUP with nothing changed says so, and the process goes on.
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, p, regexp.MustCompile(`msg="TLS files unchanged" trigger=SIGHUP`), 10*time.Second)
	stop(t, p)
}

// The kubelet's layout of a Secret volume, updated as the kubelet does: a
// new ..TIMESTAMP directory, a ..data link swapped to it by a rename,
// the old directory removed. Both files are read through their links,
// tls.crt -> ..data/tls.crt and tls.key -> ..data/tls.key; the key is
// 0440, as with the pod's fsGroup (the test runs as root, whose group it
// is in), the certificate 0444.
func TestServeCertificateKubeletSwap(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the certificate files' 2 s polls, twice: not in -short")
	}
	t.Parallel()
	s := newTLSSetup(t)
	vol := filepath.Join(s.dir, "volume")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	n := 0
	publish := func(pair tlstest.Pair) {
		t.Helper()
		n++
		ts := fmt.Sprintf("..2026_12_01_00_00_%02d.%d", n, 1000+n)
		if err := os.Mkdir(filepath.Join(vol, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		crt, key := pair.WriteFiles(t, filepath.Join(vol, ts), "tls.crt", "tls.key")
		os.Chmod(crt, 0o444)
		os.Chmod(key, 0o440)
		old, _ := os.Readlink(filepath.Join(vol, "..data"))
		if err := os.Symlink(ts, filepath.Join(vol, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(vol, "..data_tmp"), filepath.Join(vol, "..data")); err != nil {
			t.Fatal(err)
		}
		if old != "" {
			os.RemoveAll(filepath.Join(vol, old))
		}
	}
	first := s.ca.Server(t, "kubelet-1")
	publish(first)
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(vol, f)); err != nil {
			t.Fatal(err)
		}
	}
	p, _ := startServeTLS(t, nil, "--nodes", "0-63", "--tls-cert-file", filepath.Join(vol, "tls.crt"), "--tls-key-file", filepath.Join(vol, "tls.key"))
	if got := servedSerial(t, s, p.url); got != first.Cert.SerialNumber.String() {
		t.Fatalf("serving %s, want %s", got, first.Cert.SerialNumber)
	}
	h1, h2 := openKeptAlive(t, s, p.url, false), openKeptAlive(t, s, p.url, true)
	for i := 2; i <= 3; i++ {
		next := s.ca.Server(t, fmt.Sprintf("kubelet-%d", i))
		publish(next)
		waitSerial(t, s, p, next.Cert.SerialNumber.String())
		h1.get(t, p)
		h2.get(t, p)
	}
	if c := strings.Count(p.logs.String(), `msg="TLS certificate reloaded"`); c != 2 {
		t.Errorf("%d reloads logged, want 2:\n%s", c, p.logs.String())
	}
	stop(t, p)
}

// Bad TLS settings: usage errors for flags that do not go together, and
// files that cannot serve refused at start with the reason.
func TestServeTLSRefused(t *testing.T) {
	t.Parallel()
	s := newTLSSetup(t)
	other := s.ca.Server(t, "other")
	mismatched := filepath.Join(s.dir, "other.key")
	os.WriteFile(mismatched, other.KeyPEM, 0o600)
	open := filepath.Join(s.dir, "open.key")
	os.WriteFile(open, other.KeyPEM, 0o644)
	garbage := filepath.Join(s.dir, "garbage.pem")
	os.WriteFile(garbage, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o644)
	// A certificate anyone may write is not trusted.
	writable := filepath.Join(s.dir, "writable.crt")
	os.WriteFile(writable, other.CertPEM, 0o644)
	os.Chmod(writable, 0o666)
	// A FIFO is refused at once, never waited on.
	fifo := filepath.Join(s.dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--tls-cert-file", s.certFile}, 2, "--tls-cert-file and --tls-key-file go together"},
		{[]string{"--tls-key-file", s.keyFile}, 2, "--tls-cert-file and --tls-key-file go together"},
		{[]string{"--tls-client-ca-file", s.caFile}, 2, "--tls-client-ca-file needs --tls-cert-file and --tls-key-file"},
		{[]string{"--client-rate", "-1"}, 2, "must not be negative"},
		{[]string{"--client-burst", "10"}, 2, "--client-burst needs --client-rate"},
		{[]string{"--ops-listen", "127.0.0.1:8080"}, 2, "--ops-listen must be another address than --listen"},
		{[]string{"--tls-cert-file", filepath.Join(s.dir, "missing.crt"), "--tls-key-file", s.keyFile}, 1, "--tls-cert-file: statedir: open"},
		{[]string{"--tls-cert-file", s.certFile, "--tls-key-file", mismatched}, 1, "private key does not match public key"},
		{[]string{"--tls-cert-file", s.certFile, "--tls-key-file", open}, 1, "chmod 600"},
		{[]string{"--tls-cert-file", s.certFile, "--tls-key-file", s.keyFile, "--tls-client-ca-file", garbage}, 1, `a PEM block of type \"PRIVATE KEY\": only CERTIFICATE blocks go here`},
		{[]string{"--tls-cert-file", s.certFile, "--tls-key-file", s.keyFile, "--tls-client-ca-file", s.keyFile}, 1, "only CERTIFICATE blocks"},
		{[]string{"--tls-cert-file", writable, "--tls-key-file", mismatched}, 1, writable + " is writable by group or others"},
		{[]string{"--tls-cert-file", fifo, "--tls-key-file", s.keyFile}, 1, fifo + " is not a regular file"},
		{[]string{"--tls-cert-file", s.certFile, "--tls-key-file", fifo}, 1, fifo + " is not a regular file"},
		{[]string{"--tls-cert-file", s.certFile, "--tls-key-file", s.keyFile, "--tls-client-ca-file", fifo}, 1, fifo + " is not a regular file"},
		{[]string{"--issue-tokens-file", fifo}, 1, fifo + " is not a regular file"},
	} {
		start := time.Now()
		r := runBinaryTimeout(t, 30*time.Second, secretEnv, append([]string{"serve", "--nodes", "0-9"}, c.args...)...)
		if took, most := time.Since(start), within(10*time.Second); took > most {
			t.Errorf("serve %q took %v, want at most %v (%s): a special file waited on?", c.args, took, most, slowness())
		}
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("serve %q: exit %d, %q; want exit %d and %q", c.args, r.code, r.stderr, c.code, c.want)
		}
		for _, key := range [][]byte{other.KeyPEM} {
			if strings.Contains(r.stderr, string(key[30:60])) {
				t.Errorf("serve %q: the message holds the key", c.args)
			}
		}
	}
	// The environment sets them as the flags.
	r := runBinaryTimeout(t, 30*time.Second, append(slicesClone(secretEnv), "RANDFLAKE_TLS_CERT_FILE="+s.certFile), "serve", "--nodes", "0-9")
	if r.code != 2 || !strings.Contains(r.stderr, "--tls-cert-file and --tls-key-file go together") || !strings.Contains(r.stderr, "$RANDFLAKE_TLS_CERT_FILE") {
		t.Errorf("$RANDFLAKE_TLS_CERT_FILE alone: exit %d, %q", r.code, r.stderr)
	}
}
