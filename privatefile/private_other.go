//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package privatefile

import "os"

// OpenNoFollow opens path with flag and perm (as os.OpenFile), refusing a
// symbolic link in its last element with an *os.PathError wrapping
// ErrSymlink. This platform cannot open without following links, so the
// check is made just before opening.
func OpenNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return nil, &os.PathError{Op: "open", Path: path, Err: ErrSymlink}
	}
	return os.OpenFile(path, flag, perm)
}

// OwnerOK cannot tell owners apart on this platform: every file passes,
// with uid -1.
func OwnerOK(fi os.FileInfo) (uid int, ok bool) { return -1, true }

// groupOK cannot tell groups apart on this platform: a group-readable
// secret is refused.
func groupOK(fi os.FileInfo) (gid int, ok bool) { return -1, false }
