package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// maxItem is the most of one input item (a word, or a JSON value) that
// inspect and uniqueid parse keep: no ID or token comes near it, so a
// longer item is reported by its first maxItem bytes and its length, and
// memory stays bounded whatever the input.
const maxItem = 256

// item is one ID or token read from standard input.
type item struct {
	text string // the item, or its first maxItem bytes
	size int64  // its length in bytes, if longer than maxItem; else 0
}

// itemReader reads items from standard input one at a time, so that
// inspect and uniqueid parse run in bounded memory whatever the input's
// size: words separated by white space, or (with json) a sequence of JSON
// arrays, whose strings are given back as they are, numbers with a "+"
// before them (decimal IDs), and other values as "JSON VALUE", which is
// not an ID.
type itemReader struct {
	r       *bufio.Reader
	what    string // what the items are, for messages: IDs, tokens
	json    bool
	inArray bool  // inside a top-level JSON array
	first   bool  // at the array's first value: no comma before it
	off     int64 // bytes read so far, for syntax errors
	buf     []byte
	// idle, if set, is called before the reader waits for more input:
	// the caller flushes its output, so that a slow producer's IDs show
	// as they come.
	idle func()
}

// newItemReader returns a reader of the items of r: JSON arrays if r
// begins with "[" (after white space), else words.
func newItemReader(r io.Reader, what string, allowJSON bool, idle func()) (*itemReader, error) {
	ir := &itemReader{r: bufio.NewReaderSize(r, 64<<10), what: what, buf: make([]byte, 0, maxItem), idle: idle}
	if allowJSON {
		c, err := ir.peekNonSpace()
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		ir.json = err == nil && c == '['
	}
	return ir, nil
}

// readByte reads one byte, calling idle first when none is buffered.
func (ir *itemReader) readByte() (byte, error) {
	if ir.r.Buffered() == 0 && ir.idle != nil {
		ir.idle()
	}
	c, err := ir.r.ReadByte()
	if err == nil {
		ir.off++
	}
	return c, err
}

func (ir *itemReader) unreadByte() {
	ir.r.UnreadByte()
	ir.off--
}

// peekNonSpace skips ASCII white space and returns the next byte, unread.
func (ir *itemReader) peekNonSpace() (byte, error) {
	for {
		c, err := ir.readByte()
		if err != nil {
			return 0, err
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			ir.unreadByte()
			return c, nil
		}
	}
}

// keep appends c to the item being read, up to maxItem bytes.
func (ir *itemReader) keep(c byte) {
	if len(ir.buf) < maxItem {
		ir.buf = append(ir.buf, c)
	}
}

// next returns the next item; io.EOF at the end of the input. Any other
// error ends the input (malformed JSON).
func (ir *itemReader) next() (item, error) {
	if ir.json {
		return ir.nextJSON()
	}
	return ir.nextWord()
}

// nextWord reads a word: what lies between white space, as
// bufio.ScanWords separates them.
func (ir *itemReader) nextWord() (item, error) {
	ir.buf = ir.buf[:0]
	var n int64
	for {
		c, err := ir.readByte()
		if err != nil {
			if errors.Is(err, io.EOF) && n > 0 {
				return ir.done(n), nil
			}
			return item{}, err
		}
		if c < utf8.RuneSelf {
			if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' {
				if n > 0 {
					return ir.done(n), nil
				}
				continue
			}
			ir.keep(c)
			n++
			continue
		}
		// A multi-byte sequence: white space if it is a Unicode space.
		ir.unreadByte()
		seq, _ := ir.r.Peek(utf8.UTFMax)
		r, size := utf8.DecodeRune(seq)
		if r != utf8.RuneError && unicode.IsSpace(r) {
			ir.r.Discard(size)
			ir.off += int64(size)
			if n > 0 {
				return ir.done(n), nil
			}
			continue
		}
		if r == utf8.RuneError {
			size = 1 // an invalid byte is part of the word, as in ScanWords
		}
		for range size {
			c, _ := ir.readByte()
			ir.keep(c)
			n++
		}
	}
}

