package leasetest

import (
	"testing"

	"github.com/randflake/randflake/lease"
)

// Hooks returns the backend as a Store for Run: handles opened with o
// (and the process's layout), and every fault hook. Rollback puts a
// saved copy back as Restore does, under the same identity with the
// position going back, which only a running holder can see. Addr is the
// address Serve gave the backend, if it was called before; a handle
// opened through another address (the suite's proxy) reaches the backend
// through it, the others directly.
func (b *MemBackend) Hooks(o MemOptions) *Store {
	b.mu.Lock()
	addr := b.addr
	b.mu.Unlock()
	return &Store{
		Open: func(t *testing.T, p Process) (lease.BlockStore, error) {
			o := o
			o.Layout, o.Addr = p.Layout, p.Addr
			h, err := b.Open(o)
			if err == nil {
				t.Cleanup(h.Close)
			}
			return h, err
		},
		Addr: addr,
		Kill: func(t *testing.T, s lease.BlockStore) {
			k, ok := s.(interface{ Kill() })
			if !ok {
				t.Fatalf("leasetest: %T is not a handle this backend opened", s)
			}
			k.Kill()
		},
		Wipe:           func(*testing.T) { b.Wipe() },
		WipeKeepMarker: func(*testing.T) { b.WipeKeepMarker() },
		ReadRecord:     func(_ *testing.T, first int64) []byte { return b.Record(first) },
		WriteRecord:    func(_ *testing.T, first int64, raw []byte) { b.SetRecord(first, raw) },
		ReadMarker:     func(*testing.T) []byte { return b.Marker() },
		WriteMarker:    func(_ *testing.T, raw []byte) { b.SetMarker(raw) },
		Save: func(*testing.T) func(*testing.T) {
			sn := b.Save()
			return func(*testing.T) { b.Restore(sn) }
		},
		Rollback: func(*testing.T) func(*testing.T) {
			sn := b.Save()
			return func(t *testing.T) {
				before := b.Identity()
				b.Restore(sn)
				if after := b.Identity(); after.Position >= before.Position {
					t.Fatalf("leasetest: restoring a copy did not move the position back (%d, then %d)", before.Position, after.Position)
				}
			}
		},
	}
}
