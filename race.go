//go:build race

package randflake

const raceEnabled = true
