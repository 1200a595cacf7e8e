package server

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/randflake/randflake"
	"github.com/randflake/randflake/cmd/randflake/internal/tlstest"
)

func mustTokens(t *testing.T, file string) *IssueTokens {
	t.Helper()
	tokens, err := ParseIssueTokens([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}

// status401 checks a 401 of kind unauthorized with the bearer challenge.
func status401(t *testing.T, what string, resp *http.Response, body []byte) {
	t.Helper()
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != `Bearer realm="randflake"` {
		t.Errorf("%s: %d, WWW-Authenticate %q; want 401 with the bearer challenge", what, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		return
	}
	errorBodyExactly(t, what, body, KindUnauthorized)
}

// With IssueTokens, issuing needs a listed token as a bearer token, in any
// format; a missing, wrong or malformed one is a 401 that the log explains
// without the token. Tokens are replaced by SetIssueTokens; inspection
// keeps its own token.
func TestIssueTokensRequired(t *testing.T) {
	var logs, access syncBuffer
	reg := prometheus.NewRegistry()
	const inspectToken = "inspection-token-0123456789"
	s, ts := newServer(t, Config{
		IssueTokens: mustTokens(t, "alice "+aliceToken+"\nbob "+bobToken), InspectToken: inspectToken, Registry: reg,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), AccessLog: slog.New(slog.NewTextHandler(&access, nil)),
	})
	for _, auth := range []string{"", "Bearer", "Bearer wrong-token-0123456789", "Basic " + aliceToken, aliceToken,
		"Bearer " + aliceToken + "x", "Bearer " + inspectToken} {
		for _, accept := range []string{"", "text/plain", MediaTypeBinary} {
			hdr := map[string]string{"Accept": accept}
			if auth != "" {
				hdr["Authorization"] = auth
			}
			resp, body := do(t, "GET", ts.URL+"/v1/ids?count=3", hdr)
			status401(t, fmt.Sprintf("Authorization %q, Accept %q", auth, accept), resp, body)
		}
	}
	// Unauthenticated requests learn nothing else first: a bad query is
	// still a 401.
	resp, body := do(t, "GET", ts.URL+"/v1/ids?count=banana", nil)
	status401(t, "bad query without a token", resp, body)
	for token, n := range map[string]int{aliceToken: 3, bobToken: 5} {
		resp, body := do(t, "GET", fmt.Sprintf("%s/v1/ids?count=%d", ts.URL, n), map[string]string{"Authorization": "Bearer " + token})
		var got struct{ IDs []string }
		if resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil || len(got.IDs) != n {
			t.Errorf("with a listed token: %d %s", resp.StatusCode, body)
		}
	}
	resp, _ = do(t, "GET", ts.URL+"/v1/ids?count=2", map[string]string{"Authorization": "bearer " + aliceToken, "Accept": MediaTypeBinary})
	if resp.StatusCode != 200 {
		t.Errorf("binary with a listed token: %d", resp.StatusCode)
	}
	// Other paths need no issue token; inspection takes only its own.
	if resp, _ := do(t, "GET", ts.URL+"/healthz", nil); resp.StatusCode != 200 {
		t.Errorf("/healthz without a token: %d", resp.StatusCode)
	}
	resp, _ = do(t, "GET", ts.URL+"/v1/ids/3vgoe12ccb8gh", map[string]string{"Authorization": "Bearer " + aliceToken})
	if resp.StatusCode != 401 {
		t.Errorf("inspection with an issue token: %d, want 401", resp.StatusCode)
	}
	// Replaced tokens: the old one is refused at once, the new one works.
	s.SetIssueTokens(mustTokens(t, "carol carol-token-0123456789\nbob "+bobToken))
	resp, body = do(t, "GET", ts.URL+"/v1/ids", map[string]string{"Authorization": "Bearer " + aliceToken})
	status401(t, "alice after her token was removed", resp, body)
	if resp, _ := do(t, "GET", ts.URL+"/v1/ids", map[string]string{"Authorization": "Bearer carol-token-0123456789"}); resp.StatusCode != 200 {
		t.Errorf("carol's new token: %d", resp.StatusCode)
	}
	for label, want := range map[string]float64{"alice": 5, "bob": 5, "carol": 1, OtherClients: 0} {
		if got := testutil.ToFloat64(s.clients.issued.WithLabelValues(label)); got != want {
			t.Errorf("randflake_client_ids_issued_total{client=%q} = %v, want %v", label, got, want)
		}
	}
	if !strings.Contains(logs.String(), `msg="issuing refused" reason="the bearer token is not one of the issue tokens"`) ||
		!strings.Contains(logs.String(), `reason="no bearer token and no client certificate"`) {
		t.Errorf("the log does not say why issuing was refused:\n%s", logs.String())
	}
	if !strings.Contains(access.String(), "client=alice") || !strings.Contains(access.String(), "client=carol") {
		t.Errorf("the access log does not name the clients:\n%s", access.String())
	}
	for _, leak := range []string{aliceToken, bobToken, "carol-token", "wrong-token", inspectToken} {
		if strings.Contains(logs.String()+access.String(), leak) {
			t.Errorf("a log line holds the token %q", leak)
		}
	}
	if got := testutil.ToFloat64(s.errs.WithLabelValues(KindUnauthorized)); got < 22 {
		t.Errorf("randflake_errors_total{kind=unauthorized} = %v, want at least 22", got)
	}
}

// tlsServer serves s over TLS with HTTP/2, requiring client certificates
// of ca, and returns the server and a client that presents pair.
func tlsServer(t *testing.T, s *Server, server tlstest.Pair, ca *tlstest.CA) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(s)
	s.Configure(ts.Config)
	ts.EnableHTTP2 = true
	ts.TLS = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{server.TLS(t)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
	}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts
}

// clientWith returns an HTTP/2 client trusting ca and presenting pair.
func clientWith(t *testing.T, ca *tlstest.CA, pair *tlstest.Pair) *http.Client {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.Pool()}
	if pair != nil {
		cfg.Certificates = []tls.Certificate{pair.TLS(t)}
	}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// Under mutual TLS a verified certificate is enough to issue, even with
// IssueTokens; the client is its certificate's common name, else its first
// DNS name; a token that is sent must still be valid.
func TestCertificateIdentity(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	var access syncBuffer
	s, err := New(Config{Generator: newSharded(t), LeaseEnd: func() int64 { return time.Now().Unix() + 3600 },
		IssueTokens: mustTokens(t, "alice "+aliceToken), AccessLog: slog.New(slog.NewTextHandler(&access, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := tlsServer(t, s, ca.Server(t, "randflake"), ca)
	billing, orders, alice := ca.Client(t, "billing", "ignored.example"), ca.Client(t, "", "orders.example", "second.example"), ca.Client(t, "alice")
	get := func(hc *http.Client, n int, hdr ...string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/ids?count=%d", ts.URL, n), nil)
		if len(hdr) == 2 {
			req.Header.Set(hdr[0], hdr[1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ProtoMajor != 2 {
			t.Errorf("protocol %s, want HTTP/2", resp.Proto)
		}
		return resp.StatusCode, body
	}
	if st, body := get(clientWith(t, ca, &billing), 4); st != 200 {
		t.Errorf("certificate billing: %d %s", st, body)
	}
	if st, _ := get(clientWith(t, ca, &orders), 6); st != 200 {
		t.Errorf("certificate with DNS names only: %d", st)
	}
	// The certificate alice and the token alice are the same client.
	if st, _ := get(clientWith(t, ca, &alice), 1); st != 200 {
		t.Errorf("certificate alice: %d", st)
	}
	if st, _ := get(clientWith(t, ca, &billing), 2, "Authorization", "Bearer "+aliceToken); st != 200 {
		t.Errorf("certificate billing with alice's token: %d", st)
	}
	if st, body := get(clientWith(t, ca, &billing), 1, "Authorization", "Bearer not-a-listed-token-at-all"); st != 401 {
		t.Errorf("certificate with a wrong token: %d %s, want 401", st, body)
	}
	// Without a certificate there is no connection at all.
	if _, err := clientWith(t, ca, nil).Get(ts.URL + "/healthz"); err == nil {
		t.Error("a client without a certificate was served")
	}
	for label, want := range map[string]float64{"billing": 4, "orders.example": 6, "alice": 3, OtherClients: 0} {
		if got := testutil.ToFloat64(s.clients.issued.WithLabelValues(label)); got != want {
			t.Errorf("randflake_client_ids_issued_total{client=%q} = %v, want %v", label, got, want)
		}
	}
	for _, want := range []string{"client=billing", "client=orders.example", "client=alice"} {
		if !strings.Contains(access.String(), want) {
			t.Errorf("access log lacks %s:\n%s", want, access.String())
		}
	}
}

// Only a bounded number of certificate identities become labels; the
// others count as OtherClients. Token names always have their own.
func TestCertificateLabelsBounded(t *testing.T) {
	c, err := newClients(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxCertNames + 10 {
		st := c.forName(fmt.Sprintf("cert-%d", i), true)
		if want := i < maxCertNames; (st.label != OtherClients) != want {
			t.Fatalf("certificate %d: label %q", i, st.label)
		}
	}
	if st := c.forName("cert-3", true); st.label != "cert-3" {
		t.Errorf("a known certificate identity lost its label: %q", st.label)
	}
	if st := c.forName("token-client", false); st.label != "token-client" {
		t.Errorf("a token's name past the certificate bound: %q", st.label)
	}
	if st := c.forName(strings.Repeat("x", maxLabelLength+1), true); st.label != OtherClients {
		t.Errorf("an overlong identity became a label")
	}
	if n := testutil.CollectAndCount(c.issued); n != maxCertNames+2 {
		t.Errorf("%d series, want %d", n, maxCertNames+2)
	}
}

// fakeClock is a clock that tests move.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Each client has its own share: a request over it is a 429 of kind quota
// with Retry-After in whole seconds, rounded up, and takes nothing; a
// count above the burst is a 400; the share refills at the rate. Unnamed
// clients are shared by address.
func TestClientShares(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	reg := prometheus.NewRegistry()
	s, ts := newServer(t, Config{
		IssueTokens: mustTokens(t, "alice "+aliceToken+"\nbob "+bobToken),
		ClientRate:  100, ClientBurst: 500, Registry: reg, Now: clock.Now,
	})
	ask := func(token string, n int, accept string) (*http.Response, []byte) {
		t.Helper()
		return do(t, "GET", fmt.Sprintf("%s/v1/ids?count=%d", ts.URL, n), map[string]string{"Authorization": "Bearer " + token, "Accept": accept})
	}
	want := func(what string, resp *http.Response, body []byte, status int, retry string) {
		t.Helper()
		if resp.StatusCode != status || resp.Header.Get("Retry-After") != retry {
			t.Errorf("%s: %d, Retry-After %q (%s); want %d, %q", what, resp.StatusCode, resp.Header.Get("Retry-After"), body, status, retry)
		}
		if status == 429 {
			errorBodyExactly(t, what, body, KindQuota)
		}
	}
	resp, body := ask(aliceToken, 501, "")
	want("alice asks for more than the burst", resp, body, 400, "")
	errorBodyExactly(t, "over the burst", body, KindBadRequest)
	resp, body = ask(aliceToken, 300, MediaTypeBinary)
	want("alice's first 300", resp, body, 200, "")
	resp, body = ask(aliceToken, 200, "text/plain")
	want("alice's next 200", resp, body, 200, "")
	resp, body = ask(aliceToken, 1, "")
	want("alice's share used up", resp, body, 429, "1") // 1 ID at 100/s: 10 ms, rounded up
	resp, body = ask(aliceToken, 450, MediaTypeBinary)
	want("alice asks for 450 with nothing left", resp, body, 429, "5") // 4.5 s
	// Bob's share is his own.
	resp, body = ask(bobToken, 500, "")
	want("bob's 500", resp, body, 200, "")
	clock.Add(2 * time.Second) // 200 IDs back
	resp, body = ask(aliceToken, 201, "")
	want("alice asks for 201 after 2 s", resp, body, 429, "1")
	resp, body = ask(aliceToken, 200, "")
	want("alice asks for 200 after 2 s", resp, body, 200, "")
	if got := testutil.ToFloat64(s.clients.refused.WithLabelValues("alice")); got != 3 {
		t.Errorf("randflake_client_quota_refusals_total{client=alice} = %v, want 3", got)
	}
	if got := testutil.ToFloat64(s.clients.issued.WithLabelValues("alice")); got != 700 {
		t.Errorf("randflake_client_ids_issued_total{client=alice} = %v, want 700", got)
	}
	if got := testutil.ToFloat64(s.errs.WithLabelValues(KindQuota)); got != 3 {
		t.Errorf("randflake_errors_total{kind=quota} = %v, want 3", got)
	}

	// Without tokens, clients are their addresses: here all the same.
	_, open := newServer(t, Config{ClientRate: 10, Now: clock.Now})
	for i, w := range []int{200, 429} {
		resp, _ := do(t, "GET", open.URL+"/v1/ids?count=10", nil)
		if resp.StatusCode != w {
			t.Errorf("open service, request %d: %d, want %d (burst defaults to the rate)", i, resp.StatusCode, w)
		}
	}
}

// IDs a failed request did not hand out are given back to the share.
func TestSharesRefundFailures(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	gen := &switchable{Generator: newSharded(t)}
	_, ts := newServer(t, Config{Generator: gen, ClientRate: 1, ClientBurst: 100, Now: clock.Now})
	gen.fail(randflake.ErrResourceExhausted)
	for _, accept := range []string{"", MediaTypeBinary, "", MediaTypeBinary} {
		resp, body := do(t, "GET", ts.URL+"/v1/ids?count=100", map[string]string{"Accept": accept})
		if resp.StatusCode != 503 {
			t.Fatalf("failing generator: %d %s", resp.StatusCode, body)
		}
	}
	gen.fail(nil)
	if resp, body := do(t, "GET", ts.URL+"/v1/ids?count=100", nil); resp.StatusCode != 200 {
		t.Fatalf("after four failures: %d %s; want the whole burst still there", resp.StatusCode, body)
	}
}

// switchable is a generator that fails with err while it is set.
type switchable struct {
	Generator
	mu  sync.Mutex
	err error
}

func (s *switchable) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *switchable) GenerateBatch(dst []int64) (int, error) {
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return 0, errors.Join(err)
	}
	return s.Generator.GenerateBatch(dst)
}

// The buckets stay bounded: full ones are dropped, and clients beyond
// maxBuckets share one overflow bucket.
func TestLimiterBounded(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	l := newLimiter(10, 10, clock.Now)
	for i := range maxBuckets {
		if b, _ := l.take(fmt.Sprintf("addr:%d", i), 5); b == nil {
			t.Fatalf("client %d refused", i)
		}
	}
	if n := l.size(); n != maxBuckets {
		t.Fatalf("%d buckets, want %d", n, maxBuckets)
	}
	// The map is full of half-empty buckets: newcomers share the overflow
	// bucket (10 IDs) among them.
	if b, _ := l.take("addr:new-1", 10); b != &l.overflow {
		t.Fatalf("a client beyond the bound got a bucket of its own")
	}
	if b, wait := l.take("addr:new-2", 1); b != nil || wait <= 0 {
		t.Fatalf("the overflow bucket is not shared: %v %v", b, wait)
	}
	// Once they are full again, they are dropped.
	clock.Add(time.Second)
	if b, _ := l.take("addr:new-3", 1); b == nil || b == &l.overflow {
		t.Fatalf("after the others filled up: bucket %p (overflow %p)", b, &l.overflow)
	}
	if n := l.size(); n != 1 {
		t.Errorf("%d buckets after the sweep, want 1", n)
	}
	// An idle client's bucket goes at the next sweep, sweepEvery later.
	clock.Add(sweepEvery)
	l.take("addr:another", 1)
	if n := l.size(); n != 1 {
		t.Errorf("%d buckets, want 1 (the full one dropped)", n)
	}
	for _, c := range []struct {
		wait time.Duration
		want int64
	}{{0, 1}, {time.Nanosecond, 1}, {time.Second, 1}, {time.Second + 1, 2}, {4500 * time.Millisecond, 5}} {
		if got := retryAfter(c.wait); got != c.want {
			t.Errorf("retryAfter(%v) = %d, want %d", c.wait, got, c.want)
		}
	}
}

// OpsHandler serves the probes and the metrics only; with SeparateOps the
// main handler no longer serves the metrics.
func TestOpsHandler(t *testing.T) {
	for _, separate := range []bool{false, true} {
		s, main := newServer(t, Config{SeparateOps: separate, IssueTokens: mustTokens(t, "alice "+aliceToken)})
		ops := httptest.NewUnstartedServer(nil)
		s.ConfigureOps(ops.Config)
		ops.Start()
		t.Cleanup(ops.Close)
		for _, c := range []struct {
			url    string
			status int
		}{
			{ops.URL + "/healthz", 200}, {ops.URL + "/readyz", 200}, {ops.URL + "/metrics", 200},
			{ops.URL + "/v1/ids", 404}, {ops.URL + "/v1/ids/3vgoe12ccb8gh", 404}, {ops.URL + "/openapi.yaml", 404}, {ops.URL + "/healthz/", 404},
			{main.URL + "/healthz", 200}, {main.URL + "/readyz", 200}, {main.URL + "/openapi.yaml", 200},
			{main.URL + "/metrics", map[bool]int{false: 200, true: 404}[separate]},
		} {
			resp, body := do(t, "GET", c.url, map[string]string{"Authorization": "Bearer " + aliceToken})
			if resp.StatusCode != c.status {
				t.Errorf("SeparateOps %v: %s: %d, want %d", separate, c.url, resp.StatusCode, c.status)
			}
			if c.status == 404 {
				errorBodyExactly(t, c.url, body, KindNotFound)
			}
		}
		if resp, _ := do(t, "POST", ops.URL+"/metrics", nil); resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("POST /metrics on the operations listener: %d", resp.StatusCode)
		}
		if resp, _ := do(t, "HEAD", ops.URL+"/readyz", nil); resp.StatusCode != 200 {
			t.Errorf("HEAD /readyz on the operations listener: %d", resp.StatusCode)
		}
	}
}
