// Package kubetest provides throwaway Kubernetes API servers for tests, in
// the spirit of net/http/httptest: the real kube-apiserver on the real etcd,
// started by the test binary itself on loopback ports with temporary
// directories, and stopped by process ID, never by name.
//
// A [Cluster] is one etcd member (Debian's etcd, found as etcdtest finds
// it: $RANDFLAKE_ETCD_BIN, else PATH) and one kube-apiserver in front of
// it, serving HTTPS on 127.0.0.1 with a certificate of a CA the test makes,
// authenticating static tokens (--token-auth-file: an administrator in
// system:masters and users without any right) and client certificates of
// that CA, authorizing by RBAC, and signing service-account tokens with a
// key pair the test makes. Besides starting and stopping, a test can
// restart the API server, and save etcd to a snapshot and restore it under
// the API server (which is restarted, as Kubernetes asks): the resource
// versions go back to the snapshot's.
//
// kube-apiserver is found by [Find]: the file $RANDFLAKE_KUBE_APISERVER
// names, else the cache .ci/kube-apiserver.sh builds it into
// (${XDG_CACHE_HOME:-$HOME/.cache}/randflake/kube-apiserver-v1.37.2).
// Without it, or without etcd, [New] skips the test with a message saying
// how to build it, unless the CI environment variable is set, in which
// case the test fails.
package kubetest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake/leasetest"
)

// Version is the kube-apiserver release the tests run.
const Version = "v1.37.2"

// BinEnv names the kube-apiserver binary when set.
const BinEnv = "RANDFLAKE_KUBE_APISERVER"

// ErrNotFound is wrapped by the error of [Find] and [Start] when
// kube-apiserver, etcd or etcdctl is not found.
var ErrNotFound = errors.New("no kube-apiserver or etcd binaries")

const hint = "build kube-apiserver with .ci/kube-apiserver.sh (about 6 minutes, once; it prints the path) and set $" + BinEnv +
	" to it, or leave it in the script's cache; install etcd with apt-get install etcd-server etcd-client"

// CachePath returns where .ci/kube-apiserver.sh leaves the binary.
func CachePath() string {
	dir := os.Getenv("XDG_CACHE_HOME")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache")
	}
	return filepath.Join(dir, "randflake", "kube-apiserver-"+Version)
}

// Find returns the paths of kube-apiserver, etcd and etcdctl.
func Find() (apiserver, etcd, etcdctl string, err error) {
	apiserver = os.Getenv(BinEnv)
	if apiserver == "" {
		apiserver = CachePath()
	}
	if fi, err := os.Stat(apiserver); err != nil || fi.IsDir() {
		return "", "", "", fmt.Errorf("%w: no kube-apiserver at %s; %s", ErrNotFound, apiserver, hint)
	}
	if d := os.Getenv("RANDFLAKE_ETCD_BIN"); d != "" {
		etcd, etcdctl = filepath.Join(d, "etcd"), filepath.Join(d, "etcdctl")
	} else {
		etcd, _ = exec.LookPath("etcd")
		etcdctl, _ = exec.LookPath("etcdctl")
	}
	if etcd == "" || etcdctl == "" {
		return "", "", "", fmt.Errorf("%w: no etcd or etcdctl; %s", ErrNotFound, hint)
	}
	return apiserver, etcd, etcdctl, nil
}

// Users of a cluster, authenticated by the static tokens of Cluster.Token.
const (
	// Admin is in system:masters: it may do anything.
	Admin = "admin"
	// User has no right until a test grants one (Cluster.Grant).
	User = "randflake-user"
	// Denied never has any right.
	Denied = "denied-user"
)

// Cluster is a throwaway etcd and kube-apiserver. Its methods may be
// called from any goroutine.
type Cluster struct {
	apiserver, etcd, etcdctl string
	dir                      string
	etcdPort, peerPort       int
	apiPort                  int
	tokens                   map[string]string // user -> token
	caPEM                    []byte
	caCert                   *x509.Certificate
	caKey                    *ecdsa.PrivateKey
	hc                       *http.Client

	mu      sync.Mutex
	data    string // etcd's data directory
	gen     int
	etcdP   *leasetest.ServerProcess
	apiP    *leasetest.ServerProcess
	closed  bool
	started time.Duration // how long the API server took to be ready, last start
}

// New starts a cluster for t alone, closed when t and its subtests end.
// Without binaries it skips t, or fails it under CI.
func New(t testing.TB) *Cluster {
	t.Helper()
	return leasetest.ServerFor(t, "kubetest: starting etcd and kube-apiserver", Start, ErrNotFound)
}

