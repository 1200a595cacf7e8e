package randflake

// The layout of a Randflake ID's plaintext: timestamp, node ID, sequence.
const (
	// Epoch is the Unix time of timestamp zero: 2024-10-27 03:33:20 UTC.
	Epoch = 1730000000
	// TimestampBits is the width of the timestamp: 34 years of seconds.
	TimestampBits = 30
	// NodeBits is the width of the node ID.
	NodeBits = 17
	// SequenceBits is the width of the per-second sequence number.
	SequenceBits = 17

	// MaxTimestamp is the last Unix second an ID can carry:
	// 2058-11-05 17:10:23 UTC.
	MaxTimestamp = Epoch + 1<<TimestampBits - 1
	// MaxNode is the largest node ID, 131071.
	MaxNode = 1<<NodeBits - 1
	// MaxSequence is the largest sequence number in a second, 131071.
	MaxSequence = 1<<SequenceBits - 1
	// IDsPerSecond is the number of IDs one node ID may issue per second.
	IDsPerSecond = MaxSequence + 1
)

// rawID assembles an unencrypted ID.
func rawID(sec, nodeID int64, seq int64) uint64 {
	return uint64(sec-Epoch)<<(NodeBits+SequenceBits) |
		uint64(nodeID)<<SequenceBits | uint64(seq)
}

// splitRaw takes an unencrypted ID apart.
func splitRaw(raw uint64) (timestamp, nodeID, sequence int64) {
	timestamp = int64(raw>>(NodeBits+SequenceBits)) + Epoch
	nodeID = int64(raw>>SequenceBits) & MaxNode
	sequence = int64(raw) & MaxSequence
	return
}
