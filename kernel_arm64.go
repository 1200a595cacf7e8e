//go:build !purego

package randflake

// Placeholder until the NEON kernel lands.
func platformKernels() []kernel { return nil }
