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
// The servers take their ports from testserver.FreePort, and a server that
// finds a port taken all the same is started again on new ones. The API
// server's address ([Cluster.Addr]) is a listener the test process holds
// for the cluster's life, which forwards each connection to the API
// server's port of the moment: it stays the same across restarts, and no
// other program can take it meanwhile.
//
// Every wait of the package is bounded by a time that holds on idle cores,
// stretched by how much slower the test process runs ([Timeout]); the
// tests on a cluster bound theirs the same way ([Context]).
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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/internal/testserver"
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
	etcd, etcdctl, err = testserver.FindEtcd()
	if err != nil {
		return "", "", "", fmt.Errorf("%w: %v; %s", ErrNotFound, err, hint)
	}
	return apiserver, etcd, etcdctl, nil
}

// The bounds of kubetest's waits on idle cores, each stretched by Timeout
// when used.
const (
	// CallTimeout bounds one request to the API server, or a few in a
	// row (a namespace created and its Role granted), as Context does.
	CallTimeout = 30 * time.Second
	// etcdReady and apiReady bound a start: until etcd is healthy, and
	// until the API server's /readyz answers ok (it writes its default
	// objects first).
	etcdReady = 30 * time.Second
	apiReady  = 90 * time.Second
	// stopGrace is how long a stopped server has to exit after SIGTERM
	// before it is killed.
	stopGrace = 10 * time.Second
)

// Timeout returns d, a bound that holds on idle cores, stretched by how
// much slower than on idle cores the test process has run so far
// (internal/slowdown measures it: the time its threads waited for a CPU
// against the time they ran). Every wait of kubetest takes its bound from
// it, and so should the tests' waits on a cluster.
func Timeout(d time.Duration) time.Duration { return slowdown.Stretch(d) }

// deadlineError is the cause of a context of Context whose deadline
// passed: what was not done, within which bound.
type deadlineError struct {
	what string
	base time.Duration // the bound on idle cores
	d    time.Duration // as stretched
}

func (e *deadlineError) Error() string {
	return fmt.Sprintf("kubetest: %s: not done within %v (%v on idle cores, stretched: %s)",
		e.what, e.d.Round(time.Millisecond), e.base, slowness())
}

// slowness describes the process's slowdown, for failure messages.
func slowness() string {
	return fmt.Sprintf("this process has run %.1f× slower than on idle cores", slowdown.Factor())
}

func (e *deadlineError) Unwrap() error { return context.DeadlineExceeded }

// Context returns a context for a step of t on a cluster, bounded by
// CallTimeout stretched by Timeout, and cancelled when t ends. Once its
// deadline passes, its cause (context.Cause, and the error of a request
// made with it) names what, the bound and the slowdown, and wraps
// context.DeadlineExceeded.
func Context(t testing.TB, what string) context.Context {
	return ContextFor(t, what, CallTimeout)
}

// ContextFor is Context with the bound d on idle cores.
func ContextFor(t testing.TB, what string, d time.Duration) context.Context {
	ctx, cancel := boundCtx(context.Background(), what, d)
	t.Cleanup(cancel)
	return ctx
}

// boundCtx returns ctx bounded by d stretched, with a cause naming what.
func boundCtx(ctx context.Context, what string, d time.Duration) (context.Context, context.CancelFunc) {
	sd := Timeout(d)
	return context.WithTimeoutCause(ctx, sd, &deadlineError{what: what, base: d, d: sd})
}

// SkipShort skips t under -short: a cluster runs etcd and kube-apiserver,
// external programs that take seconds to start.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs etcd and kube-apiserver (kubetest starts them): not in -short")
	}
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
	etcdDir                  string            // holds etcd's data directories
	etcdName                 string            // etcd's member name and cluster token, the cluster's own
	tokens                   map[string]string // user -> token
	caPEM                    []byte
	caCert                   *x509.Certificate
	caKey                    *ecdsa.PrivateKey
	hc                       *http.Client
	front                    *front // the API server's address

	mu                 sync.Mutex
	data               string // etcd's data directory
	gen                int
	etcdPort, peerPort int // etcd's ports of the moment
	apiPort            int // the API server's port of the moment, behind front
	etcdP              *testserver.ServerProcess
	apiP               *testserver.ServerProcess
	closed             bool
	started            time.Duration // how long the API server took to be ready, last start
}

// New starts a cluster for t alone, closed when t and its subtests end.
// Without binaries it skips t, or fails it under CI; under -short it skips
// t (see SkipShort).
func New(t testing.TB) *Cluster {
	t.Helper()
	SkipShort(t)
	return testserver.ServerFor(t, "kubetest: starting etcd and kube-apiserver", Start, ErrNotFound)
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
		if c.front != nil {
			c.front.close()
		}
		os.RemoveAll(dir)
		return nil, err
	}
	c.etcdDir = etcdBase(dir)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.startEtcd(context.Background(), ""); err != nil {
		c.closeLocked()
		return nil, err
	}
	if err := c.startAPI(); err != nil {
		c.closeLocked()
		return nil, err
	}
	return c, nil
}

