package leasetest

import (
	"testing"
	"time"

	"github.com/randflake/randflake/lease"
)

// Harness is what a store's tests give Run: the fleet layout to use and a
// way to make a fresh store, with its fault hooks, for each subtest.
type Harness struct {
	// Layout is the fleet's division of node IDs into blocks. The suite
	// claims every run of Blocks blocks at once in some subtests, so it
	// should hold from 4 to 32 runs: for example 8 blocks of 16 node IDs.
	Layout lease.BlockLayout
	// Blocks is the number of consecutive blocks a claim takes (0: 1).
	Blocks int64
	// New returns a fresh store for one subtest: empty, initialised as
	// the store's own setup leaves it (for example after its migration),
	// and shared with no other subtest, so that a wipe or a restore in one
	// subtest touches nothing else. It registers on t what removes the
	// store at the end.
	New func(t *testing.T) *Store
	// Parallel runs all the subtests at once, each on the store New made
	// for it (they mostly wait for seconds to pass, so -test.parallel
	// does not limit them). It shortens the suite from minutes to seconds
	// on a store that keeps many stores at once cheaply (in memory, a
	// database with a table per subtest); leave it false on a slow or
	// shared server.
	Parallel bool
	// MaxParallel, with Parallel, is how many subtests run at once at
	// most (0: all of them). A store that needs a server of its own per
	// subtest (etcd) sets it, so that a loaded machine does not starve
	// those servers until its claims lapse.
	MaxParallel int
	// Transient, if not nil, reports whether a failed claim failed only
	// because the store was slow (a step past its own timeout, not the
	// subtest's): a process's first claim is then tried again after a
	// pause, as a deployment starts a process again, up to MaxTransient
	// times, each logged; a release that fails so is logged, the source
	// having abandoned the claim. Nil: no claim error is transient.
	Transient func(err error) bool
}

// Store is one store under test and the hooks that fault it. Open is
// required. Every other hook may be nil when the store cannot provide it:
// the subtests that need it then skip, naming the hook. Hooks run while
// the store's holders run, and must act on the store as an operator or a
// failure would, without telling the holders.
type Store struct {
	// Open opens a handle on the store as a new process would: its own
	// connection or file handles, nothing shared with earlier handles. It
	// registers on t what closes the handle at the end (a close that
	// releases nothing the handle's BlockSource did not release).
	Open func(t *testing.T, p Process) (lease.BlockStore, error)
	// Addr is the store's TCP address (host:port), which Open connects
	// to when p.Addr is empty; empty if the store has no network
	// address. The suite puts a Proxy in front of it to cut one holder
	// off.
	Addr string
	// Kill stops a handle as a crash of its process would: its claims
	// are not released (a store whose claims are locks held by the
	// process, like file locks, frees them as the process's death
	// would), and every later call of the handle fails and changes
	// nothing.
	Kill func(t *testing.T, s lease.BlockStore)
	// Wipe deletes everything the store keeps: claims, records and the
	// fleet marker (as "etcdctl del --prefix" or "DELETE FROM" on every
	// table would). The store then shows no sign of initialisation.
	Wipe func(t *testing.T)
	// WipeKeepMarker deletes every claim and record but keeps the fleet
	// marker. Nil if the store cannot delete one without the other.
	WipeKeepMarker func(t *testing.T)
	// ReadRecord returns the raw record of the block whose first node ID
	// is first, nil if it has none.
	ReadRecord func(t *testing.T, first int64) []byte
	// WriteRecord replaces the raw record of the block whose first node
	// ID is first (nil: deletes it), leaving its claim alone.
	WriteRecord func(t *testing.T, first int64, raw []byte)
	// ReadMarker returns the raw fleet marker, nil if there is none.
	ReadMarker func(t *testing.T) []byte
	// WriteMarker replaces the raw fleet marker (nil: deletes it).
	WriteMarker func(t *testing.T, raw []byte)
	// Save takes a copy of the whole store and returns a function that
	// puts it back under the same identity, the way a backup restored
	// while no holder runs would: claims, records and marker as they
	// were. Nothing can detect such a restore; the suite checks that it
	// is not detected, and that BlockSource.ResetHistory then makes the
	// next claim wait.
	Save func(t *testing.T) (restore func(t *testing.T))
	// Rollback takes a copy of the whole store and returns a function that
	// puts it back in a way a running holder can see: the store's identity
	// changes, or its position goes back below one a holder has seen (an
	// etcd snapshot restore, a PostgreSQL point-in-time restore or
	// failover on a new timeline). Nil if the store cannot go back so.
	Rollback func(t *testing.T) (goBack func(t *testing.T))
}

// Process is how Store.Open opens a handle.
type Process struct {
	// Name names the process in the store, where the store records who
	// holds a claim ("holder-3").
	Name string
	// Addr is the address to connect to instead of Store.Addr (a Proxy's);
	// empty: Store.Addr.
	Addr string
	// Layout is the layout the process is configured with; it is the
	// Harness's except in the subtest of a process configured otherwise.
	Layout lease.BlockLayout
	// Now is the process's clock, for a store that reads one (nil:
	// time.Now). The suite offsets it to play a clock that jumped.
	Now func() time.Time
}

// Secret returns the fleet secret the suite's generators and block
// sources use, for a store that keeps or checks the secret itself.
func Secret() []byte { return []byte("leasetest-secret") }
