package leasetest

import (
	"testing"

	"github.com/randflake/randflake/lease"
)

// handle is a handle of a store for the Handles test: only its identity
// counts.
type handle struct {
	lease.BlockStore
	name string
}

// Handles.Kill kills the handle it is given with what was added for it,
// and nothing else.
func TestHandlesKill(t *testing.T) {
	var hs Handles
	a, b := &handle{name: "a"}, &handle{name: "b"}
	killed := map[string]int{}
	hs.Add(a, func() { killed["a"]++ })
	hs.Add(b, func() { killed["b"]++ })
	hs.Kill(t, b)
	if killed["a"] != 0 || killed["b"] != 1 {
		t.Errorf("after Kill of b: kills %v, want b's once and none of a's", killed)
	}
}