// setup opens the API server's address and writes the CA, the serving
// certificate, the service-account key pair and the token file.
func (c *Cluster) setup() error {
	var err error
	if c.front, err = newFront(); err != nil {
		return fmt.Errorf("kubetest: the API server's address: %w", err)
	}
	name := make([]byte, 6)
	rand.Read(name)
	c.etcdName = "kubetest-" + hex.EncodeToString(name)
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
	// No timeout of its own: every request is bounded by its context.
	c.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
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
	return filepath.Join(c.etcdDir, fmt.Sprintf("etcd-%d", c.gen))
}

// shmDir is where etcd keeps its data when it is a tmpfs with room.
const shmDir = "/dev/shm"

// etcdBase returns a new directory for etcd's data directories: in
// memory (a tmpfs, with 1 GiB free at least) where the machine has one,
// so that etcd's sync of every write to disk waits for no disk the
// machine's other work keeps busy (a test server's data need not survive
// a crash); else dir itself.
func etcdBase(dir string) string {
	var st syscall.Statfs_t
	const tmpfsMagic = 0x01021994
	if err := syscall.Statfs(shmDir, &st); err != nil || st.Type != tmpfsMagic || uint64(st.Bavail)*uint64(st.Bsize) < 1<<30 {
		return dir
	}
	d, err := os.MkdirTemp(shmDir, "kubetest-etcd-")
	if err != nil {
		return dir
	}
	return d
}

// etcdURL and peerURL are etcd's URLs of the moment; c.mu is held.
func (c *Cluster) etcdURL() string { return "http://127.0.0.1:" + strconv.Itoa(c.etcdPort) }
func (c *Cluster) peerURL() string { return "http://127.0.0.1:" + strconv.Itoa(c.peerPort) }

// Addr returns the API server's address, 127.0.0.1:PORT; it stays the same
// across restarts, even when the API server itself starts again on
// another port.
func (c *Cluster) Addr() string { return c.front.addr() }

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

// startEtcd starts etcd on a new data directory, or on one restored from
// the snapshot file if not "": on its ports of the moment if it had some,
// else, or if one of them is taken, on new ones. c.mu is held.
func (c *Cluster) startEtcd(ctx context.Context, snapshot string) error {
	try := func(ports []int) error {
		c.etcdPort, c.peerPort = ports[0], ports[1]
		c.data = c.newDataDir()
		if snapshot != "" {
			// The same member name and cluster token: a restore of this
			// cluster, not a new one.
			if _, err := c.ctl(ctx, c.member().RestoreArgs(snapshot)...); err != nil {
				return err
			}
		}
		return c.runEtcd()
	}
	if c.etcdPort != 0 {
		if err := try([]int{c.etcdPort, c.peerPort}); !errors.Is(err, testserver.ErrPortTaken) {
			return err
		}
	}
	return testserver.StartOnFreePorts("kubetest: etcd", 2, try)
}

