package main

import (
	"bufio"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/randflake/randflake"
)

const inspectUsage = `inspect [--secret-file FILE] [--json] [ID...]

Prints the time (UTC), node ID and sequence number of each ID, given in
its string form or as a decimal integer (prefix + forces decimal). Without
arguments the IDs are read from standard input, separated by white space
(randflake gen | randflake inspect). IDs that cannot be read are reported
one by one and make the exit status 1. A wrong secret cannot be detected:
the fields then come out as noise.`

// inspectCmd is randflake inspect: the fields of IDs.
type inspectCmd struct {
	secret secretFlags
	json   bool
}

func (c *inspectCmd) flags(fs *flag.FlagSet) {
	c.secret.register(fs)
	fs.BoolVar(&c.json, "json", false, "print one JSON object per line")
}

func (c *inspectCmd) run(e *env, ids []string) error {
	if len(ids) == 0 {
		var err error
		if ids, err = readIDs(e); err != nil {
			return err
		}
	}
	secret, err := c.secret.load(e)
	if err != nil {
		return err
	}
	in, err := randflake.NewInspector(secret)
	clear(secret)
	if err != nil {
		return err
	}
	failed := false
	for _, arg := range ids {
		id, err := parseAnyID(arg)
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: %v\n", arg, err)
			failed = true
			continue
		}
		ts, node, seq, _ := in.Inspect(id)
		when := time.Unix(ts, 0).UTC().Format(time.RFC3339)
		if c.json {
			fmt.Fprintf(e.stdout, `{"id":%q,"int":"%d","time":%q,"timestamp":%d,"node":%d,"sequence":%d}`+"\n",
				randflake.EncodeString(id), id, when, ts, node, seq)
			continue
		}
		fmt.Fprintf(e.stdout, "%s\t%d\t%s\tnode=%d\tseq=%d\n", randflake.EncodeString(id), id, when, node, seq)
	}
	if failed {
		return errReported
	}
	return nil
}

// readIDs reads the IDs, separated by white space, from standard input,
// unless it is a terminal.
func readIDs(e *env) ([]string, error) {
	if e.isTerminal(e.stdin) {
		return nil, usagef("no IDs given")
	}
	var ids []string
	sc := bufio.NewScanner(e.stdin)
	sc.Split(bufio.ScanWords)
	for sc.Scan() {
		ids = append(ids, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, usagef("no IDs given on the command line or standard input")
	}
	return ids, nil
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
