package etcdlease

import (
	"errors"

	"github.com/randflake/randflake/lease"
)

// Errors of etcd leases. ErrNoFreeNodes and ErrClockBehind are the lease
// engine's errors.
var (
	// ErrNoFreeNodes: every block of node IDs is claimed (or used up, or
	// refused for its clock).
	ErrNoFreeNodes = lease.ErrNoFreeNodes
	// ErrClockBehind: every free block was used at times ahead of this
	// machine's clock, or up to seconds too far ahead to wait for.
	ErrClockBehind = lease.ErrClockBehind
	// ErrCorrupt: a key among the claims names no node ID; this package
	// never writes it, and refuses to guess which block it claims. (A
	// record that fails its check is not an error: the lease engine waits
	// out the history it cannot trust.)
	ErrCorrupt = errors.New("etcdlease: corrupt key under the prefix")
)
