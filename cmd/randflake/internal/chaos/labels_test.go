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
