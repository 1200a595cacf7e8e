//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package privatefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// loadSecret reads a secret file as statedir.LoadSecret does before
// parsing it: with Read, up to 4096 bytes.
func loadSecret(path string) ([]byte, error) { return Read(path, 4096) }

// secretVolume is a directory laid out as the kubelet lays out a Secret
// volume: each version's files in a hidden timestamped directory
// (..2026_12_01_10_00_00.NNN, mode 0755), ..data a symbolic link to it,
// and a link per key, key -> ..data/key. Files have the volume's
// defaultMode; with an fsGroup (>= 0) the volume is given to that group
// as the kubelet does: group fsGroup on every file, directory and link,
// group read added to files, setgid on directories, and the volume's own
// directory (a tmpfs, mode 1777) setgid too.
type secretVolume struct {
	dir     string
	mode    os.FileMode
	fsGroup int
	version int
}

// newSecretVolume lays out dir (created if need be) with files.
func newSecretVolume(t *testing.T, dir string, mode os.FileMode, fsGroup int, files map[string]string) *secretVolume {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	v := &secretVolume{dir: dir, mode: mode, fsGroup: fsGroup}
	if fsGroup >= 0 {
		if err := os.Chown(dir, -1, fsGroup); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o777|os.ModeSticky|os.ModeSetgid); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.update(files); err != nil {
		t.Fatal(err)
	}
	return v
}

// path returns the user-visible path of key.
func (v *secretVolume) path(key string) string { return filepath.Join(v.dir, key) }

