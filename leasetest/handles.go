package leasetest

import (
	"sync"
	"testing"

	"github.com/randflake/randflake/lease"
)

// Handles keeps, for a Store's Kill, the handles its Open opened, each
// with what kills it (closes its client, makes its requests fail): Open
// adds every handle it returns, and Store.Kill can be Handles.Kill.
//
// The zero Handles is empty and ready for use. It is safe for concurrent
// use, as Open and Kill are called from the suite's subtests at once.
type Handles struct {
	mu    sync.Mutex
	kills map[lease.BlockStore]func()
}

// Add records st, a handle Open opened, with kill, which kills it.
func (h *Handles) Add(st lease.BlockStore, kill func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.kills == nil {
		h.kills = map[lease.BlockStore]func(){}
	}
	h.kills[st] = kill
}

// Kill kills st with what Add recorded for it, and fails t if st was not
// added: a Store.Kill.
func (h *Handles) Kill(t *testing.T, st lease.BlockStore) {
	t.Helper()
	h.mu.Lock()
	kill := h.kills[st]
	h.mu.Unlock()
	if kill == nil {
		t.Fatalf("Kill of a store not opened here: %T", st)
	}
	kill()
}
