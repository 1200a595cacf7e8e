// Package privatefile reads small files given by path that hold key
// material (a secret, tokens, a TLS private key, a password) or that must
// at least be trusted (a certificate, a CA bundle), with the checks that
// keep another user from choosing, replacing or reading what is read.
//
// Such files are often reached through symbolic links: a Kubernetes
// Secret volume presents each key as a link, key -> ..data/key, where
// ..data is a link to a timestamped directory (..2026_12_01_…) that the
// kubelet replaces on update by renaming a new link over ..data and then
// removing the old directory. Read and ReadPublic follow such links
// themselves, one at a time, and accept the file reached only when
//
//   - every link followed, and the file reached, lies inside the directory
//     of the path given (that directory is resolved once and must be a
//     real directory): a link leading out of it is refused. A ".." in a
//     link's target is the parent of the directory reached so far (links
//     already followed), as the kernel has it; it may not climb above the
//     file's directory;
//   - every element (the directory, each link, each directory passed
//     through, the file) belongs to root or to the current user, and no
//     directory is writable by group or others unless it is sticky (as
//     /tmp and a Secret volume's tmpfs are: then only an entry's owner,
//     the directory's or root may replace it). This holds for the
//     directory part of the path too, from the root down: each of its
//     directories and each link in it is checked before it is followed,
//     so that no other user decides which file is read. Links there may
//     lead anywhere, under the same checks;
//   - the file is a regular file, and writable by neither group nor others;
//   - for key material (Read): neither others nor the group may read it,
//     except that a file root owns may be readable by its group when that
//     group is one of this process's groups (the kubelet's fsGroup: mode
//     0440, root:fsGroup).
//
// The file is then opened without following a link and without blocking
// (a FIFO or a device is refused, never waited on), and the descriptor's
// file must be the very file checked (same device and inode): a path
// changed between the checks and the open, as by the kubelet's update, is
// resolved afresh, a few times, rather than read unchecked. At most the
// limit given is read: a larger file is refused, never truncated.
//
// Errors name the path and the fix, never the file's contents; a missing
// file is an error wrapping os.ErrNotExist.
//
// On systems other than Linux, macOS and the BSDs, owners and groups
// cannot be told apart: the owner checks pass, a group-readable secret is
// refused, and the last element is checked for a link just before it is
// opened.
package privatefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// errPrefix begins every error: the wording these errors had when this
// code was part of package statedir, which callers' messages and tests
// still show.
const errPrefix = "statedir: "

// errorf formats an error, after errPrefix.
func errorf(format string, a ...any) error {
	return fmt.Errorf(errPrefix+format, a...)
}

// maxLinks bounds the symbolic links followed to reach one file, as the
// kernel bounds them (40 on Linux), in each of the directory part of the
// path and the file's part.
const maxLinks = 40

// maxAttempts bounds how often a path that changed while being resolved
// and opened (a Secret volume's update) is resolved again.
const maxAttempts = 8

// ErrSymlink is the error OpenNoFollow wraps for a path whose last
// element is a symbolic link.
var ErrSymlink = errors.New("is a symbolic link")

// testHookOpen, set by tests only, runs between resolving a path and
// opening the file reached, so that tests can change the path there.
var testHookOpen func(reached string)

// Read reads the file at path, a small private file holding key material
// (a secret, tokens, a TLS private key, a password): at most limit bytes,
// a larger file being refused. Links are followed within the directory of
// path, as a Kubernetes Secret volume needs (see the package's rules);
// the file must be a regular file of the current user or root, writable
// by neither group nor others and readable by neither, except by the
// group of a root-owned file when that group is one of this process's
// groups (a Secret volume with fsGroup). The caller should clear the
// bytes returned once used.
func Read(path string, limit int64) ([]byte, error) {
	return read(path, limit, true)
}

// ReadPublic reads the file at path, a small file that must be trusted
// but need not be secret, such as a TLS certificate or a CA bundle: as
// Read, except that group and others may read it (mode 0644 is accepted).
// It must still be a regular file of the current user or root that group
// and others cannot write, reached through directories and links that
// only root or the current user may change, staying inside the directory
// of path.
func ReadPublic(path string, limit int64) ([]byte, error) {
	return read(path, limit, false)
}

// read reads the file at path under the package's rules; secret selects
// the rules for key material.
func read(path string, limit int64, secret bool) ([]byte, error) {
	f, fi, err := open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := checkFile(path, fi, secret); err != nil {
		return nil, err
	}
	return readLimited(f, path, limit)
}

