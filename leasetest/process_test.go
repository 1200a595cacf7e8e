package leasetest

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake/lease"
)

func TestMain(m *testing.M) {
	HolderMain(openForHolder)
	os.Exit(m.Run())
}

// processLayout is the layout of the holder processes' stores (and of the
// proxy test's echo server): 4 blocks of 16 node IDs.
var processLayout = lease.BlockLayout{FirstNode: 0, LastNode: 63, Size: 16}

// openForHolder opens a store of the holder's own (a process cannot share
// a MemBackend; the modules' tests share etcd, PostgreSQL or a directory):
// "mem" a fresh one, "full" one whose every block someone else holds,
// anything else fails.
func openForHolder(arg string) (lease.BlockStore, error) {
	b, err := NewMemBackend(processLayout)
	if err != nil {
		return nil, err
	}
	switch arg {
	case "mem":
	case "full":
		other, _ := b.Open(MemOptions{TTL: time.Minute})
		var all []int64
		for i := range processLayout.Count() {
			f, _ := processLayout.Block(i)
			all = append(all, f)
		}
		if _, err := other.Update(context.Background(), nil, false, func(*lease.StoreView) (*lease.StoreChanges, error) {
			return &lease.StoreChanges{Claim: all}, nil
		}); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("no such store: " + arg)
	}
	return b.Open(MemOptions{TTL: 2 * time.Second})
}

// A holder process killed half-way through a second: every ID it handed
// out is in its file, once, inside the leases it reported, the last ones
// handed out just before the kill.
func TestHolderKilledMidSecond(t *testing.T) {
	t.Parallel()
	h := StartHolder(t, HolderConfig{Name: "doomed", Arg: "mem", Layout: processLayout, Blocks: 2})
	l := h.Lease(30 * time.Second)
	if l.Nodes() != 32 {
		t.Fatalf("lease %v: %d node IDs, want 2 blocks of 16", l, l.Nodes())
	}
	h.WaitIDs(2000, 20*time.Second)
	killed := h.KillMidSecond()
	if ms := killed.Sub(killed.Truncate(time.Second)); ms < 450*time.Millisecond {
		t.Errorf("killed %v past a second boundary, want about 500ms", ms)
	}
	ids := h.IDs()
	check := NewChecker(t, Secret())
	sp := check.Add("the killed holder", ids, h.Leases()...)
	if sp.IDs < 2000 {
		t.Fatalf("%d IDs read back, want at least 2000", sp.IDs)
	}
	// The kill's time is read just before SIGKILL is sent; the holder
	// runs on until the signal arrives, so its last batch may be a little
	// later (microseconds, on a loaded machine milliseconds). It issues a
	// batch every millisecond: on idle cores the last comes well within
	// 500 ms before the kill, on a loaded machine as much later as the
	// machine is slower.
	after, before := sinceStart.Stretch(100*time.Millisecond), sinceStart.Stretch(500*time.Millisecond)
	if gap := killed.Sub(sp.LastAt); gap < -after || gap > before {
		t.Errorf("the last ID read back was handed out %v before the kill, want the load running up to it (from %v before to %v after; %s)",
			gap, before.Round(time.Millisecond), after.Round(time.Millisecond), slowness())
	}
	if sp.Last != killed.Unix() {
		t.Errorf("the last ID carries second %d, want the second of the kill, %d", sp.Last, killed.Unix())
	}
	t.Logf("killed at %s; %d IDs read back, the last handed out %v before the kill; %v",
		killed.Format("15:04:05.000"), sp.IDs, killed.Sub(sp.LastAt).Round(time.Millisecond), check)
}

// A holder with a run time issues, releases, reports its final lease and
// exits cleanly.
func TestHolderRunsAndExits(t *testing.T) {
	t.Parallel()
	h := StartHolder(t, HolderConfig{Name: "brief", Arg: "mem", Layout: processLayout, Run: 1200 * time.Millisecond})
	h.Lease(30 * time.Second)
	if err := h.Wait(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	ls := h.Leases()
	sp := NewChecker(t, Secret()).Add("the holder", h.IDs(), ls...)
	if sp.IDs == 0 || len(ls) != 1 || ls[0].End < sp.Last {
		t.Fatalf("%d IDs up to second %d, leases %v", sp.IDs, sp.Last, ls)
	}
}

// A holder that gets no lease says why: the parent's error wraps the
// engine's, or carries the store's message.
func TestHolderErrors(t *testing.T) {
	t.Parallel()
	full := StartHolder(t, HolderConfig{Name: "late", Arg: "full", Layout: processLayout})
	if err := full.Wait(30 * time.Second); !errors.Is(err, lease.ErrNoFreeNodes) {
		t.Errorf("a holder on a full store: %v, want ErrNoFreeNodes", err)
	}
	bad := StartHolder(t, HolderConfig{Name: "lost", Arg: "nowhere", Layout: processLayout})
	if err := bad.Wait(30 * time.Second); err == nil || !strings.Contains(err.Error(), "no such store: nowhere") {
		t.Errorf("a holder whose store cannot be opened: %v, want the store's error", err)
	}
	if ids := bad.IDs(); len(ids) != 0 {
		t.Errorf("a holder without a lease wrote %d IDs", len(ids))
	}
}
