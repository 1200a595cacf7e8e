package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

const completionUsage = `completion bash|zsh

Prints a shell completion script for randflake's commands, subcommands and
flags. Load it in the running shell:
  bash: source <(randflake completion bash)
  zsh:  source <(randflake completion zsh)   (after compinit)
or install it: the bash script in a directory of bash-completion (such as
~/.local/share/bash-completion/completions/randflake), the zsh script as
_randflake in a directory of $fpath.`

// completionCmd is randflake completion: shell completion scripts.
type completionCmd struct{ noFlags }

func (c *completionCmd) run(e *env, args []string) error {
	if len(args) != 1 {
		return usagef("want one shell: bash or zsh")
	}
	tree := completionTree(commands(), "")
	switch args[0] {
	case "bash":
		writeBashCompletion(e.stdout, tree)
	case "zsh":
		writeZshCompletion(e.stdout, tree)
	default:
		return usagef("unknown shell %q: want bash or zsh", args[0])
	}
	return nil
}

// compCommand is what completion knows of a command: its flags, its
// subcommands and the words its first argument may be.
type compCommand struct {
	name, path, summary string
	flags               []compFlag
	subs                []compCommand
	args                []string
}

// compFlag is a flag of a command.
type compFlag struct {
	name, usage string
	isBool      bool
}

// spelling is the flag as completion offers it: -n for one letter,
// --name for more.
func (f compFlag) spelling() string {
	if len(f.name) == 1 {
		return "-" + f.name
	}
	return "--" + f.name
}

// completionTree describes the commands of table, whose parent's path
// (after "randflake") is prefix.
func completionTree(table []command, prefix string) []compCommand {
	var out []compCommand
	for _, c := range table {
		cc := compCommand{name: c.name, path: strings.TrimSpace(prefix + " " + c.name), summary: c.summary}
		sc := c.new()
		fs := newFlags(cc.path)
		sc.flags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			b, ok := f.Value.(interface{ IsBoolFlag() bool })
			cc.flags = append(cc.flags, compFlag{name: f.Name, usage: f.Usage, isBool: ok && b.IsBoolFlag()})
		})
		cc.flags = append(cc.flags, compFlag{name: "help", usage: "show the help", isBool: true})
		if p, ok := sc.(parent); ok {
			cc.subs = completionTree(p.subcommands(), cc.path)
		}
		switch cc.path {
		case "help":
			for _, c := range table {
				cc.args = append(cc.args, c.name)
			}
		case "completion":
			cc.args = []string{"bash", "zsh"}
		}
		out = append(out, cc)
	}
	return out
}

// names returns the names of cs.
func names(cs []compCommand) []string {
	var n []string
	for _, c := range cs {
		n = append(n, c.name)
	}
	return n
}

// writeBashCompletion writes the bash completion script of tree.
func writeBashCompletion(w io.Writer, tree []compCommand) {
	fmt.Fprint(w, `# bash completion for randflake. Load it with
#   source <(randflake completion bash)
_randflake() {
    local cur prev cmd sub words values i w
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    cmd= sub=
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        case $w in
        -*) ;;
        *) if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi ;;
        esac
    done
    case $cmd in
`)
	fmt.Fprintf(w, "    '') words='%s --help --version' ;;\n", strings.Join(names(tree), " "))
	for _, c := range tree {
		fmt.Fprintf(w, "    %s)\n", c.name)
		if len(c.subs) == 0 {
			writeBashCase(w, "        ", c)
			continue
		}
		fmt.Fprintf(w, "        case $sub in\n")
		fmt.Fprintf(w, "        '') words='%s' ;;\n", strings.Join(append(names(c.subs), flagSpellings(c.flags)...), " "))
		for _, s := range c.subs {
			fmt.Fprintf(w, "        %s)\n", s.name)
			writeBashCase(w, "            ", s)
		}
		fmt.Fprintf(w, "        esac ;;\n")
	}
	fmt.Fprint(w, `    esac
    # The value of a flag: the shell's default (file names).
    if [[ -n $values && " $values " == *" $prev "* ]]; then
        COMPREPLY=()
        return
    fi
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _randflake randflake
`)
}

