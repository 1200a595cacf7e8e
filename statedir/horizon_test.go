package statedir

import (
	"strings"
	"testing"
	"time"
)

// A process whose Horizon passes the directory's MaxHorizon is refused,
// naming both (rule 13 of docs/leases.md): after the state is lost the
// other processes wait out MaxHorizon only. Raising MaxHorizon with it is
// accepted, and a negative one refused.
func TestHorizonBound(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	_, err := d.Source(Options{Horizon: 20 * time.Second, Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "promise 20s ahead, beyond the fleet's horizon of 10s") {
		t.Errorf("Horizon 20s under the default MaxHorizon: %v, want it refused naming both", err)
	}
	s := newSource(t, d, Options{Horizon: 20 * time.Second, MaxHorizon: 20 * time.Second})
	if p := s.Store().Info().Promise; p != 20*time.Second {
		t.Errorf("Horizon 20s under MaxHorizon 20s: promise %v", p)
	}
	if _, err := d.Source(Options{MaxHorizon: -time.Second}); err == nil {
		t.Error("a negative MaxHorizon was accepted")
	}
}