// Start starts etcd and kube-apiserver in a new temporary directory and
// returns once the API server is ready. The caller must call Close.
func Start() (*Cluster, error) {
	apiserver, etcd, etcdctl, err := Find()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{apiserver: apiserver, etcd: etcd, etcdctl: etcdctl, dir: dir, tokens: map[string]string{}}
	if err := c.setup(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.data = c.newDataDir()
	if err := c.startEtcd(); err != nil {
		c.closeLocked()
		return nil, err
	}
	if err := c.startAPI(); err != nil {
		c.closeLocked()
		return nil, err
	}
	return c, nil
}

// setup picks the ports and writes the CA, the serving certificate, the
// service-account key pair and the token file.
func (c *Cluster) setup() error {
	var err error
	for _, p := range []*int{&c.etcdPort, &c.peerPort, &c.apiPort} {
		if *p, err = leasetest.FreePort(); err != nil {
			return err
		}
	}
	c.caKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubetest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &c.caKey.PublicKey, c.caKey)
	if err != nil {
		return err
	}
	if c.caCert, err = x509.ParseCertificate(der); err != nil {
		return err
	}
	c.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(c.path("ca.crt"), c.caPEM, 0o600); err != nil {
		return err
	}
	cert, key, err := c.issue("kube-apiserver", nil, true)
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.path("apiserver.crt"), cert, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(c.path("apiserver.key"), key, 0o600); err != nil {
		return err
	}
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	saDER, err := x509.MarshalECPrivateKey(sa)
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.path("sa.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER}), 0o600); err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.path("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600); err != nil {
		return err
	}
	var csv bytes.Buffer
	for i, u := range []string{Admin, User, Denied} {
		b := make([]byte, 16)
		rand.Read(b)
		c.tokens[u] = hex.EncodeToString(b)
		group := ""
		if u == Admin {
			group = "system:masters"
		}
		fmt.Fprintf(&csv, "%s,%s,%d,\"%s\"\n", c.tokens[u], u, 1000+i, group)
	}
	if err := os.WriteFile(c.path("tokens.csv"), csv.Bytes(), 0o600); err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.caCert)
	c.hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return nil
}

// issue makes a certificate of the cluster's CA: a serving certificate for
// 127.0.0.1 and localhost, or a client certificate for user in groups.
func (c *Cluster) issue(user string, groups []string, server bool) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: user, Organization: groups},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.caCert, &key.PublicKey, c.caKey)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// ClientCertificate returns a client certificate and key (PEM) of the
// cluster's CA for user in groups.
func (c *Cluster) ClientCertificate(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	return c.issue(user, groups, false)
}

func (c *Cluster) path(name string) string { return filepath.Join(c.dir, name) }

func (c *Cluster) newDataDir() string {
	c.gen++
	return c.path(fmt.Sprintf("etcd-%d", c.gen))
}

func (c *Cluster) etcdURL() string { return "http://127.0.0.1:" + strconv.Itoa(c.etcdPort) }
func (c *Cluster) peerURL() string { return "http://127.0.0.1:" + strconv.Itoa(c.peerPort) }

// Addr returns the API server's address, 127.0.0.1:PORT; it stays the same
// across restarts.
func (c *Cluster) Addr() string { return "127.0.0.1:" + strconv.Itoa(c.apiPort) }

// URL returns the API server's URL.
func (c *Cluster) URL() string { return "https://" + c.Addr() }

// CA returns the CA certificate (PEM) of the API server's certificate and
// of client certificates.
func (c *Cluster) CA() []byte { return c.caPEM }

// CAFile returns the path of the CA certificate.
func (c *Cluster) CAFile() string { return c.path("ca.crt") }

// Token returns the bearer token of user (Admin, User or Denied).
func (c *Cluster) Token(user string) string { return c.tokens[user] }

