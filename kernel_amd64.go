//go:build gc && !purego

package randflake

import "golang.org/x/sys/cpu"

//go:generate go run -C _asm . -out ../sparx64_amd64.s -stubs ../sparx64_amd64_stubs.go -pkg randflake

// platformKernels returns the amd64 kernels this CPU can run, fastest first.
// Every CPU feature a kernel uses is checked on its own, since turning one
// off with GODEBUG does not clear the features that depend on it.
func platformKernels() []kernel {
	var ks []kernel
	x := &cpu.X86
	if x.HasAVX && x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VBMI && x.HasAVX512VBMI2 {
		ks = append(ks, kernel{name: "avx512", id: kernelAVX512, width: 32})
	}
	if x.HasAVX && x.HasAVX2 {
		ks = append(ks, kernel{name: "avx2", id: kernelAVX2, width: 16})
	}
	return ks
}

// callKernel runs an assembly kernel on n IDs, n a positive multiple of its
// width. The calls are static so that the compiler sees that no pointer
// escapes.
func callKernel(id kernelID, decrypt bool, rk *[roundKeyWords]uint32, dst, src *uint64, n int) {
	switch {
	case id == kernelAVX512 && !decrypt:
		encryptAVX512(rk, dst, src, n)
	case id == kernelAVX512:
		decryptAVX512(rk, dst, src, n)
	case id == kernelAVX2 && !decrypt:
		encryptAVX2(rk, dst, src, n)
	case id == kernelAVX2:
		decryptAVX2(rk, dst, src, n)
	default:
		panic("randflake: unknown kernel")
	}
}
