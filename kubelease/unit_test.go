package kubelease

import (
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake/lease"
)

// A kubeconfig's current context gives the server, the CA (a file
// relative to the kubeconfig's directory, or inline data), the user's
// token or certificate, and the namespace; users the client cannot
// authenticate as are refused with a clear error.
func TestReadKubeconfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cert := base64.StdEncoding.EncodeToString([]byte("CERT"))
	p := write("config", `apiVersion: v1
kind: Config
current-context: b
clusters:
- name: one
  cluster: {server: "https://one:6443", certificate-authority: ca.crt}
- name: two
  cluster: {server: "https://two:6443", certificate-authority-data: `+cert+`}
users:
- name: tok
  user: {token: abc}
- name: crt
  user: {client-certificate: c.crt, client-key-data: `+cert+`}
contexts:
- name: a
  context: {cluster: one, user: tok, namespace: ns-a}
- name: b
  context: {cluster: two, user: crt, namespace: ns-b}
`)
	cfg, err := ReadKubeconfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != "https://two:6443" || string(cfg.CAData) != "CERT" || cfg.Namespace != "ns-b" ||
		cfg.CertFile != filepath.Join(dir, "c.crt") || string(cfg.KeyData) != "CERT" || cfg.Token != "" {
		t.Errorf("context b read as %+v", cfg)
	}
	p = write("config-a", strings.Replace(string(mustRead(t, p)), "current-context: b", "current-context: a", 1))
	cfg, err = ReadKubeconfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != "https://one:6443" || cfg.CAFile != filepath.Join(dir, "ca.crt") || cfg.Token != "abc" || cfg.Namespace != "ns-a" {
		t.Errorf("context a read as %+v", cfg)
	}
	for name, text := range map[string]string{
		"no current context": "apiVersion: v1\nkind: Config\n",
		"unknown context":    "current-context: x\ncontexts: []\n",
		"exec plugin": `current-context: a
clusters: [{name: c, cluster: {server: "https://c"}}]
users: [{name: u, user: {exec: {command: aws}}}]
contexts: [{name: a, context: {cluster: c, user: u}}]
`,
		"bad base64": `current-context: a
clusters: [{name: c, cluster: {server: "https://c", certificate-authority-data: "!!"}}]
contexts: [{name: a, context: {cluster: c}}]
`,
		"not YAML": "{{{",
	} {
		if _, err := ReadKubeconfig(write("bad", text)); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "abc") {
			t.Errorf("%s: the error shows a token: %v", name, err)
		}
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A refusal by RBAC names the verb and the resource, and matches
// ErrForbidden; other answers say their status.
func TestAPIErrorMessages(t *testing.T) {
	body := []byte(`{"kind":"Status","reason":"Forbidden","message":"leases is forbidden: User \"x\" cannot update resource \"leases\"","code":403}`)
	for method, verb := range map[string]string{http.MethodGet: "get", http.MethodPut: "update", http.MethodPost: "create", http.MethodDelete: "delete"} {
		e := newAPIError(method, "/apis/coordination.k8s.io/v1/namespaces/ns1/leases/x", 403, body)
		if !errors.Is(e, ErrForbidden) || !strings.Contains(e.Error(), "refused to "+verb+" leases.coordination.k8s.io in namespace \"ns1\"") {
			t.Errorf("%s: %v", method, e)
		}
	}
	e := newAPIError(http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/ns1/leases", 403, body)
	if !strings.Contains(e.Error(), "refused to list leases") {
		t.Errorf("list: %v", e)
	}
	e = newAPIError(http.MethodPut, "/x", 409, []byte(`{"reason":"Conflict","message":"the object has been modified"}`))
	if errors.Is(e, ErrForbidden) || !isCode(e, 409) || !strings.Contains(e.Error(), "409 Conflict") {
		t.Errorf("conflict: %v", e)
	}
	if e := newAPIError(http.MethodGet, "/x", 401, nil); !errors.Is(e, ErrUnauthorized) {
		t.Errorf("401: %v", e)
	}
}

// The clock check accepts a Date header that could name the server's
// second while the request ran, within the bound, and refuses one
// further off; the lease end leaves the clock allowances and the margin.
func TestClockChecks(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 10, 900_000_000, time.UTC)
	rep := reply{t0: t0, t1: t0.Add(200 * time.Millisecond)}
	for _, c := range []struct {
		date time.Time
		ok   bool
	}{
		{t0.Truncate(time.Second), true},                       // the second the request began in
		{t0.Add(time.Second).Truncate(time.Second), true},      // the next: the answer crossed it
		{t0.Add(-time.Second).Truncate(time.Second), false},    // ended before t0 - 100ms
		{t0.Add(2 * time.Second).Truncate(time.Second), false}, // begins after t1 + 100ms
		{time.Time{}, false},                                   // no header
		{t0.Add(-1500 * time.Millisecond).Truncate(time.Second), false},
	} {
		rep.date = c.date
		if err := checkSkew(rep, 100*time.Millisecond); (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrClockSkew)) {
			t.Errorf("Date %v, request %v to %v: %v, want ok=%v", c.date, rep.t0, rep.t1, err, c.ok)
		}
	}
	// TTL 6s, skew 100ms: 6 - 2 x 1.1 - 0.6 = 3.2 s after t0, the last
	// whole second ending before it.
	if got, want := endFor(t0, 6*time.Second, 100*time.Millisecond), t0.Add(3200*time.Millisecond).Unix()-1; got != want {
		t.Errorf("endFor = %d, want %d", got, want)
	}
}

