package kubelease

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/kubelease/kubetest"
	"github.com/randflake/randflake/lease"
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
func openHolderStore(arg string) (lease.BlockStore, error) {
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
		Layout: lease.BlockLayout{FirstNode: 0, LastNode: last, Size: 16}})
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
	block := BlockName(DefaultName, l1.FirstNode)
	takeover := &claimWrites{path: "/leases/" + block, holder: `"holderIdentity":"successor claim `}
	cli.hc.Transport = takeover.wrap(cli.hc.Transport)
	cfg := testConfig(cli, ns, 15, "successor")
	ctx := testCtx(t, "claiming the killed holder's node IDs", 60*time.Second)
	if _, err := NewLeased(ctx, testSecret, cfg); !errors.Is(err, ErrNoFreeNodes) {
		t.Fatalf("claim while the holder lives: %v, want ErrNoFreeNodes", err)
	}
	killedAt := h.KillMidSecond()
	// The killed holder's claim as it left it: it lapses at renewTime
	// plus leaseDurationSeconds. (A renewal in flight at the kill and
	// applied after this read would only make it lapse later.)
	var left leaseObject
	if err := c.Do(testCtx(t, "reading the killed holder's Lease", 20*time.Second), http.MethodGet, kubetest.LeasesPath(ns)+"/"+block, nil, &left); err != nil {
		t.Fatal(err)
	}
	lapse, ok := left.expiry()
	if !ok || left.holder() == "" {
		t.Fatalf("the killed holder's Lease %s names no claim that lapses: %+v", block, left.Spec)
	}
	g, refused := leasetest.ClaimAfterKill(t, killedAt, 4*testTTL, 100*time.Millisecond, func() (*randflake.Leased, error) {
		return NewLeased(ctx, testSecret, cfg)
	})
	startedAt := time.Since(killedAt)
	defer g.Close(ctx)
	// Taken over only once the claim had lapsed: the successor sent its
	// claim of the block after the killed holder's renewTime plus the TTL
	// (one clock: every process runs on this machine).
	if sent := takeover.first(); sent.IsZero() {
		t.Errorf("the successor got %v without a write claiming %s", g.Lease(), block)
	} else if !sent.After(lapse) {
		t.Errorf("the successor claimed %s at %s, %v before the killed holder's claim lapsed at %s (its last renewal plus the TTL)",
			block, sent.Format(time.RFC3339Nano), lapse.Sub(sent), lapse.Format(time.RFC3339Nano))
	}
	check := leasetest.CheckSuccessor(t, testSecret, h, l1, g, 1000, 15*time.Second)
	t.Logf("killed holder: its claim lapsing %v after SIGKILL, node IDs refused until %v after it, the successor claiming %v and issuing %v after it; %v",
		lapse.Sub(killedAt).Round(time.Millisecond), refused.Round(time.Millisecond), takeover.first().Sub(killedAt).Round(time.Millisecond),
		startedAt.Round(time.Millisecond), check)
}

// claimWrites is a transport that notes when the first successful write
// to the object at path (a suffix of the URL's path) whose body holds
// holder was sent.
type claimWrites struct {
	rt     http.RoundTripper
	path   string
	holder string

	mu   sync.Mutex
	sent time.Time
}

func (w *claimWrites) wrap(rt http.RoundTripper) http.RoundTripper {
	w.rt = rt
	return w
}

func (w *claimWrites) RoundTrip(r *http.Request) (*http.Response, error) {
	claim := false
	if (r.Method == http.MethodPut || r.Method == http.MethodPost) && r.GetBody != nil &&
		(strings.HasSuffix(r.URL.Path, w.path) || strings.HasSuffix(r.URL.Path, "/leases")) {
		if b, err := r.GetBody(); err == nil {
			raw, _ := io.ReadAll(b)
			claim = strings.Contains(string(raw), w.holder) && strings.Contains(string(raw), `"name":"`+strings.TrimPrefix(w.path, "/leases/")+`"`)
		}
	}
	at := time.Now()
	resp, err := w.rt.RoundTrip(r)
	if claim && err == nil && resp.StatusCode/100 == 2 {
		w.mu.Lock()
		if w.sent.IsZero() {
			w.sent = at
		}
		w.mu.Unlock()
	}
	return resp, err
}

// first returns when the first such write was sent, zero if none was.
func (w *claimWrites) first() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sent
}
