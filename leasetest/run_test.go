package leasetest_test

import (
	"testing"

	"github.com/randflake/randflake/leasetest"
)

// The suite on the reference store, with the example's harness (the root
// package's tests run it too, with lock-like claims and with a network
// between holders and the store).
func TestRunMemStore(t *testing.T) {
	leasetest.Run(t, memHarness())
}
