package randflake

// The drop-in surface: the names of the reference implementation,
// gosuda.org/randflake, so that code written for it compiles unchanged
// against this package. Each is the same value as its idiomatic
// counterpart, which the rest of the package uses.

// The layout of a Randflake ID under the reference's names.
const (
	// RANDFLAKE_EPOCH_OFFSET is Epoch.
	RANDFLAKE_EPOCH_OFFSET = Epoch
	// RANDFLAKE_TIMESTAMP_BITS is TimestampBits.
	RANDFLAKE_TIMESTAMP_BITS = TimestampBits
	// RANDFLAKE_NODE_BITS is NodeBits.
	RANDFLAKE_NODE_BITS = NodeBits
	// RANDFLAKE_SEQUENCE_BITS is SequenceBits.
	RANDFLAKE_SEQUENCE_BITS = SequenceBits
	// RANDFLAKE_MAX_TIMESTAMP is MaxTimestamp.
	RANDFLAKE_MAX_TIMESTAMP = MaxTimestamp
	// RANDFLAKE_MAX_NODE is MaxNode.
	RANDFLAKE_MAX_NODE = MaxNode
	// RANDFLAKE_MAX_SEQUENCE is MaxSequence.
	RANDFLAKE_MAX_SEQUENCE = MaxSequence
)

// ErrRandflakeDead is ErrLifetimeOver under the reference's name.
var ErrRandflakeDead = ErrLifetimeOver

// LeaseInfo describes the lease of a Generator (the reference's type; see
// Generator.Lease for this package's).
type LeaseInfo struct {
	NodeID     int64
	LeaseStart int64
	LeaseEnd   int64
}

// GetLeaseInfo returns the generator's node ID and current lease.
func (g *Generator) GetLeaseInfo() LeaseInfo {
	l := g.lease()
	return LeaseInfo{NodeID: l.FirstNode, LeaseStart: l.Start, LeaseEnd: l.End}
}
