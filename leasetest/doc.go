// Package leasetest checks a lease.BlockStore against the rules of the
// lease engine, in the spirit of testing/fstest: a store's tests fill in a
// Harness (how to make a fresh store and how to fault it) and call Run,
// which runs real generators on the store and proves, by collecting their
// IDs and looking for duplicates, that no node ID is used by two holders
// in the same second, whatever the faults.
//
// # Writing a store
//
// A store keeps, per block of node IDs, an opaque record and a claim (who
// holds the block, until when), plus one opaque fleet marker, and says
// which history it holds (lease.StoreIdentity). It implements three
// methods of lease.BlockStore; lease.BlockSource, the engine,
// applies every rule on top of them:
//
//   - Info says how claims behave in time: EndFor(t0), the last whole
//     second a holder may use after a claim or renewal begun at t0 (the
//     claim's expiry less the store's margins for clock skew; nil if
//     claims never expire while the holder lives, like file locks), and
//     Promise, how far ahead holders record the seconds they may use (at
//     least what EndFor gives).
//   - Update runs one atomic step: one consistent read of the marker, the
//     blocks (all of the fleet's layout, or those of the held claim) and
//     the identity; one call of fn; and the changes fn returns applied all
//     together or not at all. A step that another writer got in the way of
//     is run again or returns lease.ErrStoreConflict; a claim of a held
//     block returns lease.ErrBlockHeld; a held claim that is no longer
//     the caller's returns an error wrapping randflake.ErrLeaseLost without
//     calling fn. StoreView.Fresh is true only while the store was created
//     empty by its own initialisation and no marker has been written.
//   - Renew keeps a claim alive and reports the identity and position the
//     renewal saw; ErrLeaseLost if the claim is gone (reporting the
//     identity with the loss lets the engine tell a store that went back
//     from a claim that lapsed), any other error if the store cannot be
//     reached.
//
// Records and the marker are bytes the store returns exactly as written
// and never interprets. MemStore (memstore.go) is the reference: a store
// in memory, small enough to read in a few minutes, that passes the suite
// both with claims that lapse and with claims that live as long as their
// handle.
//
// # Running the suite
//
// In the store's tests, a test function calls Run with a Harness whose
// New returns a fresh, empty store for each subtest, with the hooks that
// play faults on it: kill a handle without release, wipe everything or
// all but the marker, read and write raw records and the marker, put back
// a saved copy (undetectably, and in a way a running holder sees). A hook
// the store cannot provide is left nil, and only the subtests that need
// it skip, saying which hook. A store with a network address (Store.Addr)
// is also cut off from one holder through a Proxy.
//
// The pieces the suite is built from serve a module's own tests too:
// Proxy (a TCP fault proxy: Cut, Blackhole, Heal), Collect and Checker
// (generators under load, every ID checked for duplicates and against its
// holder's leases), and HolderMain and StartHolder (a holder in a process
// of its own, to SIGKILL half-way through a second). So do the drivers
// of tests every store module has: NewLeased (a generator closed when the
// test ends), ClaimReleaseCycles (concurrent claims and releases, each
// lease after the second its block last recorded) and CutOff (a holder
// cut off through a Proxy, its node IDs taken over, the partition
// healed). Starting the real server a store needs (etcd, PostgreSQL,
// kube-apiserver) is left to the store's own tests; this repository's
// do it with a package of their own that this one does not export.
package leasetest
