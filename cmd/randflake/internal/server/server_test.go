package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake"
)

var secret = []byte("0123456789abcdef")

func newSharded(t testing.TB) *randflake.Sharded {
	t.Helper()
	now := time.Now().Unix()
	s, err := randflake.NewSharded(randflake.ShardedConfig{Secret: secret, FirstNode: 0, LastNode: 63, LeaseStart: now - 1, LeaseEnd: now + 3600})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newServer(t *testing.T, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	if cfg.Generator == nil {
		cfg.Generator = newSharded(t)
	}
	if cfg.LeaseEnd == nil {
		cfg.LeaseEnd = func() int64 { return time.Now().Unix() + 3600 }
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, startTestServer(t, s)
}

// startTestServer serves s as `randflake serve` does: through Configure.
func startTestServer(t *testing.T, s *Server) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(s)
	s.Configure(ts.Config)
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

type errorBody struct {
	Error string `json:"error"`
	Kind  string `json:"kind"`
}

func do(t *testing.T, method, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func TestIDs(t *testing.T) {
	_, ts := newServer(t, Config{MaxCount: 500})
	resp, body := do(t, "GET", ts.URL+"/v1/ids", nil)
	var got struct{ IDs []string }
	if resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil || len(got.IDs) != 1 {
		t.Fatalf("default count: %d %s", resp.StatusCode, body)
	}
	if _, err := randflake.DecodeString(got.IDs[0]); err != nil {
		t.Fatalf("ID %q: %v", got.IDs[0], err)
	}
	resp, body = do(t, "GET", ts.URL+"/v1/ids?count=500&format=int", nil)
	if resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil || len(got.IDs) != 500 {
		t.Fatalf("count=500: %d %.80s", resp.StatusCode, body)
	}
	resp, body = do(t, "GET", ts.URL+"/v1/ids?count=7", map[string]string{"Accept": "text/plain"})
	lines := strings.Fields(string(body))
	if resp.StatusCode != 200 || len(lines) != 7 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("text: %d %q", resp.StatusCode, body)
	}
}

// Every bad input gets a 400 (or 404/405) with a JSON error body of the
// documented kind.
func TestBadInput(t *testing.T) {
	_, ts := newServer(t, Config{MaxCount: 100})
	cases := []struct {
		method, path string
		status       int
		kind         string
	}{
		{"GET", "/v1/ids?count=", 400, KindBadRequest},
		{"GET", "/v1/ids?count=0", 400, KindBadRequest},
		{"GET", "/v1/ids?count=-5", 400, KindBadRequest},
		{"GET", "/v1/ids?count=abc", 400, KindBadRequest},
		{"GET", "/v1/ids?count=1.5", 400, KindBadRequest},
		{"GET", "/v1/ids?count=101", 400, KindBadRequest},
		{"GET", "/v1/ids?count=99999999999999999999", 400, KindBadRequest},
		{"GET", "/v1/ids?count=1&count=2", 400, KindBadRequest},
		{"GET", "/v1/ids?format=hex", 400, KindBadRequest},
		{"GET", "/nope", 404, KindNotFound},
		{"GET", "/v1/idz", 404, KindNotFound},
		{"POST", "/v1/ids", 405, KindMethodNotAllowed},
		{"DELETE", "/v1/ids", 405, KindMethodNotAllowed},
		{"PUT", "/healthz", 405, KindMethodNotAllowed},
		{"GET", "/v1/ids/3vgoe12ccb8gh", 404, KindNotFound}, // inspection disabled
	}
	for _, c := range cases {
		resp, body := do(t, c.method, ts.URL+c.path, nil)
		var e errorBody
		if resp.StatusCode != c.status || json.Unmarshal(body, &e) != nil || e.Error == "" || e.Kind != c.kind {
			t.Errorf("%s %s: %d %q; want %d with a JSON error of kind %s", c.method, c.path, resp.StatusCode, body, c.status, c.kind)
		}
	}
}

// The query of /v1/ids is parsed strictly: a malformed query, a repeated
// or unknown parameter is a 400, never a default.
func TestStrictQuery(t *testing.T) {
	_, ts := newServer(t, Config{MaxCount: 100})
	for _, q := range []string{
		"count=%zz", "count=1;count=2", "count=2;x", "count=1&count=2", "format=int&format=int",
		"foo=1", "count=1&foo=", "count=1&", "&count=1", "&", "count", "count=+5", "count=5%20",
		"count=%2B5", "format=", "count=1&format=int&token=secret", "Count=1", "count=0x10",
	} {
		resp, body := do(t, "GET", ts.URL+"/v1/ids?"+q, nil)
		var e errorBody
		if resp.StatusCode != 400 || json.Unmarshal(body, &e) != nil || e.Kind != KindBadRequest {
			t.Errorf("?%s: %d %q; want 400 of kind bad_request", q, resp.StatusCode, body)
		}
	}
	for q, want := range map[string]int{"": 1, "count=%35": 5, "count=2&format=int": 2, "format=string&count=3": 3, "count=007": 7} {
		resp, body := do(t, "GET", ts.URL+"/v1/ids?"+q, nil)
		var got struct{ IDs []string }
		if resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil || len(got.IDs) != want {
			t.Errorf("?%s: %d %q; want 200 with %d IDs", q, resp.StatusCode, body, want)
		}
	}
}

// counting is a generator that counts the IDs asked of it.
type counting struct {
	Generator
	asked atomic.Int64
}

func (c *counting) GenerateBatch(dst []int64) (int, error) {
	c.asked.Add(int64(len(dst)))
	return c.Generator.GenerateBatch(dst)
}

// HEAD on /v1/ids issues no IDs and counts none; it is a 405 that names
// GET. The other paths answer HEAD as GET.
func TestHeadIssuesNoIDs(t *testing.T) {
	gen := &counting{Generator: newSharded(t)}
	_, ts := newServer(t, Config{Generator: gen})
	resp, _ := do(t, "HEAD", ts.URL+"/v1/ids?count=10000", nil)
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET" {
		t.Errorf("HEAD /v1/ids: %d, Allow %q; want 405, Allow GET", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if n := gen.asked.Load(); n != 0 {
		t.Errorf("HEAD /v1/ids made %d IDs", n)
	}
	_, body := do(t, "GET", ts.URL+"/metrics", nil)
	for _, want := range []string{"randflake_ids_issued_total 0\n", "randflake_batch_size_count 0\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q after HEAD:\n%s", want, body)
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if resp, _ := do(t, "HEAD", ts.URL+p, nil); resp.StatusCode != 200 {
			t.Errorf("HEAD %s: %d, want 200", p, resp.StatusCode)
		}
	}
}

// rawRequest sends req as it is on a new connection and reads one answer.
func rawRequest(t *testing.T, ts *httptest.Server, req string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	errc := make(chan error, 1)
	go func() { _, err := io.WriteString(conn, req); errc <- err }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%.40q...: reading the answer: %v", req, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%.40q...: reading the body: %v", req, err)
	}
	return resp, body
}

