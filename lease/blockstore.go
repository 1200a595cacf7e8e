package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/randflake/randflake"
)

// A BlockStore keeps the claims on blocks of node IDs and their history: the
// storage primitives of a lease source, and nothing else. The rules that make
// leases safe (where a lease starts, how far ahead a promise is recorded, what
// unknown or rolled-back history costs, which clocks are trusted) live in one
// place, BlockSource, which turns any BlockStore into a
// [randflake.LeaseSource]. The state directory (package statedir), etcd
// (module etcdlease), PostgreSQL (module pglease) and the Kubernetes API
// (module kubelease) are BlockStores; package leasetest checks a BlockStore
// against the rules.
//
// The store sees records and the marker as opaque bytes: BlockSource
// writes them, signed under the fleet secret, and checks them when it
// reads them back. A store never interprets, repairs or drops them.
//
// A store is used by one BlockSource, which calls it from one goroutine at
// a time.
type BlockStore interface {
	// Info describes the store's claims, once, before any other call.
	Info() StoreInfo
	// Update runs one atomic step. It reads the store (the marker, and either
	// every block of the fleet's range, if all is set, or only the blocks of
	// held, if held is not nil), calls fn once with what it read, and applies
	// the changes fn returns all together or not at all. The held claim, if
	// any, must still be this store's: if it is not (it expired and was taken
	// over), Update returns an error wrapping [randflake.ErrLeaseLost] without
	// calling fn. If another writer changed what was read before the changes
	// could be applied, the store either runs the whole step again (calling fn
	// again with the new contents) or returns ErrStoreConflict; BlockSource
	// retries that. A claim of a block that turns out to be held returns
	// ErrBlockHeld. An error of fn is returned as it is, and nothing is
	// changed.
	//
	// When the changes claim blocks, Update returns the new claim's
	// handle, which the store alone interprets; otherwise it returns
	// held.
	Update(ctx context.Context, held StoreClaim, all bool, fn func(*StoreView) (*StoreChanges, error)) (StoreClaim, error)
	// Renew keeps the claim alive. After it returns without error, no one else
	// can claim the blocks before the end that StoreInfo.EndFor gives for t0,
	// a time taken before Renew was called. It also reports the store's
	// identity and position as seen by the renewal. An error wrapping
	// [randflake.ErrLeaseLost] means the claim is gone for good; a store that
	// read its identity reports it with the loss too, so that a claim lost
	// because the store went back to a copy in which it had lapsed is known as
	// the rollback it is (ErrHistoryRolledBack). Other errors are transient
	// (the store unreachable): the claim stays valid until the last end given.
	Renew(ctx context.Context, held StoreClaim) (StoreIdentity, error)
}

// StoreInfo describes how a store's claims behave in time.
type StoreInfo struct {
	// Name names the store in errors and logs ("etcd /randflake/",
	// "postgres randflake_blocks", "state directory /path").
	Name string
	// EndFor returns the last whole second a holder may use after a claim
	// or renewal begun at t0 succeeded: the claim cannot pass to anyone
	// else before that second has ended, on the holder's clock, with the
	// store's margins for clock skew included. Nil means claims do not
	// expire while the holder lives (file locks): the promise alone bounds
	// the lease.
	EndFor func(t0 time.Time) int64
	// Promise is how far ahead of the clock the holder records the seconds
	// it may use: promises are written at most every Promise/2 or so, and
	// a crashed holder's blocks are reusable Promise after its last
	// promise at the latest. It must cover EndFor (a lease never ends
	// after its promise).
	Promise time.Duration
	// Durable is false for a store that records nothing (a static node
	// range): BlockSource then relies on the deployment alone (no two
	// holders at once) and on the clock, and starts a lease after now +
	// MaxClockSkew.
	Durable bool
	// MaxClockSkew is how far the clocks of the holders may differ (for a
	// store that records nothing, how far a restarted holder's clock may
	// be behind its predecessor's).
	MaxClockSkew time.Duration
}

// StoreIdentity is what a store can say about which history it holds.
type StoreIdentity struct {
	// ID names the store's history: an etcd cluster ID, a PostgreSQL
	// system identifier and timeline, a state directory's generation. It
	// changes when the store is replaced by a copy that may be older (a
	// restore, a failover to a replica that may lack the last writes).
	// Empty: the store cannot tell.
	ID string
	// Position is a counter of the store's writes that never goes back
	// while the history is the same (an etcd revision, a PostgreSQL WAL
	// position); 0 if the store has none. BlockSource remembers the
	// highest it saw: a lower one means the store went back in time.
	Position uint64
}

// StoreClaim is a store's handle on claimed blocks. Only the store that
// made it interprets it.
type StoreClaim interface{}

