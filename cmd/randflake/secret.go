package main

import (
	"flag"
	"fmt"

	"github.com/randflake/randflake/statedir"
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
		b, err := statedir.ParseSecret([]byte(h))
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

// stateSecret returns the state directory's secret, creating the directory
// and the secret on first use.
func stateSecret() ([]byte, error) {
	d, err := statedir.Open("")
	if err != nil {
		return nil, err
	}
	return d.Secret(), nil
}
