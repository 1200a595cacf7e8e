package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/randflake/randflake"
)

const inspectUsage = `inspect [--secret-file FILE] [--json] [ID...]

Prints the time (UTC), node ID and sequence number of each ID, given in
its string form or as a decimal integer, negative ones included (prefix +
forces decimal). Without arguments the IDs are read from standard input:
separated by white space (randflake gen | randflake inspect), or as JSON
arrays of strings or numbers (randflake gen --format json | randflake
inspect). Flags may also follow the IDs. IDs that cannot be read are
reported one by one and make the exit status 1.

Standard error names the secret's source (never the secret). A wrong
secret cannot be detected: the fields then come out as meaningless noise.`

// inspectCmd is randflake inspect: the fields of IDs.
type inspectCmd struct {
	secret secretFlags
	json   bool
}

func (c *inspectCmd) flags(fs *flag.FlagSet) {
	c.secret.register(fs)
	fs.BoolVar(&c.json, "json", false, "print one JSON object per line")
}

func (c *inspectCmd) run(e *env, args []string) error {
	out := bufio.NewWriterSize(e.stdout, 64<<10)
	var next func() (item, error)
	if len(args) > 0 {
		next = argItems(args)
	} else {
		ir, err := stdinItems(e, "IDs", true, func() { out.Flush() })
		if err != nil {
			return err
		}
		next = ir.nextWrapped
	}
	// The first ID is read before the secret, so that input without any
	// is a usage error whatever the secret.
	first, err := next()
	if errors.Is(err, io.EOF) {
		return usagef("no IDs given on the command line or standard input")
	}
	if err != nil {
		return err
	}
	secret, source, err := c.secret.load(e)
	if err != nil {
		return err
	}
	in, err := randflake.NewInspector(secret)
	clear(secret)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "randflake inspect: decoding with the secret from %s (under a wrong secret the fields are meaningless, not an error)\n", source)
	failed := false
	line := make([]byte, 0, 160)
	for it := first; ; {
		id, err := parseItem(it)
		if err != nil {
			out.Flush()
			fmt.Fprintf(e.stderr, "%s: %v\n", echoItem(it), err)
			failed = true
		} else {
			ts, node, seq, _ := in.Inspect(id)
			line = c.appendFields(line[:0], id, ts, node, seq)
			out.Write(line)
		}
		if it, err = next(); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			out.Flush()
			return err
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if failed {
		return errReported
	}
	return nil
}

// appendFields appends the line inspect prints for id to b.
func (c *inspectCmd) appendFields(b []byte, id, ts, node, seq int64) []byte {
	if c.json {
		b = append(b, `{"id":"`...)
		b = randflake.AppendString(b, id)
		b = append(b, `","int":"`...)
		b = strconv.AppendInt(b, id, 10)
		b = append(b, `","time":"`...)
		b = time.Unix(ts, 0).UTC().AppendFormat(b, time.RFC3339)
		b = append(b, `","timestamp":`...)
		b = strconv.AppendInt(b, ts, 10)
		b = append(b, `,"node":`...)
		b = strconv.AppendInt(b, node, 10)
		b = append(b, `,"sequence":`...)
		b = strconv.AppendInt(b, seq, 10)
		return append(b, "}\n"...)
	}
	b = randflake.AppendString(b, id)
	b = append(b, '\t')
	b = strconv.AppendInt(b, id, 10)
	b = append(b, '\t')
	b = time.Unix(ts, 0).UTC().AppendFormat(b, time.RFC3339)
	b = append(b, "\tnode="...)
	b = strconv.AppendInt(b, node, 10)
	b = append(b, "\tseq="...)
	b = strconv.AppendInt(b, seq, 10)
	return append(b, '\n')
}

// parseItem is parseAnyID of an item; a truncated item is not an ID.
func parseItem(it item) (int64, error) {
	if it.size > 0 {
		return 0, fmt.Errorf("longer than %d bytes: %w", maxItem, randflake.ErrInvalidID)
	}
	return parseAnyID(it.text)
}

// parseAnyID accepts the string form, or a decimal integer when the text
// is not a valid string form (a decimal of up to 13 digits is read as the
// string form, as the two are ambiguous; prefix it with "+" to force
// decimal).
func parseAnyID(s string) (int64, error) {
	if len(s) > 0 && s[0] == '+' {
		return strconv.ParseInt(s[1:], 10, 64)
	}
	if id, err := randflake.DecodeString(s); err == nil {
		return id, nil
	}
	if id, err := strconv.ParseInt(s, 10, 64); err == nil {
		return id, nil
	}
	return 0, randflake.ErrInvalidID
}