// update writes a new version of the files the kubelet's way: a new
// timestamped directory with the files, links for new keys, a new link
// ..data_tmp to the new directory renamed over ..data (atomic), and the
// old directory removed.
func (v *secretVolume) update(files map[string]string) error {
	v.version++
	old, err := os.Readlink(filepath.Join(v.dir, "..data"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	ts := fmt.Sprintf("..2026_12_01_10_00_00.%09d", v.version)
	tsPath := filepath.Join(v.dir, ts)
	if err := os.Mkdir(tsPath, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(tsPath, 0o755); err != nil {
		return err
	}
	for key, content := range files {
		p := filepath.Join(tsPath, key)
		if err := os.WriteFile(p, []byte(content), v.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, v.mode); err != nil {
			return err
		}
	}
	if v.fsGroup >= 0 {
		err := filepath.Walk(tsPath, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			if err := os.Lchown(p, -1, v.fsGroup); err != nil {
				return err
			}
			mode := fi.Mode() | 0o040
			if fi.IsDir() {
				mode |= os.ModeSetgid
			}
			return os.Chmod(p, mode)
		})
		if err != nil {
			return err
		}
	}
	for key := range files {
		link := v.path(key)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := v.symlink(filepath.Join("..data", key), link); err != nil {
				return err
			}
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := v.symlink(ts, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		return err
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(v.dir, old))
	}
	return nil
}

func (v *secretVolume) symlink(target, link string) error {
	if err := os.Symlink(target, link); err != nil {
		return err
	}
	if v.fsGroup >= 0 {
		return os.Lchown(link, -1, v.fsGroup)
	}
	return nil
}

// dataDir returns the path of the current timestamped directory.
func (v *secretVolume) dataDir(t *testing.T) string {
	t.Helper()
	ts, err := os.Readlink(filepath.Join(v.dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(v.dir, ts)
}

const (
	volumeSecretHex = "5f0e8a3c91d24b6e07a1c3e5f7092b4d"
	volumeTokens    = "alice 0123456789abcdef0123456789abcdef\nbob fedcba9876543210fedcba9876543210\n"
	volumeCert      = "-----BEGIN CERTIFICATE-----\nMIIB (a test certificate)\n-----END CERTIFICATE-----\n"
)

// volumeFiles is a Secret's keys: the fleet secret, a tokens file, a
// certificate and its key.
func volumeFiles(version int) map[string]string {
	secret := []byte(volumeSecretHex)
	secret[0] = "0123456789abcdef"[version%16] // a new secret for each version
	return map[string]string{
		"secret":  string(secret) + "\n",
		"tokens":  fmt.Sprintf("%s# version %d\n", volumeTokens, version),
		"tls.crt": fmt.Sprintf("%s# version %d\n", volumeCert, version),
		"tls.key": fmt.Sprintf("-----BEGIN PRIVATE KEY-----\nversion %d\n-----END PRIVATE KEY-----\n", version),
	}
}

// readVolume reads v's files as serve does, the secret, tokens and the
// key with Read, the certificate with ReadPublic, and checks they are
// those of files.
func readVolume(v *secretVolume, files map[string]string) error {
	for key, read := range map[string]func(string, int64) ([]byte, error){
		"secret": Read, "tokens": Read, "tls.key": Read, "tls.crt": ReadPublic,
	} {
		b, err := read(v.path(key), 4096)
		if err != nil {
			return err
		}
		if string(b) != files[key] {
			return fmt.Errorf("reading %s: %q, want %q", v.path(key), b, files[key])
		}
	}
	return nil
}

// A Secret volume as the kubelet writes it (links into ..data, ..data a
// link to a timestamped directory) is read, for the secret, a tokens
// file, a key and a certificate; and after the kubelet's atomic update,
// the new contents are.
func TestSecretVolumeLayout(t *testing.T) {
	for _, c := range []struct {
		name string
		mode os.FileMode
	}{
		{"defaultMode 0400", 0o400},
		{"defaultMode 0600", 0o600},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := volumeFiles(1)
			v := newSecretVolume(t, filepath.Join(t.TempDir(), "randflake"), c.mode, -1, files)
			if err := readVolume(v, files); err != nil {
				t.Fatalf("the kubelet's layout: %v", err)
			}
			old := v.dataDir(t)
			files = volumeFiles(2)
			if err := v.update(files); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(old); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the old directory %s is still there: %v", old, err)
			}
			if err := readVolume(v, files); err != nil {
				t.Fatalf("after the kubelet's update: %v", err)
			}
		})
	}
	// A certificate may be readable by all (the kubelet's default mode,
	// 0644); a key may not.
	files := volumeFiles(3)
	v := newSecretVolume(t, filepath.Join(t.TempDir(), "tls"), 0o644, -1, files)
	if b, err := ReadPublic(v.path("tls.crt"), 4096); err != nil || string(b) != files["tls.crt"] {
		t.Errorf("certificate, mode 0644: %q, %v", b, err)
	}
	for _, key := range []string{"tls.key", "tokens", "secret"} {
		p := v.path(key)
		expectRefusal(t, key+", mode 0644", p, "chmod 600 it; a secret must never be accessible to others", func() error { _, err := Read(p, 4096); return err })
	}
	// Links to a nested key, and a path through the volume's own link to a
	// directory (items: path: sub/secret).
	nested := filepath.Join(t.TempDir(), "nested")
	v = newSecretVolume(t, nested, 0o400, -1, map[string]string{"secret": files["secret"]})
	if err := os.Mkdir(filepath.Join(v.dataDir(t), "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v.dataDir(t), "sub", "secret"), []byte(files["secret"]), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/sub", filepath.Join(nested, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/secret", filepath.Join(nested, "via-sub")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(nested, "sub", "secret"), filepath.Join(nested, "via-sub")} {
		if s, err := loadSecret(p); err != nil || string(s) != files["secret"] {
			t.Errorf("%s: %x, %v", p, s, err)
		}
	}
	// A relative path, and an absolute link that stays inside.
	if err := os.Symlink(filepath.Join(nested, "..data", "secret"), filepath.Join(nested, "absolute")); err != nil {
		t.Fatal(err)
	}
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(cwd, nested)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(rel, "secret"), filepath.Join(rel, "absolute"), rel + "/./../nested/secret"} {
		if s, err := loadSecret(p); err != nil || string(s) != files["secret"] {
			t.Errorf("%s: %x, %v", p, s, err)
		}
	}
}

// Reads racing the kubelet's updates never fail and never see a mixture:
// a path resolved into a directory removed meanwhile is resolved again.
func TestSecretVolumeReadsDuringUpdates(t *testing.T) {
	v := newSecretVolume(t, filepath.Join(t.TempDir(), "randflake"), 0o400, -1, volumeFiles(1))
	const updates = 100
	tokens := regexp.MustCompile(`^` + regexp.QuoteMeta(volumeTokens) + `# version ([0-9]+)\n$`)
	stop := make(chan struct{})
	var (
		wg    sync.WaitGroup
		reads int
		fails []string
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			reads++
			b, err := Read(v.path("tokens"), 4096)
			if err == nil && !tokens.Match(b) {
				err = fmt.Errorf("read %q, not a whole version", b)
			}
			if err == nil {
				_, err = loadSecret(v.path("secret"))
			}
			if err != nil && len(fails) < 5 {
				fails = append(fails, err.Error())
			}
		}
	}()
	for i := 2; i <= updates+1; i++ {
		if err := v.update(volumeFiles(i)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if len(fails) > 0 {
		t.Errorf("%d reads during %d updates; failures:\n%s", reads, updates, strings.Join(fails, "\n"))
	} else if reads == 0 {
		t.Error("no read ran during the updates")
	} else {
		t.Logf("%d reads of the tokens file and the secret during %d updates, none failed", reads, updates)
	}
	if err := readVolume(v, volumeFiles(updates+1)); err != nil {
		t.Errorf("after the updates: %v", err)
	}
}

// Links leading out of the file's directory, loose modes, loops and
// special files are refused, naming the path and the fix.
func TestSecretVolumeRefusals(t *testing.T) {
	root := t.TempDir()
	// A private secret elsewhere: good in itself, but not inside.
	other := filepath.Join(root, "other")
	os.Mkdir(other, 0o700)
	if err := os.WriteFile(filepath.Join(other, "secret"), []byte(volumeSecretHex+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	newVolume := func(name string) *secretVolume {
		return newSecretVolume(t, filepath.Join(root, name), 0o400, -1, volumeFiles(1))
	}
	load := func(p string) func() error { return func() error { _, err := loadSecret(p); return err } }
	public := func(p string) func() error { return func() error { _, err := ReadPublic(p, 4096); return err } }
	relink := func(link, target string) {
		t.Helper()
		os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}

	v := newVolume("passwd")
	relink(v.path("secret"), "/etc/passwd")
	expectRefusal(t, "a link to /etc/passwd", v.path("secret"), "leads to /etc/passwd, outside "+v.dir, load(v.path("secret")))
	expectRefusal(t, "a certificate linked to /etc/passwd", v.path("secret"), "outside", public(v.path("secret")))

	v = newVolume("dotdot")
	relink(v.path("secret"), "../other/secret")
	expectRefusal(t, "a link to ../other/secret", v.path("secret"), "a symbolic link leads out of "+v.dir, load(v.path("secret")))

	v = newVolume("deep-dotdot")
	relink(v.path("secret"), "..data/../../other/secret")
	expectRefusal(t, "a link to ..data/../../other/secret", v.path("secret"), "leads out of", load(v.path("secret")))

	v = newVolume("data-out")
	relink(filepath.Join(v.dir, "..data"), other)
	expectRefusal(t, "..data linked to another directory", v.path("secret"), "leads to "+other+", outside", load(v.path("secret")))

	v = newVolume("world-readable")
	os.Chmod(filepath.Join(v.dataDir(t), "secret"), 0o444)
	expectRefusal(t, "a world-readable secret", v.path("secret"), "chmod 600", load(v.path("secret")))

	v = newVolume("group-writable")
	for _, key := range []string{"secret", "tls.crt"} {
		os.Chmod(filepath.Join(v.dataDir(t), key), 0o460)
	}
	expectRefusal(t, "a group-writable secret", v.path("secret"), "chmod 600", load(v.path("secret")))
	expectRefusal(t, "a group-writable certificate", v.path("tls.crt"), "writable by group or others (mode -r--rw----): chmod go-w it", public(v.path("tls.crt")))
	os.Chmod(filepath.Join(v.dataDir(t), "tls.crt"), 0o646)
	expectRefusal(t, "a world-writable certificate", v.path("tls.crt"), "chmod go-w it", public(v.path("tls.crt")))

	v = newVolume("loop")
	relink(v.path("secret"), "secret")
	expectRefusal(t, "a link to itself", v.path("secret"), "more than 40 symbolic links", load(v.path("secret")))
	relink(v.path("secret"), "a")
	relink(filepath.Join(v.dir, "a"), "b")
	relink(filepath.Join(v.dir, "b"), "a")
	expectRefusal(t, "a loop of two links", v.path("secret"), "(a loop?)", load(v.path("secret")))

	v = newVolume("dangling")
	relink(v.path("secret"), "..data/missing")
	if _, err := loadSecret(v.path("secret")); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), v.path("secret")) {
		t.Errorf("a dangling link: %v, want an error wrapping os.ErrNotExist naming the path", err)
	}
	if _, err := loadSecret(filepath.Join(v.dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v, want os.ErrNotExist", err)
	}

	v = newVolume("fifo")
	fifo := filepath.Join(v.dataDir(t), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	relink(v.path("secret"), "..data/fifo")
	expectRefusal(t, "a link to a FIFO", v.path("secret"), "not a regular file (a FIFO)", load(v.path("secret")))
	expectRefusal(t, "a certificate link to a FIFO", v.path("secret"), "not a regular file (a FIFO)", public(v.path("secret")))
	dev := filepath.Join(v.dataDir(t), "zero")
	if err := syscall.Mknod(dev, syscall.S_IFCHR|0o600, 1<<8|5); err == nil { // /dev/zero's numbers on Linux
		relink(v.path("secret"), "..data/zero")
		expectRefusal(t, "a link to a device", v.path("secret"), "not a regular file (a device)", load(v.path("secret")))
	} else {
		t.Logf("cannot make a device here (%v): a link to one is tested through /dev", err)
	}
	expectRefusal(t, "/dev/zero", "/dev/zero", "not a regular file (a device)", load("/dev/zero"))
	expectRefusal(t, "/dev/stdin", "/dev/stdin", "leads to /proc/self/fd/0, outside /dev", load("/dev/stdin"))
	relink(v.path("secret"), "..data")
	expectRefusal(t, "a link to a directory", v.path("secret"), "not a regular file (a directory)", load(v.path("secret")))
	relink(v.path("secret"), "..data/secret/x")
	expectRefusal(t, "a path on below a file", v.path("secret"), "is not a directory (a regular file)", load(v.path("secret")))
}

// The file opened must be the file checked: an element swapped between
// the checks and the open (here a timestamped directory replaced by a
// link to another directory, which O_NOFOLLOW cannot see) is noticed by
// comparing device and inode, and the path resolved again, which then
// refuses the link leading out.
func TestSecretVolumeSwappedWhileOpening(t *testing.T) {
	root := t.TempDir()
	other := filepath.Join(root, "other")
	os.Mkdir(other, 0o700)
	if err := os.WriteFile(filepath.Join(other, "secret"), []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v := newSecretVolume(t, filepath.Join(root, "randflake"), 0o400, -1, volumeFiles(1))
	ts := v.dataDir(t)
	swapped := 0
	testHookOpen = func(reached string) {
		if swapped++; swapped == 1 {
			if reached != filepath.Join(ts, "secret") {
				t.Errorf("resolved to %s, want %s", reached, filepath.Join(ts, "secret"))
			}
			if err := os.Rename(ts, ts+".away"); err != nil {
				t.Error(err)
			}
			if err := os.Symlink(other, ts); err != nil {
				t.Error(err)
			}
		}
	}
	defer func() { testHookOpen = nil }()
	expectRefusal(t, "a directory swapped for a link", v.path("secret"), "leads to "+other+", outside", func() error { _, err := loadSecret(v.path("secret")); return err })
	if swapped != 1 {
		t.Errorf("the hook ran %d times; want the open noticed once, then a refusal while resolving", swapped)
	}

	// The file itself replaced by a link: O_NOFOLLOW refuses it, and the
	// path is resolved again.
	v = newSecretVolume(t, filepath.Join(root, "second"), 0o400, -1, volumeFiles(1))
	swapped = 0
	testHookOpen = func(reached string) {
		if swapped++; swapped == 1 {
			os.Remove(reached)
			if err := os.Symlink("/etc/passwd", reached); err != nil {
				t.Error(err)
			}
		}
	}
	expectRefusal(t, "the file swapped for a link", v.path("secret"), "leads to /etc/passwd, outside", func() error { _, err := loadSecret(v.path("secret")); return err })

	// The file replaced by another, world-readable: the checks are made on
	// the file opened.
	v = newSecretVolume(t, filepath.Join(root, "third"), 0o400, -1, volumeFiles(1))
	swapped = 0
	testHookOpen = func(reached string) {
		if swapped++; swapped > 1 {
			return
		}
		os.WriteFile(reached+".new", []byte(volumeSecretHex+"\n"), 0o644)
		os.Chmod(reached+".new", 0o644)
		os.Rename(reached+".new", reached)
	}
	expectRefusal(t, "the file swapped for a world-readable one", v.path("secret"), "chmod 600", func() error { _, err := loadSecret(v.path("secret")); return err })
}

// needRoot skips a test that needs root to give files away, except under
// CI (which runs as root), where it fails.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("this test needs root (to chown files), and CI runs as root: run it as root")
	}
	t.Skip("needs root to chown files")
}

// Ownership, as root: a secret group-readable under fsGroup (root's file,
// a group of this process's) is read; with a group this process is not
// in, it is refused; links, directories and files of another user are
// refused wherever they are on the way.
//
// The conditions are made with real chown: as root, this process's
// groups are its own (gid 0 here) and the files it makes are root's, so
// that group 0 plays the fsGroup; a file given to group 65534 (not one of
// ours) is the group-readable secret that must be refused.
func TestSecretVolumeOwnersAsRoot(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	fsGroup := os.Getegid()
	files := volumeFiles(1)
	v := newSecretVolume(t, filepath.Join(root, "fsgroup"), 0o400, fsGroup, files)
	if fi, _ := os.Stat(v.path("secret")); fi.Mode().Perm() != 0o440 {
		t.Fatalf("the fsGroup layout made mode %v, want 0440", fi.Mode().Perm())
	}
	if err := readVolume(v, files); err != nil {
		t.Fatalf("root's files, group %d (ours), mode 0440: %v", fsGroup, err)
	}
	files = volumeFiles(2)
	if err := v.update(files); err != nil {
		t.Fatal(err)
	}
	if err := readVolume(v, files); err != nil {
		t.Fatalf("after an update: %v", err)
	}

	foreign := foreignGroup(t)
	v = newSecretVolume(t, filepath.Join(root, "foreign-group"), 0o400, foreign, files)
	for _, key := range []string{"secret", "tokens", "tls.key"} {
		p := v.path(key)
		expectRefusal(t, key+" readable by a group not ours", p, fmt.Sprintf("only when root owns it and its group (gid %d here) is one of this process's groups", foreign), func() error { _, err := Read(p, 4096); return err })
	}
	if _, err := ReadPublic(v.path("tls.crt"), 4096); err != nil {
		t.Errorf("a certificate readable by a group not ours: %v", err)
	}

	const nobody = 65534
	for _, c := range []struct {
		name string
		elem func(v *secretVolume, key string) string // the element given to nobody
	}{
		{"the file", func(v *secretVolume, key string) string { return filepath.Join(v.dataDir(t), key) }},
		{"the key's link", func(v *secretVolume, key string) string { return v.path(key) }},
		{"..data", func(v *secretVolume, key string) string { return filepath.Join(v.dir, "..data") }},
		{"the timestamped directory", func(v *secretVolume, key string) string { return v.dataDir(t) }},
		{"the volume's directory", func(v *secretVolume, key string) string { return v.dir }},
	} {
		for _, key := range []string{"secret", "tls.crt"} {
			v := newSecretVolume(t, filepath.Join(root, strings.ReplaceAll(c.name+" "+key, " ", "-")), 0o400, -1, volumeFiles(1))
			if err := os.Lchown(c.elem(v, key), nobody, -1); err != nil {
				t.Fatal(err)
			}
			p := v.path(key)
			read := Read
			if key == "tls.crt" {
				read = ReadPublic
			}
			expectRefusal(t, c.name+" of another user ("+key+")", p, "belongs to uid 65534", func() error { _, err := read(p, 4096); return err })
		}
	}
}

// The pod's own view, as Kubernetes runs it (runAsUser 65532, runAsGroup
// 65532, fsGroup 65532): this test runs itself again as that user, on
// volumes laid out by root. The fsGroup volume (root's files, group
// 65532, mode 0440) is read, before and after an update; the same files
// owned by the pod's user, or readable by all, are refused; without
// fsGroup (root's files, mode 0400) the error says to set it.
func TestSecretVolumeAsPodUser(t *testing.T) {
	if dir := os.Getenv("PRIVATEFILE_TEST_POD_VOLUMES"); dir != "" {
		podUserChecks(t, dir)
		return
	}
	needRoot(t)
	// Its volumes and its copy of the test binary are its own.
	t.Parallel()
	const pod = 65532
	dir, err := os.MkdirTemp("", "privatefile-pod")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	files := volumeFiles(1)
	fsGroup := newSecretVolume(t, filepath.Join(dir, "fsgroup"), 0o400, pod, files)
	own := newSecretVolume(t, filepath.Join(dir, "own"), 0o400, pod, files)
	for _, key := range []string{"secret", "tokens", "tls.key", "tls.crt"} {
		os.Lchown(filepath.Join(own.dataDir(t), key), pod, -1)
	}
	newSecretVolume(t, filepath.Join(dir, "world"), 0o444, pod, files)
	newSecretVolume(t, filepath.Join(dir, "nofsgroup"), 0o400, -1, files)

	// The test binary, where the pod's user can run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "privatefile.test")
	copyFile(t, self, bin, 0o755)
	asPod := func(version int) {
		t.Helper()
		cmd := exec.Command(bin, "-test.run=^TestSecretVolumeAsPodUser$", "-test.count=1", "-test.v")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PRIVATEFILE_TEST_POD_VOLUMES="+dir, fmt.Sprintf("PRIVATEFILE_TEST_POD_VERSION=%d", version))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: pod, Gid: pod, Groups: []uint32{pod}}}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestSecretVolumeAsPodUser") {
			t.Fatalf("as uid %d, version %d: %v\n%s", pod, version, err, out)
		}
		t.Logf("as uid %d, groups [%d], version %d:\n%s", pod, pod, version, out)
	}
	asPod(1)
	// The kubelet's update, by root, is read by the pod's user.
	if err := fsGroup.update(volumeFiles(2)); err != nil {
		t.Fatal(err)
	}
	asPod(2)
}

// podUserChecks runs in the child process of TestSecretVolumeAsPodUser,
// as the pod's user.
func podUserChecks(t *testing.T, dir string) {
	if os.Geteuid() == 0 {
		t.Fatal("the pod's checks run as root")
	}
	t.Logf("uid %d, gid %d", os.Geteuid(), os.Getegid())
	version, _ := strconv.Atoi(os.Getenv("PRIVATEFILE_TEST_POD_VERSION"))
	v := &secretVolume{dir: filepath.Join(dir, "fsgroup")}
	if err := readVolume(v, volumeFiles(version)); err != nil {
		t.Errorf("fsGroup volume (root's files, group %d, mode 0440), version %d: %v", os.Getegid(), version, err)
	}
	v.dir = filepath.Join(dir, "own")
	for _, key := range []string{"secret", "tokens", "tls.key"} {
		p := v.path(key)
		expectRefusal(t, key+" of the pod's user, group-readable", p, "a secret may be readable by its group only when root owns it", func() error { _, err := Read(p, 4096); return err })
	}
	if _, err := ReadPublic(v.path("tls.crt"), 4096); err != nil {
		t.Errorf("a certificate of the pod's user, group-readable: %v", err)
	}
	v.dir = filepath.Join(dir, "world")
	expectRefusal(t, "a world-readable secret", v.path("secret"), "a secret must never be accessible to others", func() error { _, err := loadSecret(v.path("secret")); return err })
	v.dir = filepath.Join(dir, "nofsgroup")
	expectRefusal(t, "root's secret, mode 0400, without fsGroup", v.path("secret"), "permission denied", func() error { _, err := loadSecret(v.path("secret")); return err })
	if _, err := loadSecret(v.path("secret")); err == nil || !strings.Contains(err.Error(), "set the pod's fsGroup and defaultMode: 0440") {
		t.Errorf("without fsGroup: %v, want the fix (fsGroup, defaultMode 0440)", err)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