// open resolves path inside its directory and opens the file reached,
// returning it with its fstat information, which is that of the file
// resolve checked. A path whose links or file change meanwhile is
// resolved again, up to maxAttempts times.
func open(path string) (*os.File, os.FileInfo, error) {
	for attempt := 1; ; attempt++ {
		again := attempt < maxAttempts
		r, err := resolve(path)
		if err != nil {
			// A link followed into a directory removed meanwhile: the
			// kubelet's update, between renaming ..data and removing
			// the old directory.
			if again && r.links > 0 && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, nil, err
		}
		if !r.info.Mode().IsRegular() {
			return nil, nil, notRegular(path, r)
		}
		if testHookOpen != nil {
			testHookOpen(r.path)
		}
		f, err := OpenNoFollow(r.path, os.O_RDONLY, 0)
		if err != nil {
			if again && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrSymlink)) {
				continue
			}
			return nil, nil, openError(path, r, err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, nil, errorf("%s: %w", path, err)
		}
		if os.SameFile(fi, r.info) {
			return f, fi, nil
		}
		f.Close()
		if !again {
			return nil, nil, errorf("%s changed between its checks and its opening %d times in a row: give a path that is not being replaced", path, maxAttempts)
		}
	}
}

// readLimited reads f, the file at path, to its end: at most limit bytes,
// refusing a larger file rather than truncating it.
func readLimited(f *os.File, path string, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		clear(data)
		return nil, errorf("reading %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		clear(data)
		return nil, errorf("%s is larger than %d bytes: it is not the file meant", path, limit)
	}
	return data, nil
}

// checkFile checks the mode of the file opened for path (its fstat
// information): a regular file of root's or the current user's, not
// writable by group or others and, for a secret, not readable by others,
// nor by the group unless root owns it and the group is one of this
// process's.
func checkFile(path string, fi os.FileInfo, secret bool) error {
	if !fi.Mode().IsRegular() {
		return errorf("%s is not a regular file (%s): give the path of a regular file", path, Kind(fi.Mode()))
	}
	uid, ok := OwnerOK(fi)
	if !ok {
		return errorf("%s belongs to uid %d, not to this user (uid %d) or root: chown it", path, uid, os.Geteuid())
	}
	perm := fi.Mode().Perm()
	if !secret {
		if perm&0o022 != 0 {
			return errorf("%s is writable by group or others (mode %v): chmod go-w it", path, perm)
		}
		return nil
	}
	exposed := perm & 0o077
	gid, ours := groupOK(fi)
	if uid == 0 && ours {
		exposed &^= 0o040 // fsGroup: root's file, readable by a group of ours
	}
	if exposed == 0 {
		return nil
	}
	why := ""
	switch {
	case exposed&0o007 != 0:
		why = "; a secret must never be accessible to others (from a Kubernetes Secret volume: defaultMode: 0400, or 0440 with the pod's fsGroup)"
	case exposed == 0o040:
		why = fmt.Sprintf("; a secret may be readable by its group only when root owns it and its group (gid %d here) is one of this process's groups, as a Kubernetes Secret volume with the pod's fsGroup has it", gid)
	}
	return errorf("%s is accessible to group or others (mode %v): chmod 600 it%s", path, perm, why)
}

// openError explains an error opening the file resolve reached.
func openError(path string, r reached, err error) error {
	switch {
	case errors.Is(err, fs.ErrPermission):
		return errorf("open %s: permission denied%s%s", path, r.via(), permissionFix())
	case errors.Is(err, ErrSymlink):
		return errorf("%s kept being replaced by a symbolic link while being opened: give a path that is not being replaced", path)
	case errors.Is(err, fs.ErrNotExist):
		return errorf("%w", &os.PathError{Op: "open", Path: path, Err: fs.ErrNotExist})
	}
	return errorf("%s%s: %w", path, r.via(), err)
}

// permissionFix is the advice for a file this process may not read.
func permissionFix() string {
	return fmt.Sprintf(" (this process runs as uid %d, gid %d): make it readable by this user; from a Kubernetes Secret volume, set the pod's fsGroup and defaultMode: 0440", os.Geteuid(), os.Getegid())
}

// notRegular refuses a path that reached something else than a regular
// file.
func notRegular(path string, r reached) error {
	return errorf("%s is not a regular file (%s)%s: give the path of a regular file", path, Kind(r.info.Mode()), r.via())
}

// Kind names a file's type for messages: "a symbolic link", "a FIFO",
// "a directory", "a regular file"...
func Kind(m os.FileMode) string {
	switch {
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	case m.IsRegular():
		return "a regular file"
	}
	return "a special file"
}
