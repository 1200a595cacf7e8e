//go:build chaos

// Package chaos holds the fleet chaos tests of the randflake command. They
// run the real binary: `randflake serve --etcd` processes on a real
// three-member etcd cluster (the etcd and etcdctl binaries), `randflake
// serve --node-source postgres` processes on a real PostgreSQL server,
// `randflake serve --node-source kubernetes` processes on a real
// kube-apiserver, and sixteen `randflake serve` processes on one shared
// state directory, with clients fetching IDs continuously while a seeded
// random schedule breaks things: a member with a longer TTL than the rest,
// SIGKILLs half-way through a second with replacements started at once,
// SIGSTOPs and partitions longer than the TTL, etcd members killed and the
// quorum taken away, every key or Lease object of the fleet deleted
// (etcdctl del --prefix; DELETE FROM the blocks table, with or without the
// fleet marker), the whole etcd cluster restored from an older snapshot,
// records rolled back to older ones and a running holder's saved record
// and marker put back over it, the database and the API server restarted,
// and a process under another fleet's secret on the same store. Every ID
// received is decrypted at the end and checked: no ID twice, no (second,
// node ID) issued by two processes, and the time bounds the lease sources
// promise, the wait for unknown history included.
//
// The tests only build with the chaos tag:
//
//	cd cmd/randflake && go test -tags chaos -count=1 -v ./internal/chaos/
//
// Each run prints its seed first; RANDFLAKE_CHAOS_SEED=N (or -args
// -chaos.seed=N) replays its schedule. Process timing still varies from run
// to run, so a replay repeats the events, not every interleaving.
// RANDFLAKE_CHAOS_LOGS=DIR keeps the servers' logs in DIR. docs/chaos.md
// describes the runs.
package chaos
