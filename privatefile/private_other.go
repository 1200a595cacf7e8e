//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package privatefile

import "os"

// openNoFollow opens path for reading, refusing a symbolic link in its
// last element. This platform cannot open without following links, so
// the check is made just before opening.
func openNoFollow(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return nil, &os.PathError{Op: "open", Path: path, Err: errSymlink}
	}
	return os.OpenFile(path, os.O_RDONLY, 0)
}

// ownerOK cannot tell owners apart on this platform.
func ownerOK(fi os.FileInfo) (uid int, ok bool) { return -1, true }

// groupOK cannot tell groups apart on this platform: a group-readable
// secret is refused.
func groupOK(fi os.FileInfo) (gid int, ok bool) { return -1, false }
