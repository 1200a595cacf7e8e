//go:build !gc || purego || race

package randflake

// lockedSlots is true: every slot is held with its mutex. Without the
// runtime's procPin (purego, or a toolchain other than gc), a goroutine
// cannot be pinned to its P; under the race detector it is not, because
// the detector cannot see that pinning keeps other goroutines off a slot
// and would report the slot's plain reads and writes. The mutex gives the
// same exclusion in a form the detector sees; the rest of Generate is the
// same code.
const lockedSlots = true

// slotSet is Generate's buffers: one slot per P at creation. Ps added
// since share them (lockSlot holds a slot with its mutex).
type slotSet struct {
	slots []slot
}

// lockSlot returns a slot, held with its mutex.
func (s *Sharded) lockSlot() *slot {
	sl := &s.slots[s.pick()%len(s.slots)]
	sl.mu.Lock()
	return sl
}

// slotCount returns the number of Generate's buffers, the slots made at
// creation.
func (s *Sharded) slotCount() int { return len(s.slots) }