// Configurations that leave no room for the clock allowances, or name
// no namespace, are refused.
func TestConfigChecks(t *testing.T) {
	cli, err := NewClient(ClientConfig{Server: "https://127.0.0.1:1", Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	good := Config{Client: cli, Nodes: 16, LastNode: 127, TTL: 6 * time.Second, MaxClockSkew: 100 * time.Millisecond}
	if _, err := good.normalize(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Config){
		"ttl too short for the default skew": func(c *Config) { c.MaxClockSkew = 0 },
		"ttl not whole seconds":              func(c *Config) { c.TTL = 6500 * time.Millisecond },
		"bad namespace":                      func(c *Config) { c.Namespace = "Not_A_Label" },
		"bad name":                           func(c *Config) { c.Name = strings.Repeat("a", 57) },
		"blocks not dividing":                func(c *Config) { c.Nodes = 15 },
		"no client":                          func(c *Config) { c.Client = nil },
	} {
		c := good
		mod(&c)
		if _, err := c.normalize(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := (Config{Client: cli, Secret: nil}).normalize(); err != nil {
		t.Errorf("the defaults refused: %v", err)
	}
	// A TTL past the fleet's horizon is refused, naming both, unless the
	// horizon is raised with it (rule 13 of docs/leases.md).
	long := Config{Client: cli, Secret: []byte("0123456789abcdef"), TTL: 20 * time.Minute}
	if _, err := New(long); !errors.Is(err, lease.ErrBeyondHorizon) || !strings.Contains(err.Error(), "promise 20m0s ahead, beyond the fleet's horizon of 15s") {
		t.Errorf("a TTL of 20m under the default horizon: %v, want ErrBeyondHorizon naming both", err)
	}
	long.Horizon = 20 * time.Minute
	if _, err := New(long); err != nil {
		t.Errorf("a TTL of 20m under a horizon of 20m: %v", err)
	}
	if _, err := (Config{Client: cli, Horizon: -time.Second}).normalize(); err == nil {
		t.Error("a negative horizon was accepted")
	}
	if _, err := NewClient(ClientConfig{Server: "ftp://x"}); err == nil {
		t.Error("an ftp:// server accepted")
	}
}
