// Command randflake generates and inspects Randflake IDs, manages secrets,
// makes Apache-compatible request tokens, measures the cipher kernels, and
// serves IDs over HTTP.
//
//	randflake gen [-n N] [--format int|string|json]
//	randflake inspect ID...
//	randflake keygen --out FILE
//	randflake uniqueid gen|parse
//	randflake bench
//	randflake serve [--listen ADDR] [--nodes FIRST-LAST | --etcd ENDPOINTS]
//	randflake load --url URL
//
// Every subcommand takes --help. Exit status: 0 on success, 1 when the work
// failed (for inspect: when any ID could not be read), 2 on a usage error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(env *env, args []string) error
}

// env is what a subcommand sees of the process, so that tests can run
// subcommands in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	isTerminal     func(f any) bool
}

// usageError is a command-line mistake: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func commands() []command {
	return []command{
		{"gen", "print new IDs", runGen},
		{"inspect", "decode IDs: time, node, sequence", runInspect},
		{"keygen", "write a new secret file", runKeygen},
		{"uniqueid", "Apache mod_unique_id tokens: gen, parse", runUniqueID},
		{"bench", "measure the cipher kernels and generators on this CPU", runBench},
		{"serve", "serve IDs over HTTP", runServe},
		{"load", "load-test a running `randflake serve`", runLoad},
	}
}

func main() {
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, isTerminal: isTerminal}
	os.Exit(run(e, os.Args[1:]))
}

func run(e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		topUsage(e.stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(e, args[1:])
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.As(err, new(usageError)):
				fmt.Fprintf(e.stderr, "randflake %s: %v\n(see randflake %s --help)\n", c.name, err, c.name)
				return 2
			case errors.Is(err, errReported):
				return 1
			default:
				fmt.Fprintf(e.stderr, "randflake %s: %v\n", c.name, err)
				return 1
			}
		}
	}
	fmt.Fprintf(e.stderr, "randflake: unknown command %q\n", args[0])
	topUsage(e.stderr)
	return 2
}

// errReported means the failure was already reported on stderr.
var errReported = errors.New("reported")

func topUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: randflake <command> [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nSecrets come from --secret-file, $RANDFLAKE_SECRET_FILE, $RANDFLAKE_SECRET (hex)")
	fmt.Fprintln(w, "or the state directory ($RANDFLAKE_STATE_DIR); see randflake <command> --help.")
}

// newFlags returns a flag set that reports errors as usage errors and
// prints its help on stderr.
func newFlags(e *env, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("randflake "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: randflake %s\n\n", usage)
		fs.PrintDefaults()
	}
	return fs
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
