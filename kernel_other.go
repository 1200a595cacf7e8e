//go:build !gc || purego || !(amd64 || arm64)

package randflake

func platformKernels() []kernel { return nil }

// callKernel is never reached: no assembly kernel exists here.
func callKernel(id kernelID, decrypt bool, rk *[roundKeyWords]uint32, dst, src *uint64, n int) {
	panic("randflake: no assembly kernels in this build")
}
