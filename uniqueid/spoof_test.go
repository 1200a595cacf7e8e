package uniqueid

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// metaVar is how net/http/cgi names the meta-variable of a request header,
// without the HTTP_ prefix: ASCII upper case, with '-' and '=' as '_'. The
// tests spell it out independently of the package's own implementation.
func metaVar(name string) string {
	return strings.NewReplacer("-", "_", "=", "_").Replace(strings.ToUpper(name))
}

// forged is the value a test client puts in header variant v of request n;
// forgedRE finds such values wherever they turn up.
func forged(n int, v string) string { return fmt.Sprintf("FORGED-r%d-%s", n, v) }

var forgedRE = regexp.MustCompile(`FORGED-r([0-9]+)-([A-Za-z_=-]+)`)

// forgedIn describes the forged values in s as "request n via header v".
func forgedIn(s string) []string {
	var out []string
	for _, m := range forgedRE.FindAllStringSubmatch(s, -1) {
		out = append(out, fmt.Sprintf("request %s via header %q", m[1], m[2]))
	}
	return out
}

// mapVariants are header names, as raw http.Header keys, that a CGI host
// turns into HTTP_UNIQUE_ID along with the canonical Unique-Id. Only the
// first two can come off the wire through net/http's server, which
// canonicalises names; the others reach a handler called directly.
var mapVariants = []string{
	"Unique_id", "Unique-Id", "UNIQUE_ID", "UNIQUE-ID", "unique-id",
	"unique_id", "Unique_Id", "uNiQuE-iD", "UNIQUE=ID",
}

// TestMiddlewareDropsHeaderVariants sends requests whose headers carry
// forged values under every spelling of Unique-Id that differs only by
// case, '-' or '_', and checks that the next handler sees none of them:
// only the canonical header, holding the request's ID.
func TestMiddlewareDropsHeaderVariants(t *testing.T) {
	const requests = 240
	var got struct {
		header http.Header
		id     string
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.header = r.Header.Clone()
		got.id, _ = FromContext(r.Context())
	})
	h := Middleware(next, Options{})
	nonVariant := "unique__id" // HTTP_UNIQUE__ID, a raw key on purpose
	leaks := 0
	for n := 0; n < requests; n++ {
		req := httptest.NewRequest("GET", "/", nil)
		for _, v := range mapVariants {
			req.Header[v] = []string{forged(n, v)}
		}
		req.Header[nonVariant] = []string{"other"}
		req.Header.Set("X-Other", "kept")
		resp := serve(h, req)
		id := resp.Header.Get("Unique-Id")
		if !Valid(id) || got.id != id {
			t.Fatalf("request %d: response header %q, context %q", n, id, got.id)
		}
		leaked := false
		for k, vs := range got.header {
			joined := strings.Join(vs, ", ")
			if f := forgedIn(joined); len(f) > 0 {
				t.Errorf("request %d: next handler saw %s=%q (%s)", n, k, joined, strings.Join(f, ", "))
				leaked = true
			} else if k != "Unique-Id" && metaVar(k) == "UNIQUE_ID" {
				t.Errorf("request %d: next handler saw variant %s=%q", n, k, joined)
				leaked = true
			}
		}
		if leaked {
			leaks++
		}
		if vs := got.header["Unique-Id"]; len(vs) != 1 || vs[0] != id {
			t.Errorf("request %d: Unique-Id seen downstream = %q, want [%q]", n, vs, id)
		}
		if got.header.Get("X-Other") != "kept" || !slices.Equal(got.header[nonVariant], []string{"other"}) {
			t.Errorf("request %d: unrelated headers lost: %v", n, got.header)
		}
	}
	if leaks > 0 {
		t.Errorf("%d of %d requests leaked a forged header variant", leaks, requests)
	}
}

