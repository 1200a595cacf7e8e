package statedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Files given by path, such as the fleet secret, token files and TLS keys
// and certificates, are often reached through symbolic links: a
// Kubernetes Secret volume presents each key as a link, key -> ..data/key,
// where ..data is a link to a timestamped directory (..2026_12_01_…) that
// the kubelet replaces on update by renaming a new link over ..data and
// then removing the old directory. ReadPrivateFile and ReadPublicFile
// follow such links themselves, one at a time, and accept the file
// reached only when
//
//   - every link followed, and the file reached, lies inside the directory
//     of the path given (that directory is resolved once and must be a
//     real directory): a link leading out of it is refused;
//   - every element (the directory, each link, each directory passed
//     through, the file) belongs to root or to the current user, and no
//     directory is writable by group or others unless it is sticky (as
//     /tmp and a Secret volume's tmpfs are: then only an entry's owner,
//     the directory's or root may replace it). This holds for the
//     directory part of the path too, from the root down: each of its
//     directories and each link in it is checked before it is followed,
//     so that no other user decides which file is read;
//   - the file is a regular file, and writable by neither group nor others;
//   - for a secret (ReadPrivateFile): neither others nor the group may
//     read it, except that a file root owns may be readable by its group
//     when that group is one of this process's groups (the kubelet's
//     fsGroup: mode 0440, root:fsGroup).
//
// The file is then opened without following a link and without blocking,
// and the descriptor's file must be the very file checked (same device
// and inode): a path changed between the checks and the open is resolved
// afresh, a few times, rather than read unchecked.
//
// The state directory's own files follow stricter rules (no links at all;
// see readStateFile).

// maxLinks bounds the symbolic links followed to reach one file, as
// the kernel bounds them (40 on Linux).
const maxLinks = 40

// maxAttempts bounds how often a path that changed while being resolved
// and opened (a Secret volume's update) is resolved again.
const maxAttempts = 8

// testHookOpen, set by tests only, runs between resolving a path and
// opening the file reached, so that tests can change the path there.
var testHookOpen func(reached string)

// ReadPrivateFile reads a small private file holding key material (a
// secret, tokens, a TLS private key): at most limit bytes (a larger file
// is refused, never truncated). Symbolic links are followed within the
// directory of path, as a Kubernetes Secret volume needs (see the rules
// above); the file must be a regular file of the current user or root,
// writable by neither group nor others and readable by neither, except
// by the group of a root-owned file when that group is one of this
// process's groups (a Secret volume with fsGroup). FIFOs, devices and
// directories are refused without being opened or waited on. Errors name
// the path and the fix, never the contents; a missing file is an error
// wrapping os.ErrNotExist.
func ReadPrivateFile(path string, limit int64) ([]byte, error) {
	return readGiven(path, limit, true)
}

// ReadPublicFile reads a small file that must be trusted but need not be
// secret, such as a TLS certificate or a CA bundle: as ReadPrivateFile,
// except that group and others may read it (mode 0644 is accepted). It
// must still be a regular file of the current user or root that group and
// others cannot write, reached through links that stay inside the
// directory of path.
func ReadPublicFile(path string, limit int64) ([]byte, error) {
	return readGiven(path, limit, false)
}

// readGiven reads the file at path under the rules above; secret selects
// the rules for key material.
func readGiven(path string, limit int64, secret bool) ([]byte, error) {
	f, fi, err := openGiven(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := checkGiven(path, fi, secret); err != nil {
		return nil, err
	}
	return readLimited(f, path, limit)
}

// openGiven resolves path inside its directory and opens the file
// reached, returning it with its fstat information, which is that of the
// file resolveGiven checked. A path whose links or file change meanwhile
// is resolved again, up to maxAttempts times.
func openGiven(path string) (*os.File, os.FileInfo, error) {
	for attempt := 1; ; attempt++ {
		again := attempt < maxAttempts
		r, err := resolveGiven(path)
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
		f, err := openNoFollow(r.path, os.O_RDONLY, 0)
		if err != nil {
			if again && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, errSymlink)) {
				continue
			}
			return nil, nil, openError(path, r, err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("statedir: %s: %w", path, err)
		}
		if os.SameFile(fi, r.info) {
			return f, fi, nil
		}
		f.Close()
		if !again {
			return nil, nil, fmt.Errorf("statedir: %s changed between its checks and its opening %d times in a row: give a path that is not being replaced", path, maxAttempts)
		}
	}
}

// reached is where resolveGiven led: the path of the file reached,
// through real directories only, its Lstat information and how many links
// were followed.
type reached struct {
	path  string
	info  os.FileInfo
	links int
}

