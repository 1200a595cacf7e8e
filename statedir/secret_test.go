package statedir

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A secret is a key, not a password: a secret file holds 32 hexadecimal
// digits and at most one newline, or 16 raw bytes that are not all text;
// anything else is refused with the fix, without the input in the error.
func TestParseSecret(t *testing.T) {
	want, _ := hex.DecodeString("00a1b2c3d4e5f60718293a4b5c6d7e8f")
	raw := []byte{0x9f, 'k', 0x00, 'e', 0xff, 'y', 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, in := range []string{
		"00a1b2c3d4e5f60718293a4b5c6d7e8f",
		"00a1b2c3d4e5f60718293a4b5c6d7e8f\n",
		"00a1b2c3d4e5f60718293a4b5c6d7e8f\r\n",
		"00A1B2C3D4E5F60718293A4B5C6D7E8F\n",
		"00a1B2c3D4e5F60718293a4B5c6D7e8f",
	} {
		got, err := ParseSecret([]byte(in))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("ParseSecret(%q) = %x, %v; want %x", in, got, err, want)
		}
	}
	if got, err := ParseSecret(raw); err != nil || !bytes.Equal(got, raw) {
		t.Errorf("ParseSecret(16 raw bytes) = %x, %v", got, err)
	}
	for _, c := range []struct {
		name, in string
		is       error  // the error wanted, if a sentinel
		say      string // else, what it must say
	}{
		{"a 16-character password", "passwordpassword", ErrPasswordSecret, ""},
		{"16 spaces", strings.Repeat(" ", 16), ErrPasswordSecret, ""},
		{"half a hexadecimal secret", "0011223344556677", ErrPasswordSecret, ""},
		{"15 characters and a newline", "passwordpasswor\n", ErrPasswordSecret, ""},
		{"text with tabs and CRs", "pass\tword\r\npassw", ErrPasswordSecret, ""},
		{"16 zero bytes", string(make([]byte, 16)), ErrWeakSecret, ""},
		{"32 zero digits", strings.Repeat("0", 32) + "\n", ErrWeakSecret, ""},
		{"leading blanks", "  00a1b2c3d4e5f60718293a4b5c6d7e8f\n", nil, "found 35 bytes"},
		{"a trailing blank", "00a1b2c3d4e5f60718293a4b5c6d7e8f \n", nil, "found 34 bytes"},
		{"two newlines", "00a1b2c3d4e5f60718293a4b5c6d7e8f\n\n", nil, "found 34 bytes"},
		{"a lone CR", "00a1b2c3d4e5f60718293a4b5c6d7e8f\r", nil, "found 33 bytes"},
		{"31 digits", "00a1b2c3d4e5f60718293a4b5c6d7e8\n", nil, "found 32 bytes"},
		{"33 digits", "00a1b2c3d4e5f60718293a4b5c6d7e8f0", nil, "found 33 bytes"},
		{"32 characters, not hex", "zza1b2c3d4e5f60718293a4b5c6d7e8f\n", nil, "that are not"},
		{"17 raw bytes", "\xff" + strings.Repeat("k", 16), nil, "found 17 bytes"},
		{"nothing", "", nil, "found 0 bytes"},
	} {
		got, err := ParseSecret([]byte(c.in))
		switch {
		case err == nil:
			t.Errorf("%s: accepted as %x, want a refusal", c.name, got)
			continue
		case c.is != nil && !errors.Is(err, c.is):
			t.Errorf("%s: %v, want %v", c.name, err, c.is)
		case c.is == nil && (!strings.Contains(err.Error(), c.say) || !strings.Contains(err.Error(), "randflake keygen --out FILE")):
			t.Errorf("%s: %v, want it to say %q and the fix (randflake keygen --out FILE)", c.name, err, c.say)
		}
		if got != nil {
			t.Errorf("%s: a secret returned with the error", c.name)
		}
		requireNotShown(t, c.name, err, c.in)
	}
}

