package kubelease

import (
	"errors"

	"github.com/randflake/randflake/lease"
)

// Errors of Kubernetes leases. ErrNoFreeNodes and ErrClockBehind are the
// lease engine's own.
var (
	// ErrNoFreeNodes: every block of node IDs is claimed.
	ErrNoFreeNodes = lease.ErrNoFreeNodes
	// ErrClockBehind: the free blocks were used up to seconds ahead of
	// this machine's clock (it may have stepped back).
	ErrClockBehind = lease.ErrClockBehind
	// ErrCorrupt: a Lease object with the fleet's label whose name is
	// not one this package writes.
	ErrCorrupt = errors.New("kubelease: corrupt Lease object")
	// ErrClockSkew: the API server's clock and this machine's differ by
	// more than Config.MaxClockSkew.
	ErrClockSkew = errors.New("kubelease: this machine's clock and the API server's differ by more than MaxClockSkew")
)