// via describes, for messages, the path reached if links led there.
func (r reached) via() string {
	if r.links == 0 {
		return ""
	}
	return fmt.Sprintf(" (reached through %d symbolic link(s) at %s)", r.links, r.path)
}

// resolveGiven follows the symbolic links of path, one at a time, inside
// the directory of path, checking the owner of every element on the way.
// The reached it returns with an error counts the links followed so far.
func resolveGiven(path string) (reached, error) {
	var r reached
	abs, err := filepath.Abs(path)
	if err != nil {
		return r, fmt.Errorf("statedir: %s: %w", path, err)
	}
	dir, name := filepath.Dir(abs), filepath.Base(abs)
	if abs == dir { // the root directory
		return r, fmt.Errorf("statedir: %s is not a regular file (a directory): give the path of a regular file", path)
	}
	base, err := resolveDir(path, dir)
	if err != nil {
		return r, err
	}
	var within []string // real directories below base, each checked
	todo := []string{name}
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(within) == 0 {
				return r, fmt.Errorf("statedir: %s: a symbolic link leads out of %s: links must stay inside the file's directory; give the path of the file itself", path, dir)
			}
			within = within[:len(within)-1]
			continue
		}
		cur := filepath.Join(base, filepath.Join(within...), c)
		fi, err := os.Lstat(cur)
		if err != nil {
			return r, missingOr(path, r, err)
		}
		if err := checkElement(path, cur, fi); err != nil {
			return r, err
		}
		if err := checkDirWrite(path, cur, fi); err != nil {
			return r, err
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			r.links++
			if r.links > maxLinks {
				return r, fmt.Errorf("statedir: %s: more than %d symbolic links to follow (a loop?): give the path of the file itself", path, maxLinks)
			}
			target, err := os.Readlink(cur)
			if err != nil {
				return r, missingOr(path, r, err)
			}
			if target == "" {
				return r, fmt.Errorf("statedir: %s: the symbolic link %s is empty", path, cur)
			}
			if filepath.IsAbs(target) {
				rel, ok := inside(target, base, dir)
				if !ok {
					return r, fmt.Errorf("statedir: %s: the symbolic link %s leads to %s, outside %s: links must stay inside the file's directory; give the path of the file itself", path, cur, target, dir)
				}
				within = nil
				target = rel
			}
			todo = append(strings.Split(filepath.ToSlash(target), "/"), todo...)
		case fi.IsDir() && len(todo) > 0:
			within = append(within, c)
		case len(todo) > 0:
			return r, fmt.Errorf("statedir: %s: %s is not a directory (%s), yet the path goes on below it", path, cur, kind(fi.Mode()))
		default:
			r.path, r.info = cur, fi
			return r, nil
		}
	}
	// The last step was "." or "..": a directory.
	r.path = filepath.Join(base, filepath.Join(within...))
	r.info, err = os.Lstat(r.path)
	if err != nil {
		return r, missingOr(path, r, err)
	}
	return r, nil
}

// resolveDir resolves dir, the absolute directory part of path, to a real
// directory, as filepath.EvalSymlinks does, but one element at a time
// from the root down, checking each before it is used: every directory
// (the root included) and every link belongs to root or to the current
// user, and no directory is writable by group or others unless it is
// sticky. A directory that others can change, or a link that another
// user owns, would let that user choose the file read.
func resolveDir(path, dir string) (string, error) {
	links := 0
	at := string(filepath.Separator) // the real directory reached so far
	fi, err := os.Lstat(at)
	if err != nil {
		return "", fmt.Errorf("statedir: %s: %w", path, err)
	}
	if err := checkDirElement(path, at, fi); err != nil {
		return "", err
	}
	todo := strings.Split(filepath.ToSlash(dir), "/")
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			at = filepath.Dir(at)
			continue
		}
		cur := filepath.Join(at, c)
		fi, err := os.Lstat(cur)
		if err != nil {
			return "", missingOr(path, reached{}, err)
		}
		if err := checkDirElement(path, cur, fi); err != nil {
			return "", err
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			if links++; links > maxLinks {
				return "", fmt.Errorf("statedir: %s: more than %d symbolic links in its directory part (a loop?): give the path of the file itself", path, maxLinks)
			}
			target, err := os.Readlink(cur)
			if err != nil {
				return "", missingOr(path, reached{}, err)
			}
			if target == "" {
				return "", fmt.Errorf("statedir: %s: the symbolic link %s is empty", path, cur)
			}
			if filepath.IsAbs(target) {
				at = string(filepath.Separator)
			}
			todo = append(strings.Split(filepath.ToSlash(target), "/"), todo...)
		case fi.IsDir():
			at = cur
		default:
			return "", fmt.Errorf("statedir: %s: its directory %s is not a directory (%s)", path, cur, kind(fi.Mode()))
		}
	}
	return at, nil
}

