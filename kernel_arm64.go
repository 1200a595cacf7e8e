//go:build gc && !purego

package randflake

import "golang.org/x/sys/cpu"

// The NEON kernels (sparx64_arm64.s) take any positive multiple of 8 IDs:
// the main loop runs 32 IDs at a time, a second loop 8 at a time.
const neonWidth = 8

//go:noescape
func encryptNEON(rk *[roundKeyWords]uint32, dst, src *uint64, n int)

//go:noescape
func decryptNEON(rk *[roundKeyWords]uint32, dst, src *uint64, n int)

func platformKernels() []kernel {
	if !cpu.ARM64.HasASIMD {
		return nil
	}
	return []kernel{{name: "neon", id: kernelNEON, width: neonWidth}}
}

// callKernel runs an assembly kernel on n IDs, n a positive multiple of its
// width. The calls are static so that the compiler sees that no pointer
// escapes.
func callKernel(id kernelID, decrypt bool, rk *[roundKeyWords]uint32, dst, src *uint64, n int) {
	if decrypt {
		decryptNEON(rk, dst, src, n)
	} else {
		encryptNEON(rk, dst, src, n)
	}
}