// StoreView is what one atomic step of a store read.
type StoreView struct {
	// Identity is the store's identity when read.
	Identity StoreIdentity
	// NextID is the identity the store will have once this step's changes
	// are applied; it differs from Identity.ID only for stores whose
	// identity counts their writes (the state directory). The marker
	// written in the step records it.
	NextID string
	// Marker is the fleet marker, nil if the store has none.
	Marker []byte
	// Fresh is true while the store was created empty by its own
	// initialisation (pglease.Migrate on a database without the tables,
	// a state directory together with its secret) and no marker has been
	// written since: no ID can have been issued on it.
	Fresh bool
	// Blocks are the blocks read, in order of their first node ID.
	Blocks []BlockState
	// Clock is the store's own clock when read, for a store that has one
	// (PostgreSQL's clock_timestamp(), the API server's Date); zero
	// otherwise. Only status reports use it.
	Clock time.Time
}

// BlockState is one block as read.
type BlockState struct {
	// First and Last bound its node IDs.
	First, Last int64
	// Record is its record, nil if it has none.
	Record []byte
	// Held reports whether someone holds a claim on it that has not
	// expired (for the held claim's own blocks: whether it is still
	// this store's).
	Held bool
	// Holder names the holder of a held block as the store knows it (a
	// holder name, a pod), for status reports; "" where the store does
	// not say.
	Holder string
}

// StoreChanges is what one atomic step writes.
type StoreChanges struct {
	// Marker replaces the marker (nil: unchanged).
	Marker []byte
	// Records replaces the records of these blocks, keyed by first node
	// ID. Only blocks that were read may be written.
	Records map[int64][]byte
	// Claim claims these blocks (first node IDs, consecutive), each of
	// which must be free: otherwise the step fails with ErrBlockHeld.
	Claim []int64
	// Release frees the held claim's blocks.
	Release bool
}

// Errors of block stores.
var (
	// ErrStoreConflict: another writer changed the store during an atomic
	// step; the step changed nothing and may be run again.
	ErrStoreConflict = errors.New("randflake: the lease store changed during the update")
	// ErrBlockHeld: a block to be claimed is held by someone else.
	ErrBlockHeld = errors.New("randflake: the block of node IDs is held by someone else")
	// ErrNoFreeNodes: every block of node IDs in the range is held, used
	// up, or refused for its clock.
	ErrNoFreeNodes = errors.New("randflake: every node-ID block is claimed")
	// ErrClockBehind: this machine's clock reads earlier than a time
	// recorded for every free block, or a block's history lies too far
	// ahead of it to wait for.
	ErrClockBehind = errors.New("randflake: this machine's clock is behind the times recorded for the free node IDs")
	// ErrHistoryRolledBack: the store went back in time (a restore or a
	// failover) while this process held a claim; the claim is dropped and
	// the store's history marked unknown.
	ErrHistoryRolledBack = errors.New("randflake: the lease store went back in time (restored or failed over)")
	// ErrFleetMismatch: the store's marker records another node range or
	// block size than this process was configured with.
	ErrFleetMismatch = errors.New("randflake: the lease store belongs to a fleet configured differently")
	// ErrBeyondHorizon: the store would promise further ahead than the
	// fleet's horizon (BlockSourceConfig.Horizon), which every member
	// waits out after a wipe: raise the horizon on every member first.
	ErrBeyondHorizon = errors.New("randflake: a promise beyond the fleet's horizon")
)

// Block geometry shared by BlockSource and the stores.

// BlockLayout is the fleet's division of node IDs into blocks: blocks of
// Size node IDs from FirstNode, aligned to it, up to LastNode.
type BlockLayout struct {
	FirstNode, LastNode int64
	// Size is the number of node IDs per block, a divisor of
	// LastNode-FirstNode+1.
	Size int64
}

// NewBlockLayout returns the layout a store module's Config describes:
// blocks of size node IDs (0: defaultSize) over first-last (0-0: every
// node ID). The range must be valid and the size must divide it; the error
// says which is not, for the caller to prefix with its name.
func NewBlockLayout(first, last, size, defaultSize int64) (BlockLayout, error) {
	if size == 0 {
		size = defaultSize
	}
	if first == 0 && last == 0 {
		last = randflake.MaxNode
	}
	l := BlockLayout{FirstNode: first, LastNode: last, Size: size}
	if err := randflake.CheckNodeRange(first, last); err != nil {
		return BlockLayout{}, err
	}
	if !l.divides() {
		return BlockLayout{}, fmt.Errorf("blocks of %d node IDs: want a number that divides the %d node IDs of the range %d-%d",
			size, last-first+1, first, last)
	}
	return l, nil
}

// Check checks the layout.
func (b BlockLayout) Check() error {
	if err := randflake.CheckNodeRange(b.FirstNode, b.LastNode); err != nil {
		return err
	}
	if !b.divides() {
		return fmt.Errorf("randflake: blocks of %d node IDs do not divide the range %d-%d", b.Size, b.FirstNode, b.LastNode)
	}
	return nil
}

// divides reports whether the blocks' size divides the range.
func (b BlockLayout) divides() bool { return b.Size >= 1 && (b.LastNode-b.FirstNode+1)%b.Size == 0 }

// Count returns the number of blocks.
func (b BlockLayout) Count() int64 { return (b.LastNode - b.FirstNode + 1) / b.Size }

// Block returns the first and last node ID of block i.
func (b BlockLayout) Block(i int64) (first, last int64) {
	first = b.FirstNode + i*b.Size
	return first, first + b.Size - 1
}
