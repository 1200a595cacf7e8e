package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
)

const keygenUsage = `keygen --out FILE [--force]

Writes a new random 16-byte secret, as 32 hex digits, to FILE with mode 0600.
With --out - the secret goes to standard output, but never to a terminal
unless --show is given.`

// keygenCmd is randflake keygen: a new secret.
type keygenCmd struct {
	out   string
	force bool
	show  bool
}

func (c *keygenCmd) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.out, "out", "", "file to write (required); - for standard output")
	fs.BoolVar(&c.force, "force", false, "replace an existing file")
	fs.BoolVar(&c.show, "show", false, "allow writing the secret to a terminal")
}

func (c *keygenCmd) run(e *env, args []string) error {
	if c.out == "" || len(args) > 0 {
		return usagef("--out FILE is required and no arguments are taken")
	}
	if c.out == "-" && e.isTerminal(e.stdout) && !c.show {
		return usagef("refusing to print a secret to a terminal; use --out FILE, or --show")
	}
	key := make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	text := []byte(hex.EncodeToString(key) + "\n")
	clear(key)
	defer clear(text)
	if c.out == "-" {
		_, err := e.stdout.Write(text)
		return err
	}
	if err := c.write(text); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "wrote a new secret to %s (mode 0600)\n", c.out)
	return nil
}

// write writes text to the file c.out with mode 0600, replacing an
// existing file only with --force.
func (c *keygenCmd) write(text []byte) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if c.force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(c.out, flags, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists; use --force to replace it", c.out)
	}
	if err != nil {
		return err
	}
	// An existing file keeps its mode on truncation: tighten it.
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(text)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
