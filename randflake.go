// Package randflake generates Randflake IDs: unique, unpredictable 64-bit
// IDs made of a timestamp, a node ID and a sequence number, encrypted with
// the Sparx-64/128 block cipher under a 16-byte secret.
//
// An ID's plaintext is
//
//	timestamp (30 bits, seconds since RANDFLAKE_EPOCH_OFFSET) << 34 |
//	node ID (17 bits) << 17 | sequence (17 bits)
//
// Outsiders see random-looking 64-bit numbers and cannot predict the next or
// previous one; the secret's holder can read the time and node back with
// Inspect. Each node ID issues at most 131,072 IDs per second.
//
// The package is a drop-in replacement for gosuda.org/randflake: the same
// constants, errors, Generator API and bit-exact IDs and strings. It adds a
// sharded, lock-free generator (Sharded), batch generation on SIMD kernels
// (GenerateBatch, Sparx64.EncryptIDs), an ID type for applications, and it
// never issues the same ID twice, whatever the clock does.
package randflake

import (
	"errors"
	"sync/atomic"
)

// The layout of a Randflake ID, with the reference implementation's names.
const (
	// RANDFLAKE_EPOCH_OFFSET is the Unix time of timestamp zero:
	// 2024-10-27 03:33:20 UTC.
	RANDFLAKE_EPOCH_OFFSET = 1730000000

	// RANDFLAKE_TIMESTAMP_BITS is the width of the timestamp (34 years).
	RANDFLAKE_TIMESTAMP_BITS = 30
	// RANDFLAKE_NODE_BITS is the width of the node ID.
	RANDFLAKE_NODE_BITS = 17
	// RANDFLAKE_SEQUENCE_BITS is the width of the per-second sequence.
	RANDFLAKE_SEQUENCE_BITS = 17

	// RANDFLAKE_MAX_TIMESTAMP is the last Unix second an ID can carry:
	// 2058-11-05 17:10:23 UTC.
	RANDFLAKE_MAX_TIMESTAMP = RANDFLAKE_EPOCH_OFFSET + 1<<RANDFLAKE_TIMESTAMP_BITS - 1
	// RANDFLAKE_MAX_NODE is the largest node ID, 131071.
	RANDFLAKE_MAX_NODE = 1<<RANDFLAKE_NODE_BITS - 1
	// RANDFLAKE_MAX_SEQUENCE is the largest sequence number, 131071.
	RANDFLAKE_MAX_SEQUENCE = 1<<RANDFLAKE_SEQUENCE_BITS - 1
)

// Idiomatic names for the layout constants.
const (
	Epoch        = RANDFLAKE_EPOCH_OFFSET     // Unix time of timestamp zero
	MaxTimestamp = RANDFLAKE_MAX_TIMESTAMP    // last Unix second an ID can carry
	MaxNode      = RANDFLAKE_MAX_NODE         // largest node ID
	MaxSequence  = RANDFLAKE_MAX_SEQUENCE     // largest sequence number in a second
	IDsPerSecond = RANDFLAKE_MAX_SEQUENCE + 1 // IDs one node ID may issue per second
)

// Errors, with the reference implementation's names and texts.
var (
	// ErrRandflakeDead: a lease reaches past RANDFLAKE_MAX_TIMESTAMP.
	ErrRandflakeDead = errors.New("randflake: the randflake id is dead after 34 years of lifetime")
	// ErrInvalidSecret: the secret is not 16 bytes long.
	ErrInvalidSecret = errors.New("randflake: invalid secret, secret must be 16 bytes long")
	// ErrInvalidLease: the lease is malformed, or the clock is outside it.
	ErrInvalidLease = errors.New("randflake: invalid lease, lease expired or not started yet")
	// ErrInvalidNode: a node ID outside 0..131071.
	ErrInvalidNode = errors.New("randflake: invalid node id, node id must be between 0 and 131071")
	// ErrResourceExhausted: every sequence number of the current second is
	// used on every node ID the generator owns.
	ErrResourceExhausted = errors.New("randflake: resource exhausted (generator can't handle current throughput, try using multiple randflake instances)")
	// ErrConsistencyViolation: the clock stepped back and the newest second
	// already seen has no sequence numbers left.
	ErrConsistencyViolation = errors.New("randflake: timestamp consistency violation, the current time is less than the last time")
	// ErrInvalidID: a string that is not a Randflake ID.
	ErrInvalidID = errors.New("randflake: invalid id")
)

// LeaseInfo describes the lease of a Generator.
type LeaseInfo struct {
	NodeID     int64
	LeaseStart int64
	LeaseEnd   int64
}

// Generator issues IDs for one node ID. It is safe for concurrent use.
//
// Each (second, node, sequence) triple is issued at most once: the sequence
// starts again at 0 in every new second, and when the clock steps back the
// generator keeps issuing from the newest second it has seen while that
// second has sequence numbers left, then returns ErrConsistencyViolation
// until the clock catches up. IDs are only issued for seconds inside the
// lease.
type Generator struct {
	node       node
	leaseStart int64
	leaseEnd   atomic.Int64
	nodeID     int64
	cipher     *Sparx64

	// TimeSource, if set, returns the current Unix time in seconds and is
	// called once per Generate or GenerateBatch call. If nil, the package's
	// coarse clock is used: the wall clock, refreshed at least every 10ms.
	TimeSource func() int64
}

// NewGenerator returns a generator for nodeID holding a lease on it from
// leaseStart to leaseEnd inclusive (Unix seconds). secret must be 16 bytes.
func NewGenerator(nodeID int64, leaseStart int64, leaseEnd int64, secret []byte) (*Generator, error) {
	if err := checkLease(leaseStart, leaseEnd); err != nil {
		return nil, err
	}
	if nodeID < 0 || nodeID > RANDFLAKE_MAX_NODE {
		return nil, ErrInvalidNode
	}
	c, err := newIDCipher(secret)
	if err != nil {
		return nil, err
	}
	g := &Generator{leaseStart: leaseStart, nodeID: nodeID, cipher: c}
	g.leaseEnd.Store(leaseEnd)
	return g, nil
}

