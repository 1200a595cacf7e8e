// Package lease is the lease engine of Randflake: BlockSource, a
// [randflake.LeaseSource] on any BlockStore, and what a store module needs
// to build one. It is the package to read when writing a store of your own
// (another database, a coordination service); an application only picks
// a source (package statedir, the modules etcdlease, pglease and
// kubelease, or randflake.StaticSource) and hands it to randflake.NewLeased.
//
// # What a store provides
//
// A BlockStore is the storage primitives of a lease source and nothing
// else. It keeps, per block of node IDs (BlockLayout divides the fleet's
// range into blocks), a claim and an opaque record, plus one opaque fleet
// marker, and says which history it holds (StoreIdentity). BlockSource
// writes the records and the marker, signed under the fleet secret, and
// applies every rule of docs/leases.md ("The rules") on top of three
// methods:
//
//   - Info, called once, says how claims behave in time (StoreInfo):
//     EndFor(t0), the last whole second a holder may use after a claim or
//     renewal begun at t0, margins for clock skew included (nil for claims
//     that live as long as their holder, like file locks); Promise, how
//     far ahead holders record the seconds they may use; Durable, false
//     only for a store that records nothing (NewStaticStore); and
//     MaxClockSkew.
//   - Update runs one atomic step: it reads the marker and the blocks
//     (every block of the layout, or those of the held claim), calls fn
//     once with what it read (StoreView), and applies the StoreChanges fn
//     returns all together or not at all. A step another writer got in the
//     way of is run again or returns ErrStoreConflict; a claim of a held
//     block returns ErrBlockHeld; a held claim that is no longer the
//     store's returns an error wrapping [randflake.ErrLeaseLost] without
//     calling fn; an error of fn is returned as it is, with nothing
//     changed.
//   - Renew keeps a claim alive and reports the identity and position the
//     renewal saw: an error wrapping randflake.ErrLeaseLost if the claim is
//     gone for good, any other error if the store cannot be reached (the
//     claim then stays valid until the last end given).
//
// Records and the marker are bytes the store returns exactly as written:
// it never interprets, repairs or drops them. The rules themselves, what
// each costs and why it is needed, are in docs/leases.md; its "Writing a
// store" section is the short version of this comment.
//
// # Testing a store
//
// Package leasetest is the conformance suite, in the spirit of
// testing/fstest: a store's tests give leasetest.Run a leasetest.Harness
// whose New makes a fresh store with its fault hooks (kill a holder, wipe,
// edit or roll back a record, restore a copy, cut the store off through a
// proxy), and Run drives real generators on it under each fault and looks
// for duplicate IDs and IDs outside their holder's lease:
//
//	func TestConformance(t *testing.T) { leasetest.Run(t, harness()) }
//
// leasetest.MemStore, a store in memory, is the reference to read; the
// conformance tests of statedir, etcdlease, pglease and kubelease run the
// same suite on theirs.
//
// # Building the source
//
// A store module gives the engine one StoreOpener: a function that makes
// its BlockStore from the module's own Config and returns it with the
// StoreConfig every store-backed source shares (the fleet secret, the
// layout, the blocks per claim, the fleet's horizon, a logger, and the
// generator's shards and error callback). The module's New is then
// OpenStoreSource(open), and its NewLeased OpenStoreLeased(ctx, secret,
// open), which refuses a Config naming another secret than the one given.
// Both check the secret (CheckStoreSecret) in one place; their errors
// begin with the module's name. A module whose source wraps the engine
// (pglease scrubs passwords from its errors) calls the steps itself:
// CheckLeasedSecret, NewStoreSource for the BlockSource, NewStoreLeased for
// the generator.
// NewBlockLayout turns a Config's node range and block size into the
// BlockLayout, with the defaults the store modules share (the whole range,
// the module's block size). NewBlockSource is the engine alone, for a caller that checks its own
// configuration.
//
// The engine's errors (ErrNoFreeNodes, ErrClockBehind,
// ErrHistoryRolledBack, ErrFleetMismatch, ErrBeyondHorizon) reach the
// application through the generator; the store modules re-export the ones
// their users test for.
//
// The root package randflake never imports this one: it holds the user
// side of leases (Lease, LeaseSource, Leased, StaticSource), which this
// package builds on.
package lease
