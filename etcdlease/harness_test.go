package etcdlease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/etcdlease/etcdtest"
	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/leasetest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// sinceStart measures the process's slowdown from its start (the package's
// first use); its Stretch is the one place the tests stretch their
// bounds from.
var sinceStart = slowdown.Start()

// testTTL is the etcd lease TTL of the tests; their promise is the same,
// so that unknown history costs about 5 s: the promise, the clock skew
// bound and the second it starts after.
const testTTL = 3 * time.Second

var testSecret = []byte("fleet-secret-16b")

// slowRequest reports whether err is a request of a store that failed
// only because it was slow: past its deadline, or timed out in etcd
// itself. Leased retries such a failed acquisition; a test claiming in a
// loop may too.
func slowRequest(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded ||
		errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrGRPCTimeout)
}

// newClient returns a silenced etcd client of endpoint that reconnects
// quickly after the server comes back, closed when t ends.
func newClient(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.5, MaxDelay: 300 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// testConfig is the configuration of the tests: blocks of 16 node IDs in
// 0..last, the test TTL and promise, the test secret.
func testConfig(cli *clientv3.Client, prefix string, last int64, holder string) Config {
	return Config{Client: cli, Prefix: prefix, Secret: testSecret, Nodes: 16, LastNode: last,
		TTL: testTTL, Promise: testTTL, Horizon: testTTL, Holder: holder}
}

// newLeased returns a generator on cfg, closed when t ends; its start-up
// (which may wait out unknown history) is bounded by leasetest.StartTimeout.
func newLeased(t testing.TB, cfg Config) *randflake.Leased {
	t.Helper()
	return leasetest.NewLeased(t, func(ctx context.Context) (*randflake.Leased, error) { return NewLeased(ctx, testSecret, cfg) })
}

// startEtcd starts an etcd server of the test's own, with a client.
func startEtcd(t *testing.T) (*etcdtest.Server, *clientv3.Client) {
	t.Helper()
	srv := etcdtest.New(t)
	return srv, newClient(t, srv.Endpoint())
}

// keyCount returns how many keys start with prefix.
func keyCount(t testing.TB, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// takeoverOf returns the seconds every claim on cfg waits after it, when
// no record asks for longer (rule 14 of docs/leases.md).
func takeoverOf(t *testing.T, cfg Config) int64 { return leasetest.TakeoverSeconds(t, NewStore, cfg) }
