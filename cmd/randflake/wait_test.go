package main

import (
	"fmt"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
)

// The deadlines of the end-to-end tests' waits (for a process to start,
// to log a line, to exit, for a server to answer) are meant for idle
// cores. within stretches one by how much slower than that this process
// has run since it started (internal/slowdown), so that a loaded machine
// does not fail a wait whose condition does hold: it is the one place
// they are scaled, and a wait that still runs out says so with the
// factor (slowness).
func within(d time.Duration) time.Duration { return slowdown.Stretch(d) }

// slowness describes the stretch of within, for a failure message.
func slowness() string {
	return fmt.Sprintf("deadlines stretched %.1f× by this process's slowdown (its time waiting for a CPU against its time running)", slowdown.Factor())
}

// startupTimeout is how long, on idle cores, a serve process is given to
// start serving: to log its address and answer /readyz.
const startupTimeout = 30 * time.Second
