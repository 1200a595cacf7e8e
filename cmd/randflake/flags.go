package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// newFlags returns a flag set for the subcommand name (after
// "randflake"). It prints nothing on its own (exec prints the help): parseFlags turns its errors into usage
// errors, which run prints once.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("randflake "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// printHelp prints the help of a command: its usage text and its flags,
// if any.
func printHelp(w io.Writer, usage string, fs *flag.FlagSet) {
	printUsage(w, usage)
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintln(w)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}

// printUsage prints a command's usage text.
func printUsage(w io.Writer, usage string) {
	fmt.Fprintf(w, "usage: randflake %s\n", usage)
}

// parseFlags parses args into fs and returns the arguments that are not
// flags. Unless stopAtArg, flags may come before, between and after the
// arguments; "--" ends the flags either way. A "-" followed by a digit is
// an argument (a negative number), not a flag, unless it is the value of
// the flag before it. -h and --help return flag.ErrHelp; a bad flag is a
// usage error.
func parseFlags(fs *flag.FlagSet, args []string, stopAtArg bool) ([]string, error) {
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(rest, args[i+1:]...), nil
		case len(a) < 2 || a[0] != '-' || isDigit(a[1]):
			if stopAtArg {
				return append(rest, args[i:]...), nil
			}
			rest = append(rest, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			if name == "h" || name == "help" {
				return nil, flag.ErrHelp
			}
			return nil, usagef("flag provided but not defined: -%s", name)
		}
		if !hasValue {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				value = "true"
			} else if i+1 < len(args) {
				i++
				value = args[i]
			} else {
				return nil, usagef("flag needs an argument: -%s", name)
			}
		}
		if err := fs.Set(name, value); err != nil {
			return nil, usagef("invalid value %q for flag -%s: %v", value, name, err)
		}
	}
	return rest, nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

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

// envConfigured is a subcommand whose flags may also be set by
// environment variables (envVar names them); exec applies them after
// the command line, which wins.
type envConfigured interface {
	envConfigured()
}

// envVar is the environment variable of flag name: RANDFLAKE_ and the
// name upper-cased, '-' turned into '_' (--node-source:
// RANDFLAKE_NODE_SOURCE).
func envVar(name string) string {
	return "RANDFLAKE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// envUsage adds each flag's variable to its usage text, unless the text
// names it already.
func envUsage(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		v := "$" + envVar(f.Name)
		if !strings.Contains(f.Usage, v) {
			f.Usage += " [" + v + "]"
		}
	})
}

// readsOwnEnv are the flags whose code reads their variable itself, so
// that messages can say where a value came from (secret.go, serve.go).
var readsOwnEnv = map[string]bool{"secret-file": true, "inspect-token-file": true}

// applyEnv sets every flag of fs that the command line did not set from
// its variable (envVar), if that is set and not empty. A bad value is a
// usage error naming the variable.
// It returns the names of the flags it set.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) (fromEnv []string, err error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] || readsOwnEnv[f.Name] {
			return
		}
		name := envVar(f.Name)
		v := getenv(name)
		if v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = usagef("invalid value %q for $%s (--%s): %v", v, name, f.Name, serr)
			return
		}
		fromEnv = append(fromEnv, f.Name)
	})
	return fromEnv, err
}

// noteEnv adds to a usage message about flags which of them, among
// fromEnv, were set by their variable.
func noteEnv(msg string, fromEnv []string) string {
	var notes []string
	for _, name := range fromEnv {
		if mentionsFlag(msg, name) {
			notes = append(notes, "--"+name+" is $"+envVar(name))
		}
	}
	if len(notes) == 0 {
		return msg
	}
	return msg + " (" + strings.Join(notes, ", ") + ")"
}

// mentionsFlag reports whether msg names --name (and not a longer flag
// that starts with it).
func mentionsFlag(msg, name string) bool {
	for i := 0; ; {
		j := strings.Index(msg[i:], "--"+name)
		if j < 0 {
			return false
		}
		end := i + j + 2 + len(name)
		if end == len(msg) || !(msg[end] == '-' || 'a' <= msg[end] && msg[end] <= 'z') {
			return true
		}
		i = end
	}
}
