//go:build chaos

package chaos

import (
	"testing"
	"time"
)

// The summary labels every count of failures: client errors and failed
// start attempts are expected when the test caused them or an event's
// window explains them, and unexpected otherwise; nothing is printed as
// a bare count that could read as a failure of the run.
func TestSummaryLabels(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	a := &server{name: "a"}
	b := &server{name: "b"}
	f := &fleet{servers: []*server{a, b}}
	f.expect(nil, t0, t0.Add(10*time.Second), "wipe", lease503)
	f.expect(a, t0.Add(20*time.Second), t0.Add(22*time.Second), "SIGKILL")
	for i := range 3 {
		a.coll.failures = append(a.coll.failures, failure{t0.Add(time.Duration(i) * time.Second).UnixNano(), lease503})
	}
	a.coll.failures = append(a.coll.failures, failure{t0.Add(21 * time.Second).UnixNano(), "refused"})
	b.coll.failures = append(b.coll.failures,
		failure{t0.Add(21 * time.Second).UnixNano(), "refused"}, // the SIGKILL was a's
		failure{t0.Add(5 * time.Second).UnixNano(), "timeout"})  // the wipe explains 503 lease only
	if got, want := f.errorLine(), "client errors: 4 expected (SIGKILL: refused×1; wipe: 503 lease×3), unexpected: refused×1, timeout×1"; got != want {
		t.Errorf("error line:\n%s\nwant\n%s", got, want)
	}
	a.failedStarts = []failedStart{{t0.Add(30 * time.Second), "killed during start-up"}, {t0.Add(2 * time.Second), "exit 1: etcd unreachable"}}
	b.failedStarts = []failedStart{{t0.Add(40 * time.Second), "no free node IDs"}, {t0.Add(50 * time.Second), "not ready within 20s"}}
	want := "3 expected (SIGKILL during start-up, by the test: killed during start-up×1; every block held, until a killed holder's lease ends: no free node IDs×1; wipe: exit 1: etcd unreachable×1), unexpected: not ready within 20s×1"
	if got := labelled(f.startFailures()); got != want {
		t.Errorf("failed starts:\n%s\nwant\n%s", got, want)
	}
	if got := labelled(nil, nil); got != "none expected, unexpected: none" {
		t.Errorf("no failures: %s", got)
	}
}

// A window that lasts until its server issues again explains the server's
// failures past its end for as long as the server gets no ID, and no
// longer: a 503 after its next success, or past the limit, is the
// run's, not the event's.
func TestWindowUntilIssuing(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	a := &server{name: "a"}
	b := &server{name: "b"}
	f := &fleet{servers: []*server{a, b}}
	f.expectUntilIssuing(a, t0, t0.Add(2*time.Second), t0.Add(20*time.Second), "partition", lease503)
	at := func(s float64) int64 { return t0.Add(time.Duration(s * float64(time.Second))).UnixNano() }
	// a: 503s from 1 s to 8 s (past the window's 2 s), IDs again at 9 s,
	// then one more 503 at 10 s.
	for _, s := range []float64{1, 3, 5, 8, 10} {
		a.coll.failures = append(a.coll.failures, failure{at(s), lease503})
	}
	a.coll.batches = []batch{{end: 1, send: at(0.5), recv: at(0.6)}, {end: 2, send: at(8.9), recv: at(9)}}
	// b: a 503 at 5 s, which a's window does not explain.
	b.coll.failures = append(b.coll.failures, failure{at(5), lease503})
	if got, want := f.errorLine(), "client errors: 4 expected (partition: 503 lease×4), unexpected: 503 lease×2"; got != want {
		t.Errorf("error line:\n%s\nwant\n%s", got, want)
	}
	// Never issuing again: the window ends at its limit.
	c := &server{name: "c"}
	g := &fleet{servers: []*server{c}}
	g.expectUntilIssuing(c, t0, t0.Add(2*time.Second), t0.Add(20*time.Second), "partition", lease503)
	c.coll.failures = []failure{{at(1), lease503}, {at(19), lease503}, {at(21), lease503}}
	if got, want := g.errorLine(), "client errors: 2 expected (partition: 503 lease×2), unexpected: 503 lease×1"; got != want {
		t.Errorf("error line without a success:\n%s\nwant\n%s", got, want)
	}
}
