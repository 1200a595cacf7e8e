package statedir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// errSymlink: a path whose last element is a symbolic link.
var errSymlink = errors.New("is a symbolic link")

// explainOpen adds the fix to an open error about a symbolic link.
func explainOpen(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) && errors.Is(pe.Err, errSymlink) {
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
		return fmt.Errorf("statedir: %s is not a regular file (%s): give the path of a regular file", f.Name(), kind(fi.Mode()))
	}
	return checkOwner(f.Name(), fi, forbid)
}

// checkOwner checks the owner and mode of path.
func checkOwner(path string, fi os.FileInfo, forbid os.FileMode) error {
	if uid, ok := ownerOK(fi); !ok {
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
		return fmt.Errorf("statedir: %s is not a directory (%s)", path, kind(fi.Mode()))
	}
	return checkOwner(path, fi, 0o022)
}

// kind names a file's type for messages.
func kind(m os.FileMode) string {
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

// openOwned opens (creating if asked) a file of the state directory that
// must be a regular file of ours, not writable by group or others.
func openOwned(path string, flag int) (*os.File, error) {
	f, err := openNoFollow(path, flag, 0o600)
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
	f, err := openNoFollow(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
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
func (d *Dir) locked(ctx context.Context, fn func() error) error {
	f, err := openOwned(filepath.Join(d.path, "lock"), os.O_RDWR|os.O_CREATE)
	if err != nil {
		return err
	}
	defer f.Close()
	for wait := time.Millisecond; ; wait = min(2*wait, 20*time.Millisecond) {
		ok, err := tryLock(f)
		if err != nil {
			return fmt.Errorf("statedir: locking %s: %w", f.Name(), err)
		}
		if ok {
			break
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return fmt.Errorf("statedir: waiting for %s: %w", f.Name(), err)
		}
	}
	return fn() // closing f releases the lock
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (d *Dir) blockPath(b int) string {
	return filepath.Join(d.path, "blocks", fmt.Sprintf("%04d", b))
}

// lockBlocks locks the files of blocks first..first+k-1 without waiting.
// It returns nil files if another process holds one of them.
func (d *Dir) lockBlocks(first, k int) ([]*os.File, error) {
	files := make([]*os.File, 0, k)
	for b := first; b < first+k; b++ {
		f, err := openOwned(d.blockPath(b), os.O_RDWR|os.O_CREATE)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		ok, err := tryLock(f)
		if err != nil || !ok {
			f.Close()
			closeAll(files)
			if err != nil {
				return nil, fmt.Errorf("statedir: locking %s: %w", f.Name(), err)
			}
			return nil, nil
		}
		files = append(files, f)
	}
	return files, nil
}

// stillLocked reports whether f, a locked lock file, is still the file at
// block b's path.
func (d *Dir) stillLocked(f *os.File, b int) bool {
	held, err := f.Stat()
	if err != nil {
		return false
	}
	cur, err := os.Lstat(d.blockPath(b))
	return err == nil && os.SameFile(held, cur)
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close() // releases the flock
	}
}
