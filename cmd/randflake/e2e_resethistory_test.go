package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// lease reset-history marks the state directory's history unknown: the
// next gen waits out the horizon (10 s) before issuing, where it waited
// nothing before; static ranges have no history and are refused.
//
// Whether gen waited is read from what it says and issues, not from how
// long it took: it reports every wait on standard error, and an ID's
// second is when it was issued.
func TestLeaseResetHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the state directory's horizon (10 s): not in -short")
	}
	t.Parallel()
	_, env := ownStateEnv(t)
	if r := runBinary(t, "", env, "gen"); r.code != 0 {
		t.Fatalf("first gen: exit %d, %s", r.code, r.stderr)
	}
	if r := runBinary(t, "", env, "gen"); r.code != 0 || r.stderr != "" {
		t.Fatalf("second gen: exit %d, stderr %q; want no wait, and so nothing said", r.code, r.stderr)
	}
	reset := time.Now()
	r := runBinary(t, "", env, "lease", "reset-history")
	if r.code != 0 || !strings.Contains(r.stdout, "is now unknown") {
		t.Fatalf("lease reset-history: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	start := time.Now()
	r = runBinaryTimeout(t, 40*time.Second, env, "gen", "--format", "int")
	waited := time.Since(start)
	if r.code != 0 || !strings.Contains(r.stderr, "still waiting for node IDs from the state directory") {
		t.Fatalf("gen after reset-history: exit %d after %v, want a wait, said so\nstderr: %s", r.code, waited, r.stderr)
	}
	// The ID was issued once the horizon had passed since the reset:
	// about 10 s after it began, 8 at least, however slow the machine
	// (which only makes it later).
	ins := runBinary(t, "", env, "inspect", "--json", "+"+strings.TrimSpace(r.stdout))
	var v struct{ Timestamp int64 }
	if err := json.Unmarshal([]byte(ins.stdout), &v); ins.code != 0 || err != nil {
		t.Fatalf("inspect %s: exit %d, %q, %v", r.stdout, ins.code, ins.stdout, err)
	}
	if v.Timestamp < reset.Unix()+8 {
		t.Errorf("gen after reset-history issued an ID of second %d, %d s after the reset began (%d); want the horizon (10 s) waited out", v.Timestamp, v.Timestamp-reset.Unix(), reset.Unix())
	}
	t.Logf("gen after reset-history waited %v; its ID is of second %d, %d s after the reset began", waited.Round(100*time.Millisecond), v.Timestamp, v.Timestamp-reset.Unix())

	r = runBinary(t, "", env, "lease", "reset-history", "--nodes", "0-15")
	if r.code != 1 || !strings.Contains(r.stderr, "the static source records nothing") {
		t.Errorf("reset-history on a static range: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runBinary(t, "", env, "lease", "forget")
	if r.code != 2 || !strings.Contains(r.stderr, `unknown lease command "forget"`) {
		t.Errorf("lease forget: exit %d, stderr %q", r.code, r.stderr)
	}
}
