//go:build purego

package randflake

import "unsafe"

// pick returns a shard index derived from the caller's stack address, which
// differs between goroutines and stays put for one goroutine.
func (s *Sharded) pick() int {
	var x byte
	h := uint64(uintptr(unsafe.Pointer(&x))>>12) * 0x9e3779b97f4a7c15
	return int(h>>32) % len(s.shards)
}
