package statedir

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// Store is a lease.BlockStore on a state directory: the storage
// primitives of the lease engine, for the processes of one machine.
//
//   - A claim on a block is an flock on its lock file, blocks/NNNN (NNNN =
//     first node ID / BlockSize). The kernel drops the locks of a process
//     that exits or is killed, so claims never expire while their holder
//     lives and are free at once when it dies (StoreInfo.EndFor is nil):
//     only the promises recorded in the state file bound a lease.
//   - The records and the fleet marker live in the state file (described
//     in the package overview), replaced durably on every change.
//   - Every step (Update) runs under the directory's lock (flock on the
//     lock file, held for milliseconds), so steps never conflict.
//   - The store's identity is its generation: a count of state writes,
//     recorded in the lock file (which is never replaced) before each.
//     A state file put back from an older copy is seen as history that
//     went back.
//
// A Store is used by one lease.BlockSource at a time, as the
// interface requires; Dir.Source makes both.
type Store struct {
	dir      *Dir
	layout   lease.BlockLayout
	promise  time.Duration
	external bool
	log      *slog.Logger

	// mu guards held and the files of its claims.
	mu sync.Mutex
	// held is the claim the store made last, until it is released or lost
	// (its engine holds one lease at a time).
	held *storeClaim
}

// storeClaim is a Store's handle on claimed blocks: their lock files,
// locked.
type storeClaim struct {
	store  *Store
	firsts []int64    // first node IDs of the blocks, in order
	files  []*os.File // their lock files; nil once released or lost
}

// Store returns the state directory as a lease.BlockStore, with the
// node range, horizon and secret origin of opts (Options.Nodes is ignored:
// the claim size is the engine's, BlockSourceConfig.Blocks). Most callers
// want Source, which puts the lease engine on it.
func (d *Dir) Store(opts Options) (*Store, error) {
	if !flockSupported {
		return nil, ErrUnsupported
	}
	opts.Nodes = BlockSize // not the store's concern: any claim size fits
	c, err := opts.check()
	if err != nil {
		return nil, err
	}
	return d.store(opts, c), nil
}

func (d *Dir) store(opts Options, c checked) *Store {
	return &Store{dir: d, layout: lease.BlockLayout{FirstNode: c.first, LastNode: c.last, Size: BlockSize},
		promise: time.Duration(c.horizon) * time.Second, external: opts.ExternalSecret, log: c.log}
}

// Layout returns the division of the store's node IDs into blocks.
func (s *Store) Layout() lease.BlockLayout { return s.layout }

// Info describes the store: flocks that never expire while their holder
// lives, promises of Options.Horizon, recorded durably, and one machine's
// clock.
func (s *Store) Info() lease.StoreInfo {
	return lease.StoreInfo{
		Name:    "state directory " + s.dir.path,
		EndFor:  nil,
		Promise: s.promise,
		Durable: true,
	}
}

// claimOf checks a handle given to the store.
func (s *Store) claimOf(held lease.StoreClaim) (*storeClaim, error) {
	if held == nil {
		return nil, nil
	}
	c, ok := held.(*storeClaim)
	if !ok || c == nil || c.store != s {
		return nil, fmt.Errorf("statedir: %s: a claim handle of another store (%T)", s.dir.path, held)
	}
	return c, nil
}

// live checks that the claim's lock files are still locked by it and
// still the files at their paths. If not (released, or a file removed or
// replaced), it drops the claim and returns an error wrapping
// randflake.ErrLeaseLost.
func (c *storeClaim) live() error {
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	if c.files == nil {
		return fmt.Errorf("statedir: %s: the claim was released: %w", c.store.dir.path, randflake.ErrLeaseLost)
	}
	for i, f := range c.files {
		if !sameFile(f, c.store.dir.blockPath(c.firsts[i])) {
			c.releaseLocked()
			return fmt.Errorf("statedir: the lock file of node IDs %d-%d, %s, was removed or replaced: %w",
				c.firsts[i], c.firsts[i]+BlockSize-1, c.store.dir.blockPath(c.firsts[i]), randflake.ErrLeaseLost)
		}
	}
	return nil
}

// release frees the claim's blocks.
func (c *storeClaim) release() {
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	c.releaseLocked()
}

func (c *storeClaim) releaseLocked() {
	closeAll(c.files)
	c.files = nil
	if c.store.held == c {
		c.store.held = nil
	}
}

