package randflake

import "os"

// A kernel is one implementation of the batch ID cipher.
type kernel struct {
	name    string
	encrypt func(s *Sparx64, dst, src []uint64) // len(src) >= len(dst)
	decrypt func(s *Sparx64, dst, src []uint64)
}

var genericKernel = kernel{name: "generic", encrypt: encryptIDsGeneric, decrypt: decryptIDsGeneric}

// activeKernel is chosen once, at package initialisation.
var activeKernel = selectKernel(os.Getenv("RANDFLAKE_KERNEL"))

// Kernel reports the name of the Sparx-64 kernel that EncryptIDs and
// DecryptIDs use on this CPU: "avx512", "avx2", "neon" or "generic".
//
// The fastest kernel whose every CPU feature is present is chosen when the
// package is initialised. The environment variable RANDFLAKE_KERNEL may name
// a slower kernel to use instead (for comparisons); a name this CPU cannot
// run is ignored. GODEBUG=cpu.<feature>=off (see golang.org/x/sys/cpu) also
// steers the choice.
func Kernel() string { return activeKernel.name }

// kernels lists the kernels this CPU can run, fastest first, generic last.
func kernels() []kernel {
	return append(platformKernels(), genericKernel)
}

func selectKernel(want string) kernel {
	all := kernels()
	for _, k := range all {
		if k.name == want {
			return k
		}
	}
	return all[0]
}

// simdFunc is the signature of an assembly kernel: it processes n IDs, n a
// positive multiple of the kernel's width, reading all of a group of IDs
// before writing it, so that dst may equal src.
type simdFunc func(rk *[roundKeyWords]uint32, dst, src *uint64, n int)

// maxWidth bounds the width of every SIMD kernel.
const maxWidth = 32

// simdKernel wraps an assembly kernel of the given width (IDs per call
// unit) into a kernel that handles any length.
func simdKernel(name string, width int, enc, dec simdFunc) kernel {
	return kernel{
		name: name,
		encrypt: func(s *Sparx64, dst, src []uint64) {
			runSIMD(enc, width, s, dst, src, encryptIDsGeneric)
		},
		decrypt: func(s *Sparx64, dst, src []uint64) {
			runSIMD(dec, width, s, dst, src, decryptIDsGeneric)
		},
	}
}

// genericTail is the largest remainder that the generic code handles faster
// than one padded pass of a SIMD kernel.
const genericTail = 2

func runSIMD(fn simdFunc, width int, s *Sparx64, dst, src []uint64, tail func(*Sparx64, []uint64, []uint64)) {
	n := len(dst) - len(dst)%width
	if n > 0 {
		fn(&s.rk32, &dst[0], &src[0], n)
	}
	rest := len(dst) - n
	switch {
	case rest == 0:
	case rest <= genericTail:
		tail(s, dst[n:], src[n:])
	default:
		var buf [maxWidth]uint64
		copy(buf[:], src[n:len(dst)])
		fn(&s.rk32, &buf[0], &buf[0], width)
		copy(dst[n:], buf[:rest])
	}
}
