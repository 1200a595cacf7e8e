//go:build !purego && !race

package randflake

// lockedSlots is false: Generate holds a P's slot by pinning the goroutine
// to the P (runtimeProcPin), and only the extra slots of Ps made after
// NewSharded with their mutex.
const lockedSlots = false

// lockSlot returns the extra slot of the P the caller runs on, held with
// its mutex. (Generate calls it only for a P beyond len(s.slots).)
func (s *Sharded) lockSlot() *slot {
	p := runtimeProcPin()
	runtimeProcUnpin()
	sl := s.extraSlot(max(p, len(s.slots)))
	sl.mu.Lock()
	return sl
}
