//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package privatefile

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// OpenNoFollow opens path with flag and perm (as os.OpenFile) without
// following a symbolic link in its last element and without blocking on a
// FIFO or a device, so that a planted link or special file can be refused
// (its mode checked on the open file) instead of read or written through,
// or waited on. A link in the last element is an *os.PathError wrapping
// ErrSymlink.
func OpenNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	for {
		fd, err := unix.Open(path, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, uint32(perm.Perm()))
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.ELOOP:
			return nil, &os.PathError{Op: "open", Path: path, Err: ErrSymlink}
		case err != nil:
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return os.NewFile(uintptr(fd), path), nil
	}
}

// OwnerOK reports whether fi belongs to the current user or to root, and
// its owner's uid (-1 where the platform does not say).
func OwnerOK(fi os.FileInfo) (uid int, ok bool) {
	st, isStat := fi.Sys().(*syscall.Stat_t)
	if !isStat {
		return -1, false
	}
	uid = int(st.Uid)
	return uid, uid == os.Geteuid() || uid == 0
}

// groupOK reports whether fi's group is one of this process's groups
// (its effective group or a supplementary one).
func groupOK(fi os.FileInfo) (gid int, ok bool) {
	st, isStat := fi.Sys().(*syscall.Stat_t)
	if !isStat {
		return -1, false
	}
	gid = int(st.Gid)
	if gid == os.Getegid() {
		return gid, true
	}
	groups, err := os.Getgroups()
	if err != nil {
		return gid, false
	}
	for _, g := range groups {
		if g == gid {
			return gid, true
		}
	}
	return gid, false
}
