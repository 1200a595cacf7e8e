//go:build chaos

package chaos

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/randflake/randflake/statedir"
)

const (
	stateProcs = 16
	stateClaim = 64 // --claim: one block of node IDs per process
	stateChaos = 35 * time.Second
)

// TestChaosStateDir runs 16 `randflake serve` processes on one state
// directory, with no configuration but the directory, and SIGKILLs random
// ones, some while they start, replacing each at once.
func TestChaosStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	f := newFleet(t, fleetConfig{
		name: "statedir",
		env:  append(baseEnv(), "RANDFLAKE_STATE_DIR="+dir),
		args: func(s *server) ([]string, func(), error) {
			return []string{"--claim", fmt.Sprint(stateClaim), "--shutdown-timeout", "5s"}, func() {}, nil
		},
		clients:      []clientSpec{{1, 20 * time.Millisecond}, {100, 40 * time.Millisecond}, {1000, 200 * time.Millisecond}},
		readyTimeout: 40 * time.Second,
		requestLimit: 2 * time.Second,
	})
	r := newRun(t, f, 0x57a7)
	rng := r.rng
	f.event("%d servers started at once on one new state directory, %d node IDs each", stateProcs, stateClaim)
	for i := 1; i <= stateProcs; i++ {
		f.launch(fmt.Sprintf("p%02d", i), "initial", "")
	}
	d := within(60 * time.Second)
	if starting := f.waitStarted(d); len(starting) > 0 {
		t.Fatalf("%d servers not ready after %v; %s: %s", len(starting), d, starting[0].name, starting[0].logTail(10))
	}

	kills, startKills := 0, 0
	chaosStart := time.Now()
	for time.Since(chaosStart) < stateChaos {
		time.Sleep(300*time.Millisecond + upTo(rng, 1700*time.Millisecond))
		var s *server
		if rng.IntN(4) == 0 {
			s = f.pick(rng, "starting")
		}
		if s == nil {
			s = f.pick(rng, "serving")
		}
		if s == nil {
			continue
		}
		pid := s.pidString()
		switch s.kill() {
		case "starting":
			startKills++
			f.event("SIGKILL %s (%s) while it starts", s.name, pid)
			continue
		case "serving":
		default:
			continue
		}
		kills++
		r := f.launch(fmt.Sprintf("r%02d", kills), "replacement", "replaces "+s.name)
		f.event("SIGKILL %s (%s); replacement %s launched", s.name, pid, r.name)
		if rng.IntN(4) == 0 {
			// Kill the replacement's first attempt in the middle of its
			// start-up: claiming blocks, writing the state.
			time.Sleep(upTo(rng, 150*time.Millisecond))
			switch r.kill() {
			case "starting":
				startKills++
				f.event("SIGKILL %s while it starts (%.0fms after launch)", r.name, time.Since(r.launched).Seconds()*1000)
			case "serving":
				kills++
				r2 := f.launch(fmt.Sprintf("r%02d", kills), "replacement", "replaces "+r.name)
				f.event("SIGKILL %s just after it became ready; replacement %s launched", r.name, r2.name)
			}
		}
		if lat, ok := f.waitProgress(time.Now(), within(10*time.Second)); !ok {
			t.Errorf("the fleet issued no ID within %v after SIGKILL %s", within(10*time.Second), s.name)
		} else if lat > time.Second {
			f.event("the fleet issued again %.1fs later", lat.Seconds())
		}
	}

	secret, err := statedir.LoadSecret(filepath.Join(dir, "secret"))
	if err != nil {
		t.Fatalf("reading the state directory's secret: %v", err)
	}
	head := func(rep *report) string {
		return fmt.Sprintf("chaos statedir: seed %d, %d servers on one state directory (+%d replacements), %s, %s; %s, %.0fs",
			seed, stateProcs, kills, plural(kills, "SIGKILL", "SIGKILLs"), plural(startKills, "SIGKILL during start-up", "SIGKILLs during start-up"),
			rep.idLine(), time.Since(r.began).Seconds())
	}
	r.finish(checkConfig{secret: secret, rangeSize: stateClaim, strict: true}, head, nil, 100_000)
}
