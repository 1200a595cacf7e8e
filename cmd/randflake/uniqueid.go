package main

import (
	"bufio"
	"fmt"
	"net/netip"

	"github.com/randflake/randflake/uniqueid"
)

func runUniqueID(e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(e.stderr, "usage: randflake uniqueid gen [-n N] [--layout current|classic] [--addr IPV4]\n       randflake uniqueid parse TOKEN...")
		if len(args) == 0 {
			return usagef("gen or parse expected")
		}
		return nil
	}
	switch args[0] {
	case "gen":
		return uniqueIDGen(e, args[1:])
	case "parse":
		return uniqueIDParse(e, args[1:])
	}
	return usagef("unknown uniqueid command %q (gen or parse)", args[0])
}

func uniqueIDGen(e *env, args []string) error {
	fs := newFlags(e, "uniqueid gen", "uniqueid gen [-n N] [--layout current|classic] [--addr IPV4]\n\nPrints N Apache mod_unique_id tokens.")
	n := fs.Int("n", 1, "number of tokens")
	layout := fs.String("layout", "current", "current (httpd 2.4, 27 characters) or classic (24 characters)")
	addr := fs.String("addr", "", "IPv4 address for the classic layout (default: the host's first non-loopback address)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *n < 0 || fs.NArg() > 0 {
		return usagef("-n must not be negative, and no arguments are taken")
	}
	var gen interface{ Append([]byte) []byte }
	switch *layout {
	case "current":
		g, err := uniqueid.NewCurrent()
		if err != nil {
			return err
		}
		gen = g
	case "classic":
		var a netip.Addr
		if *addr != "" {
			var err error
			if a, err = netip.ParseAddr(*addr); err != nil || !a.Is4() {
				return usagef("--addr must be an IPv4 address")
			}
		}
		g, err := uniqueid.NewClassic(a)
		if err != nil {
			return err
		}
		gen = g
	default:
		return usagef("--layout must be current or classic")
	}
	w := bufio.NewWriter(e.stdout)
	buf := make([]byte, 0, 32)
	for range *n {
		buf = append(gen.Append(buf[:0]), '\n')
		w.Write(buf)
	}
	return w.Flush()
}

func uniqueIDParse(e *env, args []string) error {
	fs := newFlags(e, "uniqueid parse", "uniqueid parse TOKEN...\n\nPrints the fields of Apache mod_unique_id tokens in either layout.")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("no tokens given")
	}
	failed := false
	for _, s := range fs.Args() {
		t, err := uniqueid.Parse(s)
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: %v\n", s, err)
			failed = true
			continue
		}
		fmt.Fprintf(e.stdout, "%s\tlayout=%v\ttime=%s\tcounter=%d\tthread=%d", s, t.Layout, t.Time.UTC().Format("2006-01-02T15:04:05Z"), t.Counter, t.ThreadIndex)
		if t.Layout == uniqueid.Classic {
			fmt.Fprintf(e.stdout, "\taddr=%s\tpid=%d\n", t.Addr, t.PID)
		} else {
			fmt.Fprintf(e.stdout, "\troot=%x\n", t.Root)
		}
	}
	if failed {
		return errReported
	}
	return nil
}
