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
package randflake