// Kubeconfig writes a kubeconfig file into dir for user, with a token,
// on addr ("": the API server's) and namespace, and returns its path.
func (c *Cluster) Kubeconfig(dir, user, addr, namespace string) (string, error) {
	if addr == "" {
		addr = c.Addr()
	}
	ca := filepath.Join(dir, "kube-ca.crt")
	if err := os.WriteFile(ca, c.caPEM, 0o600); err != nil {
		return "", err
	}
	p := filepath.Join(dir, "kubeconfig-"+user)
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: test
clusters:
- name: kubetest
  cluster:
    server: https://%s
    certificate-authority: kube-ca.crt
users:
- name: %s
  user:
    token: %s
contexts:
- name: test
  context:
    cluster: kubetest
    user: %s
    namespace: %s
`, addr, user, c.tokens[user], user, namespace)
	return p, os.WriteFile(p, []byte(kc), 0o600)
}

func (c *Cluster) startEtcd() error {
	cmd := exec.Command(c.etcd, "--name", "kubetest", "--data-dir", c.data,
		"--listen-client-urls", c.etcdURL(), "--advertise-client-urls", c.etcdURL(),
		"--listen-peer-urls", c.peerURL(), "--initial-advertise-peer-urls", c.peerURL(),
		"--initial-cluster", "kubetest="+c.peerURL(), "--initial-cluster-token", "kubetest", "--initial-cluster-state", "new",
		"--heartbeat-interval", "10", "--election-timeout", "100", "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p, err := leasetest.StartServer("kubetest: etcd", cmd, c.path("etcd.log"))
	if err != nil {
		return err
	}
	c.etcdP = p
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := (&http.Client{Timeout: time.Second, Transport: &http.Transport{}}).Get(c.etcdURL() + "/health")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if bytes.Contains(b, []byte(`"health":"true"`)) {
				return nil
			}
		}
		select {
		case <-p.Exited():
			c.etcdP = nil
			return fmt.Errorf("kubetest: etcd exited: %v\n%s", p.State(), leasetest.LogTail(c.path("etcd.log")))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubetest: etcd not healthy after 30s\n%s", leasetest.LogTail(c.path("etcd.log")))
		}
	}
}

func (c *Cluster) startAPI() error {
	start := time.Now()
	cmd := exec.Command(c.apiserver,
		"--etcd-servers", c.etcdURL(),
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", strconv.Itoa(c.apiPort),
		"--tls-cert-file", c.path("apiserver.crt"), "--tls-private-key-file", c.path("apiserver.key"),
		"--client-ca-file", c.path("ca.crt"),
		"--token-auth-file", c.path("tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", c.path("sa.pub"), "--service-account-signing-key-file", c.path("sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/24",
		"--cert-dir", c.path("certs"),
		"--enable-priority-and-fairness=false",
		"--endpoint-reconciler-type", "none",
		"--profiling=false",
		"--v", "1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p, err := leasetest.StartServer("kubetest: kube-apiserver", cmd, c.path("apiserver.log"))
	if err != nil {
		return err
	}
	c.apiP = p
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := c.ready()
		if err == nil {
			c.started = time.Since(start)
			return nil
		}
		select {
		case <-p.Exited():
			c.apiP = nil
			return fmt.Errorf("kubetest: kube-apiserver exited: %v\n%s", p.State(), leasetest.LogTail(c.path("apiserver.log")))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubetest: kube-apiserver not ready after 90s: %v\n%s", err, leasetest.LogTail(c.path("apiserver.log")))
		}
	}
}

// ready asks /readyz, as the administrator.
func (c *Cluster) ready() error {
	req, _ := http.NewRequest(http.MethodGet, c.URL()+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+c.tokens[Admin])
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return fmt.Errorf("/readyz: %s %s", resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// StartupTime returns how long the API server took to be ready at its last
// start.
func (c *Cluster) StartupTime() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started
}

// APIServerPID returns the API server's process ID, 0 when it is stopped.
func (c *Cluster) APIServerPID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiP == nil {
		return 0
	}
	return c.apiP.PID()
}

// StopAPIServer stops the API server (SIGTERM, then SIGKILL after 10 s);
// etcd keeps running.
func (c *Cluster) StopAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.apiP
	c.apiP = nil
	return p.Stop(syscall.SIGTERM, 10*time.Second)
}

// StartAPIServer starts a stopped API server again, on the same port and
// etcd, and returns once it is ready.
func (c *Cluster) StartAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiP != nil {
		return errors.New("kubetest: the API server runs")
	}
	return c.startAPI()
}

// RestartAPIServer stops the API server and starts it again.
func (c *Cluster) RestartAPIServer() error {
	if err := c.StopAPIServer(); err != nil {
		return err
	}
	return c.StartAPIServer()
}

// Snapshot saves etcd's keyspace to path (etcdctl snapshot save).
func (c *Cluster) Snapshot(ctx context.Context, path string) error {
	_, err := c.ctl(ctx, "--endpoints="+c.etcdURL(), "snapshot", "save", path)
	return err
}

// Restore puts etcd back to the snapshot at path under the API server, as
// an operator does after a disaster: it stops the API server and etcd,
// restores the snapshot into a new data directory under the same cluster
// token (the same cluster ID), starts etcd on it and the API server again.
// Resource versions go back to the snapshot's.
func (c *Cluster) Restore(ctx context.Context, path string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("kubetest: Restore of a closed cluster")
	}
	p := c.apiP
	c.apiP = nil
	if err := p.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
		return err
	}
	e := c.etcdP
	c.etcdP = nil
	if err := e.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
		return err
	}
	data := c.newDataDir()
	if _, err := c.ctl(ctx, "snapshot", "restore", path, "--data-dir", data, "--name", "kubetest",
		"--initial-cluster", "kubetest="+c.peerURL(), "--initial-advertise-peer-urls", c.peerURL(), "--initial-cluster-token", "kubetest"); err != nil {
		return err
	}
	c.data = data
	if err := c.startEtcd(); err != nil {
		return err
	}
	return c.startAPI()
}

func (c *Cluster) ctl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.etcdctl, args...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("etcdctl %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(errb.Bytes()))
	}
	return out.Bytes(), nil
}

// Close stops the API server and etcd and removes the temporary
// directory.
func (c *Cluster) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
}

func (c *Cluster) closeLocked() {
	if c.closed {
		return
	}
	c.closed = true
	c.apiP.Stop(syscall.SIGTERM, 10*time.Second)
	c.etcdP.Stop(syscall.SIGTERM, 10*time.Second)
	c.apiP, c.etcdP = nil, nil
	os.RemoveAll(c.dir)
}

// LogTail returns the last lines of the API server's log, for failure
// messages.
func (c *Cluster) LogTail() string { return leasetest.LogTail(c.path("apiserver.log")) }

// Do sends a request as the administrator: method on path, with in as
// its JSON body (if not nil), decoding a success into out (if not nil).
// An answer that is not a success is an error with its status and body.
func (c *Cluster) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL()+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.tokens[Admin])
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &StatusError{Code: resp.StatusCode, Body: string(bytes.TrimSpace(raw))}
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// StatusError is an answer of Do that is not a success.
type StatusError struct {
	Code int
	Body string
}

// Error gives the status and the body.
func (e *StatusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Code, e.Body) }

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool {
	var e *StatusError
	return errors.As(err, &e) && e.Code == http.StatusNotFound
}

// CreateNamespace creates namespace ns.
func (c *Cluster) CreateNamespace(ctx context.Context, ns string) error {
	return c.Do(ctx, http.MethodPost, "/api/v1/namespaces", map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}, nil)
}

// LeaseVerbs are the verbs on leases a fleet's processes need.
var LeaseVerbs = []string{"get", "list", "create", "update", "delete"}

// Grant gives user the verbs on leases.coordination.k8s.io in namespace
// ns, with a Role and a RoleBinding named randflake-USER, as
// deploy/kubernetes/deployment does for the service account. It returns
// once the API server's authorizer allows every verb: RBAC objects take
// effect a moment after they are written.
func (c *Cluster) Grant(ctx context.Context, ns, user string, verbs ...string) error {
	if err := c.writeGrant(ctx, ns, user, verbs); err != nil {
		return err
	}
	for _, verb := range verbs {
		for {
			var review struct {
				Status struct {
					Allowed bool `json:"allowed"`
				} `json:"status"`
			}
			if err := c.Do(ctx, http.MethodPost, "/apis/authorization.k8s.io/v1/subjectaccessreviews", map[string]any{
				"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
				"spec": map[string]any{"user": user, "resourceAttributes": map[string]any{
					"namespace": ns, "verb": verb, "group": "coordination.k8s.io", "resource": "leases"}},
			}, &review); err != nil {
				return err
			}
			if review.Status.Allowed {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("kubetest: %s may not %s leases in %s yet: %w", user, verb, ns, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// writeGrant writes Grant's Role and RoleBinding.
func (c *Cluster) writeGrant(ctx context.Context, ns, user string, verbs []string) error {
	name := "randflake-" + user
	if err := c.Do(ctx, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/namespaces/"+ns+"/roles", map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": map[string]any{"name": name},
		"rules": []any{map[string]any{"apiGroups": []string{"coordination.k8s.io"}, "resources": []string{"leases"}, "verbs": verbs}},
	}, nil); err != nil {
		return err
	}
	return c.Do(ctx, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/namespaces/"+ns+"/rolebindings", map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": map[string]any{"name": name},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
		"subjects": []any{map[string]any{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}},
	}, nil)
}

// LeasesPath returns the path of the leases of namespace ns.
func LeasesPath(ns string) string { return "/apis/coordination.k8s.io/v1/namespaces/" + ns + "/leases" }

// DeleteLeases deletes every Lease object of namespace ns with the label
// selector sel ("": all), as kubectl delete leases -l would.
func (c *Cluster) DeleteLeases(ctx context.Context, ns, sel string) error {
	p := LeasesPath(ns)
	if sel != "" {
		p += "?labelSelector=" + sel
	}
	return c.Do(ctx, http.MethodDelete, p, nil, nil)
}
