// Package randflake generates Randflake IDs: unique, unpredictable 64-bit
// IDs made of a timestamp, a node ID and a sequence number, encrypted with
// the Sparx-64/128 block cipher under a 16-byte secret.
//
// An ID's plaintext is
//
//	timestamp (30 bits, seconds since Epoch) << 34 |
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
//
// # Layers
//
// A call passes, top to bottom: Leased (leased.go), bound to a LeaseSource
// (lease.go, packages statedir and etcdlease); the generators Generator,
// Sharded and Local (generator.go, shard.go, shard_local.go) and their
// clock (clock.go); the one reservation path over the lease's node IDs
// (nodeset.go) and each node's state (node.go); the ID layout (layout.go);
// the cipher (sparx64.go), its kernel dispatch (kernel*.go) and the
// assembly kernels. The reference's names live in compat.go only. See
// docs/design.md.
package randflake
