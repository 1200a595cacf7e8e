package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
)

// tokenServer answers one ID to requests with "Bearer want", and 401 to
// the others; it records the Authorization headers it saw.
type tokenServer struct {
	mu   sync.Mutex
	want string
	seen []string
}

func (s *tokenServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	want := s.want
	s.seen = append(s.seen, r.Header.Get("Authorization"))
	s.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+want {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("WWW-Authenticate", `Bearer realm="randflake"`)
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":"a valid bearer token or client certificate is required","kind":"unauthorized"}`))
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Write([]byte("42\n"))
}

func (s *tokenServer) setWant(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want = token
}

// headers returns the Authorization headers seen so far, one a request.
func (s *tokenServer) headers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// Token is sent as a bearer token with every request; a token the service
// refuses ends Next at once with the 401.
func TestToken(t *testing.T) {
	ts := &tokenServer{want: "token-0123456789abcdef"}
	srv := httptest.NewServer(ts)
	defer srv.Close()
	c, err := New(Config{URL: srv.URL, Token: "token-0123456789abcdef", BatchSize: 1, Format: FormatText})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if id, err := c.Next(context.Background()); err != nil || id != 42 {
		t.Fatalf("Next: %d %v", id, err)
	}
	ts.setWant("another-token-0123456789")
	_, err = c.Fetch(context.Background())
	var se *ServerError
	if !errors.As(err, &se) || se.StatusCode != 401 || se.Kind != "unauthorized" {
		t.Fatalf("Fetch with a refused token: %v", err)
	}
	c2, _ := New(Config{URL: srv.URL, Token: "wrong-token-0123456789", BatchSize: 1, Format: FormatText, MaxAttempts: 5})
	defer c2.Close()
	before := len(ts.headers())
	if _, err := c2.Next(context.Background()); !errors.As(err, &se) || se.StatusCode != 401 {
		t.Fatalf("Next with a refused token: %v", err)
	}
	if n := len(ts.headers()) - before; n != 1 {
		t.Errorf("a 401 was retried: %d requests for one Next with MaxAttempts 5, want 1", n)
	}
}

// TokenFile is read by New and again a second after, so that a replaced
// token is used.
func TestTokenFile(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the token's 1 s re-read twice: not in -short")
	}
	ts := &tokenServer{want: "first-token-0123456789"}
	srv := httptest.NewServer(ts)
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("first-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{URL: srv.URL, TokenFile: file, BatchSize: 1, Format: FormatText})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Fetch(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Replaced as an editor or the kubelet would: a new file renamed
	// over the old.
	tmp := file + ".new"
	os.WriteFile(tmp, []byte("  second-token-0123456789  \n"), 0o600)
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	ts.setWant("second-token-0123456789")
	// The file is read again a second after the last read: the bound,
	// stretched by how slowly the test runs, only ends a wait for a
	// token that is never read again.
	slow := slowdown.Start()
	for start := time.Now(); ; {
		_, err := c.Fetch(context.Background())
		if err == nil {
			break
		}
		if limit := slow.Stretch(5 * time.Second); time.Since(start) > limit {
			t.Fatalf("the replaced token was not used within %v: %v (%s)", limit, err, slow)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A file that cannot be read later leaves the last token.
	os.Remove(file)
	time.Sleep(tokenReread + 100*time.Millisecond)
	if _, err := c.Fetch(context.Background()); err != nil {
		t.Errorf("after the file went away: %v", err)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.seen[0] != "Bearer first-token-0123456789" || ts.seen[len(ts.seen)-1] != "Bearer second-token-0123456789" {
		t.Errorf("headers sent: %q", ts.seen)
	}
}

// Bad token settings are refused by New, without quoting the token.
func TestTokenRefused(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("token-0123456789abcdef\n"), 0o644)
	spaced := filepath.Join(dir, "spaced")
	os.WriteFile(spaced, []byte("token 0123456789abcdef\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("token-0123456789abcdef\n"), 0o600)
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{URL: "http://127.0.0.1:1", Token: "a", TokenFile: good}, "Token and TokenFile exclude each other"},
		{Config{URL: "http://127.0.0.1:1", Token: "token with\nnewline"}, "characters a bearer token cannot carry"},
		{Config{URL: "http://127.0.0.1:1", Token: "=="}, "the token is empty"},
		{Config{URL: "http://127.0.0.1:1", TokenFile: filepath.Join(dir, "missing")}, "TokenFile"},
		{Config{URL: "http://127.0.0.1:1", TokenFile: open}, "chmod 600"},
		{Config{URL: "http://127.0.0.1:1", TokenFile: spaced}, "characters a bearer token cannot carry"},
		{Config{URL: "http://127.0.0.1:1", TokenFile: empty}, "the token is empty"},
		{Config{URL: "http://ids.example:8080", Token: "token-0123456789abcdef"}, "a token is sent only over https"},
		{Config{URLs: []string{"https://ids.example", "http://10.0.0.1"}, TokenFile: good}, "URLs[1]: http://10.0.0.1 is plain http"},
	} {
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error with %q", c.cfg, err, c.want)
		} else if strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("the error %q quotes the token", err)
		}
	}
	for _, u := range []string{"https://ids.example", "http://localhost:8080", "http://[::1]:8080", "http://127.0.0.2"} {
		if _, err := New(Config{URL: u, Token: "token-0123456789abcdef"}); err != nil {
			t.Errorf("%s with a token: %v", u, err)
		}
	}
}
