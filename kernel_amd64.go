//go:build !purego

package randflake

// Placeholder until the AVX2 and AVX-512 kernels land.
func platformKernels() []kernel { return nil }
