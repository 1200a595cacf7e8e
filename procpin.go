//go:build gc && !purego

package randflake

import _ "unsafe" // for go:linkname

// The runtime keeps procPin and procUnpin linkable for packages outside it
// (see the comment on runtime.procPin): they give the index of the P the
// goroutine runs on, which is how sync.Pool finds its per-CPU shard.

//go:linkname runtimeProcPin runtime.procPin
func runtimeProcPin() int

//go:linkname runtimeProcUnpin runtime.procUnpin
func runtimeProcUnpin()

// pick returns the index of the shard for the CPU the caller runs on.
func (s *Sharded) pick() int {
	p := runtimeProcPin()
	runtimeProcUnpin()
	if p >= len(s.shards) { // GOMAXPROCS grew after NewSharded
		p %= len(s.shards)
	}
	return p
}
