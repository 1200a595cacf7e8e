package etcdlease

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/randflake/randflake/etcdlease/etcdtest"
	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/leasetest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The lease engine's conformance suite on real etcd: every subtest on an
// etcd server of its own, so that a wipe or a restore touches nothing
// else.
func TestConformance(t *testing.T) {
	leasetest.Run(t, leasetest.Harness{
		Layout:   lease.BlockLayout{FirstNode: 0, LastNode: 127, Size: 16},
		New:      newConformanceStore,
		Parallel: true,
		// A claim step past its own timeout on a loaded machine is
		// tried again, as a deployment starts the process again.
		Transient: slowRequest,
		// An etcd server per subtest: six at once, not all sixteen,
		// or under two busy loops the servers starve and the idle
		// holders' claims lapse.
		MaxParallel: 6,
	})
}

// conformanceTTL is the suite's etcd lease TTL: longer than the other
// tests' 3 s, since every claim of the suite waits a takeover while its
// subtests run side by side, under load: a 3 s lease lapsed before its
// holder's release on a loaded 2-core machine.
const conformanceTTL = 5 * time.Second

const conformancePrefix = "/conformance/"

// newConformanceStore starts an etcd server for one subtest and returns
// its hooks: each handle is a Store on a client of its own; Kill closes
// that client (its claims stay until their etcd leases expire); the
// faults are an operator's, through a client of the test's.
func newConformanceStore(t *testing.T) *leasetest.Store {
	srv := etcdtest.New(t)
	admin := newClient(t, srv.Endpoint())
	var handles leasetest.Handles
	ctx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	get := func(t *testing.T, key string) []byte {
		resp, err := admin.Get(ctx(), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		return append([]byte{}, resp.Kvs[0].Value...)
	}
	set := func(t *testing.T, key string, raw []byte) {
		var err error
		if raw == nil {
			_, err = admin.Delete(ctx(), key)
		} else {
			_, err = admin.Put(ctx(), key, string(raw))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// snapshot saves the keyspace and returns a function that restores
	// it under opts.
	snapshot := func(t *testing.T, opts etcdtest.RestoreOptions) func(*testing.T) {
		path := filepath.Join(t.TempDir(), "snapshot.db")
		if err := srv.Snapshot(ctx(), path); err != nil {
			t.Fatal(err)
		}
		return func(t *testing.T) {
			if err := srv.Restore(ctx(), path, opts); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := &leasetest.Store{Addr: srv.Endpoint()}
	s.Open = func(t *testing.T, p leasetest.Process) (lease.BlockStore, error) {
		addr := p.Addr
		if addr == "" {
			addr = srv.Endpoint()
		}
		cli := newClient(t, addr)
		st, err := NewStore(Config{Client: cli, Prefix: conformancePrefix, Nodes: p.Layout.Size, FirstNode: p.Layout.FirstNode, LastNode: p.Layout.LastNode,
			TTL: conformanceTTL, Promise: conformanceTTL, Horizon: conformanceTTL, Holder: p.Name})
		if err != nil {
			return nil, err
		}
		handles.Add(st, func() { cli.Close() })
		return st, nil
	}
	s.Kill = handles.Kill
	s.Wipe = func(t *testing.T) {
		if _, err := srv.Ctl(ctx(), "del", "--prefix", conformancePrefix); err != nil {
			t.Fatal(err)
		}
	}
	s.WipeKeepMarker = func(t *testing.T) {
		if _, err := admin.Txn(ctx()).Then(
			clientv3.OpDelete(conformancePrefix+"record/", clientv3.WithPrefix()),
			clientv3.OpDelete(conformancePrefix+"claim/", clientv3.WithPrefix()),
		).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	recordKey := func(first int64) string { return (&Store{prefix: conformancePrefix}).recordKey(first) }
	s.ReadRecord = func(t *testing.T, first int64) []byte { return get(t, recordKey(first)) }
	s.WriteRecord = func(t *testing.T, first int64, raw []byte) { set(t, recordKey(first), raw) }
	s.ReadMarker = func(t *testing.T) []byte { return get(t, conformancePrefix+"marker") }
	s.WriteMarker = func(t *testing.T, raw []byte) { set(t, conformancePrefix+"marker", raw) }
	// A snapshot restored under the same cluster ID: undetectable while
	// no holder runs; a running holder sees the revision go back.
	s.Save = func(t *testing.T) func(*testing.T) { return snapshot(t, etcdtest.RestoreOptions{}) }
	s.Rollback = func(t *testing.T) func(*testing.T) { return snapshot(t, etcdtest.RestoreOptions{}) }
	return s
}
