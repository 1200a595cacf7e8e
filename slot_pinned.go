//go:build gc && !purego && !race

package randflake

import "sync"

// lockedSlots is false: Generate holds a P's slot by pinning the goroutine
// to the P (runtimeProcPin), and only the extra slots of Ps made after
// NewSharded with their mutex.
const lockedSlots = false

// slotSet is Generate's buffers: one slot per P at creation, and the
// slots of Ps beyond those, made when GOMAXPROCS grew after NewSharded
// (each held with its mutex).
type slotSet struct {
	slots []slot
	extra struct {
		mu    sync.Mutex
		slots []*slot // the slot of P len(slots)+i, or nil
	}
}

// lockSlot returns the extra slot of the P the caller runs on, held with
// its mutex. (Generate calls it only for a P beyond len(s.slots).)
func (s *Sharded) lockSlot() *slot {
	p := runtimeProcPin()
	runtimeProcUnpin()
	sl := s.extraSlot(max(p, len(s.slots)))
	sl.mu.Lock()
	return sl
}

// extraSlot returns the slot of P p, one of those beyond len(s.slots).
func (s *Sharded) extraSlot(p int) *slot {
	s.extra.mu.Lock()
	defer s.extra.mu.Unlock()
	i := p - len(s.slots)
	if i >= len(s.extra.slots) {
		s.extra.slots = append(s.extra.slots, make([]*slot, i+1-len(s.extra.slots))...)
	}
	sl := s.extra.slots[i]
	if sl == nil {
		sl = &slot{cursor: &s.shards[p%len(s.shards)].node}
		s.extra.slots[i] = sl
	}
	return sl
}

// slotCount returns the number of Generate's buffers: one per P at
// creation, and the extra ones made since.
func (s *Sharded) slotCount() int {
	s.extra.mu.Lock()
	defer s.extra.mu.Unlock()
	return len(s.slots) + len(s.extra.slots)
}
