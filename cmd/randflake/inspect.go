package main

import (
	"bufio"
	"fmt"
	"strconv"
	"time"

	"github.com/randflake/randflake"
)

func runInspect(e *env, args []string) error {
	fs := newFlags(e, "inspect", "inspect [--secret-file FILE] [--json] [ID...]\n\nPrints the time (UTC), node ID and sequence number of each ID, given in\nits string form or as a decimal integer (prefix + forces decimal). Without\narguments the IDs are read from standard input, separated by white space\n(randflake gen | randflake inspect). IDs that cannot be read are reported\none by one and make the exit status 1. A wrong secret cannot be detected:\nthe fields then come out as noise.")
	var sf secretFlags
	sf.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object per line")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ids := fs.Args()
	if len(ids) == 0 {
		if e.isTerminal(e.stdin) {
			return usagef("no IDs given")
		}
		sc := bufio.NewScanner(e.stdin)
		sc.Split(bufio.ScanWords)
		for sc.Scan() {
			ids = append(ids, sc.Text())
		}
		if err := sc.Err(); err != nil {
			return err
		}
		if len(ids) == 0 {
			return usagef("no IDs given on the command line or standard input")
		}
	}
	secret, err := sf.load(e)
	if err != nil {
		return err
	}
	c, err := randflake.NewSparx64(secret)
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
		raw := c.DecryptID(uint64(id))
		ts, node, seq := splitRaw(raw)
		if *asJSON {
			fmt.Fprintf(e.stdout, `{"id":%q,"int":"%d","time":%q,"timestamp":%d,"node":%d,"sequence":%d}`+"\n",
				randflake.EncodeString(id), id, time.Unix(ts, 0).UTC().Format(time.RFC3339), ts, node, seq)
			continue
		}
		fmt.Fprintf(e.stdout, "%s\t%d\t%s\tnode=%d\tseq=%d\n", randflake.EncodeString(id), id,
			time.Unix(ts, 0).UTC().Format(time.RFC3339), node, seq)
	}
	if failed {
		return errReported
	}
	return nil
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

// splitRaw takes a decrypted ID apart.
func splitRaw(raw uint64) (ts, node, seq int64) {
	ts = int64(raw>>(randflake.RANDFLAKE_NODE_BITS+randflake.RANDFLAKE_SEQUENCE_BITS)) + randflake.RANDFLAKE_EPOCH_OFFSET
	node = int64(raw>>randflake.RANDFLAKE_SEQUENCE_BITS) & randflake.RANDFLAKE_MAX_NODE
	seq = int64(raw) & randflake.RANDFLAKE_MAX_SEQUENCE
	return
}
