//go:build chaos

// Package chaos holds the fleet chaos tests of the randflake command. They
// run the real binary: `randflake serve --etcd` processes on a real
// three-member etcd cluster (the etcd binary on PATH), and sixteen
// `randflake serve` processes on one shared state directory, with clients
// fetching IDs continuously while a seeded random schedule SIGKILLs servers
// and starts replacements, SIGSTOPs servers for longer than their TTL, cuts
// servers off from etcd through TCP proxies, kills etcd members and takes
// the cluster's quorum away. Every ID received is decrypted at the end and
// checked: no ID twice, no (second, node ID) issued by two processes, and
// the time bounds the lease sources promise.
//
// The tests only build with the chaos tag:
//
//	cd cmd/randflake && go test -tags chaos -count=1 -v ./internal/chaos/
//
// Each run prints its seed first; RANDFLAKE_CHAOS_SEED=N (or -args
// -chaos.seed=N) replays its schedule. Process timing still varies from run
// to run, so a replay repeats the events, not every interleaving.
package chaos