// TestMiddlewareTrustIgnoresVariants checks that with TrustIncoming only the
// exact canonical header can supply the ID, and that variants of the token
// and incoming headers are dropped whether or not it does.
func TestMiddlewareTrustIgnoresVariants(t *testing.T) {
	tokA := "ZVPxAI86UcIH5JttIKoSNAAAAAc"
	tokB := "ZVPxAMAAAgoAABCSEjQAAAAH"
	rf := &fakeRandflake{}
	var seenHeader http.Header
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenHeader = r.Header.Clone()
	})
	cases := []struct {
		name   string
		opts   Options
		header http.Header
		want   string      // kept ID, or "" for a fresh one
		after  http.Header // headers next must see besides the token header
	}{
		{"variant only", Options{TrustIncoming: true},
			http.Header{"Unique_id": {tokA}}, "", nil},
		{"raw lower case only", Options{TrustIncoming: true},
			http.Header{"unique-id": {tokA}}, "", nil},
		{"canonical and variant", Options{TrustIncoming: true},
			http.Header{"Unique-Id": {tokA}, "UNIQUE_ID": {tokB}}, tokA, nil},
		{"variant and canonical duplicate", Options{TrustIncoming: true},
			http.Header{"Unique-Id": {tokA}, "unique-id": {tokA}}, tokA, nil},
		{"incoming header variants", Options{TrustIncoming: true, IncomingHeader: "X-Upstream-Id"},
			http.Header{"X-Upstream-Id": {tokA}, "X_Upstream_Id": {tokB}, "x-upstream-id": {tokB}, "Unique_id": {tokB}},
			tokA, http.Header{"X-Upstream-Id": {tokA}}},
		{"incoming header a variant of the token header", Options{TrustIncoming: true, IncomingHeader: "Unique_Id"},
			http.Header{"Unique_id": {tokA}, "Unique-Id": {tokB}}, tokA, nil},
		{"custom token header", Options{Header: "X-Request-Id"},
			http.Header{"X_Request_Id": {tokA}, "x-request-id": {tokA}, "X-Request-Id": {tokA}, "Unique_id": {"other"}},
			"", http.Header{"Unique_id": {"other"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Source = rf
			h := Middleware(next, c.opts)
			req := httptest.NewRequest("GET", "/", nil)
			req.Header = c.header
			tokenHeader := http.CanonicalHeaderKey(c.opts.Header)
			if tokenHeader == "" {
				tokenHeader = DefaultHeader
			}
			id := serve(h, req).Header.Get(tokenHeader)
			if (c.want != "" && id != c.want) || (c.want == "" && !strings.HasPrefix(id, "rf")) {
				t.Errorf("ID %q, want %q (empty: a fresh one)", id, c.want)
			}
			want := http.Header{tokenHeader: {id}}
			for k, v := range c.after {
				want[k] = v
			}
			if fmt.Sprint(seenHeader) != fmt.Sprint(want) {
				t.Errorf("next saw headers %v, want %v", seenHeader, want)
			}
		})
	}
}

// cgiCase is one way of serving a CGI program to clients that forge the
// token header.
type cgiCase struct {
	name     string
	handler  func(h *cgi.Handler, inspect func(http.Handler) http.Handler) http.Handler
	idHeader string   // response header with the token; "" if none
	wire     []string // forged header names; nil for the default five
	extra    []string // more header lines, with %d for the request number
	wantID   string   // the ID a trusting middleware must keep
	httpVar  string   // environment variable the token header maps to
	// wantHTTPUniqueID is true if HTTP_UNIQUE_ID must equal the token,
	// false if it must be absent.
	wantHTTPUniqueID bool
}

