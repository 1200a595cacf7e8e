package uniqueid

import (
	"errors"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// fakeRandflake stands in for the root package's generators, which
// implement Source; this package must not import them.
type fakeRandflake struct {
	mu  sync.Mutex
	n   int
	err error
}

func (f *fakeRandflake) GenerateString() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return "", f.err
	}
	f.n++
	return "rf" + strings.Repeat("x", f.n), nil
}

// seen records what the next handler observed.
type seen struct {
	called    bool
	id        string
	ok        bool
	reqHeader []string
}

func recorder(s *seen) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.called = true
		s.id, s.ok = FromContext(r.Context())
		s.reqHeader = r.Header.Values("Unique-Id")
		io.WriteString(w, "ok")
	})
}

func serve(h http.Handler, req *http.Request) *http.Response {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func TestMiddlewareDefault(t *testing.T) {
	var s seen
	h := Middleware(recorder(&s), Options{})
	ids := make(map[string]bool)
	for i := 0; i < 50; i++ {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("Unique-Id", "ZVPxAI86UcIH5JttIKoSNAAAAAc") // not trusted
		resp := serve(h, req)
		id := resp.Header.Get("Unique-Id")
		tok, err := Parse(id)
		if err != nil || tok.Layout != Current {
			t.Fatalf("response header %q: %v, %v", id, tok.Layout, err)
		}
		if !s.called || !s.ok || s.id != id {
			t.Fatalf("context holds %q, %v; header %q", s.id, s.ok, id)
		}
		if len(s.reqHeader) != 1 || s.reqHeader[0] != id {
			t.Fatalf("request header seen downstream = %q, want [%q]", s.reqHeader, id)
		}
		if ids[id] {
			t.Fatalf("duplicate id %q", id)
		}
		ids[id] = true
	}
}

func TestMiddlewareSources(t *testing.T) {
	cg, err := NewClassic(testAddr)
	if err != nil {
		t.Fatal(err)
	}
	var s seen
	// Classic tokens in a custom header.
	h := Middleware(recorder(&s), Options{Source: cg, Header: "x-request-id"})
	resp := serve(h, httptest.NewRequest("GET", "/", nil))
	id := resp.Header.Get("X-Request-Id")
	if tok, err := Parse(id); err != nil || tok.Layout != Classic || tok.Addr != testAddr {
		t.Fatalf("classic id %q: %+v %v", id, tok, err)
	}
	if resp.Header.Get("Unique-Id") != "" || s.id != id {
		t.Fatalf("context %q, headers %v", s.id, resp.Header)
	}
	// A Randflake-like source.
	rf := &fakeRandflake{}
	h = Middleware(recorder(&s), Options{Source: rf})
	resp = serve(h, httptest.NewRequest("GET", "/", nil))
	if id := resp.Header.Get("Unique-Id"); id != "rfx" || s.id != "rfx" {
		t.Fatalf("randflake id %q, context %q", id, s.id)
	}
}

var testAddr = netip.MustParseAddr("192.0.2.55")

func TestMiddlewareTrustIncoming(t *testing.T) {
	apacheTok := "ZVPxAI86UcIH5JttIKoSNAAAAAc"
	classicTok := "ZVPxAMAAAgoAABCSEjQAAAAH"
	rf := &fakeRandflake{}
	var s seen
	h := Middleware(recorder(&s), Options{Source: rf, TrustIncoming: true})
	cases := []struct {
		name   string
		values []string
		keep   bool
	}{
		{"current", []string{apacheTok}, true},
		{"classic", []string{classicTok}, true},
		{"absent", nil, false},
		{"empty", []string{""}, false},
		{"malformed", []string{apacheTok[1:]}, false},
		{"spare bits", []string{apacheTok[:26] + "d"}, false},
		{"overlong", []string{strings.Repeat("A", 4096)}, false},
		{"twice", []string{apacheTok, apacheTok}, false},
		{"control", []string{apacheTok[:20] + "\x01" + apacheTok[21:]}, false},
		{"randflake-looking", []string{"rfxxxx"}, false}, // default Accept is Valid
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/", nil)
			for _, v := range c.values {
				req.Header.Add("Unique-Id", v)
			}
			resp := serve(h, req)
			id := resp.Header.Get("Unique-Id")
			if c.keep {
				if id != c.values[0] || s.id != id {
					t.Fatalf("kept %q in header, %q in context; want %q", id, s.id, c.values[0])
				}
			} else if !strings.HasPrefix(id, "rf") || s.id != id {
				t.Fatalf("got %q in header, %q in context; want a fresh id", id, s.id)
			}
			if len(s.reqHeader) != 1 || s.reqHeader[0] != id {
				t.Fatalf("downstream request header %q, want [%q]", s.reqHeader, id)
			}
		})
	}

	// A separate incoming header and a custom Accept.
	h = Middleware(recorder(&s), Options{
		Source: rf, TrustIncoming: true, IncomingHeader: "X-Upstream-Id",
		Accept: func(v string) bool { return strings.HasPrefix(v, "rf") },
	})
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-Upstream-Id", "rfupstream")
	req.Header.Set("Unique-Id", "rfclient")
	if id := serve(h, req).Header.Get("Unique-Id"); id != "rfupstream" || s.id != id {
		t.Fatalf("custom accept: %q / %q", id, s.id)
	}
	req = httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-Upstream-Id", "rf"+strings.Repeat("y", MaxIncomingLen)) // too long even for Accept
	if id := serve(h, req).Header.Get("Unique-Id"); strings.Contains(id, "y") {
		t.Fatalf("overlong value trusted: %q", id)
	}
}

