package main

import (
	"strings"
	"testing"
	"time"
)

// lease reset-history marks the state directory's history unknown: the
// next gen waits out the horizon (10 s) before issuing, where it waited
// nothing before; static ranges have no history and are refused.
func TestLeaseResetHistory(t *testing.T) {
	_, env := ownStateEnv(t)
	if r := runBinary(t, "", env, "gen"); r.code != 0 {
		t.Fatalf("first gen: exit %d, %s", r.code, r.stderr)
	}
	start := time.Now()
	if r := runBinary(t, "", env, "gen"); r.code != 0 || time.Since(start) > 5*time.Second {
		t.Fatalf("second gen: exit %d after %v (want no wait), %s", r.code, time.Since(start), r.stderr)
	}
	r := runBinary(t, "", env, "lease", "reset-history")
	if r.code != 0 || !strings.Contains(r.stdout, "is now unknown") {
		t.Fatalf("lease reset-history: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	start = time.Now()
	r = runBinaryTimeout(t, 40*time.Second, env, "gen")
	waited := time.Since(start)
	if r.code != 0 || waited < 8*time.Second {
		t.Errorf("gen after reset-history: exit %d after %v, want a wait of about 10 s\nstderr: %s", r.code, waited, r.stderr)
	}
	t.Logf("gen after reset-history waited %v", waited.Round(100*time.Millisecond))

	r = runBinary(t, "", env, "lease", "reset-history", "--nodes", "0-15")
	if r.code != 1 || !strings.Contains(r.stderr, "the static source records nothing") {
		t.Errorf("reset-history on a static range: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runBinary(t, "", env, "lease", "forget")
	if r.code != 2 || !strings.Contains(r.stderr, `unknown lease command "forget"`) {
		t.Errorf("lease forget: exit %d, stderr %q", r.code, r.stderr)
	}
}
