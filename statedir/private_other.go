//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package statedir

import "os"

// openNoFollow opens path, refusing a symbolic link in its last element.
// This platform cannot open without following links, so the check is made
// just before opening.
func openNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return nil, &os.PathError{Op: "open", Path: path, Err: errSymlink}
	}
	return os.OpenFile(path, flag, perm)
}

// ownerOK cannot tell owners apart on this platform.
func ownerOK(fi os.FileInfo) (uid int, ok bool) { return -1, true }

func ownerFix(path string, uid int) string { return "it belongs to another user" }
