package statedir

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// Errors of secrets.
var (
	// ErrWeakSecret: the secret is all zeros, a placeholder rather than a
	// key; anyone could read and predict the IDs made under it.
	ErrWeakSecret = errors.New("statedir: the secret is all zeros: make a real one (randflake keygen)")
	// errSecretFormat: the secret is neither 16 bytes nor 32 hex digits.
	errSecretFormat = errors.New("want 32 hexadecimal digits or 16 bytes")
)

// maxSecretFile bounds what LoadSecret reads.
const maxSecretFile = 4096

// ParseSecret reads a 16-byte secret given as the 16 bytes themselves or
// as 32 hexadecimal digits with optional surrounding white space. It
// refuses an all-zero secret (ErrWeakSecret). Errors never include the
// input.
func ParseSecret(b []byte) ([]byte, error) {
	var secret []byte
	if len(b) == 16 {
		secret = bytes.Clone(b)
	} else {
		t := bytes.TrimSpace(b)
		if len(t) != 32 {
			return nil, fmt.Errorf("statedir: secret: %w, found %d bytes", errSecretFormat, len(b))
		}
		secret = make([]byte, 16)
		if _, err := hex.Decode(secret, t); err != nil {
			return nil, fmt.Errorf("statedir: secret: %w", errSecretFormat)
		}
	}
	if bytes.Equal(secret, make([]byte, 16)) {
		return nil, ErrWeakSecret
	}
	return secret, nil
}

// LoadSecret reads a 16-byte secret from a file holding 32 hexadecimal
// digits (surrounding white space ignored) or the 16 bytes themselves,
// through ReadPrivateFile: the file must be a regular file of this user's
// (or root's) that group and others cannot access. It refuses an all-zero
// secret. Errors never include the file's contents; a missing file is an
// error wrapping os.ErrNotExist.
func LoadSecret(path string) ([]byte, error) {
	data, err := ReadPrivateFile(path, maxSecretFile)
	if err != nil {
		return nil, err
	}
	defer clear(data)
	secret, err := ParseSecret(data)
	if err != nil {
		if errors.Is(err, ErrWeakSecret) {
			return nil, fmt.Errorf("%w (in %s)", err, path)
		}
		return nil, fmt.Errorf("statedir: secret %s: %w", path, errors.Unwrap(err))
	}
	return secret, nil
}

// ReadPrivateFile reads a small private file, such as a secret or a token:
// at most limit bytes (a larger file is refused, never truncated). It opens
// the file without following a symbolic link and without blocking, and
// refuses anything but a regular file (links, FIFOs, devices, directories),
// a file owned by another user than the current one or root, and a file
// that group or others may access (mode bits 0077). Errors name the path
// and the fix, never the contents; a missing file is an error wrapping
// os.ErrNotExist.
func ReadPrivateFile(path string, limit int64) ([]byte, error) {
	f, err := openNoFollow(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("statedir: %w", explainOpen(err))
	}
	defer f.Close()
	if err := checkOwned(f, 0o077); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("statedir: reading %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		clear(data)
		return nil, fmt.Errorf("statedir: %s is larger than %d bytes: it is not the file meant", path, limit)
	}
	return data, nil
}
