package main

import (
	"bufio"
	"encoding/json"
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

func (c *inspectCmd) run(e *env, ids []string) error {
	if len(ids) == 0 {
		var err error
		if ids, err = readIDs(e); err != nil {
			return err
		}
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

// readIDs reads the IDs from standard input, unless it is a terminal:
// JSON arrays if the input begins with "[", else words separated by white
// space. Numbers in JSON are decimal IDs, given back with a "+"; other
// JSON values come back as "JSON VALUE", which is not an ID.
func readIDs(e *env) ([]string, error) {
	if e.isTerminal(e.stdin) {
		return nil, usagef("no IDs given")
	}
	r := bufio.NewReaderSize(e.stdin, 64<<10)
	first, err := firstNonSpace(r)
	if err != nil {
		return nil, err
	}
	if first != '[' {
		return scanWords(r, "IDs")
	}
	var ids []string
	dec := json.NewDecoder(r)
	dec.UseNumber()
	for {
		var arr []any
		err := dec.Decode(&arr)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("standard input: want JSON arrays of IDs: %w", err)
		}
		for _, v := range arr {
			switch v := v.(type) {
			case string:
				ids = append(ids, v)
			case json.Number:
				ids = append(ids, "+"+v.String())
			default: // reported as not an ID
				b, _ := json.Marshal(v)
				ids = append(ids, "JSON "+string(b))
			}
		}
	}
	if len(ids) == 0 {
		return nil, usagef("no IDs given on the command line or standard input")
	}
	return ids, nil
}

// firstNonSpace returns the first byte of r that is not white space,
// leaving it unread; 0 at the end of r.
func firstNonSpace(r *bufio.Reader) (byte, error) {
	for {
		c, err := r.ReadByte()
		if errors.Is(err, io.EOF) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c, r.UnreadByte()
		}
	}
}

// readWords reads words separated by white space from standard input,
// unless it is a terminal; what names them in errors.
func readWords(e *env, what string) ([]string, error) {
	if e.isTerminal(e.stdin) {
		return nil, usagef("no %s given", what)
	}
	return scanWords(e.stdin, what)
}

// scanWords returns the words of r, separated by white space; none is a
// usage error.
func scanWords(r io.Reader, what string) ([]string, error) {
	var words []string
	sc := bufio.NewScanner(r)
	sc.Split(bufio.ScanWords)
	for sc.Scan() {
		words = append(words, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(words) == 0 {
		return nil, usagef("no %s given on the command line or standard input", what)
	}
	return words, nil
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
