package statedir

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/privatefile"
)

// The checks of the state's files and directories take their primitives
// from package privatefile: an open that follows no link and never blocks
// (privatefile.OpenNoFollow), the owner check (privatefile.OwnerOK) and
// the names of file types (privatefile.Kind).

// explainOpen adds the fix to an open error about a symbolic link.
func explainOpen(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) && errors.Is(pe.Err, privatefile.ErrSymlink) {
		return fmt.Errorf("%s is a symbolic link: links are not followed here; give the real path", pe.Path)
	}
	return err
}

// checkOwned checks an open file: a regular file (not a FIFO, a device or
// a directory) of the current user or root, with none of the mode bits
// forbid.
func checkOwned(f *os.File, forbid os.FileMode) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("statedir: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("statedir: %s is not a regular file (%s): give the path of a regular file", f.Name(), privatefile.Kind(fi.Mode()))
	}
	return checkOwner(f.Name(), fi, forbid)
}

// checkOwner checks the owner and mode of path.
func checkOwner(path string, fi os.FileInfo, forbid os.FileMode) error {
	if uid, ok := privatefile.OwnerOK(fi); !ok {
		return fmt.Errorf("statedir: %s: %s", path, ownerFix(path, uid))
	}
	if perm := fi.Mode().Perm(); perm&forbid != 0 {
		if forbid&0o044 != 0 {
			return fmt.Errorf("statedir: %s is accessible to group or others (mode %v): chmod 600 it", path, perm)
		}
		return fmt.Errorf("statedir: %s is writable by group or others (mode %v): chmod go-w it", path, perm)
	}
	return nil
}

// ownerFix is the advice for a path owned by someone else.
func ownerFix(path string, uid int) string {
	if uid < 0 {
		return "it belongs to another user"
	}
	return fmt.Sprintf("it belongs to uid %d, not to this user (uid %d) or root: use a state directory of your own, or chown it", uid, os.Geteuid())
}

// checkDir checks a directory of the state: a real directory, not a link,
// of the current user or root, not writable by group or others.
func checkDir(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("statedir: %w", err)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("statedir: %s is a symbolic link: links are not followed here; give the real path", path)
	}
	if !fi.IsDir() {
		return fmt.Errorf("statedir: %s is not a directory (%s)", path, privatefile.Kind(fi.Mode()))
	}
	return checkOwner(path, fi, 0o022)
}

// readStateFile reads a small private file of the state directory: as
// ReadPrivateFile, but refusing a symbolic link outright and any access
// by group or others (mode bits 0077).
func readStateFile(path string, limit int64) ([]byte, error) {
	f, err := privatefile.OpenNoFollow(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("statedir: %w", explainOpen(err))
	}
	defer f.Close()
	if err := checkOwned(f, 0o077); err != nil {
		return nil, err
	}
	return readLimited(f, path, limit)
}

// readLimited reads f, the file at path, to its end: at most limit bytes,
// refusing a larger file rather than truncating it.
func readLimited(f *os.File, path string, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		clear(data)
		return nil, fmt.Errorf("statedir: reading %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		clear(data)
		return nil, fmt.Errorf("statedir: %s is larger than %d bytes: it is not the file meant", path, limit)
	}
	return data, nil
}

// openOwned opens (creating if asked) a file of the state directory that
// must be a regular file of ours, not writable by group or others.
func openOwned(path string, flag int) (*os.File, error) {
	f, err := privatefile.OpenNoFollow(path, flag, 0o600)
	if err != nil {
		return nil, fmt.Errorf("statedir: %w", explainOpen(err))
	}
	if err := checkOwned(f, 0o022); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// writeDurably replaces path with data (mode 0600): a temporary file is
// created afresh (never opened through a link or reused), written and
// synced, renamed over path, and the directory synced. Callers hold the
// directory lock, so the temporary name is theirs.
func writeDurably(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("statedir: %w", err)
	}
	f, err := privatefile.OpenNoFollow(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("statedir: %w", explainOpen(err))
	}
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("statedir: writing %s: %w", path, err)
	}
	return nil
}

