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
	"time"
)

func main() {
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, isTerminal: isTerminal}
	os.Exit(run(e, os.Args[1:]))
}

// env is what a subcommand sees of the process, so that tests can run
// subcommands in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	isTerminal     func(f any) bool
	// now, if set, is the clock of generators on a static node range
	// (--nodes); it must be ahead of the wall clock, as their lease starts
	// at the wall clock's next second. Nil means the wall clock.
	now func() time.Time
}

// run runs the subcommand args[0] names with the rest of args and returns
// the exit status.
func run(e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		topUsage(e.stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := lookup(commands(), args[0])
	if !ok {
		fmt.Fprintf(e.stderr, "randflake: unknown command %q\n", args[0])
		topUsage(e.stderr)
		return 2
	}
	err := c.exec(e, c.name, args[1:])
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
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

// commands is the table of subcommands, in the order of the usage text.
// Each is a type in a file of its own (gen.go, inspect.go, ...) holding its
// usage text, its flags and its run method; flags.go has the flag helpers
// they share, lease.go the node IDs of gen and serve, secret.go the secret.
func commands() []command {
	return []command{
		{"gen", "print new IDs", genUsage, func() subcommand { return new(genCmd) }},
		{"inspect", "decode IDs: time, node, sequence", inspectUsage, func() subcommand { return new(inspectCmd) }},
		{"keygen", "write a new secret file", keygenUsage, func() subcommand { return new(keygenCmd) }},
		{"uniqueid", "Apache mod_unique_id tokens: gen, parse", uniqueIDUsage, func() subcommand { return new(uniqueIDCmd) }},
		{"bench", "measure the cipher kernels and generators on this CPU", benchUsage, func() subcommand { return new(benchCmd) }},
		{"serve", "serve IDs over HTTP", serveUsage, func() subcommand { return new(serveCmd) }},
		{"load", "load-test a running `randflake serve`", loadUsage, func() subcommand { return new(loadCmd) }},
	}
}

// command is one entry of a command table.
type command struct {
	name    string
	summary string // one line for the list of commands
	usage   string // synopsis and description, printed by --help
	new     func() subcommand
}

// subcommand is what a command does. Its flags are fields of its type:
// exec registers them, parses the arguments into them and calls run with
// the arguments left.
type subcommand interface {
	flags(fs *flag.FlagSet)
	run(e *env, args []string) error
}

// lookup returns the command called name.
func lookup(table []command, name string) (command, bool) {
	for _, c := range table {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// exec parses args into a new subcommand's flags and runs it; path is its
// name after "randflake" ("gen", "uniqueid parse").
func (c command) exec(e *env, path string, args []string) error {
	sc := c.new()
	fs := newFlags(e, path, c.usage)
	sc.flags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return sc.run(e, fs.Args())
}

func topUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: randflake <command> [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nSecrets come from --secret-file, $RANDFLAKE_SECRET_FILE, $RANDFLAKE_SECRET (hex)")
	fmt.Fprintln(w, "or the state directory ($RANDFLAKE_STATE_DIR); see randflake <command> --help.")
}

// usageError is a command-line mistake: exit status 2.
type usageError struct{ msg string }

// Error returns the message, which main prints with a pointer to --help.
func (e usageError) Error() string { return e.msg }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errReported means the failure was already reported on stderr.
var errReported = errors.New("reported")

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	st, err := file.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
