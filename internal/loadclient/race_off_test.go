//go:build !race

package loadclient

// raceEnabled is whether the race detector is on: tests that move much
// data skip then.
const raceEnabled = false