func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && runtime.GOOS != "windows" {
		return err
	}
	return nil
}

// locked runs fn holding the directory lock, waiting for it within ctx.
// fn gets the lock file, open for reading and writing: it also holds the
// directory's generation (see generation.go). A lock taken on a file that
// is no longer at the path (removed or replaced between the open and the
// lock) is dropped and taken again on the file now there, so that a
// process does not go on under a lock that later processes do not see.
// (A lock file removed while a process holds it cannot be guarded
// against: the next process locks a new one. Never remove it; its
// generation then reads 0, and the next claim waits out the horizon.)
func (d *Dir) locked(ctx context.Context, fn func(lock *os.File) error) error {
	path := filepath.Join(d.path, "lock")
	for {
		f, err := openOwned(path, os.O_RDWR|os.O_CREATE)
		if err != nil {
			return err
		}
		for wait := time.Millisecond; ; wait = min(2*wait, 20*time.Millisecond) {
			ok, err := tryLock(f)
			if err != nil {
				f.Close()
				return fmt.Errorf("statedir: locking %s: %w", path, err)
			}
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				f.Close()
				return fmt.Errorf("statedir: waiting for %s: %w", path, ctx.Err())
			case <-time.After(wait):
			}
		}
		if sameFile(f, path) {
			defer f.Close() // closing f releases the lock
			return fn(f)
		}
		f.Close()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("statedir: waiting for %s: %w", path, err)
		}
	}
}

// sameFile reports whether f is still the file at path.
func sameFile(f *os.File, path string) bool {
	held, err := f.Stat()
	if err != nil {
		return false
	}
	cur, err := os.Lstat(path)
	return err == nil && os.SameFile(held, cur)
}

// lockBlock locks the file of the block whose first node ID is first,
// creating it, without waiting. It returns a nil file if someone else
// holds it.
func (d *Dir) lockBlock(first int64) (*os.File, error) {
	f, err := openOwned(d.blockPath(first), os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, err
	}
	ok, err := tryLock(f)
	if err != nil || !ok {
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("statedir: locking %s: %w", d.blockPath(first), err)
		}
		return nil, nil
	}
	return f, nil
}

// heldBlocks returns the first node IDs of the blocks in first..last whose
// lock file someone holds (this process included, through another open
// file). Only existing files are tried: nobody holds a block without one.
// A file that is not a regular file of ours, writable only by us, is
// refused, naming its path.
func (d *Dir) heldBlocks(first, last int64) (map[int64]bool, error) {
	dir := filepath.Join(d.path, "blocks")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("statedir: %w", err)
	}
	held := map[int64]bool{}
	for _, e := range entries {
		b, ok := blockNumber(e.Name())
		if !ok || b*BlockSize < first || b*BlockSize > last {
			continue
		}
		f, err := openOwned(filepath.Join(dir, e.Name()), os.O_RDONLY)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed meanwhile: not held
		}
		if err != nil {
			return nil, err
		}
		free, err := tryLock(f)
		f.Close() // releases the lock just taken, if it was
		if err != nil {
			return nil, fmt.Errorf("statedir: locking %s: %w", f.Name(), err)
		}
		if !free {
			held[b*BlockSize] = true
		}
	}
	return held, nil
}

// blockNumber parses the name of a block's lock file.
func blockNumber(name string) (int64, bool) {
	b, err := strconv.ParseInt(name, 10, 64)
	if err != nil || b < 0 || b > randflake.MaxNode/BlockSize || name != fmt.Sprintf("%04d", b) {
		return 0, false
	}
	return b, true
}

// blockPath returns the path of the lock file of the block whose first
// node ID is first.
func (d *Dir) blockPath(first int64) string {
	return filepath.Join(d.path, "blocks", fmt.Sprintf("%04d", first/BlockSize))
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close() // releases the flock
	}
}
