package privatefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// reached is where resolve led: the path of the file reached, through
// real directories only, its Lstat information and how many links of the
// file's part were followed.
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

// resolve follows the symbolic links of path one at a time, checking
// every element on the way: first the directory part of path, from the
// root down, to a real directory; then the file's name inside that
// directory, which links may not leave. The reached it returns with an
// error counts the links of the file's part followed so far.
func resolve(path string) (reached, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return reached{}, errorf("%s: %w", path, err)
	}
	dir, name := filepath.Dir(abs), filepath.Base(abs)
	if abs == dir { // the root directory
		return reached{}, errorf("%s is not a regular file (a directory): give the path of a regular file", path)
	}
	root := string(filepath.Separator)
	fi, err := os.Lstat(root)
	if err != nil {
		return reached{}, errorf("%s: %w", path, err)
	}
	if err := checkElement(path, root, fi); err != nil {
		return reached{}, err
	}
	dirPart := walk{path: path}
	r, err := dirPart.run(root, split(dir))
	if err != nil {
		return reached{}, err
	}
	filePart := walk{path: path, fence: r.path, dir: dir}
	return filePart.run(r.path, []string{name})
}

// split splits a path, or a link's target, into its elements.
func split(p string) []string {
	return strings.Split(filepath.ToSlash(p), "/")
}

// walk is one walk through elements of path, from a real directory: the
// directory part of path, from the root (fence empty), or the file's
// name, inside the directory of path (fence that directory, resolved).
// Both check every element as they meet it (checkElement) and follow
// links one at a time, and in both a ".." is the parent of the real
// directory reached so far. They differ where they may lead:
//
//   - in the directory part, links may lead anywhere: an absolute link
//     starts again from the root, a ".." at the root stays there (as the
//     kernel has it), and every element must be a directory or a link to
//     one; the walk ends at a real directory;
//   - in the file's part, links must stay inside the fence: an absolute
//     link must lead inside it (or inside dir, the fence as path spells
//     it), a ".." at the fence is refused, and the last element is the
//     file reached, whatever its type (Read refuses all but a regular
//     file).
//
// Each part may follow maxLinks links.
type walk struct {
	path  string // the path given, for messages
	fence string // the file's part: the real directory not to leave
	dir   string // the file's part: the directory of path, as given
	links int
}

// counted is what a failed walk reports to open, whose retry looks at the
// links of the file's part alone.
func (w *walk) counted() reached {
	if w.fence == "" {
		return reached{}
	}
	return reached{links: w.links}
}

// run walks todo from at, a real directory already checked. The
// directory part returns the real directory it reached as the reached's
// path (without its information); the file's part returns what it
// reached.
func (w *walk) run(at string, todo []string) (reached, error) {
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if w.fence != "" && at == w.fence {
				return w.counted(), errorf("%s: a symbolic link leads out of %s: links must stay inside the file's directory; give the path of the file itself", w.path, w.dir)
			}
			at = filepath.Dir(at)
			continue
		}
		cur := filepath.Join(at, c)
		fi, err := os.Lstat(cur)
		if err != nil {
			return w.counted(), missingOr(w.path, w.counted(), err)
		}
		if err := checkElement(w.path, cur, fi); err != nil {
			return w.counted(), err
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			w.links++
			if w.links > maxLinks {
				if w.fence == "" {
					return w.counted(), errorf("%s: more than %d symbolic links in its directory part (a loop?): give the path of the file itself", w.path, maxLinks)
				}
				return w.counted(), errorf("%s: more than %d symbolic links to follow (a loop?): give the path of the file itself", w.path, maxLinks)
			}
			target, err := os.Readlink(cur)
			if err != nil {
				return w.counted(), missingOr(w.path, w.counted(), err)
			}
			if target == "" {
				return w.counted(), errorf("%s: the symbolic link %s is empty", w.path, cur)
			}
			if filepath.IsAbs(target) {
				if w.fence == "" {
					at = string(filepath.Separator)
				} else {
					rel, ok := inside(target, w.fence, w.dir)
					if !ok {
						return w.counted(), errorf("%s: the symbolic link %s leads to %s, outside %s: links must stay inside the file's directory; give the path of the file itself", w.path, cur, target, w.dir)
					}
					at, target = w.fence, rel
				}
			}
			todo = append(split(target), todo...)
		case fi.IsDir() && (w.fence == "" || len(todo) > 0):
			at = cur
		case w.fence == "":
			return reached{}, errorf("%s: its directory %s is not a directory (%s)", w.path, cur, Kind(fi.Mode()))
		case len(todo) > 0:
			return w.counted(), errorf("%s: %s is not a directory (%s), yet the path goes on below it", w.path, cur, Kind(fi.Mode()))
		default:
			return reached{path: cur, info: fi, links: w.links}, nil
		}
	}
	if w.fence == "" {
		return reached{path: at}, nil
	}
	// The file's part ended on "." or "..": a directory.
	r := reached{path: at, links: w.links}
	var err error
	if r.info, err = os.Lstat(at); err != nil {
		return r, missingOr(w.path, r, err)
	}
	return r, nil
}

// inside returns target relative to fence or dir when it lies in either
// (dir resolves to fence), and whether it does.
func inside(target, fence, dir string) (string, bool) {
	for _, root := range []string{fence, dir} {
		rel, err := filepath.Rel(root, filepath.Clean(target))
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return rel, true
		}
	}
	return "", false
}

// checkElement checks an element met on the way to path, at elem: it
// belongs to root or to the current user and, if a directory, group and
// others may not write it unless it is sticky: anyone who may write it
// may replace the entries in it. A directory that others can change, or a
// link that another user owns, would let that user choose the file read.
func checkElement(path, elem string, fi os.FileInfo) error {
	if uid, ok := OwnerOK(fi); !ok {
		what := elem
		if elem != path {
			what = fmt.Sprintf("%s: %s", path, elem)
		}
		return errorf("%s (%s) belongs to uid %d, not to this user (uid %d) or root: chown it, or give a path whose links and directories are yours or root's", what, Kind(fi.Mode()), uid, os.Geteuid())
	}
	if !fi.IsDir() || fi.Mode().Perm()&0o022 == 0 || fi.Mode()&os.ModeSticky != 0 {
		return nil
	}
	return errorf("%s: the directory %s is writable by group or others (mode %v), who could replace what the path leads to: chmod go-w it (or make it sticky, as /tmp is), or give a path through directories only root or this user may change", path, elem, fi.Mode().Perm())
}

// missingOr wraps an error met while resolving path: a missing element is
// reported as a missing path (wrapping os.ErrNotExist), naming where links
// led if they did.
func missingOr(path string, r reached, err error) error {
	if errors.Is(err, fs.ErrNotExist) && r.links == 0 {
		return errorf("%w", &os.PathError{Op: "open", Path: path, Err: fs.ErrNotExist})
	}
	if errors.Is(err, fs.ErrPermission) {
		return errorf("%s: %w%s", path, err, permissionFix())
	}
	return errorf("%s: %w", path, err)
}
