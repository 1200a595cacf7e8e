package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// newFlags returns a flag set that reports errors as usage errors and
// prints its help on stderr: "usage: randflake " and usage, then the
// flags, if any.
func newFlags(e *env, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("randflake "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		printUsage(e.stderr, usage)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(e.stderr)
			fs.PrintDefaults()
		}
	}
	return fs
}

// printUsage prints a command's usage text.
func printUsage(w io.Writer, usage string) {
	fmt.Fprintf(w, "usage: randflake %s\n", usage)
}

// parseFlags parses args; a bad flag is a usage error (already printed by
// the flag package).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	return nil
}

// noArgs is the usage error for arguments a command does not take.
func noArgs(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

// noFlags is embedded by subcommands without flags.
type noFlags struct{}

func (noFlags) flags(*flag.FlagSet) {}
