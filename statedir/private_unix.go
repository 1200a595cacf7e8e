//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package statedir

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// openNoFollow opens path without following a symbolic link in its last
// element and without blocking on a FIFO or a device, so that a planted
// link or special file is refused (by checkOwned) instead of written
// through or waited on.
func openNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	for {
		fd, err := unix.Open(path, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, uint32(perm.Perm()))
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.ELOOP:
			return nil, &os.PathError{Op: "open", Path: path, Err: errSymlink}
		case err != nil:
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return os.NewFile(uintptr(fd), path), nil
	}
}

// ownerOK reports whether fi belongs to the current user or to root.
func ownerOK(fi os.FileInfo) (uid int, ok bool) {
	st, isStat := fi.Sys().(*syscall.Stat_t)
	if !isStat {
		return -1, false
	}
	uid = int(st.Uid)
	return uid, uid == os.Geteuid() || uid == 0
}

// ownerFix is the advice for a path owned by someone else.
func ownerFix(path string, uid int) string {
	return fmt.Sprintf("it belongs to uid %d, not to this user (uid %d) or root: use a state directory of your own, or chown it", uid, os.Geteuid())
}