// Paths are matched exactly: a non-canonical path is a JSON 404, not a
// redirect.
func TestNonCanonicalPaths(t *testing.T) {
	_, ts := newServer(t, Config{InspectToken: "a-long-inspection-token"})
	for _, p := range []string{
		"/./healthz", "//healthz", "/v1//ids", "/v1/./ids", "/v1/ids/", "/healthz/", "/v1/ids/../healthz",
		"/v1/ids/a/b", "/v1/ids//x", "/x/../healthz", "/metrics/",
	} {
		resp, body := rawRequest(t, ts, "GET "+p+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		var e errorBody
		if resp.StatusCode != 404 || resp.Header.Get("Location") != "" || json.Unmarshal(body, &e) != nil || e.Kind != KindNotFound {
			t.Errorf("GET %s: %d (Location %q) %q; want a JSON 404", p, resp.StatusCode, resp.Header.Get("Location"), body)
		}
	}
}

// errorBodyExactly checks that body is the JSON error of kind and nothing
// else.
func errorBodyExactly(t *testing.T, what string, body []byte, kind string) {
	t.Helper()
	var m map[string]string
	if err := json.Unmarshal(body, &m); err != nil || len(m) != 2 || m["kind"] != kind || m["error"] == "" {
		t.Errorf("%s: body %q; want exactly {\"error\":…,\"kind\":%q}", what, body, kind)
	}
}

// headOfSize is a request head of exactly size bytes, padded by a header
// line, or by many short ones with lines.
func headOfSize(size int, lines bool) string {
	var b strings.Builder
	b.WriteString("GET /healthz HTTP/1.1\r\nHost: x\r\n")
	const end = "\r\n"
	if lines {
		for b.Len()+40+len("X-Pad: \r\n")+len(end) <= size {
			b.WriteString("X-L: " + strings.Repeat("b", 33) + "\r\n") // 40 bytes
		}
	}
	pad := size - b.Len() - len(end) - len("X-Pad: \r\n")
	b.WriteString("X-Pad: " + strings.Repeat("a", pad) + "\r\n" + end)
	return b.String()
}

// Request heads of up to MaxHeaderBytes pass; net/http refuses those past
// MaxHeaderBytes and its 4 KiB read buffer with its own plain-text 431 and
// closes the connection, whatever came before on the connection.
func TestHeaderLimit(t *testing.T) {
	_, ts := newServer(t, Config{})
	for _, c := range []struct {
		size   int
		status int
	}{
		{1000, 200}, {16000, 200}, {MaxHeaderBytes - 1, 200}, {MaxHeaderBytes, 200},
		{MaxHeaderBytes + 4096 + 1, 431}, {24000, 431}, {64 << 10, 431}, {1 << 20, 431},
	} {
		for _, lines := range []bool{false, true} {
			head := headOfSize(c.size, lines)
			if len(head) != c.size {
				t.Fatalf("head of %d bytes, want %d", len(head), c.size)
			}
			resp, body := rawRequest(t, ts, head)
			what := fmt.Sprintf("head of %d bytes (short lines %v)", c.size, lines)
			if resp.StatusCode != c.status {
				t.Errorf("%s: status %d, want %d", what, resp.StatusCode, c.status)
				continue
			}
			if c.status == 431 && (!resp.Close || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") || !strings.Contains(string(body), "431")) {
				t.Errorf("%s: %q, close %v, %q; want net/http's plain-text 431 and the connection closed", what, resp.Header.Get("Content-Type"), resp.Close, body)
			}
		}
	}
	// The second request on a connection is limited as the first, and
	// a body does not count as a head.
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	body := strings.Repeat("z", 30000)
	send := func(req string) int {
		t.Helper()
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("after %.30q: %v", req, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := send(headOfSize(MaxHeaderBytes, false)); st != 200 {
		t.Fatalf("first request: %d", st)
	}
	if st := send("POST /v1/ids HTTP/1.1\r\nHost: x\r\nContent-Length: 30000\r\n\r\n" + body); st != 405 {
		t.Fatalf("POST with a body: %d", st)
	}
	if st := send(headOfSize(MaxHeaderBytes, true)); st != 200 {
		t.Fatalf("request after a 30,000-byte body: %d, want 200", st)
	}
	if st := send(headOfSize(64<<10, false)); st != 431 {
		t.Fatalf("fourth request, 64 KiB: %d, want 431", st)
	}
}

// Over HTTP/2 (TLS, ALPN h2) the limit holds too: a 16,000-byte header
// passes, and a larger header list is refused, by the Go client itself
// (it honours the server's SETTINGS_MAX_HEADER_LIST_SIZE) before anything
// is sent.
func TestHeaderLimitHTTP2(t *testing.T) {
	s, err := New(Config{Generator: newSharded(t), LeaseEnd: func() int64 { return time.Now().Unix() + 3600 }})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(s)
	s.Configure(ts.Config)
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)
	hc := ts.Client()
	get := func(n int) (*http.Response, error) {
		req, _ := http.NewRequest("GET", ts.URL+"/healthz", nil)
		req.Header.Set("X-Big", strings.Repeat("a", n))
		resp, err := hc.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	resp, err := get(16000)
	if err != nil || resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("16,000-byte header over HTTP/2: %v %v", resp, err)
	}
	if resp, err := get(24000); err == nil {
		t.Fatalf("24,000-byte header over HTTP/2: %s, want the client to refuse to send it", resp.Status)
	}
}

func TestInspect(t *testing.T) {
	gen := newSharded(t)
	const token = "a-long-inspection-token"
	_, ts := newServer(t, Config{Generator: gen, InspectToken: token})
	id, err := gen.Generate()
	if err != nil {
		t.Fatal(err)
	}
	path := ts.URL + "/v1/ids/" + randflake.EncodeString(id)
	for _, auth := range []string{"", "Bearer wrong-token-xxxxxxxxxx", "Basic " + token, token, "Bearer " + token + "x"} {
		resp, _ := do(t, "GET", path, map[string]string{"Authorization": auth})
		if resp.StatusCode != 401 {
			t.Errorf("auth %q: status %d", auth, resp.StatusCode)
		}
	}
	resp, body := do(t, "GET", path, map[string]string{"Authorization": "Bearer " + token})
	var got struct {
		Node, Sequence, Timestamp int64
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil {
		t.Fatalf("inspect: %d %s", resp.StatusCode, body)
	}
	ts0, node, seq, _ := gen.Inspect(id)
	if got.Node != node || got.Sequence != seq || got.Timestamp != ts0 {
		t.Fatalf("inspect = %+v, want %d %d %d", got, ts0, node, seq)
	}
	resp, _ = do(t, "GET", ts.URL+"/v1/ids/not!an!id", map[string]string{"Authorization": "Bearer " + token})
	if resp.StatusCode != 400 {
		t.Fatalf("bad ID: %d", resp.StatusCode)
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	var end atomic.Int64
	_, ts := newServer(t, Config{LeaseEnd: end.Load})
	if resp, _ := do(t, "GET", ts.URL+"/healthz", nil); resp.StatusCode != 200 {
		t.Fatal("healthz", resp.StatusCode)
	}
	if resp, _ := do(t, "GET", ts.URL+"/readyz", nil); resp.StatusCode != 503 {
		t.Fatal("readyz without lease", resp.StatusCode)
	}
	end.Store(time.Now().Unix() + 100)
	if resp, _ := do(t, "GET", ts.URL+"/readyz", nil); resp.StatusCode != 200 {
		t.Fatal("readyz with lease", resp.StatusCode)
	}
	do(t, "GET", ts.URL+"/v1/ids?count=5", nil)
	do(t, "GET", ts.URL+"/v1/ids?count=x", nil)
	_, body := do(t, "GET", ts.URL+"/metrics", nil)
	for _, want := range []string{
		"randflake_ids_issued_total 5",
		`randflake_errors_total{kind="bad_request"} 1`,
		`randflake_kernel_info{kernel="` + randflake.Kernel() + `"} 1`,
		"randflake_batch_size_count 1",
		"randflake_lease_seconds_left ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// failing is a generator that always fails.
type failing struct{ err error }

func (f failing) GenerateBatch([]int64) (int, error) { return 0, f.err }
func (f failing) Inspect(int64) (int64, int64, int64, error) {
	return 0, 0, 0, errors.New("no")
}

// A failed GenerateBatch is answered with the documented kind and a fixed
// message; the error itself, with its paths and system errors, goes only
// to the log.
func TestGeneratorErrors(t *testing.T) {
	disk := errors.New("statedir: writing /var/lib/secret-place/state: write /var/lib/secret-place/state.tmp: no space left on device")
	etcd := errors.New("etcdlease: keep-alive: context deadline exceeded")
	for _, c := range []struct {
		err    error
		status int
		kind   string
	}{
		{fmt.Errorf("randflake: after 10 IDs: %w", randflake.ErrResourceExhausted), 503, KindExhausted},
		{&randflake.LeaseError{Lease: randflake.Lease{FirstNode: 0, LastNode: 63, Start: 1, End: 2}, Err: disk}, 503, KindLease},
		{&randflake.LeaseError{Err: etcd}, 503, KindLease},
		{randflake.ErrInvalidLease, 503, KindLease},
		{randflake.ErrConsistencyViolation, 503, KindClock},
		{randflake.ErrClosed, 503, KindUnavailable},
		{fmt.Errorf("boom at /etc/randflake/x: %w", errors.New("permission denied")), 500, KindInternal},
	} {
		var logs bytes.Buffer
		_, ts := newServer(t, Config{Generator: failing{c.err}, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		resp, body := do(t, "GET", ts.URL+"/v1/ids?count=3", nil)
		if resp.StatusCode != c.status {
			t.Errorf("%v: status %d, want %d", c.err, resp.StatusCode, c.status)
		}
		errorBodyExactly(t, c.err.Error(), body, c.kind)
		for _, leak := range []string{"/", "statedir", "etcdlease", "randflake:", "space", "deadline", "permission", "boom"} {
			if strings.Contains(string(body), leak) {
				t.Errorf("%v: body %q reveals %q", c.err, body, leak)
			}
		}
		if want := c.kind == KindExhausted || c.kind == KindClock; (resp.Header.Get("Retry-After") == "1") != want {
			t.Errorf("%v: Retry-After %q", c.err, resp.Header.Get("Retry-After"))
		}
		var line struct {
			Msg, Kind, Err string
			Count          int
		}
		if err := json.Unmarshal(logs.Bytes(), &line); err != nil || line.Msg != "issuing IDs failed" || line.Kind != c.kind || line.Err != c.err.Error() || line.Count != 3 {
			t.Errorf("%v: log %q (%v); want one line with the kind, the count and the error", c.err, logs.String(), err)
		}
	}
}

// A failing generator does not flood the log: one line per kind and
// second, then a count of the lines left out.
func TestLogLimiter(t *testing.T) {
	var l logLimiter
	t0 := time.Unix(1000, 0)
	if n, ok := l.allow("lease", t0); !ok || n != 0 {
		t.Fatalf("first: %d %v", n, ok)
	}
	for i := range 5 {
		if _, ok := l.allow("lease", t0.Add(time.Duration(i)*100*time.Millisecond)); ok {
			t.Fatalf("line %d within the second let through", i)
		}
	}
	if _, ok := l.allow("exhausted", t0.Add(200*time.Millisecond)); !ok {
		t.Fatal("another kind held back")
	}
	if n, ok := l.allow("lease", t0.Add(time.Second)); !ok || n != 5 {
		t.Fatalf("after a second: %d left out, %v; want 5, true", n, ok)
	}
}

// The access log has one line per request, without the query string or
// any header.
func TestAccessLog(t *testing.T) {
	var logs syncBuffer
	const token = "a-long-inspection-token"
	_, ts := newServer(t, Config{AccessLog: slog.New(slog.NewJSONHandler(&logs, nil)), InspectToken: token})
	_, body := do(t, "GET", ts.URL+"/v1/ids?count=3&format=int", nil)
	do(t, "GET", ts.URL+"/nope?password=hunter2", nil)
	do(t, "GET", ts.URL+"/v1/ids/3vgoe12ccb8gh?x=1", map[string]string{"Authorization": "Bearer " + token})
	// net/http's own 431 never reaches the handler: no line.
	rawRequest(t, ts, headOfSize(24000, false))
	type line struct {
		Msg, Method, Path, Remote, Kind string
		Status                          int
		Bytes                           int64
		Duration                        *int64
	}
	var got []line
	for l := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var v line
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		got = append(got, v)
	}
	if len(got) != 3 {
		t.Fatalf("%d access-log lines, want 3:\n%s", len(got), logs.String())
	}
	want := []struct {
		method, path, kind string
		status             int
	}{
		{"GET", "/v1/ids", "", 200}, {"GET", "/nope", KindNotFound, 404},
		{"GET", "/v1/ids/3vgoe12ccb8gh", KindBadRequest, 400},
	}
	for i, w := range want {
		g := got[i]
		if g.Msg != "request" || g.Method != w.method || g.Path != w.path || g.Status != w.status || g.Kind != w.kind || g.Remote == "" || g.Duration == nil || g.Bytes <= 0 {
			t.Errorf("line %d: %+v; want %+v", i, g, w)
		}
	}
	if got[0].Bytes != int64(len(body)) {
		t.Errorf("bytes %d, want %d", got[0].Bytes, len(body))
	}
	for _, secret := range []string{"hunter2", "password", token, "count=3", "x=1"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("access log contains %q", secret)
		}
	}
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

// Batches from many concurrent clients are unique.
func TestConcurrentBatchesUnique(t *testing.T) {
	_, ts := newServer(t, Config{})
	const clients, requests, batch = 16, 20, 1000
	var mu sync.Mutex
	var all []string
	var firstErr error
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range requests {
				resp, err := http.Get(ts.URL + "/v1/ids?count=1000")
				var got struct{ IDs []string }
				if err == nil {
					err = json.NewDecoder(resp.Body).Decode(&got)
					resp.Body.Close()
					if err == nil && len(got.IDs) != batch {
						err = fmt.Errorf("status %d, %d IDs in a batch of %d", resp.StatusCode, len(got.IDs), batch)
					}
				}
				mu.Lock()
				all = append(all, got.IDs...)
				if err != nil && firstErr == nil {
					firstErr = err
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
}

// checkUnique fails unless ids holds want IDs without duplicates, saying
// which of the two went wrong.
func checkUnique(t *testing.T, ids []string, want int, firstErr error) {
	t.Helper()
	if len(ids) != want {
		t.Errorf("got %d IDs, want %d; first error: %v", len(ids), want, firstErr)
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
		t.Errorf("%d duplicate IDs among %d: %s", len(dups), len(ids), strings.Join(dups[:min(len(dups), 10)], ", "))
	}
}

// An exhausted second: the log names the node range, the second and the
// ceiling (the library's error) and the remedy, with no advice to run
// "multiple instances"; the client hears that it is this server's range
// and to retry in a second, and nothing of the server's internals.
func TestExhaustedMessages(t *testing.T) {
	now := time.Now().Unix()
	g, err := randflake.NewSharded(randflake.ShardedConfig{Secret: []byte("0123456789abcdef"), FirstNode: 5, LastNode: 5, LeaseStart: now - 1, LeaseEnd: now + 3600})
	if err != nil {
		t.Fatal(err)
	}
	var exhausted error
	ids := make([]int64, 1<<16)
	for range 4 { // 2^18 IDs: more than one second of one node ID, unless the second turns
		if _, exhausted = g.GenerateBatch(ids); exhausted != nil {
			break
		}
	}
	if !errors.Is(exhausted, randflake.ErrResourceExhausted) {
		t.Fatalf("no exhaustion from one node ID: %v", exhausted)
	}
	var logs bytes.Buffer
	_, ts := newServer(t, Config{Generator: failing{exhausted}, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	resp, body := do(t, "GET", ts.URL+"/v1/ids?count=3", nil)
	if resp.StatusCode != 503 || !strings.Contains(string(body), `"unavailable: this second's IDs are used up on this server's node range; retry in a second"`) {
		t.Errorf("answer %d %s", resp.StatusCode, body)
	}
	for _, want := range []string{"node ID 5 issued all 131072 IDs of second", "use a wider node range", `"remedy":"a wider node range (serve --claim, or --nodes FIRST-LAST) raises the ceiling`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	if strings.Contains(strings.ToLower(logs.String()+string(body)), "multiple randflake") {
		t.Errorf("the reference's advice is still given:\n%s%s", logs.String(), body)
	}
}