// current returns the claim the store holds, if any.
func (s *Store) current() *storeClaim {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// Update runs one step of the engine under the directory's lock: it reads
// the state file, the generation and (for every block of the layout, if
// all is set) which blocks someone holds, calls fn, and applies its
// changes: it locks the blocks claimed (all of them or none:
// lease.ErrBlockHeld), records the next generation in the lock file,
// writes the state file, and then releases the held claim if asked.
// Nothing else writes while the lock is held, so a step never conflicts.
func (s *Store) Update(ctx context.Context, held lease.StoreClaim, all bool, fn func(*lease.StoreView) (*lease.StoreChanges, error)) (lease.StoreClaim, error) {
	c, err := s.claimOf(held)
	if err != nil {
		return nil, err
	}
	result := held
	err = s.dir.locked(ctx, func(lock *os.File) error {
		if c != nil {
			if err := c.live(); err != nil {
				return err
			}
		}
		r, err := s.read(lock, c, all)
		if err != nil {
			return err
		}
		ch, err := fn(r.view)
		if err != nil || ch == nil {
			return err
		}
		claimed, err := s.apply(lock, r, c, ch)
		if claimed != nil {
			result = claimed
		}
		return err
	})
	return result, err
}

// The warnings of a secret from outside the directory (Options.ExternalSecret)
// on history recorded for the directory's own secret. The engine is shown
// no marker then (read), so its own line gives the reason as "the store
// has no fleet marker (never initialised, or wiped)"; these say the real
// one, and that the wait comes once.
const (
	outsideSecretUsed = "statedir: this process's secret comes from outside the directory (a secret file or variable), " +
		"but the directory's history was recorded under the secret the directory made itself: IDs under the outside secret " +
		"may have been issued on these node IDs elsewhere, so the engine is not shown the fleet marker and its first claim " +
		"waits out the horizon (logged next as \"no fleet marker\"; about 11 s by default). This happens once: the state " +
		"then records it, and later starts on this directory, on either secret, do not wait. A process that needs no " +
		"outside secret can use the directory's own (the command: no --secret-file, $RANDFLAKE_SECRET_FILE or $RANDFLAKE_SECRET)"
	outsideSecretNew = "statedir: this process's secret comes from outside the directory (a secret file or variable), " +
		"and the directory is new: IDs under that secret may have been issued on these node IDs before the directory " +
		"existed (a container restarted on an empty directory), so the first claim waits out the horizon " +
		"(logged next as \"no fleet marker\"; about 11 s by default). This happens once: the state then records it"
)

// reading is what a step read.
type reading struct {
	view    *lease.StoreView
	st      state
	gen     int64  // the lock file's generation, -1 if unreadable
	damaged []byte // the state file's bytes, if it failed its check
	blocks  map[int64]bool
}

// read reads the directory for a step.
func (s *Store) read(lock *os.File, c *storeClaim, all bool) (*reading, error) {
	if err := s.dir.checkBlocksDir(); err != nil {
		return nil, err
	}
	gen, err := readGeneration(lock)
	if err != nil {
		return nil, err
	}
	r := &reading{gen: gen, blocks: map[int64]bool{}}
	data, err := s.dir.readStateFile()
	if err != nil {
		return nil, err
	}
	switch st, err := parseState(data); {
	case data == nil:
		r.st = state{records: map[int64][]byte{}}
		s.log.Warn("statedir: no state file: the history of the node IDs is unknown", "dir", s.dir.path)
	case errors.Is(err, errUnverified):
		r.st, r.damaged = state{records: map[int64][]byte{}}, data
		s.log.Warn("statedir: the state file fails its check: the history of the node IDs is unknown; the file is kept as state.corrupt when replaced",
			"dir", s.dir.path, "reason", err.Error())
	case err != nil:
		return nil, fmt.Errorf("%w, in %s: move it away after checking it (the next start then waits out the horizon)", err, s.dir.statePath())
	default:
		r.st = st
	}
	next := max(gen, r.st.generation) + 1
	v := &lease.StoreView{
		Identity: lease.StoreIdentity{ID: generationID(gen)},
		NextID:   generationID(next),
		Marker:   r.st.marker,
		Fresh:    r.st.fresh && r.st.generation == gen && !s.external,
	}
	if s.external && !r.st.external && r.st.marker != nil {
		// The history is complete for the directory's own secret only: IDs
		// under this secret may have been issued on these node IDs before
		// (elsewhere, or before the directory existed). Without its marker
		// the engine waits the history out once, and the file then says
		// so.
		v.Marker = nil
		s.log.Warn(outsideSecretUsed, "dir", s.dir.path)
	} else if s.external && !r.st.external && r.st.marker == nil && r.st.fresh {
		// The same for a directory created just now: Fresh is false for
		// an outside secret, and the engine waits once.
		s.log.Warn(outsideSecretNew, "dir", s.dir.path)
	}
	var heldNow map[int64]bool
	if all {
		if heldNow, err = s.dir.heldBlocks(s.layout.FirstNode, s.layout.LastNode); err != nil {
			return nil, err
		}
		for i := int64(0); i < s.layout.Count(); i++ {
			first, last := s.layout.Block(i)
			v.Blocks = append(v.Blocks, lease.BlockState{First: first, Last: last, Record: r.st.records[first], Held: heldNow[first]})
			r.blocks[first] = true
		}
	} else if c != nil {
		for _, first := range c.firsts {
			v.Blocks = append(v.Blocks, lease.BlockState{First: first, Last: first + BlockSize - 1, Record: r.st.records[first], Held: true})
			r.blocks[first] = true
		}
	}
	r.view = v
	return r, nil
}

// apply applies a step's changes. It returns the new claim, if any.
func (s *Store) apply(lock *os.File, r *reading, c *storeClaim, ch *lease.StoreChanges) (*storeClaim, error) {
	for f, raw := range ch.Records {
		if !r.blocks[f] {
			return nil, fmt.Errorf("statedir: %s: a step writes the record of node %d, which it did not read", s.dir.path, f)
		}
		if err := checkStored("a record", raw); err != nil {
			return nil, err
		}
	}
	if ch.Marker != nil {
		if err := checkStored("the marker", ch.Marker); err != nil {
			return nil, err
		}
	}
	claimed, err := s.lockClaim(r, c, ch.Claim)
	if err != nil {
		return nil, err
	}
	if ch.Marker != nil || len(ch.Records) > 0 {
		if err := s.write(lock, r, ch); err != nil {
			if claimed != nil {
				claimed.release()
			}
			return nil, err
		}
	}
	if ch.Release && c != nil {
		c.release()
	}
	return claimed, nil
}

// lockClaim locks the blocks of a claim, all of them or none.
func (s *Store) lockClaim(r *reading, c *storeClaim, firsts []int64) (*storeClaim, error) {
	if len(firsts) == 0 {
		return nil, nil
	}
	if c != nil {
		return nil, fmt.Errorf("statedir: %s: a step claims blocks while holding a claim", s.dir.path)
	}
	for i, f := range firsts {
		if !r.blocks[f] || (i > 0 && f != firsts[i-1]+BlockSize) {
			return nil, fmt.Errorf("statedir: %s: a claim of blocks %v, not consecutive blocks read by the step", s.dir.path, firsts)
		}
	}
	claimed := &storeClaim{store: s, firsts: firsts}
	for _, f := range firsts {
		file, err := s.dir.lockBlock(f)
		if err != nil || file == nil {
			closeAll(claimed.files)
			if err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("statedir: %s: node IDs %d-%d: %w", s.dir.path, f, f+BlockSize-1, lease.ErrBlockHeld)
		}
		claimed.files = append(claimed.files, file)
	}
	s.mu.Lock()
	s.held = claimed
	s.mu.Unlock()
	return claimed, nil
}

// write records the next generation in the lock file, then writes the
// state file with the step's marker and records.
func (s *Store) write(lock *os.File, r *reading, ch *lease.StoreChanges) error {
	next := max(r.gen, r.st.generation) + 1
	st := state{
		generation: next,
		// History the engine found unknown (no marker it could see, and
		// not fresh) is waited out by everyone from now on, whatever
		// their secret: complete for secrets from outside too.
		external: r.st.external || (r.view.Marker == nil && !r.view.Fresh && ch.Marker != nil),
		fresh:    r.st.fresh && ch.Marker == nil && len(ch.Records) == 0,
		marker:   r.st.marker,
		records:  make(map[int64][]byte, len(r.st.records)+len(ch.Records)),
	}
	for f, raw := range r.st.records {
		st.records[f] = raw
	}
	for f, raw := range ch.Records {
		if raw == nil {
			delete(st.records, f)
		} else {
			st.records[f] = raw
		}
	}
	if ch.Marker != nil {
		st.marker = ch.Marker
	}
	data, err := formatState(st)
	if err != nil {
		return err
	}
	if r.damaged != nil {
		if err := writeDurably(s.dir.statePath()+".corrupt", r.damaged); err != nil {
			s.log.Warn("statedir: could not keep a copy of the state file", "err", err)
		}
	}
	if err := writeGeneration(lock, next); err != nil {
		return err
	}
	return writeDurably(s.dir.statePath(), data)
}

// Renew checks that the claim still holds its lock files. A flock does
// not expire, so there is nothing else to renew; the identity returned is
// the directory's generation now.
func (s *Store) Renew(ctx context.Context, held lease.StoreClaim) (lease.StoreIdentity, error) {
	if held == nil {
		return lease.StoreIdentity{}, fmt.Errorf("statedir: %s: no claim to renew", s.dir.path)
	}
	c, err := s.claimOf(held)
	if err != nil {
		return lease.StoreIdentity{}, err
	}
	var id lease.StoreIdentity
	err = s.dir.locked(ctx, func(lock *os.File) error {
		if err := c.live(); err != nil {
			return err
		}
		gen, err := readGeneration(lock)
		id.ID = generationID(gen)
		return err
	})
	return id, err
}

// checkBlocksDir checks blocks/, creating it again if it was removed.
func (d *Dir) checkBlocksDir() error {
	blocks := filepath.Join(d.path, "blocks")
	if err := os.Mkdir(blocks, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("statedir: %w", err)
	}
	return checkDir(blocks)
}
