package randflake

import (
	"fmt"
	"os"
	"strings"
)

// kernelID names an implementation of the batch ID cipher.
type kernelID uint8

const (
	kernelGeneric kernelID = iota
	kernelAVX2
	kernelAVX512
	kernelNEON
)

// A kernel is one implementation of the batch ID cipher: the portable Go
// code (width 0) or an assembly kernel that works on width IDs at a time,
// width a power of two no larger than maxWidth.
type kernel struct {
	name  string
	id    kernelID
	width int
}

var genericKernel = kernel{name: "generic", id: kernelGeneric}

// activeKernel is chosen once, at package initialisation.
var activeKernel = selectKernel(os.Getenv("RANDFLAKE_KERNEL"))

// Kernel reports the name of the Sparx-64 kernel that EncryptIDs and
// DecryptIDs use on this CPU: "avx512", "avx2", "neon" or "generic".
//
// The fastest kernel whose every CPU feature is present is chosen when the
// package is initialised. The environment variable RANDFLAKE_KERNEL may name
// a slower kernel to use instead (for comparisons); a name this CPU cannot
// run is not used, and KernelOverrideError says so. GODEBUG=cpu.<feature>=off (see golang.org/x/sys/cpu) also
// steers the choice, and the purego build tag leaves only "generic".
func Kernel() string { return activeKernel.name }

// KernelOverrideError reports a RANDFLAKE_KERNEL that was not honoured: it
// names a kernel that does not exist or that this CPU cannot run, so the
// fastest one (Kernel) is used instead. It is nil when the variable is
// unset or honoured. Programs that let users set the variable should show
// this error rather than ignore it.
func KernelOverrideError() error {
	want := os.Getenv("RANDFLAKE_KERNEL")
	if want == "" || want == activeKernel.name {
		return nil
	}
	return fmt.Errorf("randflake: RANDFLAKE_KERNEL=%q is not a kernel this CPU can run (it can run %s); using %q",
		want, strings.Join(Kernels(), ", "), activeKernel.name)
}

// Kernels lists the kernels this CPU can run, fastest first; "generic" is
// always last.
func Kernels() []string {
	var names []string
	for _, k := range kernels() {
		names = append(names, k.name)
	}
	return names
}

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

// maxWidth bounds the width of every assembly kernel.
const maxWidth = 32

// genericTail is the largest remainder that the generic code handles faster
// than one padded pass of an assembly kernel.
const genericTail = 2

// encrypt encrypts len(dst) IDs from src (len(src) >= len(dst)).
func (k kernel) encrypt(s *Sparx64, dst, src []uint64) { k.run(s, dst, src, false) }

// decrypt is the inverse of encrypt.
func (k kernel) decrypt(s *Sparx64, dst, src []uint64) { k.run(s, dst, src, true) }

func (k kernel) run(s *Sparx64, dst, src []uint64, decrypt bool) {
	rest := len(dst)
	if k.width > 0 {
		n := len(dst) &^ (k.width - 1) // widths are powers of two
		if n > 0 {
			callKernel(k.id, decrypt, &s.rk32, &dst[0], &src[0], n)
		}
		rest -= n
		if rest > genericTail {
			// Pad the remainder to one full pass. callKernel is a static
			// call to no-escape assembly, so buf stays on the stack.
			var buf [maxWidth]uint64
			copy(buf[:], src[n:len(dst)])
			callKernel(k.id, decrypt, &s.rk32, &buf[0], &buf[0], k.width)
			copy(dst[n:], buf[:rest])
			return
		}
	}
	tail := len(dst) - rest
	if decrypt {
		decryptIDsGeneric(s, dst[tail:], src[tail:])
	} else {
		encryptIDsGeneric(s, dst[tail:], src[tail:])
	}
}
