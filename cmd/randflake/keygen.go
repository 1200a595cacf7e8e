package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
)

func runKeygen(e *env, args []string) error {
	fs := newFlags(e, "keygen", "keygen --out FILE [--force]\n\nWrites a new random 16-byte secret, as 32 hex digits, to FILE with mode 0600.\nWith --out - the secret goes to standard output, but never to a terminal\nunless --show is given.")
	out := fs.String("out", "", "file to write (required); - for standard output")
	force := fs.Bool("force", false, "replace an existing file")
	show := fs.Bool("show", false, "allow writing the secret to a terminal")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() > 0 {
		return usagef("--out FILE is required and no arguments are taken")
	}
	key := make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	text := []byte(hex.EncodeToString(key) + "\n")
	clear(key)
	defer clear(text)
	if *out == "-" {
		if e.isTerminal(e.stdout) && !*show {
			return usagef("refusing to print a secret to a terminal; use --out FILE, or --show")
		}
		_, err := e.stdout.Write(text)
		return err
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if *force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(*out, flags, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists; use --force to replace it", *out)
	}
	if err != nil {
		return err
	}
	// An existing file keeps its mode on truncation: tighten it.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(text); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "wrote a new secret to %s (mode 0600)\n", *out)
	return nil
}
