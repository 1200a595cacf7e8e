package leasetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/randflake/randflake"
)

// Several subtests build on fillers (env.fillers) holding every run but
// one, so that the next claim can only take that one. A store that
// stalls for longer than its TTL (an API server starved of CPU, a disk
// that does not sync) lets a filler's claim lapse: its run is then free
// as well, and the next claim may take it. That is the engine doing its
// job, not a fault, but the subtest can no longer check what it meant
// to. The attempt then ends (lostPremise) and the subtest runs again on
// a fresh store, up to maxAttempts times.

// maxAttempts is how many times a subtest runs when each attempt loses
// its premise.
const maxAttempts = 3

// premiseLost is the panic value that ends an attempt whose premise a
// slow store broke.
type premiseLost struct{ why string }

// runAttempts runs run on a fresh env of h until an attempt ends without
// losing its premise, at most maxAttempts times.
func runAttempts(t *testing.T, h Harness, run func(*env)) {
	t.Helper()
	for try := 1; ; try++ {
		why, lost := attempt(newEnv(t, h), run)
		if !lost {
			return
		}
		if try == maxAttempts {
			t.Fatalf("each of %d attempts lost its premise on a slow store; the last: %s", maxAttempts, why)
		}
		t.Logf("attempt %d lost its premise: %s; trying again on a fresh store", try, why)
	}
}

// attempt runs run on e, and reports whether it ended with lostPremise
// (and why). A failed test ends the attempt as it ends the test.
func attempt(e *env, run func(*env)) (why string, lost bool) {
	defer func() {
		if v := recover(); v != nil {
			pl, ok := v.(premiseLost)
			if !ok {
				panic(v)
			}
			why, lost = pl.why, true
		}
	}()
	run(e)
	return "", false
}

// lostPremise ends the attempt: what it builds on was broken by the
// store's slowness, as why says.
func (e *env) lostPremise(why string) { panic(premiseLost{why}) }

// onlyRun checks that who's lease got is on the node IDs of want, the one
// run the fillers left. If it is on a filler's run, that filler must
// report its claim lost (ErrLeaseLost) within the subtest's budget, and
// the attempt loses its premise; anything else fails the test.
func (e *env) onlyRun(who string, got, want randflake.Lease) {
	e.t.Helper()
	if got.FirstNode == want.FirstNode && got.LastNode == want.LastNode {
		return
	}
	msg := fmt.Sprintf("%s got %v, not %v, the one run the fillers left", who, got, want)
	for _, f := range e.filled {
		if f.held.FirstNode > got.LastNode || f.held.LastNode < got.FirstNode {
			continue
		}
		limit := e.limit()
		for began := time.Now(); f.lostAt().IsZero(); time.Sleep(50 * time.Millisecond) {
			if time.Since(began) > limit {
				e.t.Fatalf("%s: it is %s's run, and %s has not reported its claim lost within %v (%s); its last error: %v",
					msg, f.name, f.name, limit.Round(time.Millisecond), slowness(), lastError(f))
			}
		}
		e.lostPremise(fmt.Sprintf("%s: %s's claim lapsed (it reported the loss at %s; its last error: %v)",
			msg, f.name, f.lostAt().Format("15:04:05.000"), lastError(f)))
	}
	e.t.Fatalf("%s", msg)
}

// lastError returns the last source error p's generator reported, nil if
// none.
func lastError(p *proc) error {
	errs := p.errors()
	if len(errs) == 0 {
		return nil
	}
	return errs[len(errs)-1]
}
