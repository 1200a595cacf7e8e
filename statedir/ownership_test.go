//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package statedir

import (
	"context"
	"os"
	"path/filepath"
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
	// At once, not after waiting out a lease: within 5 s on idle cores.
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

// A secret file is read by privatefile.Read (whose tests cover links,
// owners and modes): LoadSecret refuses a FIFO at once, and a secret that
// is all zeros. ReadPrivateFile and ReadPublicFile, deprecated, still
// read through privatefile.
func TestLoadSecretRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	if s, err := LoadSecret(good); err != nil || len(s) != 16 {
		t.Fatalf("regular file: %x, %v", s, err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink("good", link)
	if s, err := LoadSecret(link); err != nil || len(s) != 16 {
		t.Errorf("a link to a file beside it: %x, %v", s, err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	expectRefusal(t, "FIFO", fifo, "not a regular file (a FIFO)", func() error { _, err := LoadSecret(fifo); return err })
	zero := filepath.Join(dir, "zero")
	os.WriteFile(zero, []byte("00000000000000000000000000000000\n"), 0o600)
	expectRefusal(t, "all-zero secret", zero, "all zeros", func() error { _, err := LoadSecret(zero); return err })
	if _, err := ParseSecret(make([]byte, 16)); err != ErrWeakSecret {
		t.Errorf("ParseSecret of 16 zero bytes: %v, want ErrWeakSecret", err)
	}

	if b, err := ReadPrivateFile(good, 100); err != nil || len(b) != 33 {
		t.Errorf("ReadPrivateFile: %q, %v", b, err)
	}
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("x"), 0o644)
	os.Chmod(open, 0o644)
	expectRefusal(t, "ReadPrivateFile of mode 0644", open, "chmod 600", func() error { _, err := ReadPrivateFile(open, 100); return err })
	if b, err := ReadPublicFile(open, 100); err != nil || string(b) != "x" {
		t.Errorf("ReadPublicFile of mode 0644: %q, %v", b, err)
	}
	expectRefusal(t, "ReadPublicFile of a FIFO", fifo, "not a regular file (a FIFO)", func() error { _, err := ReadPublicFile(fifo, 100); return err })
}

// Files of another user are refused (this needs root to set up: CI runs as
// root).
func TestForeignOwnerRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
	const nobody = 65534
	d := openTest(t)
	os.Chown(filepath.Join(d.path, "secret"), nobody, nobody)
	expectRefusal(t, "secret of another user", filepath.Join(d.path, "secret"), "belongs to uid 65534", func() error { _, err := Open(d.path); return err })
	os.Chown(filepath.Join(d.path, "secret"), 0, 0)
	os.Chown(d.path, nobody, nobody)
	expectRefusal(t, "directory of another user", d.path, "belongs to uid 65534", func() error { _, err := Open(d.path); return err })
	os.Chown(d.path, 0, 0)
	d2 := openTest(t)
	s := newSource(t, d2, Options{Nodes: 64, LastNode: 63})
	lock := filepath.Join(d2.path, "lock")
	os.WriteFile(lock, nil, 0o600)
	os.Chown(lock, nobody, nobody)
	expectRefusal(t, "lock file of another user", lock, "belongs to uid 65534", func() error { _, err := s.Acquire(context.Background()); return err })
}

// The state directory cannot be subverted with links, special files or
// loose modes: each is refused, naming the path and the fix, and nothing
// outside the directory is written.
func TestStateDirectoryTampering(t *testing.T) {
	ctx := context.Background()

	// A symbolic link planted as state.tmp is not written through.
	d := openTest(t)
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("precious\n"), 0o644)
	os.Symlink(victim, filepath.Join(d.path, "state.tmp"))
	s := newSource(t, d, Options{Nodes: 64, LastNode: 63})
	if _, err := s.Acquire(ctx); err != nil {
		t.Fatalf("Acquire with a planted state.tmp link: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("the link's target was overwritten: %q", b)
	}
	if fi, _ := os.Stat(victim); fi.Mode().Perm() != 0o644 {
		t.Errorf("the link's target was chmodded to %v", fi.Mode().Perm())
	}

	// blocks/ writable by others.
	d = openTest(t)
	os.Chmod(filepath.Join(d.path, "blocks"), 0o757)
	expectRefusal(t, "blocks mode 0757", filepath.Join(d.path, "blocks"), "chmod go-w", func() error { _, err := Open(d.path); return err })

	// The state directory or blocks/ as a link.
	real := filepath.Join(t.TempDir(), "real")
	if _, err := Open(real); err != nil {
		t.Fatal(err)
	}
	alias := filepath.Join(t.TempDir(), "alias")
	os.Symlink(real, alias)
	expectRefusal(t, "state directory as a link", alias, "symbolic link", func() error { _, err := Open(alias); return err })
	d = openTest(t)
	os.Remove(filepath.Join(d.path, "blocks"))
	os.Symlink(t.TempDir(), filepath.Join(d.path, "blocks"))
	expectRefusal(t, "blocks as a link", filepath.Join(d.path, "blocks"), "symbolic link", func() error { _, err := Open(d.path); return err })

	// The secret as a link to a private file elsewhere.
	d = openTest(t)
	elsewhere := filepath.Join(t.TempDir(), "secret")
	os.Rename(filepath.Join(d.path, "secret"), elsewhere)
	os.Symlink(elsewhere, filepath.Join(d.path, "secret"))
	expectRefusal(t, "secret as a link", filepath.Join(d.path, "secret"), "symbolic link", func() error { _, err := Open(d.path); return err })

	// state, lock and a block file as FIFOs, links or group-writable.
	for _, c := range []struct{ name, want string }{
		{"state", "a FIFO"}, {"lock", "a FIFO"}, {"blocks/0000", "a FIFO"},
	} {
		d = openTest(t)
		p := filepath.Join(d.path, c.name)
		os.Remove(p)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		s := newSource(t, d, Options{Nodes: 64, LastNode: 63})
		expectRefusal(t, c.name+" as a FIFO", p, c.want, func() error { _, err := s.Acquire(ctx); return err })
	}
	for _, name := range []string{"state", "lock", "blocks/0000"} {
		d = openTest(t)
		p := filepath.Join(d.path, name)
		os.Remove(p)
		if err := os.Symlink(victim, p); err != nil {
			t.Fatal(err)
		}
		s := newSource(t, d, Options{Nodes: 64, LastNode: 63})
		expectRefusal(t, name+" as a link", p, "symbolic link", func() error { _, err := s.Acquire(ctx); return err })
		d = openTest(t)
		p = filepath.Join(d.path, name)
		os.WriteFile(p, nil, 0o600)
		os.Chmod(p, 0o620)
		s = newSource(t, d, Options{Nodes: 64, LastNode: 63})
		expectRefusal(t, name+" group-writable", p, "chmod go-w", func() error { _, err := s.Acquire(ctx); return err })
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("a link's target was written: %q", b)
	}
}
