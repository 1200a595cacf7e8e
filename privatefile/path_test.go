//go:build unix

package privatefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// otherUID is a uid that is neither root nor this process's.
const otherUID = 65534

// Every element of a given file's path is checked, the directory part
// included: a link or an ancestor directory of another user's, or a
// directory that group or others may write (not sticky), is refused with
// an error naming it; a sticky world-writable directory (as /tmp) and
// links and directories of this user's or root's are followed.
func TestReadChecksDirectoryPart(t *testing.T) {
	base := t.TempDir()
	mkdir := func(p string, mode os.FileMode) string {
		t.Helper()
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write := func(dir string) string {
		t.Helper()
		p := filepath.Join(dir, "tokens")
		if err := os.WriteFile(p, []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	good := write(mkdir(filepath.Join(base, "good", "sub"), 0o755))
	if b, err := Read(good, 100); err != nil || string(b) != "secret\n" {
		t.Fatalf("a path through this user's directories: %q, %v", b, err)
	}
	// A link of ours in the directory part, relative and absolute.
	if err := os.Symlink("good", filepath.Join(base, "ours")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "good", "sub"), filepath.Join(base, "abs")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(base, "ours", "sub", "tokens"), filepath.Join(base, "abs", "tokens"), filepath.Join(base, "good", "..", "good", "sub", "tokens")} {
		if _, err := Read(p, 100); err != nil {
			t.Errorf("%s, through this user's links: %v", p, err)
		}
	}
	// A sticky world-writable ancestor is accepted.
	sticky := write(mkdir(filepath.Join(mkdir(filepath.Join(base, "sticky"), 0o777|os.ModeSticky), "mine"), 0o700))
	if _, err := Read(sticky, 100); err != nil {
		t.Errorf("a path through a sticky world-writable directory: %v", err)
	}

	refused := func(what, p, want string) {
		t.Helper()
		_, err := Read(p, 100)
		if err == nil {
			t.Errorf("%s (%s) was read", what, p)
			return
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want it to name %q", what, err, want)
		}
		if _, err := ReadPublic(p, 100); err == nil {
			t.Errorf("%s (%s) was read by ReadPublic", what, p)
		}
	}
	// Writable by others, not sticky: the ancestor, and the file's own
	// directory.
	open := mkdir(filepath.Join(base, "open"), 0o777)
	refused("an ancestor directory writable by others", write(mkdir(filepath.Join(open, "sub"), 0o755)), open+" is writable by group or others")
	group := mkdir(filepath.Join(base, "group"), 0o775)
	refused("the file's directory writable by its group", write(group), group+" is writable by group or others")
	if err := os.Symlink(group, filepath.Join(base, "togroup")); err != nil {
		t.Fatal(err)
	}
	refused("a link to a directory writable by its group", filepath.Join(base, "togroup", "tokens"), group+" is writable by group or others")

	// Another user's elements: only root can make them.
	if os.Geteuid() != 0 {
		t.Log("not root: the elements of another uid are not tested")
		return
	}
	theirs := mkdir(filepath.Join(base, "theirs"), 0o755)
	if err := os.Chown(theirs, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
	refused("an ancestor directory of another uid", write(mkdir(filepath.Join(theirs, "sub"), 0o755)), "belongs to uid 65534")
	link := filepath.Join(base, "theirlink")
	if err := os.Symlink(filepath.Join(base, "good"), link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
	refused("a link of another uid in the directory part", filepath.Join(link, "sub", "tokens"), "belongs to uid 65534")
	// The same link as the last element is refused as before.
	last := filepath.Join(base, "good", "sub", "lastlink")
	if err := os.Symlink("tokens", last); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(last, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
	refused("a link of another uid as the file", last, "belongs to uid 65534")
}

// A loop of links in the directory part, and a file where a directory
// should be, are errors, never a panic or a hang; a missing directory is
// a missing file.
func TestReadDirectoryPartErrors(t *testing.T) {
	base := t.TempDir()
	os.Symlink("b", filepath.Join(base, "a"))
	os.Symlink("a", filepath.Join(base, "b"))
	if _, err := Read(filepath.Join(base, "a", "tokens"), 100); err == nil || !strings.Contains(err.Error(), "symbolic links") {
		t.Errorf("a loop of links in the directory part: %v", err)
	}
	os.WriteFile(filepath.Join(base, "file"), []byte("x"), 0o600)
	if _, err := Read(filepath.Join(base, "file", "tokens"), 100); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a file in the directory part: %v", err)
	}
	if _, err := Read(filepath.Join(base, "missing", "tokens"), 100); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing directory: %v, want os.ErrNotExist", err)
	}
}

// The ".." in a link's target is the parent of the directory reached
// (links already followed), not of the name written: in the directory
// part, where it may go up to the root and no further, and in the file's
// part, where it may not leave the file's directory. The ".." of the path
// given is cleaned first, as filepath.Abs does.
func TestReadDotDotIsPhysical(t *testing.T) {
	base := t.TempDir()
	mk := func(rel string) string {
		t.Helper()
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write := func(rel, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(base, rel), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, rel string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(base, rel)); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p, want string) {
		t.Helper()
		b, err := Read(p, 100)
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", p, b, err, want)
		}
		if b, err := ReadPublic(p, 100); err != nil || string(b) != want {
			t.Errorf("%s (public): %q, %v; want %q", p, b, err, want)
		}
	}

	// The directory part: l -> x/y/.., where y -> other/deep (absolute):
	// the ".." is other's, not x's.
	mk("x")
	mk("other/deep")
	write("x/f", "lexical")
	write("other/f", "physical")
	link(filepath.Join(base, "other", "deep"), "x/y")
	link("x/y/..", "l")
	read(filepath.Join(base, "l", "f"), "physical")
	// An absolute link climbing above the root stays at the root.
	link("/../../.."+base+"/other", "up")
	read(filepath.Join(base, "up", "f"), "physical")

	// The file's part: in vol, s -> d1/lnk/../f, where d1/lnk -> ../d2/deep:
	// the ".." is d2's.
	mk("vol/d1")
	mk("vol/d2/deep")
	write("vol/d1/f", "lexical")
	write("vol/d2/f", "physical")
	link("../d2/deep", "vol/d1/lnk")
	link("d1/lnk/../f", "vol/s")
	read(filepath.Join(base, "vol", "s"), "physical")
	// Climbing to the directory itself and down again is inside.
	link("d1/../../vol/d2/f", "vol/t")
	if _, err := Read(filepath.Join(base, "vol", "t"), 100); err == nil {
		t.Errorf("a link climbing above its directory was followed")
	}
	link("d1/../d2/./f", "vol/u")
	read(filepath.Join(base, "vol", "u"), "physical")
	// A ".." of the path given is lexical (filepath.Abs).
	read(filepath.Join(base, "vol", "d1", "lnk", "..", "f"), "lexical")
}