// done returns the item read, of n bytes.
func (ir *itemReader) done(n int64) item {
	it := item{text: string(ir.buf)}
	if n > maxItem {
		it.size = n
	}
	return it
}

// syntaxError is malformed JSON at byte off of the input.
func (ir *itemReader) syntaxError(msg string) error {
	return fmt.Errorf("%s at byte %d", msg, ir.off)
}

// unexpected is the error for byte c where it does not belong.
func (ir *itemReader) unexpected(c byte, where string) error {
	return ir.syntaxError(fmt.Sprintf("invalid character %s %s", quoteByte(c), where))
}

// eofError turns the end of the input inside a value into
// io.ErrUnexpectedEOF.
func eofError(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// nextJSON reads the next value of the arrays.
func (ir *itemReader) nextJSON() (item, error) {
	for {
		c, err := ir.peekNonSpace()
		if !ir.inArray {
			if err != nil {
				return item{}, err // io.EOF between arrays: the end
			}
			ir.readByte()
			if c != '[' {
				return item{}, ir.unexpected(c, "outside an array (want '[')")
			}
			ir.inArray, ir.first = true, true
			continue
		}
		if err != nil {
			return item{}, eofError(err)
		}
		if c == ']' {
			ir.readByte()
			ir.inArray = false
			continue
		}
		if !ir.first {
			if c != ',' {
				ir.readByte()
				return item{}, ir.unexpected(c, "after an array element (want ',' or ']')")
			}
			ir.readByte()
			if c, err = ir.peekNonSpace(); err != nil {
				return item{}, eofError(err)
			}
		}
		ir.first = false
		return ir.value(c)
	}
}

// value reads the JSON value that begins with c, unread.
func (ir *itemReader) value(c byte) (item, error) {
	ir.buf = ir.buf[:0]
	switch {
	case c == '"':
		n, err := ir.scanString()
		if err != nil {
			return item{}, err
		}
		if n > maxItem {
			// Too long to be an ID: its beginning, without the quote.
			return item{text: string(ir.buf[1:]), size: n - 2}, nil
		}
		var s string
		if err := json.Unmarshal(ir.buf, &s); err != nil {
			return item{}, ir.syntaxError(fmt.Sprintf("invalid string %s", quoteBytes(ir.buf)))
		}
		return item{text: s}, nil
	case c == '-' || '0' <= c && c <= '9':
		n, err := ir.scanWhile(func(c byte) bool {
			return c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' || '0' <= c && c <= '9'
		})
		if err != nil {
			return item{}, err
		}
		if n > maxItem || !json.Valid(ir.buf) {
			return item{}, ir.syntaxError(fmt.Sprintf("invalid number %s", quoteBytes(ir.buf)))
		}
		return item{text: "+" + string(ir.buf)}, nil
	case c == 't' || c == 'f' || c == 'n':
		n, err := ir.scanWhile(func(c byte) bool { return 'a' <= c && c <= 'z' })
		if err != nil {
			return item{}, err
		}
		if s := string(ir.buf); n > 5 || s != "true" && s != "false" && s != "null" {
			return item{}, ir.syntaxError(fmt.Sprintf("invalid literal %s", quoteBytes(ir.buf)))
		}
		return item{text: "JSON " + string(ir.buf)}, nil
	case c == '[' || c == '{':
		n, err := ir.scanNested()
		if err != nil {
			return item{}, err
		}
		if n > maxItem {
			return item{text: "JSON " + string(ir.buf), size: n + 5}, nil
		}
		var b bytes.Buffer
		if err := json.Compact(&b, ir.buf); err != nil {
			return item{}, ir.syntaxError(fmt.Sprintf("invalid JSON value %s: %v", quoteBytes(ir.buf), err))
		}
		return item{text: "JSON " + b.String()}, nil
	}
	ir.readByte()
	return item{}, ir.unexpected(c, "looking for the beginning of a value")
}

// scanWhile reads the bytes for which ok holds, keeping up to maxItem,
// and returns their number. The end of the input ends them too.
func (ir *itemReader) scanWhile(ok func(byte) bool) (int64, error) {
	var n int64
	for {
		c, err := ir.readByte()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if !ok(c) {
			ir.unreadByte()
			return n, nil
		}
		ir.keep(c)
		n++
	}
}

// scanString reads a JSON string, quotes included, keeping up to maxItem
// bytes, and returns its length.
func (ir *itemReader) scanString() (int64, error) {
	c, _ := ir.readByte() // the opening quote
	ir.keep(c)
	n := int64(1)
	var str inString
	for {
		c, err := ir.nextKept()
		if err != nil {
			return n, err
		}
		n++
		if str.ends(c) {
			return n, nil
		}
	}
}

// scanNested reads a JSON array or object, keeping up to maxItem bytes,
// and returns its length. Its syntax is checked only if it is kept whole.
func (ir *itemReader) scanNested() (int64, error) {
	var n int64
	depth := 0
	var str *inString // inside a string: its state
	for {
		c, err := ir.nextKept()
		if err != nil {
			return n, err
		}
		n++
		switch {
		case str != nil:
			if str.ends(c) {
				str = nil
			}
		case c == '"':
			str = &inString{}
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			if depth--; depth == 0 {
				return n, nil
			}
		}
	}
}

// nextKept reads one more byte of a value and keeps it; the input's end
// is an error (eofError).
func (ir *itemReader) nextKept() (byte, error) {
	c, err := ir.readByte()
	if err != nil {
		return 0, eofError(err)
	}
	ir.keep(c)
	return c, nil
}

// inString follows a JSON string, its opening quote read, byte by byte.
type inString struct{ escaped bool }

// ends reports whether c, the string's next byte, is its closing quote.
func (s *inString) ends(c byte) bool {
	switch {
	case s.escaped:
		s.escaped = false
	case c == '\\':
		s.escaped = true
	case c == '"':
		return true
	}
	return false
}

// quoteByte quotes c as a Go character literal, bytes that are not ASCII
// as hexadecimal escapes.
func quoteByte(c byte) string {
	if c >= utf8.RuneSelf {
		return fmt.Sprintf(`'\x%02x'`, c)
	}
	return strconv.QuoteRune(rune(c))
}

// quoteBytes quotes b as a Go string literal.
func quoteBytes(b []byte) string { return strconv.Quote(string(b)) }

// echo is input text as messages show it: as it is when it is printable
// UTF-8, else quoted, with control characters (NUL, ESC, ...) and invalid
// UTF-8 escaped, so that input never reaches a terminal raw.
func echo(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// echoItem is it as messages show it: echo of its text, and for a
// truncated item, its length.
func echoItem(it item) string {
	if it.size == 0 {
		return echo(it.text)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(it.text), it.size)
}

// argItems returns the items of the command line, one at a time, then
// io.EOF.
func argItems(args []string) func() (item, error) {
	return func() (item, error) {
		if len(args) == 0 {
			return item{}, io.EOF
		}
		it := item{text: args[0]}
		args = args[1:]
		return it, nil
	}
}

// stdinItems returns the reader of the items of standard input, unless it
// is a terminal: JSON arrays (if allowJSON) when the input begins with
// "[", else words separated by white space. idle is called before a wait
// for input.
func stdinItems(e *env, what string, allowJSON bool, idle func()) (*itemReader, error) {
	if e.isTerminal(e.stdin) {
		return nil, usagef("no %s given", what)
	}
	return newItemReader(e.stdin, what, allowJSON, idle)
}

// nextWrapped is next, with errors that name standard input.
func (ir *itemReader) nextWrapped() (item, error) {
	it, err := ir.next()
	if err != nil && !errors.Is(err, io.EOF) {
		if ir.json {
			return it, fmt.Errorf("standard input: want JSON arrays of %s: %w", ir.what, err)
		}
		return it, fmt.Errorf("standard input: %w", err)
	}
	return it, err
}
