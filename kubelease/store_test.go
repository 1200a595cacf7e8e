package kubelease

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake/kubelease/kubetest"
	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/leasetest"
)

// A user without the Role is refused with an error that names the verb,
// the resource and the namespace; one allowed get and list only is
// refused at its first create.
func TestForbidden(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	ns := c.Namespace(t, "forbidden")
	cli, _ := testClient(t, c, kubetest.Denied, "")
	_, err := NewLeased(testCtx(t, "a claim without the Role", 30*time.Second), testSecret, testConfig(cli, ns, 127, "denied"))
	if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), `refused to list leases.coordination.k8s.io in namespace "`+ns+`"`) {
		t.Fatalf("claim without the Role: %v", err)
	}
	ns2 := c.Namespace(t, "readonly")
	if err := c.Grant(testCtx(t, "granting get and list", 20*time.Second), ns2, kubetest.Denied, "get", "list"); err != nil {
		t.Fatal(err)
	}
	_, err = NewLeased(testCtx(t, "a claim with get and list only", 30*time.Second), testSecret, testConfig(cli, ns2, 127, "denied"))
	if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), `refused to create leases.coordination.k8s.io in namespace "`+ns2+`"`) {
		t.Fatalf("claim with get and list only: %v", err)
	}
	if strings.Contains(err.Error(), c.Token(kubetest.Denied)) {
		t.Errorf("the error shows the token: %v", err)
	}
}

// A machine whose clock is off the API server's by more than
// MaxClockSkew is refused at its claim, before it touches a block, and a
// running holder whose clock steps away fails its renewal.
func TestClockSkewRefused(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	ns := c.Namespace(t, "skew")
	cli, _ := testClient(t, c, kubetest.User, "")
	for _, off := range []time.Duration{3 * time.Second, -3 * time.Second} {
		st, err := NewStore(testConfig(cli, ns, 127, "skewed"))
		if err != nil {
			t.Fatal(err)
		}
		st.now = func() time.Time { return time.Now().Add(off) }
		bs, err := lease.NewBlockSource(st, lease.BlockSourceConfig{Secret: testSecret, Layout: st.Layout(),
			Now: func() time.Time { return time.Now().Add(off) }})
		if err != nil {
			t.Fatal(err)
		}
		_, err = bs.Acquire(testCtx(t, fmt.Sprintf("a claim with the clock %v off", off), 30*time.Second))
		if !errors.Is(err, ErrClockSkew) {
			t.Errorf("a clock %v off: %v, want ErrClockSkew", off, err)
		}
	}
	// A holder with a true clock, whose clock then steps 3 s ahead.
	st, err := NewStore(testConfig(cli, ns, 127, "stepping"))
	if err != nil {
		t.Fatal(err)
	}
	var offset time.Duration
	st.now = func() time.Time { return time.Now().Add(offset) }
	bs, err := lease.NewBlockSource(st, lease.BlockSourceConfig{Secret: testSecret, Layout: st.Layout()})
	if err != nil {
		t.Fatal(err)
	}
	l, err := bs.Acquire(testCtx(t, "a claim with a true clock", 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	offset = 3 * time.Second
	if _, err := bs.Renew(testCtx(t, "a renewal with the clock 3 s ahead", 30*time.Second), l); !errors.Is(err, ErrClockSkew) {
		t.Errorf("renewal with the clock 3 s ahead: %v, want ErrClockSkew", err)
	}
}

// A step committed on the fleet object but not written to the blocks'
// objects (its process died between the two) is written out by the next
// step of anyone, before it reads: the records and the marker agree, and
// no history is lost.
func TestPendingStepWrittenOut(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	ns := c.Namespace(t, "pending")
	cli, _ := testClient(t, c, kubetest.User, "")
	cfg := testConfig(cli, ns, 63, "first")
	g := newLeased(t, cfg)
	col := leasetest.Collect("first", g)
	col.WaitCount(t, 500, 30*time.Second)
	// Hold the next step's writes back: a transport that fails every
	// request to a block's object after the commit, as a process dying
	// there would leave it.
	st, err := NewStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dying := &failAfterCommit{}
	dcli, _ := testClient(t, c, kubetest.User, "")
	dcli.hc.Transport = dying.wrap(dcli.hc.Transport)
	st.c = dcli
	bs, err := lease.NewBlockSource(st, lease.BlockSourceConfig{Secret: testSecret, Layout: st.Layout()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bs.Acquire(testCtx(t, "a claim whose writes after the commit fail", 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if !dying.tripped.Load() {
		t.Fatal("no step was committed with its writes held back")
	}
	// Another process claims: it writes the pending step out first, and
	// finds the history intact: it logs no unknown history, and its lease
	// starts a takeover's wait after its claim (rule 14), where history
	// found lost would be waited out for the horizon and the clock
	// allowances.
	cfg2 := testConfig(cli, ns, 63, "second")
	var logs leasetest.LogBuffer
	cfg2.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	began := time.Now()
	g2 := newLeased(t, cfg2)
	if strings.Contains(logs.String(), "history of the node IDs is unknown") {
		t.Errorf("the claim after a pending step found the history lost:\n%s", logs.String())
	}
	if l2, takeover := g2.Lease(), takeoverOf(t, cfg2); l2.Start > began.Unix()+takeover+1 {
		t.Errorf("the claim after a pending step got %v, starting %d s after its claim at second %d, more than a takeover's %d s: the history was lost and waited out",
			l2, l2.Start-began.Unix(), began.Unix(), takeover)
	}
	col2 := leasetest.Collect("second", g2)
	col2.WaitCount(t, 500, 30*time.Second)
	check := leasetest.NewChecker(t, testSecret)
	check.AddCollector(col)
	check.AddCollector(col2)
	if check.Duplicates() > 0 {
		t.Fatalf("duplicates: %v", check)
	}
	t.Logf("after a pending step: second claim %v, made at second %d; %v", g2.Lease(), began.Unix(), check)
}

// failAfterCommit passes requests until a commit that holds a pending
// step has succeeded, then fails every request, as the death of its
// process right after the commit would.
type failAfterCommit struct {
	rt      http.RoundTripper
	tripped atomic.Bool
}

func (f *failAfterCommit) wrap(rt http.RoundTripper) http.RoundTripper {
	f.rt = rt
	return f
}

func (f *failAfterCommit) RoundTrip(r *http.Request) (*http.Response, error) {
	if f.tripped.Load() {
		return nil, errKilled
	}
	commit := false
	if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/leases/"+DefaultName) && r.GetBody != nil {
		if b, err := r.GetBody(); err == nil {
			raw, _ := io.ReadAll(b)
			commit = strings.Contains(string(raw), AnnotationPending)
		}
	}
	resp, err := f.rt.RoundTrip(r)
	if commit && err == nil && resp.StatusCode == http.StatusOK {
		f.tripped.Store(true)
	}
	return resp, err
}

// takeoverOf returns the seconds every claim on cfg waits after it, when
// no record asks for longer (rule 14 of docs/leases.md).
func takeoverOf(t *testing.T, cfg Config) int64 { return leasetest.TakeoverSeconds(t, NewStore, cfg) }
