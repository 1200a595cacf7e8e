package kubelease

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/kubelease/kubetest"
	"github.com/randflake/randflake/leasetest"
)

// holderArg is what a holder process is told (as leasetest.HolderConfig's
// Arg, in JSON): the store it opens.
type holderArg struct {
	Server, Token string
	CA            []byte
	Namespace     string
	Last          int64  // the fleet's last node ID: blocks of 16 from 0
	Name          string // its name in its claims
}

// openHolderStore opens, in a holder process, the store its arg names,
// with the test configuration.
func openHolderStore(arg string) (randflake.BlockStore, error) {
	var a holderArg
	if err := json.Unmarshal([]byte(arg), &a); err != nil {
		return nil, err
	}
	cli, err := NewClient(ClientConfig{Server: a.Server, CAData: a.CA, Token: a.Token})
	if err != nil {
		return nil, err
	}
	return NewStore(testConfig(cli, a.Namespace, a.Last, a.Name))
}

// startHolder starts a holder process on cluster c's namespace ns,
// claiming in 0..last with the test secret; it is killed when t ends.
func startHolder(t *testing.T, c *kubetest.Cluster, ns string, last int64, name string) *leasetest.Holder {
	t.Helper()
	arg, _ := json.Marshal(holderArg{Server: c.URL(), Token: c.Token(kubetest.User), CA: c.CA(), Namespace: ns, Last: last, Name: name})
	return leasetest.StartHolder(t, leasetest.HolderConfig{Name: name, Arg: string(arg), Secret: testSecret,
		Layout: randflake.BlockLayout{FirstNode: 0, LastNode: last, Size: 16}})
}

// A holder killed with SIGKILL half-way through a second keeps its node
// IDs until its claim's TTL passes; then another claimant takes them over
// and issues IDs that start after the killed holder's last second.
func TestKilledHolder(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	ns := c.Namespace(t, "killed")
	h := startHolder(t, c, ns, 15, "doomed")
	l1 := h.Lease(60 * time.Second)
	h.WaitIDs(32*20, 10*time.Second)
	time.Sleep(time.Second)

	cli, _ := testClient(t, c, kubetest.User, "")
	cfg := testConfig(cli, ns, 15, "successor")
	ctx := context.Background()
	if _, err := NewLeased(ctx, testSecret, cfg); !errors.Is(err, ErrNoFreeNodes) {
		t.Fatalf("claim while the holder lives: %v, want ErrNoFreeNodes", err)
	}
	killedAt := h.KillMidSecond()
	g, refused := leasetest.ClaimAfterKill(t, killedAt, 4*testTTL, 100*time.Millisecond, func() (*randflake.Leased, error) {
		return NewLeased(ctx, testSecret, cfg)
	})
	startedAt := time.Since(killedAt)
	defer g.Close(ctx)
	// The last renewal was at most a renewal interval before the kill.
	if refused < testTTL-2*time.Second {
		t.Errorf("node IDs taken over %v after SIGKILL, before the TTL could pass", refused)
	}
	col := leasetest.Collect("the successor", g)
	col.WaitCount(t, 1000, 15*time.Second)
	check := leasetest.NewChecker(t, testSecret)
	dead := check.Add("the killed holder", h.IDs(), h.Leases()...)
	next := check.AddCollector(col)
	if l2 := g.Lease(); l2.FirstNode != l1.FirstNode || l2.Start <= dead.Last || next.First <= dead.Last {
		t.Errorf("the successor's lease %v (first ID at second %d) does not start after the killed holder's last second %d on its node IDs", l2, next.First, dead.Last)
	}
	t.Logf("killed holder: node IDs refused until %v after SIGKILL, the successor issuing %v after it; %v",
		refused.Round(time.Millisecond), startedAt.Round(time.Millisecond), check)
}