func TestMiddlewareSourceError(t *testing.T) {
	boom := errors.New("boom")
	var s seen
	h := Middleware(recorder(&s), Options{Source: &fakeRandflake{err: boom}})
	resp := serve(h, httptest.NewRequest("GET", "/", nil))
	if resp.StatusCode != http.StatusInternalServerError || s.called || resp.Header.Get("Unique-Id") != "" {
		t.Fatalf("status %d, next called %v", resp.StatusCode, s.called)
	}
	var got error
	h = Middleware(recorder(&s), Options{
		Source: &fakeRandflake{err: boom},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			got = err
			w.WriteHeader(http.StatusServiceUnavailable)
		},
	})
	resp = serve(h, httptest.NewRequest("GET", "/", nil))
	if resp.StatusCode != http.StatusServiceUnavailable || got != boom || s.called {
		t.Fatalf("status %d, error %v", resp.StatusCode, got)
	}
}

func TestMiddlewareBadHeaderName(t *testing.T) {
	for _, o := range []Options{
		{Header: "Unique Id"},
		{Header: "Unique-Id\r\n"},
		{TrustIncoming: true, IncomingHeader: "X:Y"},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Middleware(%+v) did not panic", o)
				}
			}()
			Middleware(http.NotFoundHandler(), o)
		}()
	}
}

func TestFromContextEmpty(t *testing.T) {
	if id, ok := FromContext(httptest.NewRequest("GET", "/", nil).Context()); ok || id != "" {
		t.Errorf("FromContext = %q, %v", id, ok)
	}
}

// TestCGI runs a real CGI program, a shell script, through CGIHandler and
// checks that it sees the request's token as UNIQUE_ID.
func TestCGI(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs /bin/sh")
	}
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("needs /bin/sh")
	}
	script := filepath.Join(t.TempDir(), "env.cgi")
	body := "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\nprintf 'UNIQUE_ID=%s\\nHTTP_UNIQUE_ID=%s\\nOTHER=%s\\n' \"$UNIQUE_ID\" \"$HTTP_UNIQUE_ID\" \"$OTHER\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	base := &cgi.Handler{Path: script, Env: []string{"OTHER=kept", "UNIQUE_ID=stale"}}
	baseEnv := append([]string(nil), base.Env...)
	srv := httptest.NewServer(Middleware(CGIHandler(base), Options{}))
	defer srv.Close()

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(srv.URL + "/env.cgi")
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				errs <- err
				return
			}
			id := resp.Header.Get("Unique-Id")
			want := "UNIQUE_ID=" + id + "\nHTTP_UNIQUE_ID=" + id + "\nOTHER=kept\n"
			if !Valid(id) || string(b) != want {
				errs <- errors.New("CGI output " + string(b) + " for id " + id)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if strings.Join(base.Env, ",") != strings.Join(baseEnv, ",") {
		t.Errorf("handler Env modified: %q", base.Env)
	}

	// Without the middleware the program runs with its own environment.
	rec := httptest.NewRecorder()
	CGIHandler(base).ServeHTTP(rec, httptest.NewRequest("GET", "/env.cgi", nil))
	if got := rec.Body.String(); !strings.HasPrefix(got, "UNIQUE_ID=stale\n") {
		t.Errorf("without middleware: %q", got)
	}
}
