package statedir

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
)

// Errors of secrets.
var (
	// ErrWeakSecret: the secret is all zeros, a placeholder rather than a
	// key; anyone could read and predict the IDs made under it.
	ErrWeakSecret = errors.New("statedir: the secret is all zeros: make a real one (randflake keygen --out FILE)")
	// ErrPasswordSecret: the secret is 16 bytes of text (printable ASCII,
	// tab, CR or LF), a password or half a hexadecimal secret rather than
	// a random key; each such string makes an ID space of its own, whose
	// IDs can collide with the fleet's.
	ErrPasswordSecret = errors.New("statedir: the secret is 16 characters of text, a password rather than a key: make a key with randflake keygen --out FILE")
)

// fixSecret is the advice every malformed secret gets.
const fixSecret = "make one with randflake keygen --out FILE"

// maxSecretFile bounds what LoadSecret reads.
const maxSecretFile = 4096

// ParseSecret reads a 16-byte secret from the contents of a secret file:
// 32 hexadecimal digits (either case), as randflake keygen writes them,
// optionally followed by one newline (LF or CRLF) and nothing else; or
// exactly the 16 bytes themselves, which must not all be text (printable
// ASCII, tab, CR or LF: a 16-character password, 16 spaces or half a
// hexadecimal secret is refused with ErrPasswordSecret). It refuses an
// all-zero secret (ErrWeakSecret). Errors never include the input.
func ParseSecret(b []byte) ([]byte, error) {
	secret, err := parseSecretFile(b)
	if err != nil && !isSentinel(err) {
		return nil, fmt.Errorf("statedir: secret: %w", err)
	}
	return secret, err
}

// ParseSecretHex reads a 16-byte secret written as exactly 32 hexadecimal
// digits (either case), with nothing around them: the form of the
// RANDFLAKE_SECRET variable. It refuses an all-zero secret
// (ErrWeakSecret). Errors never include the input.
func ParseSecretHex(s string) ([]byte, error) {
	if len(s) != 32 || !isHex([]byte(s)) {
		why := ""
		switch t := bytes.TrimSpace([]byte(s)); {
		case len(t) == 32 && isHex(t):
			why = ", with white space around them: remove it"
		case len(s) == 16:
			why = ": 16 characters are a password, not a key"
		case len(s) == 32:
			why = ": 32 characters, not all hexadecimal digits"
		}
		return nil, fmt.Errorf("statedir: secret: want exactly 32 hexadecimal digits, found %d characters%s; %s", len(s), why, fixSecret)
	}
	secret := make([]byte, 16)
	hex.Decode(secret, []byte(s)) // cannot fail: checked above
	if allZero(secret) {
		return nil, ErrWeakSecret
	}
	return secret, nil
}

// parseSecretFile is ParseSecret without the prefix on format errors.
func parseSecretFile(b []byte) ([]byte, error) {
	if len(b) == 16 {
		if isText(b) {
			return nil, ErrPasswordSecret
		}
		if allZero(b) {
			return nil, ErrWeakSecret
		}
		return bytes.Clone(b), nil
	}
	t := b
	if bytes.HasSuffix(t, []byte("\r\n")) {
		t = t[:len(t)-2]
	} else if bytes.HasSuffix(t, []byte("\n")) {
		t = t[:len(t)-1]
	}
	if len(t) != 32 {
		return nil, fmt.Errorf("want 32 hexadecimal digits (and at most one newline after them) or 16 raw bytes, found %d bytes; %s", len(b), fixSecret)
	}
	if !isHex(t) {
		return nil, fmt.Errorf("want 32 hexadecimal digits (and at most one newline after them) or 16 raw bytes, found %d bytes that are not; %s", len(b), fixSecret)
	}
	secret := make([]byte, 16)
	hex.Decode(secret, t) // cannot fail: checked above
	if allZero(secret) {
		return nil, ErrWeakSecret
	}
	return secret, nil
}

// isSentinel reports whether err is one of the exported errors of
// secrets, which carry their own prefix.
func isSentinel(err error) bool {
	return errors.Is(err, ErrWeakSecret) || errors.Is(err, ErrPasswordSecret)
}

// isHex reports whether b is all hexadecimal digits.
func isHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// isText reports whether b is all printable ASCII, tab, CR or LF.
func isText(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 || c > 0x7e) && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

func allZero(b []byte) bool {
	return bytes.Equal(b, make([]byte, len(b)))
}

// LoadSecret reads a 16-byte secret from a file in ParseSecret's form
// (32 hexadecimal digits and at most one newline, or 16 raw bytes that
// are not text), through ReadPrivateFile: symbolic links are followed
// within the file's directory (a Kubernetes Secret volume), and the file
// must be a regular file of this user's or root's that others cannot
// access and the group can read only under fsGroup. It refuses an
// all-zero secret and a password. Errors never include the file's
// contents; a missing file is an error wrapping os.ErrNotExist.
func LoadSecret(path string) ([]byte, error) {
	data, err := ReadPrivateFile(path, maxSecretFile)
	if err != nil {
		return nil, err
	}
	return parseLoaded(path, data)
}

// loadStateSecret reads the state directory's own secret, under the
// directory's stricter rules (readStateFile: no symbolic links at all).
func loadStateSecret(path string) ([]byte, error) {
	data, err := readStateFile(path, maxSecretFile)
	if err != nil {
		return nil, err
	}
	return parseLoaded(path, data)
}

// parseLoaded parses the contents of the secret file at path, clearing
// them.
func parseLoaded(path string, data []byte) ([]byte, error) {
	defer clear(data)
	secret, err := parseSecretFile(data)
	if err != nil {
		if isSentinel(err) {
			return nil, fmt.Errorf("%w (in %s)", err, path)
		}
		return nil, fmt.Errorf("statedir: secret %s: %w", path, err)
	}
	return secret, nil
}
