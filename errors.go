package randflake

import "errors"

// Errors, with the reference implementation's names and texts.
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
	// used on every node ID the generator owns.
	ErrResourceExhausted = errors.New("randflake: resource exhausted (generator can't handle current throughput, try using multiple randflake instances)")
	// ErrConsistencyViolation: the clock stepped back and the newest second
	// already seen has no sequence numbers left.
	ErrConsistencyViolation = errors.New("randflake: timestamp consistency violation, the current time is less than the last time")
	// ErrInvalidID: a string that is not a Randflake ID.
	ErrInvalidID = errors.New("randflake: invalid id")
)