// writeBashCase writes the words and value-taking flags of c, a command
// without subcommands, as a branch of a case statement.
func writeBashCase(w io.Writer, indent string, c compCommand) {
	words := flagSpellings(c.flags)
	if len(c.args) > 0 {
		words = append(c.args, words...)
	}
	var values []string
	for _, f := range c.flags {
		if !f.isBool {
			values = append(values, "-"+f.name, "--"+f.name)
		}
	}
	fmt.Fprintf(w, "%swords='%s'\n", indent, strings.Join(words, " "))
	fmt.Fprintf(w, "%svalues='%s' ;;\n", indent, strings.Join(values, " "))
}

// flagSpellings returns the spellings of flags.
func flagSpellings(flags []compFlag) []string {
	var s []string
	for _, f := range flags {
		s = append(s, f.spelling())
	}
	return s
}

// writeZshCompletion writes the zsh completion script of tree.
func writeZshCompletion(w io.Writer, tree []compCommand) {
	fmt.Fprint(w, `#compdef randflake
# zsh completion for randflake. Load it with
#   source <(randflake completion zsh)
# after compinit, or save it as _randflake in a directory of $fpath.

_randflake() {
  local -a cmds
  if (( CURRENT == 2 )); then
    cmds=(
`)
	for _, c := range tree {
		fmt.Fprintf(w, "      %s\n", zshQuote(c.name+":"+c.summary))
	}
	fmt.Fprint(w, `    )
    _describe -t commands 'randflake command' cmds
    compadd -- --help --version
    return
  fi
  case ${words[2]} in
`)
	for _, c := range tree {
		fmt.Fprintf(w, "  %s)\n", c.name)
		if len(c.subs) == 0 {
			writeZshArguments(w, "    ", 1, c)
			fmt.Fprintf(w, "    ;;\n")
			continue
		}
		fmt.Fprintf(w, "    if (( CURRENT == 3 )); then\n      cmds=(\n")
		for _, s := range c.subs {
			fmt.Fprintf(w, "        %s\n", zshQuote(s.name+":"+s.summary))
		}
		fmt.Fprintf(w, "      )\n      _describe -t commands %s cmds\n      return\n    fi\n", zshQuote(c.path+" command"))
		fmt.Fprintf(w, "    case ${words[3]} in\n")
		for _, s := range c.subs {
			fmt.Fprintf(w, "    %s)\n", s.name)
			writeZshArguments(w, "      ", 2, s)
			fmt.Fprintf(w, "      ;;\n")
		}
		fmt.Fprintf(w, "    esac\n    ;;\n")
	}
	fmt.Fprint(w, `  esac
}

if [[ ${funcstack[1]} == _randflake ]]; then
  _randflake "$@"
else
  compdef _randflake randflake
fi
`)
}

// writeZshArguments writes the _arguments call completing c's flags and
// arguments, after dropping the depth words before c's own.
func writeZshArguments(w io.Writer, indent string, depth int, c compCommand) {
	fmt.Fprintf(w, "%sshift %d words; (( CURRENT -= %d ))\n", indent, depth, depth)
	fmt.Fprintf(w, "%s_arguments", indent)
	for _, f := range c.flags {
		spec := f.spelling() + "[" + zshDescription(f.usage) + "]"
		if !f.isBool {
			action := ""
			if strings.Contains(f.name, "file") || f.name == "out" {
				action = "_files"
			}
			spec += ":" + f.name + ":" + action
		}
		fmt.Fprintf(w, " \\\n%s  %s", indent, zshQuote(spec))
	}
	if len(c.args) > 0 {
		fmt.Fprintf(w, " \\\n%s  %s", indent, zshQuote("1:argument:("+strings.Join(c.args, " ")+")"))
	}
	fmt.Fprintln(w)
}

// zshDescription makes a flag's usage fit between the brackets of an
// _arguments spec.
func zshDescription(s string) string {
	return strings.NewReplacer("[", "(", "]", ")", ":", ",", "\\", "/", "\n", " ").Replace(s)
}

// zshQuote quotes s for the shell, in single quotes.
func zshQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