// runEtcd starts etcd on c.data and its ports of the moment and waits
// until it is healthy. An error wraps testserver.ErrPortTaken if etcd could
// not bind a port. c.mu is held.
func (c *Cluster) runEtcd() error {
	cmd := exec.Command(c.etcd, c.member().Args()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p, err := testserver.StartServer("kubetest: etcd", cmd, c.path("etcd.log"))
	if err != nil {
		return err
	}
	err = testserver.WaitReady(p, "kubetest: etcd", "healthy", etcdReady, 20*time.Millisecond, c.etcdHealthy)
	if err != nil {
		return err
	}
	c.etcdP = p
	return nil
}

// member describes etcd's member: on c.data and its ports of the moment,
// named after the cluster, which also names its cluster token. c.mu is
// held.
func (c *Cluster) member() testserver.EtcdMember {
	return testserver.EtcdMember{Name: c.etcdName, DataDir: c.data, ClientURL: c.etcdURL(), PeerURL: c.peerURL(), Token: c.etcdName}
}

// etcdHealthy asks etcd whether it is healthy, and whether it is this
// cluster's: another server that took the port would answer too (that is
// testserver.ErrPortTaken).
func (c *Cluster) etcdHealthy(ctx context.Context) error {
	members, err := testserver.EtcdHealthy(ctx, c.etcdURL())
	if err != nil {
		return err
	}
	if len(members) != 1 || members[0].Name != c.etcdName {
		return fmt.Errorf("%w: %s answers for members %+v, not this cluster's %s: another etcd", testserver.ErrPortTaken, c.etcdURL(), members, c.etcdName)
	}
	return nil
}

// startAPI starts the API server on etcd, on its port of the moment if it
// had one, else, or if it is taken, on a new one, and points the
// cluster's address at it once it is ready. c.mu is held.
func (c *Cluster) startAPI() error {
	if c.apiPort != 0 {
		if err := c.runAPI(c.apiPort); !errors.Is(err, testserver.ErrPortTaken) {
			return err
		}
	}
	return testserver.StartOnFreePorts("kubetest: kube-apiserver", 1, func(ports []int) error { return c.runAPI(ports[0]) })
}

// runAPI starts the API server on port and waits until it is ready. An
// error wraps testserver.ErrPortTaken if it could not bind the port. c.mu
// is held.
func (c *Cluster) runAPI(port int) error {
	start := time.Now()
	cmd := exec.Command(c.apiserver,
		"--etcd-servers", c.etcdURL(),
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", strconv.Itoa(port),
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
	p, err := testserver.StartServer("kubetest: kube-apiserver", cmd, c.path("apiserver.log"))
	if err != nil {
		return err
	}
	// Probed on its own port: only this API server, with this CA's
	// certificate, accepts the administrator's token.
	url := "https://127.0.0.1:" + strconv.Itoa(port)
	if err := testserver.WaitReady(p, "kubetest: kube-apiserver", "ready", apiReady, 100*time.Millisecond, func(ctx context.Context) error { return c.ready(ctx, url) }); err != nil {
		return err
	}
	c.apiP, c.apiPort = p, port
	c.started = time.Since(start)
	c.front.point("127.0.0.1:" + strconv.Itoa(port))
	return nil
}

// ready asks the API server at url for /readyz, as the administrator.
func (c *Cluster) ready(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	if err != nil {
		return err
	}
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
	return testserver.Locked(&c.mu, func() time.Duration { return c.started })
}

// APIServerPID returns the API server's process ID, 0 when it is stopped.
func (c *Cluster) APIServerPID() int {
	return testserver.Locked(&c.mu, func() int { return c.apiP.PID() })
}

// StopAPIServer stops the API server (SIGTERM, then SIGKILL if it has not
// exited after 10 s, stretched by Timeout); etcd keeps running. The
// connections to its address are closed, and new ones closed at once,
// until it is started again.
func (c *Cluster) StopAPIServer() error { return testserver.Locked(&c.mu, c.stopAPILocked) }

func (c *Cluster) stopAPILocked() error {
	c.front.point("")
	p := c.apiP
	c.apiP = nil
	return p.Stop(syscall.SIGTERM, Timeout(stopGrace))
}

// StartAPIServer starts a stopped API server again, on the same etcd, and
// returns once it is ready; its address stays the same.
func (c *Cluster) StartAPIServer() error {
	return testserver.Locked(&c.mu, func() error {
		if err := testserver.StartRefused(c.closed, c.apiP != nil, "kubetest: StartAPIServer of a closed cluster", "kubetest: the API server runs"); err != nil {
			return err
		}
		return c.startAPI()
	})
}

// RestartAPIServer stops the API server and starts it again. An API
// server that had to be killed is started again all the same: it has
// exited either way.
func (c *Cluster) RestartAPIServer() error {
	c.StopAPIServer()
	return c.StartAPIServer()
}

// Snapshot saves etcd's keyspace to path (etcdctl snapshot save).
func (c *Cluster) Snapshot(ctx context.Context, path string) error {
	c.mu.Lock()
	url := c.etcdURL()
	c.mu.Unlock()
	_, err := c.ctl(ctx, "--endpoints="+url, "snapshot", "save", path)
	return err
}

// Restore puts etcd back to the snapshot at path under the API server, as
// an operator does after a disaster: it stops the API server and etcd,
// restores the snapshot into a new data directory under the same member
// name and cluster token, starts etcd on it and the API server again.
// Resource versions go back to the snapshot's.
func (c *Cluster) Restore(ctx context.Context, path string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("kubetest: Restore of a closed cluster")
	}
	// A server that had to be killed has exited all the same.
	c.stopAPILocked()
	c.etcdP.Stop(syscall.SIGTERM, Timeout(stopGrace))
	c.etcdP = nil
	if err := c.startEtcd(ctx, path); err != nil {
		return err
	}
	return c.startAPI()
}

func (c *Cluster) ctl(ctx context.Context, args ...string) ([]byte, error) {
	return testserver.Etcdctl(ctx, c.etcdctl, args...)
}

// Close stops the API server and etcd, closes the API server's address
// and removes the temporary directory.
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
	c.front.close()
	c.apiP.Stop(syscall.SIGTERM, Timeout(stopGrace))
	c.etcdP.Stop(syscall.SIGTERM, Timeout(stopGrace))
	c.apiP, c.etcdP = nil, nil
	os.RemoveAll(c.etcdDir)
	os.RemoveAll(c.dir)
}

// LogTail returns the last lines of the API server's log, for failure
// messages.
func (c *Cluster) LogTail() string { return testserver.LogTail(c.path("apiserver.log")) }

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
				return fmt.Errorf("kubetest: %s may not %s leases in %s yet: %w", user, verb, ns, context.Cause(ctx))
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