// checkDirElement checks an element of the directory part of path: owned
// by root or the current user and, if a directory, not writable by
// others (checkDirWrite).
func checkDirElement(path, elem string, fi os.FileInfo) error {
	if err := checkElement(path, elem, fi); err != nil {
		return err
	}
	return checkDirWrite(path, elem, fi)
}

// checkDirWrite refuses a directory on the way to path that group or
// others may write, unless it is sticky: anyone who may write it may
// replace the entries in it.
func checkDirWrite(path, elem string, fi os.FileInfo) error {
	if !fi.IsDir() || fi.Mode().Perm()&0o022 == 0 || fi.Mode()&os.ModeSticky != 0 {
		return nil
	}
	return fmt.Errorf("statedir: %s: the directory %s is writable by group or others (mode %v), who could replace what the path leads to: chmod go-w it (or make it sticky, as /tmp is), or give a path through directories only root or this user may change", path, elem, fi.Mode().Perm())
}

// inside returns target relative to base or dir when it lies in either
// (dir resolves to base), and whether it does.
func inside(target, base, dir string) (string, bool) {
	for _, root := range []string{base, dir} {
		rel, err := filepath.Rel(root, filepath.Clean(target))
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return rel, true
		}
	}
	return "", false
}

// checkElement checks that the element at elem, met on the way to path,
// belongs to root or to the current user.
func checkElement(path, elem string, fi os.FileInfo) error {
	if uid, ok := ownerOK(fi); !ok {
		what := elem
		if elem != path {
			what = fmt.Sprintf("%s: %s", path, elem)
		}
		return fmt.Errorf("statedir: %s (%s) belongs to uid %d, not to this user (uid %d) or root: chown it, or give a path whose links and directories are yours or root's", what, kind(fi.Mode()), uid, os.Geteuid())
	}
	return nil
}

// missingOr wraps an error met while resolving path: a missing element is
// reported as a missing path (wrapping os.ErrNotExist), naming where links
// led if they did.
func missingOr(path string, r reached, err error) error {
	if errors.Is(err, fs.ErrNotExist) && r.links == 0 {
		return fmt.Errorf("statedir: %w", &os.PathError{Op: "open", Path: path, Err: fs.ErrNotExist})
	}
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("statedir: %s: %w%s", path, err, permissionFix())
	}
	return fmt.Errorf("statedir: %s: %w", path, err)
}

// openError explains an error opening the file resolveGiven reached.
func openError(path string, r reached, err error) error {
	switch {
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("statedir: open %s: permission denied%s%s", path, r.via(), permissionFix())
	case errors.Is(err, errSymlink):
		return fmt.Errorf("statedir: %s kept being replaced by a symbolic link while being opened: give a path that is not being replaced", path)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("statedir: %w", &os.PathError{Op: "open", Path: path, Err: fs.ErrNotExist})
	}
	return fmt.Errorf("statedir: %s%s: %w", path, r.via(), err)
}

// permissionFix is the advice for a file this process may not read.
func permissionFix() string {
	return fmt.Sprintf(" (this process runs as uid %d, gid %d): make it readable by this user; from a Kubernetes Secret volume, set the pod's fsGroup and defaultMode: 0440", os.Geteuid(), os.Getegid())
}

// notRegular refuses a path that reached something else than a regular
// file.
func notRegular(path string, r reached) error {
	return fmt.Errorf("statedir: %s is not a regular file (%s)%s: give the path of a regular file", path, kind(r.info.Mode()), r.via())
}

// checkGiven checks the mode of the file opened for path (its fstat
// information): a regular file of root's or the current user's, not
// writable by group or others and, for a secret, not readable by others,
// nor by the group unless root owns it and the group is one of this
// process's.
func checkGiven(path string, fi os.FileInfo, secret bool) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("statedir: %s is not a regular file (%s): give the path of a regular file", path, kind(fi.Mode()))
	}
	uid, ok := ownerOK(fi)
	if !ok {
		return fmt.Errorf("statedir: %s belongs to uid %d, not to this user (uid %d) or root: chown it", path, uid, os.Geteuid())
	}
	perm := fi.Mode().Perm()
	if !secret {
		if perm&0o022 != 0 {
			return fmt.Errorf("statedir: %s is writable by group or others (mode %v): chmod go-w it", path, perm)
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
	return fmt.Errorf("statedir: %s is accessible to group or others (mode %v): chmod 600 it%s", path, perm, why)
}
