package lease

import "testing"

// Rule 2's tie-break: a claim draws among the runs whose seconds have
// passed, so that claimants started together do not all contend for the
// same one; with none passed it takes the one that passes soonest.
func TestSpreadDrawsAmongPassedRuns(t *testing.T) {
	const now = int64(1_800_000_000)
	// As choose orders them: passed first, then by how soon they pass.
	slots := []claimRun{{0, 0}, {16, now - 5}, {32, now - 1}, {48, now}, {64, now + 9}}
	const draws = 3000
	seen := map[int]int{}
	for range draws {
		seen[spread(slots, now)]++
	}
	for i := range 3 {
		// Each of the 3 passed runs is drawn about 1,000 times; below
		// 700 is more than 11 standard deviations off.
		if seen[i] < 700 {
			t.Errorf("run %d (seconds passed) drawn %d times of %d, want about %d: draws %v", i, seen[i], draws, draws/3, seen)
		}
	}
	if n := seen[3] + seen[4]; n > 0 {
		t.Errorf("runs whose seconds have not passed were drawn %d times while passed ones were free: draws %v", n, seen)
	}
	if got := spread(slots[3:], now); got != 0 {
		t.Errorf("with no run passed, drew run %d, want 0 (the soonest)", got)
	}
	if got := spread(slots[:1], now); got != 0 {
		t.Errorf("with one run, drew run %d, want 0", got)
	}
}