// TestCGIForgedUniqueID runs a real CGI program through CGIHandler, for
// hundreds of requests written as raw HTTP/1.1 so that header names reach
// the server exactly as a client spells them, each carrying forged
// Unique_id, UNIQUE_ID, unique_id, unique-id and UNIQUE-ID lines. In every
// request the program's whole environment must be free of forged values,
// UNIQUE_ID must be the token of the response header, and HTTP_UNIQUE_ID
// must be that token too or absent, never a client's value.
func TestCGIForgedUniqueID(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs /bin/sh")
	}
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("needs /bin/sh")
	}
	script := filepath.Join(t.TempDir(), "env.cgi")
	body := "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\nexec env\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	trusted := "ZVPxAI86UcIH5JttIKoSNAAAAAc"
	cases := []cgiCase{
		{
			name: "middleware",
			handler: func(h *cgi.Handler, inspect func(http.Handler) http.Handler) http.Handler {
				return Middleware(inspect(CGIHandler(h)), Options{})
			},
			idHeader: "Unique-Id", httpVar: "HTTP_UNIQUE_ID", wantHTTPUniqueID: true,
		},
		{
			name: "middleware trusting",
			handler: func(h *cgi.Handler, inspect func(http.Handler) http.Handler) http.Handler {
				return Middleware(inspect(CGIHandler(h)), Options{TrustIncoming: true})
			},
			idHeader: "Unique-Id", httpVar: "HTTP_UNIQUE_ID", wantHTTPUniqueID: true,
			// On the wire unique-id and UNIQUE-ID are Unique-Id, which
			// must occur once to be trusted.
			wire:  []string{"Unique_id", "UNIQUE_ID", "unique_id"},
			extra: []string{"Unique-Id: " + trusted}, wantID: trusted,
		},
		{
			name: "middleware with custom header",
			handler: func(h *cgi.Handler, inspect func(http.Handler) http.Handler) http.Handler {
				return Middleware(inspect(CGIHandler(h)), Options{Header: "X-Request-Id"})
			},
			idHeader: "X-Request-Id", httpVar: "HTTP_X_REQUEST_ID",
			extra: []string{"X_Request_Id: FORGED-r%d-X_Request_Id", "x-request-id: FORGED-r%d-x-request-id"},
		},
		{
			name: "no middleware",
			handler: func(h *cgi.Handler, inspect func(http.Handler) http.Handler) http.Handler {
				return inspect(CGIHandler(h))
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			testCGIForged(t, script, c)
		})
	}
}

func testCGIForged(t *testing.T, script string, c cgiCase) {
	const requests, workers = 200, 4
	var (
		mu     sync.Mutex
		leaked = make(map[int]bool)
	)
	fail := func(n int, format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		leaked[n] = true
		t.Errorf("request %d: "+format, append([]any{n}, args...)...)
	}
	// inspect checks what the handler in front of the CGI program sees.
	inspect := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			id, _ := FromContext(r.Context())
			for k, vs := range r.Header {
				joined := strings.Join(vs, ", ")
				if f := forgedIn(joined); len(f) > 0 && c.idHeader != "" && metaVar(k) == metaVar(c.idHeader) {
					fail(n, "handler saw %s=%q (%s)", k, joined, strings.Join(f, ", "))
				}
				if c.idHeader != "" && k == c.idHeader && (len(vs) != 1 || vs[0] != id) {
					fail(n, "handler saw %s=%q, want the ID %q", k, joined, id)
				}
			}
			next.ServeHTTP(w, r)
		})
	}
	h := &cgi.Handler{Path: script, Env: []string{"OTHER=kept"}}
	srv := httptest.NewServer(c.handler(h, inspect))
	defer srv.Close()

	wire := c.wire
	if wire == nil {
		wire = []string{"Unique_id", "UNIQUE_ID", "unique_id", "unique-id", "UNIQUE-ID"}
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range jobs {
				var lines []string
				for _, v := range wire {
					lines = append(lines, v+": "+forged(n, v))
				}
				for _, e := range c.extra {
					if strings.Contains(e, "%d") {
						e = fmt.Sprintf(e, n)
					}
					lines = append(lines, e)
				}
				resp, body, err := rawGet(srv.Listener.Addr().String(), "/env.cgi?n="+strconv.Itoa(n), lines)
				if err != nil {
					fail(n, "%v", err)
					continue
				}
				checkCGIEnv(n, c, resp, body, fail)
			}
		}()
	}
	for n := 0; n < requests; n++ {
		jobs <- n
	}
	close(jobs)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(leaked) > 0 {
		t.Errorf("%d of %d requests failed", len(leaked), requests)
	}
}

