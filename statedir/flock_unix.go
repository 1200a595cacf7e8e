//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package statedir

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

const flockSupported = true

// tryLock takes an exclusive flock on f without waiting. It reports false
// if another open file description holds it. The kernel drops the lock
// when f is closed or its process exits.
func tryLock(f *os.File) (bool, error) {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, unix.EINTR):
			continue
		default:
			return false, err
		}
	}
}
