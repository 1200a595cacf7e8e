// Command randflake generates and inspects Randflake IDs, manages secrets,
// makes Apache-compatible request tokens, measures the cipher kernels, and
// serves IDs over HTTP.
//
//	randflake gen [-n N] [--format int|string|json]
//	randflake inspect ID...
//	randflake keygen --out FILE
//	randflake uniqueid gen|parse
//	randflake bench
//	randflake serve [--listen ADDR] [--node-source SOURCE] [--nodes FIRST-LAST | --etcd ENDPOINTS]
//	randflake load --url URL
//	randflake lease status|reset-history [--node-source SOURCE]
//	randflake completion bash|zsh
//	randflake version
//	randflake help [COMMAND]
//
// Every subcommand takes --help, which prints on standard output. Exit status: 0 on success, 1 when the work
// failed (for inspect: when any ID could not be read), 2 on a usage error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/randflake/randflake"
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
// the exit status. Help goes to standard output; errors go to standard
// error, once each.
func run(e *env, args []string) int {
	if len(args) == 0 {
		topUsage(e.stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		args = append([]string{"help"}, args[1:]...)
	case "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	c, ok := lookup(commands(), args[0])
	if !ok {
		fmt.Fprintf(e.stderr, "randflake: unknown command %q\n(see randflake --help)\n", args[0])
		return 2
	}
	err := c.exec(e, c.name, args[1:])
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "randflake %s: %s\n(see randflake %s --help)\n", ue.path, ue.msg, ue.path)
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
// they share, nodesource.go the node IDs of gen, serve and lease,
// secret.go the secret.
func commands() []command {
	return []command{
		{"gen", "print new IDs", genUsage, func() subcommand { return new(genCmd) }},
		{"inspect", "decode IDs: time, node, sequence", inspectUsage, func() subcommand { return new(inspectCmd) }},
		{"keygen", "write a new secret file", keygenUsage, func() subcommand { return new(keygenCmd) }},
		{"uniqueid", "Apache mod_unique_id tokens: gen, parse", uniqueIDUsage, func() subcommand { return new(uniqueIDCmd) }},
		{"bench", "measure the cipher kernels and generators on this CPU", benchUsage, func() subcommand { return new(benchCmd) }},
		{"serve", "serve IDs over HTTP", serveUsage, func() subcommand { return new(serveCmd) }},
		{"load", "load-test a running `randflake serve`", loadUsage, func() subcommand { return new(loadCmd) }},
		{"lease", "the node-ID leases' store: status, reset-history", leaseUsage, func() subcommand { return new(leaseCmd) }},
		{"completion", "shell completion script: bash or zsh", completionUsage, func() subcommand { return new(completionCmd) }},
		{"version", "version, revision, Go version and kernel", versionUsage, func() subcommand { return new(versionCmd) }},
		{"help", "help on a command", helpUsage, func() subcommand { return new(helpCmd) }},
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

// parent is a subcommand that runs subcommands of its own (uniqueid):
// their table.
type parent interface {
	subcommands() []command
}

// runSubcommand runs the command of a parent's table that args[0] names,
// with the rest of args; path is the parent's name after "randflake"
// ("lease"). Without args the usage error says that one of expected was
// expected; for an unknown name it lists names.
func runSubcommand(e *env, path string, table []command, args []string, expected, names string) error {
	if len(args) == 0 {
		return usagef("%s expected", expected)
	}
	sub, ok := lookup(table, args[0])
	if !ok {
		return usagef("unknown %s command %q (%s)", path, args[0], names)
	}
	return sub.exec(e, path+" "+sub.name, args[1:])
}

// exec parses args into a new subcommand's flags and runs it; path is its
// name after "randflake" ("gen", "uniqueid parse"). With -h or --help it
// prints the help on standard output and returns flag.ErrHelp. Usage
// errors come back naming path, unless a subcommand named its own.
func (c command) exec(e *env, path string, args []string) error {
	sc := c.new()
	fs := newFlags(path)
	sc.flags(fs)
	_, isParent := sc.(parent)
	rest, err := parseFlags(fs, args, isParent)
	var fromEnv []string
	if _, ok := sc.(envConfigured); ok && err == nil {
		fromEnv, err = applyEnv(fs, e.getenv)
	}
	if errors.Is(err, flag.ErrHelp) {
		printHelp(e.stdout, c.usage, fs)
		return err
	}
	if err == nil {
		err = sc.run(e, rest)
	}
	var ue usageError
	if errors.As(err, &ue) && ue.path == "" {
		ue.path = path
		ue.msg = noteEnv(ue.msg, fromEnv)
		return ue
	}
	return err
}

// help prints c's help, as --help does; path is its name after
// "randflake".
func (c command) help(w io.Writer, path string) {
	fs := newFlags(path)
	c.new().flags(fs)
	printHelp(w, c.usage, fs)
}

func topUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: randflake <command> [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nFlags may come before or after the arguments; -- ends them. Secrets come")
	fmt.Fprintln(w, "from --secret-file, $RANDFLAKE_SECRET_FILE, $RANDFLAKE_SECRET (hex) or the")
	fmt.Fprintln(w, "state directory; see randflake help <command>, and randflake --version.")
}

const helpUsage = `help [COMMAND [SUBCOMMAND]]

Prints the list of commands, or a command's help (as COMMAND --help does).`

// helpCmd is randflake help: the list of commands or one's help.
type helpCmd struct{ noFlags }

func (c *helpCmd) run(e *env, args []string) error {
	if len(args) == 0 {
		topUsage(e.stdout)
		return nil
	}
	table, path := commands(), ""
	for i, name := range args {
		cmd, ok := lookup(table, name)
		if !ok {
			return usagef("unknown command %q", strings.Join(args[:i+1], " "))
		}
		path = strings.TrimSpace(path + " " + name)
		p, ok := cmd.new().(parent)
		if i == len(args)-1 || !ok {
			if i < len(args)-1 {
				return usagef("%s has no subcommands", path)
			}
			cmd.help(e.stdout, path)
			return nil
		}
		table = p.subcommands()
	}
	return nil
}

// usageError is a command-line mistake: exit status 2.
type usageError struct {
	msg  string
	path string // the subcommand, after "randflake"; set by exec
}

// Error returns the message, which main prints with a pointer to --help.
func (e usageError) Error() string { return e.msg }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error { return usageError{msg: fmt.Sprintf(format, args...)} }

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

// warnKernel says on standard error when $RANDFLAKE_KERNEL names a kernel
// this CPU cannot run, as the commands that generate or measure IDs do.
func warnKernel(e *env) {
	if err := randflake.KernelOverrideError(); err != nil {
		fmt.Fprintln(e.stderr, err)
	}
}
