//go:build !race

package main

// raceEnabled is whether the race detector is on: tests that move much
// data do less of it then.
const raceEnabled = false
