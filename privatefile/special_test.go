//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package privatefile

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
)

// expectRefusal runs fn, which must fail at once with an error naming
// path and containing want.
func expectRefusal(t *testing.T, what, path, want string, fn func() error) {
	t.Helper()
	slow := slowdown.Start()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	// At once, not after waiting on a FIFO: within 5 s on idle cores.
	for start := time.Now(); ; {
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: accepted, want a refusal", what)
			} else if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v; want an error naming %s and saying %q", what, err, path, want)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		if limit := slow.Stretch(5 * time.Second); time.Since(start) > limit {
			t.Fatalf("%s: still blocked after %v, want an immediate refusal (%s)", what, limit, slow)
		}
	}
}

// foreignGroup returns a group this process is not in.
func foreignGroup(t *testing.T) int {
	t.Helper()
	groups, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []int{65534, 65533, 4242} {
		if g != os.Getegid() && !slices.Contains(groups, g) {
			return g
		}
	}
	t.Fatal("no group found that this process is not in")
	return -1
}

// Key material is read only from regular files of ours that others
// cannot access: links out of the file's directory, FIFOs, devices,
// directories and files over the limit are refused at once (links inside
// it are followed: secretvolume_test.go).
func TestReadRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	if b, err := Read(good, 100); err != nil || len(b) != 33 {
		t.Fatalf("regular file: %q, %v", b, err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(good, link)
	if b, err := Read(link, 100); err != nil || len(b) != 33 {
		t.Errorf("a link to a file beside it: %q, %v", b, err)
	}
	out := filepath.Join(t.TempDir(), "link")
	os.Symlink(good, out)
	expectRefusal(t, "a link to another directory", out, "symbolic link", func() error { _, err := Read(out, 100); return err })
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	expectRefusal(t, "FIFO", fifo, "not a regular file (a FIFO)", func() error { _, err := Read(fifo, 4096); return err })
	expectRefusal(t, "a FIFO, as a public file", fifo, "not a regular file (a FIFO)", func() error { _, err := ReadPublic(fifo, 4096); return err })
	expectRefusal(t, "/dev/zero", "/dev/zero", "not a regular file", func() error { _, err := Read("/dev/zero", 4096); return err })
	expectRefusal(t, "a directory", dir, "not a regular file", func() error { _, err := Read(dir, 4096); return err })
	big := filepath.Join(dir, "big")
	os.WriteFile(big, make([]byte, 5000), 0o600)
	expectRefusal(t, "a large file", big, "larger than 4096 bytes", func() error { _, err := Read(big, 4096); return err })
	if b, err := Read(big, 5000); err != nil || len(b) != 5000 {
		t.Errorf("a file of exactly the limit: %d bytes, %v", len(b), err)
	}
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("x"), 0o600)
	os.Chmod(open, 0o640)
	if os.Geteuid() == 0 {
		// Root's file in a group of ours would be accepted (fsGroup).
		os.Chown(open, 0, foreignGroup(t))
	}
	expectRefusal(t, "group-readable", open, "chmod 600", func() error { _, err := Read(open, 100); return err })
	if _, err := ReadPublic(open, 100); err != nil {
		t.Errorf("a group-readable public file: %v", err)
	}
}
