package leasetest

import (
	"sync"
	"testing"
)

// subtest is one check of the suite.
type subtest struct {
	name  string
	run   func(*env)
	waits bool // it waits out lease seconds: not under -short
}

// start runs the subtest on a fresh store of h (again, on another, if
// a slow store broke its premise: runAttempts), unless -short and it
// waits out lease seconds.
func (st subtest) start(t *testing.T, h Harness) {
	if st.waits && testing.Short() {
		t.Skip("waits out lease seconds: not in -short")
	}
	runAttempts(t, h, st.run)
}

// subtests are the checks Run runs, in order.
var subtests = []subtest{
	{"DisjointClaims", disjointClaims, false},
	{"ReleaseAndReuse", releaseAndReuse, true},
	{"TakeoverAfterCrash", takeoverAfterCrash, true},
	{"PromisesHonoured", promisesHonoured, true},
	{"WipeUnderLoad", func(e *env) { wipeUnderLoad(e, false) }, true},
	{"WipeKeepingMarker", func(e *env) { wipeUnderLoad(e, true) }, true},
	{"EditedRecord", editedRecord, true},
	{"RolledBackRecord", rolledBackRecord, true},
	{"SaveRestoreUndetectable", saveRestore, true},
	{"RollbackSeenByHolder", rollbackSeen, true},
	{"ClockAheadPerBlock", clockAhead, true},
	{"CutOff", cutOff, true},
	{"RangeChecks", rangeChecks, true},
	{"LayoutMismatch", layoutMismatch, false},
	{"LongerPromiseThenWipe", longerPromiseThenWipe, true},
	{"ClockAheadFindsUnknownHistory", clockAheadFindsUnknownHistory, true},
	{"AnotherFleet", anotherFleet, true},
	{"ReplayWhileHolding", replayWhileHolding, true},
}

// Run checks a BlockStore against the rules of the lease engine. Each
// subtest makes a fresh store with h.New, opens handles on it as separate
// processes would, runs real generators (randflake.NewLeased on
// lease.NewBlockSource, under the secret Secret returns) under load,
// plays one fault with the Store's hooks, and collects every ID to look
// for duplicates and for IDs outside their holder's lease:
//
//   - DisjointClaims: one holder per run of blocks, claiming at once, get
//     disjoint node IDs; one more gets ErrNoFreeNodes.
//   - ReleaseAndReuse: a released run is claimed again, starting right
//     after the last second used or a takeover's wait after the claim,
//     whichever is later.
//   - TakeoverAfterCrash: a holder killed under load, half-way through a
//     second, without releasing; its successor starts after every second
//     the killed holder could have used, and, for a store whose claims
//     lapse, does not claim before the killed holder's lease has ended.
//   - PromisesHonoured: no generator issues a second its store has not
//     recorded (ReadRecord), and a release records the last second used.
//   - WipeUnderLoad, WipeKeepingMarker: a holder killed half-way through a
//     second, the store wiped (Wipe, WipeKeepMarker) while another holder
//     runs, a successor started at once: it waits out unknown history.
//   - EditedRecord: a record with one digit changed and its tag kept
//     (WriteRecord) is unknown history, waited out.
//   - RolledBackRecord: an older record of the same block, with its valid
//     tag, put back after the holder was killed, is detected through the
//     marker's digest and waited out.
//   - SaveRestoreUndetectable: a whole copy of the store put back under
//     the same identity while no holder runs (Save) is not detected, as
//     documented, and BlockSource.ResetHistory then makes the next claim
//     wait.
//   - RollbackSeenByHolder: a store that goes back under a running holder
//     (Rollback): the holder stops with ErrLeaseLost wrapping
//     ErrHistoryRolledBack, newcomers wait out unknown history.
//   - ClockAheadPerBlock: a holder whose clock is an hour ahead costs only
//     the blocks it touched: a holder with the true clock claims another
//     block without waiting, and gets ErrClockBehind only once every free
//     block carries a time ahead of its clock.
//   - CutOff: a holder cut off from the store through a Proxy (Addr)
//     stops issuing before its claim can pass to another.
//   - RangeChecks: records and a marker with impossible values, validly
//     signed (WriteRecord, WriteMarker), are unknown history, never
//     trusted.
//   - LayoutMismatch: a process configured with another layout is refused
//     with ErrFleetMismatch.
//   - LongerPromiseThenWipe: with a fleet horizon longer than the store's
//     promise, a member promising beyond its horizon is refused
//     (ErrBeyondHorizon), and after a wipe (Wipe) a newcomer waits out
//     the horizon, not its own promise.
//   - ClockAheadFindsUnknownHistory: a process an hour ahead finds the
//     history unknown (after Wipe) and writes the marker from its clock;
//     a process with the true clock caps it at its own bound instead of
//     waiting the hour, on another block.
//   - AnotherFleet: a process under another fleet's secret is refused with
//     ErrFleetMismatch and writes nothing (ReadMarker, if given); the
//     holder keeps its claim, a newcomer of the fleet waits no more than a
//     takeover (lease.TakeoverWait).
//   - ReplayWhileHolding: an older, consistent copy (Save) put back while a
//     holder issues: the holder stops within the detection bound, and a
//     newcomer on its node IDs starts only after the holder's last second.
//
// A subtest whose hook is nil is skipped with a message naming the hook.
// A subtest that builds on every other run being held runs again on a
// fresh store, at most three times, when a holder's claim lapsed because
// the store stalled past its TTL (the holder must report ErrLeaseLost);
// each attempt's reason is logged.
// Under -short (testing.Short) every subtest but DisjointClaims and
// LayoutMismatch is skipped: the others wait out lease seconds.
// Each wait is bounded by a budget derived from the store's promise; with
// promises of 2 to 3 seconds a subtest takes a few seconds.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Blocks == 0 {
		h.Blocks = 1
	}
	if err := h.Layout.Check(); err != nil {
		t.Fatalf("leasetest: Harness.Layout: %v", err)
	}
	if h.Blocks < 0 || h.Layout.Count()%h.Blocks != 0 {
		t.Fatalf("leasetest: Harness.Blocks %d does not divide the %d blocks of the layout", h.Blocks, h.Layout.Count())
	}
	if runs := h.Layout.Count() / h.Blocks; runs < 4 || runs > 32 {
		t.Fatalf("leasetest: the layout holds %d runs of %d blocks; the suite needs 4 to 32", runs, h.Blocks)
	}
	if h.New == nil {
		t.Fatal("leasetest: Harness.New is nil")
	}
	if h.MaxParallel < 0 {
		t.Fatalf("leasetest: Harness.MaxParallel %d: want 0 (every subtest at once) or more", h.MaxParallel)
	}
	if !h.Parallel {
		for _, st := range subtests {
			t.Run(st.name, func(t *testing.T) { st.start(t, h) })
		}
		return
	}
	// The subtests mostly wait for seconds to pass: run them all at once,
	// whatever -test.parallel says.
	slots := len(subtests)
	if h.MaxParallel > 0 {
		slots = h.MaxParallel
	}
	sem := make(chan struct{}, slots)
	var wg sync.WaitGroup
	for _, st := range subtests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(st.name, func(t *testing.T) { st.start(t, h) })
		}()
	}
	wg.Wait()
}