func checkLease(leaseStart, leaseEnd int64) error {
	if leaseEnd < leaseStart || leaseStart < RANDFLAKE_EPOCH_OFFSET {
		return ErrInvalidLease
	}
	if leaseEnd > RANDFLAKE_MAX_TIMESTAMP {
		return ErrRandflakeDead
	}
	return nil
}

func newIDCipher(secret []byte) (*Sparx64, error) {
	if len(secret) != Sparx64KeySize {
		return nil, ErrInvalidSecret
	}
	return NewSparx64(secret)
}

// UpdateLease extends the lease. It reports whether the lease end moved:
// leaseStart must equal the generator's, and leaseEnd must be later than
// the current end and no later than RANDFLAKE_MAX_TIMESTAMP.
func (g *Generator) UpdateLease(leaseStart, leaseEnd int64) bool {
	return updateLease(g.leaseStart, &g.leaseEnd, leaseStart, leaseEnd)
}

func updateLease(start int64, end *atomic.Int64, leaseStart, leaseEnd int64) bool {
	if leaseStart != start || leaseEnd < leaseStart || leaseEnd > RANDFLAKE_MAX_TIMESTAMP {
		return false
	}
	for {
		cur := end.Load()
		if leaseEnd <= cur {
			return false
		}
		if end.CompareAndSwap(cur, leaseEnd) {
			return true
		}
	}
}

// GetLeaseInfo returns the generator's node ID and current lease.
func (g *Generator) GetLeaseInfo() LeaseInfo {
	return LeaseInfo{NodeID: g.nodeID, LeaseStart: g.leaseStart, LeaseEnd: g.leaseEnd.Load()}
}

// now returns the generator's clock: the TimeSource, or else the coarse
// clock, moved to the wall clock's second when it still reads a second
// before the lease's start (it lags by up to clockTick at a boundary).
func (g *Generator) now() int64 {
	if g.TimeSource != nil {
		return g.TimeSource()
	}
	now := coarseNow()
	if now < g.leaseStart {
		now = wallAtLeast(now)
	}
	return now
}

// Generate returns a new encrypted ID.
func (g *Generator) Generate() (int64, error) {
	sec, seq, _, err := g.node.reserve(g.now(), 1, g.leaseStart, g.leaseEnd.Load())
	if err != nil {
		return 0, err
	}
	return int64(g.cipher.EncryptID(rawID(sec, g.nodeID, seq))), nil
}

// GenerateString returns a new encrypted ID in its string form (see
// EncodeString).
func (g *Generator) GenerateString() (string, error) {
	id, err := g.Generate()
	if err != nil {
		return "", err
	}
	return EncodeString(id), nil
}

// GenerateBatch fills dst with new IDs, reserving the sequence numbers with
// one atomic operation and encrypting them with the SIMD kernel. It returns
// the number of IDs written; if that is less than len(dst), the error says
// why (the current second's sequence space ran out, or the lease).
func (g *Generator) GenerateBatch(dst []int64) (int, error) {
	now := g.now()
	done := 0
	var err error
	for done < len(dst) {
		var sec, seq int64
		var n int
		sec, seq, n, err = g.node.reserve(now, len(dst)-done, g.leaseStart, g.leaseEnd.Load())
		if err != nil {
			break
		}
		fillRaw(dst[done:done+n], rawID(sec, g.nodeID, seq))
		done += n
	}
	encryptInt64s(g.cipher, dst[:done])
	return done, err
}

// Inspect decrypts id and returns its Unix timestamp, node ID and sequence
// number. Every timestamp up to RANDFLAKE_MAX_TIMESTAMP (2058) is read back.
// The secret is not checked: an ID made under another secret decrypts to
// arbitrary fields.
func (g *Generator) Inspect(id int64) (timestamp int64, nodeID int64, sequence int64, err error) {
	timestamp, nodeID, sequence = splitRaw(g.cipher.DecryptID(uint64(id)))
	return timestamp, nodeID, sequence, nil
}

// InspectString is Inspect for the string form of an ID. Malformed strings
// return ErrInvalidID.
func (g *Generator) InspectString(id string) (timestamp int64, nodeID int64, sequence int64, err error) {
	v, err := DecodeString(id)
	if err != nil {
		return 0, 0, 0, err
	}
	return g.Inspect(v)
}

// rawID assembles an unencrypted ID.
func rawID(sec, nodeID int64, seq int64) uint64 {
	return uint64(sec-RANDFLAKE_EPOCH_OFFSET)<<(RANDFLAKE_NODE_BITS+RANDFLAKE_SEQUENCE_BITS) |
		uint64(nodeID)<<RANDFLAKE_SEQUENCE_BITS | uint64(seq)
}

// splitRaw takes an unencrypted ID apart.
func splitRaw(raw uint64) (timestamp, nodeID, sequence int64) {
	timestamp = int64(raw>>(RANDFLAKE_NODE_BITS+RANDFLAKE_SEQUENCE_BITS)) + RANDFLAKE_EPOCH_OFFSET
	nodeID = int64(raw>>RANDFLAKE_SEQUENCE_BITS) & RANDFLAKE_MAX_NODE
	sequence = int64(raw) & RANDFLAKE_MAX_SEQUENCE
	return
}

// fillRaw writes consecutive raw IDs starting at first.
func fillRaw(dst []int64, first uint64) {
	for i := range dst {
		dst[i] = int64(first + uint64(i))
	}
}
