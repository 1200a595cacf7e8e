//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package privatefile

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// openNoFollow opens path for reading without following a symbolic link
// in its last element and without blocking on a FIFO or a device, so that
// a planted link or special file is refused (by checkFile) instead of
// read through or waited on.
func openNoFollow(path string) (*os.File, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
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
