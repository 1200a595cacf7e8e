//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package statedir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/leasetest"
)

// The state directory against the lease engine's conformance suite: eight
// blocks of 64 node IDs, promises of 2 seconds, each subtest on a
// directory of its own.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("runs generators under load for seconds")
	}
	// Its directories are its own; it waits alongside the other tests.
	t.Parallel()
	leasetest.Run(t, leasetest.Harness{
		Layout: lease.BlockLayout{FirstNode: 0, LastNode: 8*BlockSize - 1, Size: BlockSize},
		Blocks: 1,
		New:    newConformanceStore,
		// Each subtest has a directory of its own; directories are cheap.
		Parallel: true,
	})
}

// conformanceHorizon is the promise of the suite's stores.
const conformanceHorizon = 2 * time.Second

// newConformanceStore makes a fresh state directory and its hooks.
func newConformanceStore(t *testing.T) *leasetest.Store {
	path := filepath.Join(t.TempDir(), "state")
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	// edit runs fn on the parsed state under the directory's lock, and
	// writes what it returns (nil: nothing) with its framing made valid,
	// at the same generation: an edit by someone who knows the format.
	edit := func(t *testing.T, fn func(st *state) bool) {
		t.Helper()
		err := d.locked(context.Background(), func(*os.File) error {
			data, err := d.readStateFile()
			if err != nil {
				return err
			}
			st, err := parseState(data)
			if data == nil {
				st, err = state{records: map[int64][]byte{}}, nil
			}
			if err != nil {
				return fmt.Errorf("the state file: %w", err)
			}
			if !fn(&st) {
				return nil
			}
			return d.writeState(st)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return &leasetest.Store{
		Open: func(t *testing.T, p leasetest.Process) (lease.BlockStore, error) {
			if p.Layout.Size != BlockSize {
				return nil, fmt.Errorf("statedir: blocks of %d node IDs: a state directory's blocks are of %d", p.Layout.Size, BlockSize)
			}
			d, err := Open(path) // a handle of its own, as a new process
			if err != nil {
				return nil, err
			}
			st, err := d.Store(Options{FirstNode: p.Layout.FirstNode, LastNode: p.Layout.LastNode, Horizon: conformanceHorizon, Logger: quiet})
			if err != nil {
				return nil, err
			}
			h := &handle{Store: st}
			t.Cleanup(h.close)
			return h, nil
		},
		Kill: func(t *testing.T, s lease.BlockStore) {
			h, ok := s.(*handle)
			if !ok {
				t.Fatalf("Kill of %T, not a handle of the state directory", s)
			}
			h.close()
		},
		// Under the directory's lock, as edit: a step under way when the
		// files went would otherwise write its state back after them
		// (a run at load 20 saw a successor then trust the history).
		Wipe: func(t *testing.T) {
			err := d.locked(context.Background(), func(*os.File) error {
				if err := os.Remove(d.statePath()); err != nil && !errors.Is(err, os.ErrNotExist) {
					return err
				}
				return os.RemoveAll(filepath.Join(path, "blocks"))
			})
			if err != nil {
				t.Fatal(err)
			}
		},
		WipeKeepMarker: func(t *testing.T) {
			edit(t, func(st *state) bool {
				st.records = map[int64][]byte{}
				if err := os.RemoveAll(filepath.Join(path, "blocks")); err != nil {
					t.Error(err)
				}
				return true
			})
		},
		ReadRecord: func(t *testing.T, first int64) []byte {
			var raw []byte
			edit(t, func(st *state) bool { raw = st.records[first]; return false })
			return raw
		},
		WriteRecord: func(t *testing.T, first int64, raw []byte) {
			edit(t, func(st *state) bool {
				if raw == nil {
					delete(st.records, first)
				} else {
					st.records[first] = raw
				}
				st.fresh = false
				return true
			})
		},
		ReadMarker: func(t *testing.T) []byte {
			var raw []byte
			edit(t, func(st *state) bool { raw = st.marker; return false })
			return raw
		},
		WriteMarker: func(t *testing.T, raw []byte) {
			edit(t, func(st *state) bool {
				st.marker = raw
				st.fresh = false
				return true
			})
		},
		// A copy of the whole directory's history (state file and
		// generation) put back: undetectable, as documented.
		Save: func(t *testing.T) func(t *testing.T) {
			data, gen := saveState(t, d)
			return func(t *testing.T) {
				err := d.locked(context.Background(), func(lock *os.File) error {
					if err := writeGeneration(lock, gen); err != nil {
						return err
					}
					return writeDurably(d.statePath(), data)
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		},
		// The state file alone put back from an older copy: its marker
		// names an older generation than the lock file.
		Rollback: func(t *testing.T) func(t *testing.T) {
			data, _ := saveState(t, d)
			return func(t *testing.T) {
				if err := d.locked(context.Background(), func(*os.File) error { return writeDurably(d.statePath(), data) }); err != nil {
					t.Fatal(err)
				}
			}
		},
	}
}

// saveState copies the state file and the generation.
func saveState(t *testing.T, d *Dir) (data []byte, gen int64) {
	t.Helper()
	err := d.locked(context.Background(), func(lock *os.File) error {
		var err error
		if data, err = d.readStateFile(); err != nil {
			return err
		}
		if data == nil {
			return errors.New("no state file to save")
		}
		gen, err = readGeneration(lock)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return data, gen
}

// handle is one process's Store for the suite: Kill drops its claim as
// the kernel does at a process's death, and makes every later call fail.
type handle struct {
	*Store
	mu   sync.Mutex
	dead bool
}

var errKilled = errors.New("statedir: the process was killed")

// Update runs a step unless the handle was killed.
func (h *handle) Update(ctx context.Context, held lease.StoreClaim, all bool, fn func(*lease.StoreView) (*lease.StoreChanges, error)) (lease.StoreClaim, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dead {
		return nil, errKilled
	}
	return h.Store.Update(ctx, held, all, fn)
}

// Renew checks the claim unless the handle was killed.
func (h *handle) Renew(ctx context.Context, held lease.StoreClaim) (lease.StoreIdentity, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dead {
		return lease.StoreIdentity{}, errKilled
	}
	return h.Store.Renew(ctx, held)
}

// close drops the handle's claim, if it holds one, and kills it.
func (h *handle) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dead = true
	if c := h.Store.current(); c != nil {
		c.release()
	}
}
