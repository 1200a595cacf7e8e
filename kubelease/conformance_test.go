package kubelease

import (
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake/kubelease/kubetest"
	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/leasetest"
)

// The lease engine's conformance suite on a real kube-apiserver: each
// subtest in a namespace of its own on the shared cluster, except the two
// that restore etcd, which get a cluster of their own.
func TestConformance(t *testing.T) {
	kubetest.SkipShort(t)
	leasetest.Run(t, leasetest.Harness{
		Layout:   lease.BlockLayout{FirstNode: 0, LastNode: 127, Size: 16},
		New:      newConformanceStore,
		Parallel: true,
		// A claim step past its own timeout on a loaded machine is
		// tried again, as a deployment starts the process again.
		Transient: slowAPI,
	})
}

const conformanceFleet = "conformance"

// restores names the subtests that put etcd back from a snapshot (each on
// a cluster of its own).
func restores(name string) bool {
	return strings.HasSuffix(name, "/SaveRestoreUndetectable") || strings.HasSuffix(name, "/RollbackSeenByHolder") || strings.HasSuffix(name, "/ReplayWhileHolding")
}

// newConformanceStore returns the hooks of one subtest's store: each
// handle a Store on a client of its own, as the user granted the lease
// verbs; Kill makes that client fail every request; the faults are an
// operator's, through the administrator's requests.
func newConformanceStore(t *testing.T) *leasetest.Store {
	var c *kubetest.Cluster
	if restores(t.Name()) {
		c = kubetest.New(t)
	} else {
		c = kubetest.Shared(t)
	}
	ns := c.Namespace(t, "conformance")
	var handles leasetest.Handles
	s := &leasetest.Store{Addr: c.Addr()}
	s.Open = func(t *testing.T, p leasetest.Process) (lease.BlockStore, error) {
		cli, k := testClient(t, c, kubetest.User, p.Addr)
		cfg := testConfig(cli, ns, p.Layout.LastNode, p.Name)
		cfg.Name, cfg.Nodes, cfg.FirstNode = conformanceFleet, p.Layout.Size, p.Layout.FirstNode
		st, err := NewStore(cfg)
		if err != nil {
			return nil, err
		}
		// p.Now is not given to the store, which checks this machine's
		// clock against the API server's at every claim, promise and
		// renewal: a process an hour ahead would be refused with
		// ErrClockSkew before it touched a block. The suite's hour-ahead
		// process is played with the engine's clock alone, so that
		// ClockAheadPerBlock checks the engine's rule on the records the
		// Lease objects keep.
		handles.Add(st, func() { k.killed.Store(true) })
		return st, nil
	}
	s.Kill = handles.Kill
	leases := kubetest.LeasesPath(ns)
	get := func(t *testing.T, name string) *leaseObject {
		var l leaseObject
		err := c.Do(testCtx(t, "reading the Lease "+name, 20*time.Second), http.MethodGet, leases+"/"+name, nil, &l)
		if kubetest.IsNotFound(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return &l
	}
	// setAnnotation sets (raw != nil) or removes an annotation of the
	// object name, creating it if need be: read, then written conditioned
	// on what was read, and again on a conflict (a holder wrote the object
	// meanwhile), as the store's own writes are.
	setAnnotation := func(t *testing.T, name, key string, raw []byte) {
		for try := 1; ; try++ {
			l := get(t, name)
			if l == nil && raw == nil {
				return
			}
			method, path := http.MethodPut, leases+"/"+name
			if l == nil {
				l = &leaseObject{Metadata: objectMeta{Name: name, Labels: map[string]string{LabelFleet: conformanceFleet}}}
				method, path = http.MethodPost, leases
			}
			l.APIVersion, l.Kind = "coordination.k8s.io/v1", "Lease"
			if l.Metadata.Annotations == nil {
				l.Metadata.Annotations = map[string]string{}
			}
			if raw == nil {
				delete(l.Metadata.Annotations, key)
			} else {
				l.Metadata.Annotations[key] = string(raw)
			}
			err := c.Do(testCtx(t, "writing the annotation "+key+" of the Lease "+name, 20*time.Second), method, path, l, nil)
			if err == nil {
				return
			}
			var se *kubetest.StatusError
			if !errors.As(err, &se) || se.Code != http.StatusConflict {
				t.Fatalf("writing the annotation %s of the Lease %s: %v", key, name, err)
			}
			if try == maxSteps {
				t.Fatalf("writing the annotation %s of the Lease %s: changed under %d writes in a row: %v", key, name, try, err)
			}
		}
	}
	annotation := func(t *testing.T, name, key string) []byte {
		l := get(t, name)
		if l == nil {
			return nil
		}
		v, ok := l.Metadata.Annotations[key]
		if !ok {
			return nil
		}
		return []byte(v)
	}
	s.Wipe = func(t *testing.T) {
		if err := c.DeleteLeases(testCtx(t, "deleting the fleet's Leases", 20*time.Second), ns, LabelFleet+"="+conformanceFleet); err != nil {
			t.Fatal(err)
		}
	}
	s.WipeKeepMarker = func(t *testing.T) {
		var ll leaseList
		if err := c.Do(testCtx(t, "listing the fleet's Leases", 20*time.Second), http.MethodGet, leases+"?labelSelector="+LabelFleet+"%3D"+conformanceFleet, nil, &ll); err != nil {
			t.Fatal(err)
		}
		for _, l := range ll.Items {
			if l.Metadata.Name == conformanceFleet {
				continue
			}
			if err := c.Do(testCtx(t, "deleting the Lease "+l.Metadata.Name, 20*time.Second), http.MethodDelete, leases+"/"+l.Metadata.Name, nil, nil); err != nil && !kubetest.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
	s.ReadRecord = func(t *testing.T, first int64) []byte {
		return annotation(t, BlockName(conformanceFleet, first), AnnotationRecord)
	}
	s.WriteRecord = func(t *testing.T, first int64, raw []byte) {
		setAnnotation(t, BlockName(conformanceFleet, first), AnnotationRecord, raw)
	}
	s.ReadMarker = func(t *testing.T) []byte { return annotation(t, conformanceFleet, AnnotationMarker) }
	s.WriteMarker = func(t *testing.T, raw []byte) { setAnnotation(t, conformanceFleet, AnnotationMarker, raw) }
	if restores(t.Name()) {
		// etcd put back from a snapshot under the API server, which is
		// restarted: undetectable while no holder runs; a running holder
		// sees the resource versions go back.
		snapshot := func(t *testing.T) func(*testing.T) {
			path := filepath.Join(t.TempDir(), "snapshot.db")
			if err := c.Snapshot(testCtx(t, "saving an etcd snapshot", 30*time.Second), path); err != nil {
				t.Fatal(err)
			}
			return func(t *testing.T) {
				if err := c.Restore(testCtx(t, "restoring etcd from its snapshot", 30*time.Second), path); err != nil {
					t.Fatal(err)
				}
			}
		}
		s.Save, s.Rollback = snapshot, snapshot
	}
	return s
}

// slowAPI reports whether err is a step the API server did not finish
// within its bound (slowError), not an answer.
func slowAPI(err error) bool {
	var se *slowError
	return errors.As(err, &se)
}