// checkCGIEnv checks the environment that the CGI program printed.
func checkCGIEnv(n int, c cgiCase, resp *http.Response, body string, fail func(int, string, ...any)) {
	if resp.StatusCode != http.StatusOK {
		fail(n, "status %d: %q", resp.StatusCode, body)
		return
	}
	env := make(map[string]string)
	for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		k, v, _ := strings.Cut(line, "=")
		if _, dup := env[k]; dup {
			fail(n, "CGI environment has %s twice", k)
		}
		env[k] = v
		if f := forgedIn(v); len(f) > 0 {
			fail(n, "CGI program saw %s=%q (%s)", k, v, strings.Join(f, ", "))
		}
	}
	id := ""
	if c.idHeader != "" {
		id = resp.Header.Get(c.idHeader)
		if !Valid(id) || c.wantID != "" && id != c.wantID {
			fail(n, "response header %s=%q, want a valid token (%q if set)", c.idHeader, id, c.wantID)
		}
	}
	if v, ok := env["UNIQUE_ID"]; id != "" && v != id || id == "" && ok {
		fail(n, "CGI program saw UNIQUE_ID=%q (present %v), want %q", v, ok, id)
	}
	if v, ok := env["HTTP_UNIQUE_ID"]; c.wantHTTPUniqueID && v != id || !c.wantHTTPUniqueID && ok {
		fail(n, "CGI program saw HTTP_UNIQUE_ID=%q (present %v), want %q", v, ok, id)
	}
	if c.httpVar != "" && env[c.httpVar] != id {
		fail(n, "CGI program saw %s=%q, want %q", c.httpVar, env[c.httpVar], id)
	}
	if env["OTHER"] != "kept" {
		fail(n, "CGI program saw OTHER=%q", env["OTHER"])
	}
}

// rawGet sends a GET request with the given header lines, byte for byte,
// and reads the response.
func rawGet(addr, target string, lines []string) (*http.Response, string, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	defer conn.Close()
	req := "GET " + target + " HTTP/1.1\r\nHost: " + addr + "\r\n" +
		strings.Join(lines, "\r\n") + "\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// TestCGIHandlerDropsRawVariants calls CGIHandler directly with header
// names that net/http's server would have canonicalised, such as a raw
// "unique-id" key, which Header.Get does not see but net/http/cgi exports
// as HTTP_UNIQUE_ID, and checks that the program sees none of them and that
// the caller's request keeps its headers.
func TestCGIHandlerDropsRawVariants(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs /bin/sh")
	}
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("needs /bin/sh")
	}
	script := filepath.Join(t.TempDir(), "env.cgi")
	body := "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\nexec env\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	h := CGIHandler(&cgi.Handler{Path: script})
	const id = "ZVPxAI86UcIH5JttIKoSNAAAAAc"
	for n := 0; n < 20; n++ {
		for _, withID := range []bool{false, true} {
			req := httptest.NewRequest("GET", "/env.cgi", nil)
			for _, v := range mapVariants {
				req.Header[v] = []string{forged(n, v)}
			}
			want := ""
			if withID {
				req = req.WithContext(NewContext(req.Context(), id))
				if n%2 == 0 {
					req.Header["Unique-Id"] = []string{id}
					want = id
				}
			}
			before := fmt.Sprint(req.Header)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			out := rec.Body.String()
			if f := forgedIn(out); len(f) > 0 {
				t.Errorf("request %d (ID in context: %v): program saw %s", n, withID, strings.Join(f, ", "))
			}
			env := make(map[string]string)
			for _, line := range strings.Split(out, "\n") {
				k, v, _ := strings.Cut(line, "=")
				env[k] = v
			}
			if v, ok := env["HTTP_UNIQUE_ID"]; v != want || ok != (want != "") {
				t.Errorf("request %d (ID in context: %v): HTTP_UNIQUE_ID=%q (present %v), want %q", n, withID, v, ok, want)
			}
			if withID && env["UNIQUE_ID"] != id {
				t.Errorf("request %d: UNIQUE_ID=%q, want %q", n, env["UNIQUE_ID"], id)
			}
			if after := fmt.Sprint(req.Header); after != before {
				t.Errorf("request %d: caller's headers changed from %s to %s", n, before, after)
			}
		}
	}
}
