package etcdlease

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/leasetest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestMain runs the test binary as a holder process when leasetest's
// process harness started it. Either way the bound on each request of a
// store is stretched by how much slower than on idle cores the process
// runs (the one place the tests' stores get their timeouts from).
func TestMain(m *testing.M) {
	stretchOp = sinceStart.Stretch
	leasetest.HolderMain(openHolderStore)
	os.Exit(m.Run())
}

// holderArg is what a holder process is told (as leasetest.HolderConfig's
// Arg, in JSON): the store it opens.
type holderArg struct {
	Endpoint string // etcd's client address
	Prefix   string
	Last     int64  // the fleet's last node ID: blocks of 16 from 0
	Name     string // its name in its claims
}

// holderLayout is the layout of a holder's fleet.
func holderLayout(last int64) lease.BlockLayout {
	return lease.BlockLayout{FirstNode: 0, LastNode: last, Size: 16}
}

// openHolderStore opens, in a holder process, the store its arg names,
// with the test configuration.
func openHolderStore(arg string) (lease.BlockStore, error) {
	var a holderArg
	if err := json.Unmarshal([]byte(arg), &a); err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{a.Endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	return NewStore(testConfig(cli, a.Prefix, a.Last, a.Name))
}

// startHolder starts a holder process on the etcd at endpoint, claiming
// under prefix in 0..last with the test secret; it is killed when t ends.
func startHolder(t *testing.T, endpoint, prefix string, last int64, name string) *leasetest.Holder {
	t.Helper()
	arg, _ := json.Marshal(holderArg{Endpoint: endpoint, Prefix: prefix, Last: last, Name: name})
	return leasetest.StartHolder(t, leasetest.HolderConfig{Name: name, Arg: string(arg), Secret: testSecret, Layout: holderLayout(last)})
}

// A holder killed with SIGKILL keeps its node IDs until its etcd lease's
// TTL passes; then another claimant takes them over and issues IDs that
// start after the killed holder's last second.
func TestKilledHolder(t *testing.T) {
	t.Parallel()
	srv, cli := startEtcd(t)
	h := startHolder(t, srv.Endpoint(), "/killed/", 15, "doomed")
	l1 := h.Lease(40 * time.Second)
	h.WaitIDs(32*20, 10*time.Second)
	// Let it renew at least once, so its promise is ahead of its start.
	time.Sleep(time.Second)

	cfg := testConfig(cli, "/killed/", 15, "successor")
	ctx := context.Background()
	if _, err := NewLeased(ctx, testSecret, cfg); !errors.Is(err, ErrNoFreeNodes) {
		t.Fatalf("claim while the holder lives: %v, want ErrNoFreeNodes", err)
	}
	killedAt := h.KillMidSecond()
	g, refused := leasetest.ClaimAfterKill(t, killedAt, 3*testTTL, 50*time.Millisecond, func() (*randflake.Leased, error) {
		return NewLeased(ctx, testSecret, cfg)
	})
	startedAt := time.Since(killedAt)
	defer g.Close(ctx)
	// The last keep-alive was at most a renewal interval (under a second
	// with a 3s TTL) before the kill.
	if refused < testTTL-time.Second {
		t.Errorf("node IDs taken over %v after SIGKILL, before the TTL could pass", refused)
	}
	check := leasetest.CheckSuccessor(t, testSecret, h, l1, g, 1000, 10*time.Second)
	t.Logf("killed holder: node IDs refused until %v after SIGKILL, the successor issuing %v after it; %v",
		refused.Round(time.Millisecond), startedAt.Round(time.Millisecond), check)
}
