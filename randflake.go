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
// previous one; the secret's holder can read the time and node back. IDs
// stay unique as long as no node ID is used by two generators in the same
// second: that is what node IDs and leases are for.
//
// # Generating IDs
//
// The quickest start is package statedir: statedir.NewLeased keeps the
// secret and the node-ID claims of every process of a machine in a state
// directory and returns a ready Leased generator. Elsewhere, pick a
// generator:
//
//   - Generator issues IDs on one node ID, with the reference
//     implementation's API (NewGenerator).
//   - Sharded issues IDs on a range of node IDs without locks, for a
//     process with many goroutines (NewSharded).
//   - Local is a per-goroutine handle on a Sharded or Leased generator
//     (NewLocal): the fastest way to take IDs one at a time.
//   - Leased is a Sharded generator whose node IDs come from a LeaseSource
//     and are renewed in the background (NewLeased).
//
// Each has Generate (an int64), GenerateString (its string form, up to 13
// characters) and, except Local, GenerateBatch (a slice at once). Each node ID
// issues at most 131,072 IDs per second: past that, Generate returns an
// error wrapping ErrResourceExhausted, and GenerateContext waits for the
// next second instead. A generator never issues the same ID twice, whatever
// its clock does.
//
// # Leases
//
// A Lease is a range of node IDs and the seconds during which they are its
// holder's. A LeaseSource hands leases out: StaticSource for a fixed range
// (StatefulSetSource derives it from a Kubernetes pod's ordinal); package
// statedir for the processes of one machine; the nested modules etcdlease,
// pglease and kubelease for a fleet sharing etcd, PostgreSQL or the
// Kubernetes API. They all run on one lease engine, package lease's
// BlockSource over a BlockStore; package leasetest is the conformance suite
// a new store must pass.
//
// # Reading IDs back
//
// Every generator embeds an Inspector, and NewInspector makes one from the
// secret alone: Inspect returns an ID's second, node ID and sequence
// number. EncodeString and DecodeString convert between an ID and its
// string form, and the ID type carries an ID through JSON, text and SQL.
//
// # Kernels
//
// GenerateBatch and the per-ID buffers encrypt many IDs in one pass, on
// AVX-512, AVX2 or NEON assembly where the CPU has it and portable Go
// otherwise. Kernel and Kernels report the choice; Sparx64 is the cipher
// itself, usable as a crypto/cipher.Block. The purego build tag leaves only
// the portable code.
//
// # Compatibility
//
// The package is a drop-in replacement for gosuda.org/randflake: the same
// constants (RANDFLAKE_*), errors, Generator API and bit-exact IDs and
// strings, so that code written for it compiles unchanged.
package randflake
