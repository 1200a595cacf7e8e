//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package statedir

import "os"

const flockSupported = false

func tryLock(f *os.File) (bool, error) { return false, ErrUnsupported }
