package leasetest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/leasetest"
)

// The harness of the in-memory reference store. A store's tests run the
// suite from a test function:
//
//	func TestConformance(t *testing.T) { leasetest.Run(t, memHarness()) }
//
// Each subtest gets a fresh backend; claims lapse 2 s after their last
// renewal, so the suite's waits are about 3 s and, the subtests running at
// once, the whole suite takes about ten seconds.
func ExampleRun() {
	h := memHarness()
	fmt.Printf("%d runs of %d node IDs\n", h.Layout.Count()/h.Blocks, h.Blocks*h.Layout.Size)
	// Output: 4 runs of 32 node IDs
}

func memHarness() leasetest.Harness {
	layout := lease.BlockLayout{FirstNode: 0, LastNode: 127, Size: 16}
	return leasetest.Harness{
		Layout:   layout,
		Blocks:   2,
		Parallel: true,
		New: func(t *testing.T) *leasetest.Store {
			b, err := leasetest.NewMemBackend(layout)
			if err != nil {
				t.Fatal(err)
			}
			b.Serve(t) // a network address, for the proxy to cut
			return b.Hooks(leasetest.MemOptions{TTL: 2 * time.Second})
		},
	}
}
