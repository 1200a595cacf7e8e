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
	fs.StringVar(&s.file, "secret-file", "", "file holding the 16-byte secret (raw or 32 hex digits); without it, $RANDFLAKE_SECRET (32 hex digits), then the state directory [$RANDFLAKE_SECRET_FILE]")
}

// explicit returns the secret given by --secret-file, $RANDFLAKE_SECRET_FILE
// or $RANDFLAKE_SECRET, and which of them it came from, or nil if none is
// given. The secret is never printed; errors and source name where it
// comes from only.
func (s *secretFlags) explicit(e *env) (secret []byte, source string, err error) {
	if s.file != "" {
		b, err := statedir.LoadSecret(s.file)
		return b, "--secret-file " + s.file, err
	}
	if f := e.getenv("RANDFLAKE_SECRET_FILE"); f != "" {
		b, err := statedir.LoadSecret(f)
		return b, "$RANDFLAKE_SECRET_FILE " + f, err
	}
	if h := e.getenv("RANDFLAKE_SECRET"); h != "" {
		b, err := statedir.ParseSecretHex(h)
		if err != nil {
			return nil, "", fmt.Errorf("$RANDFLAKE_SECRET: %w", err)
		}
		return b, "$RANDFLAKE_SECRET", nil
	}
	return nil, "", nil
}

// load returns the explicit secret or, without one, the state directory's
// (created on first use, which it says on standard error), and where it
// came from.
func (s *secretFlags) load(e *env) (secret []byte, source string, err error) {
	b, src, err := s.explicit(e)
	if b != nil || err != nil {
		return b, src, err
	}
	return stateSecret(e, nil)
}

// stateSecret returns the state directory's secret and "the state
// directory PATH", creating the directory and the secret on first use
// (see openState for created).
func stateSecret(e *env, created func(dir string)) (secret []byte, source string, err error) {
	d, err := openState(e, created)
	if err != nil {
		return nil, "", err
	}
	return d.Secret(), "the state directory " + d.Path(), nil
}

// openState opens the state directory: $RANDFLAKE_STATE_DIR of e, else
// statedir.DefaultPath. When this created its secret (its first use), it
// calls created with its path or, if created is nil, says so on standard
// error.
func openState(e *env, created func(dir string)) (*statedir.Dir, error) {
	d, err := statedir.Open(e.getenv("RANDFLAKE_STATE_DIR"))
	if err != nil {
		return nil, err
	}
	if d.Created() {
		if created != nil {
			created(d.Path())
		} else {
			fmt.Fprintf(e.stderr, "randflake: %s %s\n", firstUseNotice, d.Path())
		}
	}
	return d, nil
}

// firstUseNotice is what openState says, followed by the path, on first
// use of a state directory.
const firstUseNotice = "first use: created a new secret and the state directory holding it:"
