//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package statedir

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// The fleet secret in a Kubernetes Secret volume, as the kubelet lays it
// out (secret -> ..data/secret, ..data -> a timestamped directory), is
// read by LoadSecret, before and after the kubelet's update; mode 0644
// and a link out of the volume are refused. The layouts, updates and
// refusals are tested in full with privatefile.Read, which LoadSecret
// uses.
func TestLoadSecretFromSecretVolume(t *testing.T) {
	const secretHex = "5f0e8a3c91d24b6e07a1c3e5f7092b4d"
	vol := filepath.Join(t.TempDir(), "randflake")
	version := func(ts, content string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(vol, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(vol, ts, "secret")
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(vol, "..data_tmp")
		if err := os.Symlink(ts, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(vol, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	load := func(want string) {
		t.Helper()
		s, err := LoadSecret(filepath.Join(vol, "secret"))
		if err != nil || hex.EncodeToString(s) != want {
			t.Fatalf("LoadSecret: %x, %v; want %s", s, err, want)
		}
	}
	version("..2026_12_01_10_00_00.000000001", secretHex+"\n", 0o400)
	if err := os.Symlink("..data/secret", filepath.Join(vol, "secret")); err != nil {
		t.Fatal(err)
	}
	load(secretHex)
	updated := "6" + secretHex[1:]
	version("..2026_12_01_10_00_00.000000002", updated+"\n", 0o400)
	if err := os.RemoveAll(filepath.Join(vol, "..2026_12_01_10_00_00.000000001")); err != nil {
		t.Fatal(err)
	}
	load(updated)

	version("..2026_12_01_10_00_00.000000003", updated+"\n", 0o644)
	secret := filepath.Join(vol, "secret")
	expectRefusal(t, "a secret of mode 0644", secret, "a secret must never be accessible to others", func() error { _, err := LoadSecret(secret); return err })
	os.Remove(secret)
	if err := os.Symlink("/etc/passwd", secret); err != nil {
		t.Fatal(err)
	}
	expectRefusal(t, "a link to /etc/passwd", secret, "leads to /etc/passwd, outside "+vol, func() error { _, err := LoadSecret(secret); return err })
}
