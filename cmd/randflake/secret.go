package main

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"github.com/randflake/randflake/statedir"
	"os"
)

// secretFlags are the flags every subcommand that needs the secret takes.
type secretFlags struct {
	file string
}

func (s *secretFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.file, "secret-file", "", "file holding the 16-byte secret (raw or 32 hex digits); default $RANDFLAKE_SECRET_FILE, then $RANDFLAKE_SECRET (hex), then the state directory")
}

// explicit returns the secret given by --secret-file, $RANDFLAKE_SECRET_FILE
// or $RANDFLAKE_SECRET, or nil if none is. The secret is never printed;
// errors name its source only.
func (s *secretFlags) explicit(e *env) ([]byte, error) {
	if s.file != "" {
		return statedir.LoadSecret(s.file)
	}
	if f := e.getenv("RANDFLAKE_SECRET_FILE"); f != "" {
		return statedir.LoadSecret(f)
	}
	if h := e.getenv("RANDFLAKE_SECRET"); h != "" {
		b, err := parseSecret([]byte(h))
		if err != nil {
			return nil, fmt.Errorf("$RANDFLAKE_SECRET: %w", err)
		}
		return b, nil
	}
	return nil, nil
}

// load returns the explicit secret or, without one, the state directory's
// (created on first use).
func (s *secretFlags) load(e *env) ([]byte, error) {
	b, err := s.explicit(e)
	if b != nil || err != nil {
		return b, err
	}
	return stateSecret()
}

var errSecretFormat = errors.New("a secret is 16 bytes, or 32 hexadecimal digits")

// parseSecret accepts 16 raw bytes or 32 hex digits with optional
// surrounding white space.
func parseSecret(b []byte) ([]byte, error) {
	if len(b) == 16 {
		return bytes.Clone(b), nil
	}
	t := bytes.TrimSpace(b)
	if len(t) != 32 {
		return nil, errSecretFormat
	}
	out := make([]byte, 16)
	if _, err := hex.Decode(out, t); err != nil {
		return nil, errSecretFormat
	}
	return out, nil
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	st, err := file.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