// requireNotShown fails if err shows a piece of secret of 6 characters
// (other than blanks, zeros and words every such error says anyway).
func requireNotShown(t *testing.T, what string, err error, secret string) {
	t.Helper()
	msg := err.Error()
	boilerplate := ErrPasswordSecret.Error() + ErrWeakSecret.Error()
	s := strings.TrimSpace(secret)
	for i := 0; i+6 <= len(s); i++ {
		piece := s[i : i+6]
		if strings.Trim(piece, " 0") != "" && !strings.Contains(boilerplate, piece) && strings.Contains(msg, piece) {
			t.Errorf("%s: the error %q shows part of the secret (%q)", what, msg, piece)
			return
		}
	}
}

// RANDFLAKE_SECRET is exactly 32 hexadecimal digits, nothing else.
func TestParseSecretHex(t *testing.T) {
	want, _ := hex.DecodeString("00a1b2c3d4e5f60718293a4b5c6d7e8f")
	for _, in := range []string{"00a1b2c3d4e5f60718293a4b5c6d7e8f", "00A1B2C3D4E5F60718293A4B5C6D7E8F"} {
		if got, err := ParseSecretHex(in); err != nil || !bytes.Equal(got, want) {
			t.Errorf("ParseSecretHex(%q) = %x, %v", in, got, err)
		}
	}
	for _, c := range []struct{ name, in, say string }{
		{"a 16-character password", "passwordpassword", "16 characters are a password"},
		{"16 spaces", strings.Repeat(" ", 16), "16 characters are a password"},
		{"half a hexadecimal secret", "0011223344556677", "16 characters are a password"},
		{"16 raw bytes", "\x9fk\x00e\xffy\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a", "16 characters are a password"},
		{"a trailing newline", "00a1b2c3d4e5f60718293a4b5c6d7e8f\n", "with white space around them: remove it"},
		{"leading blanks", "  00a1b2c3d4e5f60718293a4b5c6d7e8f", "with white space around them: remove it"},
		{"32 characters, not hex", "zza1b2c3d4e5f60718293a4b5c6d7e8f", "not all hexadecimal digits"},
		{"31 digits", "00a1b2c3d4e5f60718293a4b5c6d7e8", "found 31 characters"},
		{"64 digits", strings.Repeat("00a1b2c3d4e5f60718293a4b5c6d7e8f", 2), "found 64 characters"},
	} {
		got, err := ParseSecretHex(c.in)
		if err == nil {
			t.Errorf("%s: accepted as %x, want a refusal", c.name, got)
			continue
		}
		if !strings.Contains(err.Error(), c.say) || !strings.Contains(err.Error(), "randflake keygen --out FILE") {
			t.Errorf("%s: %v, want it to say %q and the fix (randflake keygen --out FILE)", c.name, err, c.say)
		}
		requireNotShown(t, c.name, err, c.in)
	}
	if _, err := ParseSecretHex(strings.Repeat("0", 32)); !errors.Is(err, ErrWeakSecret) {
		t.Errorf("32 zero digits: %v, want ErrWeakSecret", err)
	}
}

// LoadSecret applies the same rules to a file's contents, naming the file
// and never showing its contents; the state directory's secret too.
func TestLoadSecretRefusesPasswords(t *testing.T) {
	dir := t.TempDir()
	for i, c := range []struct{ name, in, say string }{
		{"password", "passwordpassword", "a password rather than a key"},
		{"password and newline", "passwordpasswor\n", "a password rather than a key"},
		{"leading blanks", "  00a1b2c3d4e5f60718293a4b5c6d7e8f\n", "found 35 bytes"},
		{"zeros", strings.Repeat("0", 32) + "\n", "all zeros"},
	} {
		p := filepath.Join(dir, fmt.Sprintf("secret%d", i))
		if err := os.WriteFile(p, []byte(c.in), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadSecret(p)
		if err == nil || !strings.Contains(err.Error(), c.say) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "randflake keygen --out FILE") {
			t.Errorf("%s: %v, want a refusal naming %s, saying %q and the fix", c.name, err, p, c.say)
		} else {
			requireNotShown(t, c.name, err, c.in)
		}
		state := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(state, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(state, "secret"), []byte(c.in), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(state); err == nil || !strings.Contains(err.Error(), c.say) {
			t.Errorf("%s in a state directory: %v, want a refusal saying %q", c.name, err, c.say)
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
