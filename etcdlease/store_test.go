package etcdlease

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseCount returns how many etcd leases the server has.
func leaseCount(t *testing.T, cli *clientv3.Client) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Leases)
}

// value returns the value of key, and whether it exists.
func value(t *testing.T, cli *clientv3.Client, key string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", false
	}
	return string(resp.Kvs[0].Value), true
}

// The store's atomic step on real etcd: one consistent read (marker,
// records, claims, the cluster's identity), fn, and a transaction that
// claims, writes and releases only if nothing it read changed; a block
// claimed by someone else is ErrBlockHeld, a claim that is gone is
// ErrLeaseLost without calling fn, a change under the step calls fn again,
// and a step that never settles is ErrStoreConflict. No etcd lease is left
// by a failed claim or a release.
func TestStoreStep(t *testing.T) {
	t.Parallel()
	_, cli := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := func(holder string) *Store {
		s, err := NewStore(testConfig(cli, "/steps/", 63, holder))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := open("holder A"), open("holder B")
	if info := a.Info(); info.Name != "etcd /steps/" || info.Promise != testTTL || !info.Durable || info.MaxClockSkew != DefaultMaxClockSkew || info.EndFor == nil {
		t.Errorf("Info: %+v", info)
	}

	// An empty prefix: no marker, never fresh, four free blocks.
	var view *lease.StoreView
	held, err := a.Update(ctx, nil, true, func(v *lease.StoreView) (*lease.StoreChanges, error) {
		view = v
		return &lease.StoreChanges{Marker: []byte("marker 1"), Records: map[int64][]byte{0: []byte("record 0")}, Claim: []int64{0}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if view.Marker != nil || view.Fresh || len(view.Blocks) != 4 {
		t.Fatalf("empty prefix: marker %q, fresh %v, %d blocks; want none, false, 4", view.Marker, view.Fresh, len(view.Blocks))
	}
	for i, bl := range view.Blocks {
		if bl.First != int64(16*i) || bl.Last != int64(16*i+15) || bl.Held || bl.Record != nil {
			t.Errorf("empty prefix: block %d is %+v", i, bl)
		}
	}
	hdr, err := cli.Get(ctx, "/none")
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.FormatUint(hdr.Header.ClusterId, 16); view.Identity.ID != want || view.NextID != want || view.Identity.Position == 0 || view.Identity.Position > uint64(hdr.Header.Revision) {
		t.Errorf("identity %+v (next %q); want cluster %s at a revision up to %d", view.Identity, view.NextID, want, hdr.Header.Revision)
	}
	if v, _ := value(t, cli, "/steps/marker"); v != "marker 1" {
		t.Errorf("marker %q", v)
	}
	if v, _ := value(t, cli, "/steps/record/000000"); v != "record 0" {
		t.Errorf("record %q", v)
	}
	if v, ok := value(t, cli, "/steps/claim/000000"); !ok || !strings.HasPrefix(v, "holder A lease ") {
		t.Errorf("claim key %q, %v", v, ok)
	}
	if n := leaseCount(t, cli); n != 1 {
		t.Errorf("%d etcd leases after one claim", n)
	}

	// Another process sees the claim and the data as written; claiming
	// the held block is refused and leaves no etcd lease behind.
	_, err = b.Update(ctx, nil, true, func(v *lease.StoreView) (*lease.StoreChanges, error) {
		if !v.Blocks[0].Held || string(v.Blocks[0].Record) != "record 0" || string(v.Marker) != "marker 1" || v.Blocks[1].Held {
			t.Errorf("second view: %+v", v)
		}
		return &lease.StoreChanges{Claim: []int64{0}}, nil
	})
	if !errors.Is(err, lease.ErrBlockHeld) {
		t.Errorf("claim of a held block: %v, want ErrBlockHeld", err)
	}
	// A block free when read but claimed before the transaction.
	c := open("holder C")
	_, err = b.Update(ctx, nil, true, func(v *lease.StoreView) (*lease.StoreChanges, error) {
		if _, err := c.Update(ctx, nil, true, func(*lease.StoreView) (*lease.StoreChanges, error) {
			return &lease.StoreChanges{Claim: []int64{16}}, nil
		}); err != nil {
			t.Errorf("claim by C: %v", err)
		}
		return &lease.StoreChanges{Claim: []int64{16}}, nil
	})
	if !errors.Is(err, lease.ErrBlockHeld) {
		t.Errorf("claim of a block taken since the read: %v, want ErrBlockHeld", err)
	}
	if n := leaseCount(t, cli); n != 2 {
		t.Errorf("%d etcd leases with A and C holding a block each, want 2", n)
	}

	// The marker changed under the step: fn runs again on the new view.
	calls := 0
	_, err = b.Update(ctx, nil, true, func(v *lease.StoreView) (*lease.StoreChanges, error) {
		calls++
		if calls == 1 {
			if _, err := cli.Put(ctx, "/steps/marker", "marker 2"); err != nil {
				t.Fatal(err)
			}
		} else if string(v.Marker) != "marker 2" {
			t.Errorf("second call sees marker %q", v.Marker)
		}
		return &lease.StoreChanges{Marker: []byte("marker 3")}, nil
	})
	if err != nil || calls != 2 {
		t.Errorf("step with a change under it: %v after %d calls, want success after 2", err, calls)
	}
	if v, _ := value(t, cli, "/steps/marker"); v != "marker 3" {
		t.Errorf("marker %q, want marker 3", v)
	}
	// A step that never settles gives up, claiming nothing.
	calls = 0
	_, err = b.Update(ctx, nil, true, func(*lease.StoreView) (*lease.StoreChanges, error) {
		calls++
		if _, err := cli.Put(ctx, "/steps/marker", "busy "+strconv.Itoa(calls)); err != nil {
			t.Fatal(err)
		}
		return &lease.StoreChanges{Claim: []int64{32}}, nil
	})
	if !errors.Is(err, lease.ErrStoreConflict) || calls != maxSteps {
		t.Errorf("step that never settles: %v after %d calls, want ErrStoreConflict after %d", err, calls, maxSteps)
	}
	if _, ok := value(t, cli, "/steps/claim/000032"); ok || leaseCount(t, cli) != 2 {
		t.Errorf("a conflicting claim left its key (%v) or its etcd lease (%d leases)", ok, leaseCount(t, cli))
	}
	// fn's error is returned as it is, and nothing is written.
	boom := errors.New("boom")
	if _, err := b.Update(ctx, nil, true, func(*lease.StoreView) (*lease.StoreChanges, error) { return nil, boom }); err != boom {
		t.Errorf("fn's error: %v", err)
	}

	// A step on the held claim reads its block only, and may write its
	// record; a record of a block not read is refused.
	_, err = a.Update(ctx, held, false, func(v *lease.StoreView) (*lease.StoreChanges, error) {
		if len(v.Blocks) != 1 || v.Blocks[0].First != 0 || !v.Blocks[0].Held || string(v.Blocks[0].Record) != "record 0" {
			t.Errorf("held view: %+v", v.Blocks)
		}
		return &lease.StoreChanges{Records: map[int64][]byte{0: []byte("record 0b")}, Marker: []byte("marker 4")}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := value(t, cli, "/steps/record/000000"); v != "record 0b" {
		t.Errorf("record %q after the held step", v)
	}
	if _, err := a.Update(ctx, held, false, func(*lease.StoreView) (*lease.StoreChanges, error) {
		return &lease.StoreChanges{Records: map[int64][]byte{16: []byte("not mine")}}, nil
	}); err == nil {
		t.Error("a record of a block not read was written")
	}
	id, err := a.Renew(ctx, held)
	if err != nil || id.ID != view.Identity.ID || id.Position <= view.Identity.Position {
		t.Errorf("Renew: %+v, %v; want cluster %s past revision %d", id, err, view.Identity.ID, view.Identity.Position)
	}

	// Release deletes the claim key and revokes the etcd lease.
	if _, err := a.Update(ctx, held, false, func(*lease.StoreView) (*lease.StoreChanges, error) {
		return &lease.StoreChanges{Records: map[int64][]byte{0: []byte("record 0c")}, Release: true}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, ok := value(t, cli, "/steps/claim/000000"); ok || leaseCount(t, cli) != 1 {
		t.Errorf("after the release: claim key %v, %d etcd leases (C's alone should be left)", ok, leaseCount(t, cli))
	}
	if _, err := a.Renew(ctx, held); !errors.Is(err, randflake.ErrLeaseLost) {
		t.Errorf("Renew after the release: %v, want ErrLeaseLost", err)
	}

	// A claim whose key was deleted (the etcd lease still alive) is lost
	// at the next step, without calling fn.
	heldB, err := b.Update(ctx, nil, true, func(*lease.StoreView) (*lease.StoreChanges, error) {
		return &lease.StoreChanges{Claim: []int64{48}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, "/steps/claim/000048"); err != nil {
		t.Fatal(err)
	}
	called := false
	if _, err := b.Update(ctx, heldB, false, func(*lease.StoreView) (*lease.StoreChanges, error) {
		called = true
		return nil, nil
	}); !errors.Is(err, randflake.ErrLeaseLost) || called {
		t.Errorf("step on a deleted claim: %v (fn called: %v), want ErrLeaseLost without fn", err, called)
	}
}

// A key among the claims that names no node ID is refused, not guessed at.
func TestStoreCorruptClaimKey(t *testing.T) {
	t.Parallel()
	_, cli := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/corrupt/claim/00000x", "?"); err != nil {
		t.Fatal(err)
	}
	s, err := NewStore(testConfig(cli, "/corrupt/", 15, "A"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Update(ctx, nil, true, func(*lease.StoreView) (*lease.StoreChanges, error) {
		t.Error("fn called on a corrupt view")
		return nil, nil
	})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "claim/00000x") {
		t.Errorf("Update: %v, want ErrCorrupt naming the key", err)
	}
	src, err := New(testConfig(cli, "/corrupt/", 15, "A"))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := src.Acquire(ctx); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Acquire: %v, %v; want ErrCorrupt", l, err)
	}
	if n := keyCount(t, cli, "/corrupt/"); n != 1 {
		t.Errorf("%d keys under the prefix after the refusal, want the corrupt one alone", n)
	}
}

// conflictStore is a Store whose held steps meet a change of the marker
// under them once: another holder's write, as happens whenever two holders
// record promises at the same moment.
type conflictStore struct {
	*Store
	mu        sync.Mutex
	conflicts int
}

func (s *conflictStore) Update(ctx context.Context, held lease.StoreClaim, all bool, fn func(*lease.StoreView) (*lease.StoreChanges, error)) (lease.StoreClaim, error) {
	if held == nil || all {
		return s.Store.Update(ctx, held, all, fn)
	}
	first := true
	return s.Store.Update(ctx, held, all, func(v *lease.StoreView) (*lease.StoreChanges, error) {
		if first {
			first = false
			// The same marker written again: its content stays valid,
			// its mod revision moves, so this step's transaction fails
			// and the step runs again on what is now stored.
			if _, err := s.cli.Put(ctx, s.markerKey(), string(v.Marker)); err != nil {
				return nil, err
			}
			s.mu.Lock()
			s.conflicts++
			s.mu.Unlock()
		}
		return fn(v)
	})
}

// A promise whose first write meets another holder's write is written on
// the second try, and the holder keeps its lease: a conflict is not lost
// history.
func TestPromiseAfterConflict(t *testing.T) {
	t.Parallel()
	_, cli := startEtcd(t)
	st, err := NewStore(testConfig(cli, "/conflict/", 15, "A"))
	if err != nil {
		t.Fatal(err)
	}
	cs := &conflictStore{Store: st}
	src, err := lease.NewBlockSource(cs, lease.BlockSourceConfig{Secret: testSecret, Layout: st.Layout()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The first claim waits out the horizon, holding the claim, and then
	// records its promise in a held step.
	l, err := src.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire with a conflict on the promise write: %v", err)
	}
	// Renewals whose end passes the promise record new ones, each meeting
	// a conflict too.
	played := func() int {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		return cs.conflicts
	}
	for deadline := time.Now().Add(4 * testTTL); played() < 3; {
		time.Sleep(300 * time.Millisecond)
		next, err := src.Renew(ctx, l)
		if err != nil {
			t.Fatalf("Renew with a conflict on the promise write: %v", err)
		}
		l = next
		if time.Now().After(deadline) {
			t.Fatalf("%d promise writes in %v, want 3", played(), 4*testTTL)
		}
	}
	if err := src.Release(ctx, l, 0); err != nil {
		t.Fatal(err)
	}
}
