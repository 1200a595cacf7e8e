package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"

	"github.com/randflake/randflake/uniqueid"
)

const uniqueIDUsage = `uniqueid gen [-n N] [--layout current|classic] [--addr IPV4]
       randflake uniqueid parse [TOKEN...]

randflake uniqueid gen | randflake uniqueid parse prints the fields of new
tokens. See randflake uniqueid gen --help and randflake uniqueid parse --help.`

// uniqueIDCmd is randflake uniqueid: it runs one of uniqueIDCommands.
type uniqueIDCmd struct{ noFlags }

// subcommands is the table of uniqueid's own subcommands.
func (c *uniqueIDCmd) subcommands() []command {
	return []command{
		{"gen", "new tokens", uniqueIDGenUsage, func() subcommand { return new(uniqueIDGenCmd) }},
		{"parse", "the fields of tokens", uniqueIDParseUsage, func() subcommand { return new(uniqueIDParseCmd) }},
	}
}

func (c *uniqueIDCmd) run(e *env, args []string) error {
	return runSubcommand(e, "uniqueid", c.subcommands(), args, "gen or parse", "gen or parse")
}

const uniqueIDGenUsage = `uniqueid gen [-n N] [--layout current|classic] [--addr IPV4]

Prints N Apache mod_unique_id tokens.`

// uniqueIDGenCmd is randflake uniqueid gen: new tokens.
type uniqueIDGenCmd struct {
	n      int
	layout string
	addr   string
}

func (c *uniqueIDGenCmd) flags(fs *flag.FlagSet) {
	fs.IntVar(&c.n, "n", 1, "number of tokens")
	fs.StringVar(&c.layout, "layout", "current", "current (httpd 2.4, 27 characters) or classic (24 characters)")
	fs.StringVar(&c.addr, "addr", "", "IPv4 address for the classic layout (default: the host's first non-loopback address)")
}

func (c *uniqueIDGenCmd) run(e *env, args []string) error {
	if c.n < 0 || len(args) > 0 {
		return usagef("-n must not be negative, and no arguments are taken")
	}
	gen, err := c.generator()
	if err != nil {
		return err
	}
	w := bufio.NewWriter(e.stdout)
	buf := make([]byte, 0, 32)
	for range c.n {
		buf = append(gen.Append(buf[:0]), '\n')
		w.Write(buf)
	}
	return w.Flush()
}

// generator returns the generator of the layout the flags name.
func (c *uniqueIDGenCmd) generator() (interface{ Append([]byte) []byte }, error) {
	switch c.layout {
	case "current":
		return uniqueid.NewCurrent()
	case "classic":
		var a netip.Addr
		if c.addr != "" {
			var err error
			if a, err = netip.ParseAddr(c.addr); err != nil || !a.Is4() {
				return nil, usagef("--addr must be an IPv4 address")
			}
		}
		return uniqueid.NewClassic(a)
	}
	return nil, usagef("--layout must be current or classic")
}

const uniqueIDParseUsage = `uniqueid parse [TOKEN...]

Prints the fields of Apache mod_unique_id tokens in either layout. Without
arguments the tokens are read from standard input, separated by white
space (randflake uniqueid gen -n 5 | randflake uniqueid parse). Tokens that
cannot be read are reported one by one and make the exit status 1. A token
that begins with - must follow --.`

// uniqueIDParseCmd is randflake uniqueid parse: the fields of tokens.
type uniqueIDParseCmd struct{ noFlags }

func (c *uniqueIDParseCmd) run(e *env, args []string) error {
	out := bufio.NewWriterSize(e.stdout, 64<<10)
	next := argItems(args)
	if len(args) == 0 {
		ir, err := stdinItems(e, "tokens", false, func() { out.Flush() })
		if err != nil {
			return err
		}
		next = ir.nextWrapped
	}
	failed, some := false, false
	for {
		it, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			out.Flush()
			return err
		}
		some = true
		var t uniqueid.Token
		if it.size > 0 {
			err = fmt.Errorf("%w: longer than %d bytes", uniqueid.ErrMalformed, maxItem)
		} else {
			t, err = uniqueid.Parse(it.text)
		}
		if err != nil {
			out.Flush()
			fmt.Fprintf(e.stderr, "%s: %v\n", echoItem(it), err)
			failed = true
			continue
		}
		fmt.Fprintf(out, "%s\tlayout=%v\ttime=%s\tcounter=%d\tthread=%d", it.text, t.Layout, t.Time.UTC().Format("2006-01-02T15:04:05Z"), t.Counter, t.ThreadIndex)
		if t.Layout == uniqueid.Classic {
			fmt.Fprintf(out, "\taddr=%s\tpid=%d\n", t.Addr, t.PID)
		} else {
			fmt.Fprintf(out, "\troot=%x\n", t.Root)
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if !some {
		return usagef("no tokens given on the command line or standard input")
	}
	if failed {
		return errReported
	}
	return nil
}
