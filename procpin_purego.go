//go:build !gc || purego

package randflake

import "unsafe"

// pick returns a shard index derived from the caller's stack address, which
// differs between goroutines and stays put for one goroutine.
func (s *Sharded) pick() int {
	var x byte
	h := uint64(uintptr(unsafe.Pointer(&x))>>12) * 0x9e3779b97f4a7c15
	return int(h>>32) % len(s.shards)
}

// runtimeProcPin and runtimeProcUnpin stand in for the runtime's procPin
// and procUnpin, which purego builds and toolchains other than gc do not
// link to; nothing calls them there, since Generate holds its slots with
// their mutex (lockedSlots).
func runtimeProcPin() int { return 0 }
func runtimeProcUnpin()   {}
