package kubelease

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/kubelease/kubetest"
	"github.com/randflake/randflake/leasetest"
)

// The tests run against a real kube-apiserver on a real etcd, which
// kubetest starts: one cluster shared by the tests (each in a namespace of
// its own), and clusters of their own for the tests that restore etcd.

// testTTL is the claims' TTL in the tests, and testSkew their clock
// bound: the shortest TTL the bound allows, so that a takeover costs 6 s
// and a lease runs about 3 s past each renewal.
const (
	testTTL  = 6 * time.Second
	testSkew = 100 * time.Millisecond
)

var testSecret = []byte("fleet-secret-16b")

func TestMain(m *testing.M) {
	leasetest.HolderMain(openHolderStore)
	kubetest.Main(m)
}

// killable is a transport that fails every request once killed, as a
// dead process's would.
type killable struct {
	rt     http.RoundTripper
	killed atomic.Bool
}

var errKilled = errors.New("kubelease test: the process was killed")

func (k *killable) RoundTrip(r *http.Request) (*http.Response, error) {
	if k.killed.Load() {
		return nil, errKilled
	}
	return k.rt.RoundTrip(r)
}

// testClient returns a client of cluster c as user on addr ("": the
// server's), and its transport's kill switch.
func testClient(t testing.TB, c *kubetest.Cluster, user, addr string) (*Client, *killable) {
	t.Helper()
	k := &killable{}
	if addr == "" {
		addr = c.Addr()
	}
	cfg := ClientConfig{Server: "https://" + addr, CAData: c.CA(), Token: c.Token(user)}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { k.rt = rt; return k }
	cli, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cli, k
}

// testConfig is the tests' configuration: blocks of 16 node IDs in
// 0..last, the test TTL, clock bound and secret.
func testConfig(cli *Client, ns string, last int64, holder string) Config {
	return Config{Client: cli, Namespace: ns, Secret: testSecret, Nodes: 16, LastNode: last, TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew, Holder: holder}
}

// newLeased returns a generator on cfg, closed when t ends.
func newLeased(t testing.TB, cfg Config) *randflake.Leased {
	t.Helper()
	return leasetest.NewLeased(t, func(ctx context.Context) (*randflake.Leased, error) { return NewLeased(ctx, testSecret, cfg) })
}

// testCtx returns a context for what, a step of t on the API server,
// bounded by d on idle cores stretched by the measured slowdown, cancelled
// when t ends; once it expires, a request made with it fails naming what
// and the bound (see kubetest.ContextFor). Every wait of these tests on
// the API server takes its bound from here or from leasetest's waits,
// which stretch theirs the same way.
func testCtx(t testing.TB, what string, d time.Duration) context.Context {
	return kubetest.ContextFor(t, what, d)
}
