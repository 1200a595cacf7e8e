package kubelease

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/randflake/randflake/kubelease/kubetest"
)

// In a pod: the service account's token, CA and namespace from its
// directory, the server from KUBERNETES_SERVICE_HOST and _PORT; the token
// file is read again (a rotated token is used without a restart).
func TestInCluster(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	ns := c.Namespace(t, "incluster")
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.crt", string(c.CA()))
	write("namespace", ns+"\n")
	write("token", c.Token(kubetest.Denied)+"\n")
	host, port, err := net.SplitHostPort(c.Addr())
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
	cli, err := inCluster(dir, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cli.Namespace() != ns {
		t.Errorf("namespace %q, want %q from the service account", cli.Namespace(), ns)
	}
	cfg := Config{Client: cli, Secret: testSecret, Nodes: 16, LastNode: 127, TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew}
	if _, err := NewLeased(testCtx(t, "a claim without the Role", 30*time.Second), testSecret, cfg); !errors.Is(err, ErrForbidden) {
		t.Fatalf("with the token of a user without the Role: %v, want ErrForbidden", err)
	}
	// The kubelet rotates the token: the next read, a minute on, takes
	// the new one (here the minute is made to have passed).
	write("token", c.Token(kubetest.User)+"\n")
	cli.mu.Lock()
	cli.readAt = time.Time{}
	cli.mu.Unlock()
	g := newLeased(t, cfg)
	if _, err := g.Generate(); err != nil {
		t.Fatal(err)
	}
	if _, err := inCluster(dir, func(string) string { return "" }); err == nil {
		t.Error("InCluster without KUBERNETES_SERVICE_HOST accepted")
	}
}

// Outside a cluster: a kubeconfig whose user has a client certificate of
// the cluster's CA (files beside the kubeconfig, named relative to it),
// and one whose user has a token.
func TestKubeconfigUsers(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	ns := c.Namespace(t, "kubeconfig")
	if err := c.Grant(testCtx(t, "granting cert-user the lease verbs", 20*time.Second), ns, "cert-user", "get", "list", "create", "update", "delete"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key, err := c.ClientCertificate("cert-user", "randflake-pods")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"ca.crt": c.CA(), "user.crt": cert, "user.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kc := filepath.Join(dir, "config")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
current-context: cert
clusters:
- name: test
  cluster: {server: "https://`+c.Addr()+`", certificate-authority: ca.crt}
users:
- name: cert-user
  user: {client-certificate: user.crt, client-key: user.key}
contexts:
- name: cert
  context: {cluster: test, user: cert-user, namespace: `+ns+`}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cli, err := LoadKubeconfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	g := newLeased(t, Config{Client: cli, Secret: testSecret, Nodes: 16, LastNode: 127, TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew})
	if _, err := g.Generate(); err != nil {
		t.Fatal(err)
	}
	tokenKC, err := c.Kubeconfig(t.TempDir(), kubetest.User, "", ns)
	if err != nil {
		t.Fatal(err)
	}
	cli2, err := LoadKubeconfig(tokenKC)
	if err != nil {
		t.Fatal(err)
	}
	g2 := newLeased(t, Config{Client: cli2, Secret: testSecret, Nodes: 16, LastNode: 127, TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew})
	if g.Lease().FirstNode == g2.Lease().FirstNode {
		t.Errorf("the certificate user and the token user share node IDs %v", g.Lease())
	}
}
