//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package statedir

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// step runs one Update of st with fn.
func step(t *testing.T, st *Store, held lease.StoreClaim, all bool, fn func(*lease.StoreView) (*lease.StoreChanges, error)) (lease.StoreClaim, error) {
	t.Helper()
	return st.Update(context.Background(), held, all, fn)
}

// The store's primitives, without the engine: records and the marker come
// back byte for byte; each write moves the generation on, in the lock file
// first; a claim takes all its blocks or none; a held claim reads only its
// blocks; bytes that cannot be stored on a line are refused.
func TestStorePrimitives(t *testing.T) {
	d := openTest(t)
	st, err := d.Store(Options{LastNode: 255, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var v0 lease.StoreView
	marker := []byte("  a marker, with spaces  ")
	records := map[int64][]byte{0: []byte("rec 0 \t x"), 64: {}, 192: []byte("r")}
	if _, err := step(t, st, nil, true, func(v *lease.StoreView) (*lease.StoreChanges, error) {
		v0 = *v
		return &lease.StoreChanges{Marker: marker, Records: records}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if !v0.Fresh || v0.Marker != nil || len(v0.Blocks) != 4 || v0.Identity.ID != "gen 1" || v0.NextID != "gen 2" {
		t.Errorf("the first view of a new directory: %+v", v0)
	}
	var v1 lease.StoreView
	step(t, st, nil, true, func(v *lease.StoreView) (*lease.StoreChanges, error) { v1 = *v; return nil, nil })
	if v1.Fresh || string(v1.Marker) != string(marker) || v1.Identity.ID != "gen 2" {
		t.Errorf("after the first write: fresh %v, marker %q, identity %+v", v1.Fresh, v1.Marker, v1.Identity)
	}
	for _, b := range v1.Blocks {
		want, ok := records[b.First]
		if ok != (b.Record != nil) || string(b.Record) != string(want) || b.Held || b.Last != b.First+63 {
			t.Errorf("block %+v, want record %q", b, want)
		}
	}
	lock := must(os.ReadFile(d.path + "/lock"))
	if string(lock) != "gen 2\n" {
		t.Errorf("lock file %q, want the generation", lock)
	}

	// Someone else (an older version, which takes block locks outside the
	// directory's lock) holds block 64: a claim of 0 and 64 fails and
	// leaves block 0 free.
	other := must(d.lockBlock(64))
	_, err = step(t, st, nil, true, func(v *lease.StoreView) (*lease.StoreChanges, error) {
		if !v.Blocks[1].Held || v.Blocks[0].Held {
			t.Errorf("held: %+v", v.Blocks)
		}
		return &lease.StoreChanges{Claim: []int64{0, 64}}, nil
	})
	if !errors.Is(err, lease.ErrBlockHeld) {
		t.Fatalf("claim of a held block: %v, want ErrBlockHeld", err)
	}
	if f := must(d.lockBlock(0)); f == nil {
		t.Error("block 0 stayed locked after the failed claim")
	} else {
		f.Close()
	}
	other.Close()

	// A claim, a step on it alone, its release.
	c, err := step(t, st, nil, true, func(*lease.StoreView) (*lease.StoreChanges, error) {
		return &lease.StoreChanges{Claim: []int64{128, 192}}, nil
	})
	if err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err)
	}
	_, err = step(t, st, c, false, func(v *lease.StoreView) (*lease.StoreChanges, error) {
		if len(v.Blocks) != 2 || v.Blocks[0].First != 128 || !v.Blocks[0].Held || string(v.Blocks[1].Record) != "r" {
			t.Errorf("the held claim's view: %+v", v.Blocks)
		}
		return &lease.StoreChanges{Records: map[int64][]byte{0: []byte("x")}}, nil
	})
	if err == nil || !strings.Contains(err.Error(), "did not read") {
		t.Errorf("a record of a block not read: %v", err)
	}
	for _, bad := range []*lease.StoreChanges{
		{Marker: []byte("two\nlines")},
		{Records: map[int64][]byte{128: []byte("two\nlines")}},
		{Records: map[int64][]byte{128: make([]byte, maxStoredValue+1)}},
		{Claim: []int64{0}},
	} {
		if _, err := step(t, st, c, false, func(*lease.StoreView) (*lease.StoreChanges, error) { return bad, nil }); err == nil {
			t.Errorf("changes %+v accepted", bad)
		}
	}
	if _, err := step(t, st, c, false, func(*lease.StoreView) (*lease.StoreChanges, error) {
		return &lease.StoreChanges{Release: true}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := step(t, st, c, false, func(*lease.StoreView) (*lease.StoreChanges, error) {
		t.Error("fn called on a released claim")
		return nil, nil
	}); !errors.Is(err, randflake.ErrLeaseLost) {
		t.Errorf("a step on a released claim: %v, want ErrLeaseLost", err)
	}
	if _, err := st.Renew(context.Background(), c); !errors.Is(err, randflake.ErrLeaseLost) {
		t.Errorf("Renew of a released claim: %v, want ErrLeaseLost", err)
	}
	other2, _ := d.Store(Options{LastNode: 255})
	if _, err := step(t, other2, c, false, nil); err == nil {
		t.Error("a claim of another store accepted")
	}
	// Nothing written: the generation stayed where it was.
	var v2 lease.StoreView
	step(t, st, nil, true, func(v *lease.StoreView) (*lease.StoreChanges, error) { v2 = *v; return nil, nil })
	if v2.Identity.ID != "gen 2" {
		t.Errorf("identity %q after steps that wrote nothing, want gen 2", v2.Identity.ID)
	}
}
