package server

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/randflake/randflake/cmd/randflake/internal/tlstest"
)

// One rule for bearer tokens, for issuing and inspection alike, over
// HTTP/1.1 and HTTP/2 alike: the scheme in any case, one space or more,
// whitespace around the value ignored; no token with a space or a tab
// inside it, no other scheme, no empty token.
func TestBearerTokenOneRule(t *testing.T) {
	const issue, inspect = "issue-token-0123456789abcdef", "inspect-token-0123456789abcdef"
	s, err := New(Config{Generator: newSharded(t), LeaseEnd: func() int64 { return 1 << 40 },
		IssueTokens: mustTokens(t, "alice "+issue), InspectToken: inspect})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(s)
	s.Configure(ts.Config)
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)
	h2 := ts.Client()
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: h2.Transport.(*http.Transport).TLSClientConfig.RootCAs},
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
	t.Cleanup(h1.CloseIdleConnections)

	for _, c := range []struct {
		format string // %s is the token
		ok     bool
	}{
		{"Bearer %s", true},
		{"bearer %s", true},
		{"BEARER %s", true},
		{"Bearer  %s", true},
		{"Bearer %s ", true},
		{"Bearer %s\t", true},
		{" Bearer %s", true},
		{"Bearer %s x", false},
		{"Bearer\t%s", false},
		{"Bearer%s", false},
		{"Basic %s", false},
		{"Bearer ", false},
		{"%s", false},
	} {
		for _, proto := range []struct {
			name   string
			client *http.Client
			major  int
		}{{"HTTP/1.1", h1, 1}, {"HTTP/2", h2, 2}} {
			for _, ep := range []struct{ what, path, token string }{
				{"issuing", "/v1/ids", issue},
				{"inspection", "/v1/ids/3vgoe12ccb8gh", inspect},
			} {
				auth := strings.Replace(c.format, "%s", ep.token, 1)
				req, _ := http.NewRequest("GET", ts.URL+ep.path, nil)
				req.Header.Set("Authorization", auth)
				resp, err := proto.client.Do(req)
				if err != nil {
					t.Fatalf("%s %s with %q: %v", proto.name, ep.what, auth, err)
				}
				resp.Body.Close()
				if resp.ProtoMajor != proto.major {
					t.Fatalf("%s asked, %s answered", proto.name, resp.Proto)
				}
				if got := resp.StatusCode != http.StatusUnauthorized; got != c.ok {
					t.Errorf("%s %s with Authorization %q: %d; want accepted %v", proto.name, ep.what, auth, resp.StatusCode, c.ok)
				}
			}
		}
	}
	// Two Authorization fields are no token, on either endpoint.
	for _, path := range []string{"/v1/ids", "/v1/ids/3vgoe12ccb8gh"} {
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		req.Header.Add("Authorization", "Bearer "+issue)
		req.Header.Add("Authorization", "Bearer "+inspect)
		resp, err := h2.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s with two Authorization fields: %d, want 401", path, resp.StatusCode)
		}
	}
}

// The access log's client field is bounded as its path is: a client
// certificate with a 3,000-byte common name gives a line of a few hundred
// bytes, the name cut with "…".
func TestAccessLogClientBounded(t *testing.T) {
	var logs syncBuffer
	ca := tlstest.NewCA(t, "test CA")
	s, err := New(Config{Generator: newSharded(t), LeaseEnd: func() int64 { return 1 << 40 },
		AccessLog: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := tlsServer(t, s, ca.Server(t, "server"), ca)
	cn := strings.Repeat("é", 1500) // 3,000 bytes, two to a character
	pair := ca.Client(t, cn)
	resp, err := clientWith(t, ca, &pair).Get(ts.URL + "/v1/ids?count=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	line := strings.TrimSpace(logs.String())
	if len(line) > 2*maxLoggedPath+200 {
		t.Errorf("the access-log line of a 3,000-byte common name is %d bytes, want at most %d: %.300s…", len(line), 2*maxLoggedPath+200, line)
	}
	want := "client=" + strings.Repeat("é", maxLoggedPath/2) + "…"
	if !strings.Contains(line, want) {
		t.Errorf("the access log's client field is not the name cut at %d bytes with …: %.400s", maxLoggedPath, line)
	}
	if b := boundField(strings.Repeat("a", maxLoggedPath-1) + "é"); b != strings.Repeat("a", maxLoggedPath-1)+"…" {
		t.Errorf("boundField cut inside a character: %q", b[len(b)-8:])
	}
}
