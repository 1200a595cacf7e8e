//go:build purego || !(amd64 || arm64)

package randflake

func platformKernels() []kernel { return nil }
