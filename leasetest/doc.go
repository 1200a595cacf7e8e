// Package leasetest checks a randflake.BlockStore against the rules of
// the lease engine, in the spirit of testing/fstest: a store's tests fill
// in a Harness (how to make a fresh store and how to fault it) and call
// Run, which builds real generators on the store and proves, by
// collecting their IDs and looking for duplicates, that no node ID is
// used by two holders in the same second, whatever the faults.
package leasetest
