package randflake

import (
	"errors"
	"fmt"
)

// Errors, with the reference implementation's names and, but for
// ErrResourceExhausted, its texts.
var (
	// ErrLifetimeOver: a lease reaches past MaxTimestamp, the last second
	// an ID can carry (ErrRandflakeDead in the reference).
	ErrLifetimeOver = errors.New("randflake: the randflake id is dead after 34 years of lifetime")
	// ErrInvalidSecret: the secret (the Sparx-64/128 key) is not 16 bytes
	// long.
	ErrInvalidSecret = errors.New("randflake: invalid secret, secret must be 16 bytes long")
	// ErrInvalidLease: the lease is malformed, or the clock is outside it.
	ErrInvalidLease = errors.New("randflake: invalid lease, lease expired or not started yet")
	// ErrInvalidNode: a node ID outside 0..131071.
	ErrInvalidNode = errors.New("randflake: invalid node id, node id must be between 0 and 131071")
	// ErrResourceExhausted: every sequence number of the current second is
	// used on every node ID the generator owns. The generators return it
	// wrapped with the node range and the second (test it with errors.Is);
	// their GenerateContext waits for the next second instead.
	ErrResourceExhausted = errors.New("randflake: resource exhausted")
	// ErrConsistencyViolation: the clock stepped back and the newest second
	// already seen has no sequence numbers left.
	ErrConsistencyViolation = errors.New("randflake: timestamp consistency violation, the current time is less than the last time")
	// ErrInvalidID: a string that is not a Randflake ID.
	ErrInvalidID = errors.New("randflake: invalid id")
)

// exhaustedError is ErrResourceExhausted as the generators return it: the
// node range that used up its second, and that second.
type exhaustedError struct {
	firstNode, lastNode int64
	sec                 int64 // Unix seconds
}

// Error names the node range, the second and the ceiling it reached, and
// what to do about it.
func (e *exhaustedError) Error() string {
	nodes := fmt.Sprintf("node IDs %d-%d", e.firstNode, e.lastNode)
	if e.firstNode == e.lastNode {
		nodes = fmt.Sprintf("node ID %d", e.firstNode)
	}
	return fmt.Sprintf("randflake: resource exhausted: %s issued all %d IDs of second %s (%d per node ID per second); "+
		"use a wider node range, or GenerateContext to wait for the next second",
		nodes, (e.lastNode-e.firstNode+1)*IDsPerSecond, formatSecond(e.sec), IDsPerSecond)
}

// Unwrap returns ErrResourceExhausted.
func (e *exhaustedError) Unwrap() error { return ErrResourceExhausted }

// exhaustedSecond returns the second err says is used up, if err is the
// exhaustion of a generator of this package.
func exhaustedSecond(err error) (int64, bool) {
	var e *exhaustedError
	if errors.As(err, &e) {
		return e.sec, true
	}
	return 0, false
}
