package uniqueid

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"time"
	"unicode/utf8"
)

// Layout identifies one of the two token layouts that mod_unique_id has
// produced over its history. The zero value is not a valid layout.
type Layout uint8

const (
	// Classic is the layout described by the mod_unique_id documentation:
	// 18 bytes (timestamp, IPv4 address, process ID, counter, thread index)
	// encoded as 24 characters from the alphabet A-Z a-z 0-9 @ -.
	Classic Layout = 1 + iota

	// Current is the layout emitted by Apache httpd 2.4 today: 20 bytes
	// (timestamp, 10-byte random root, counter, thread index) encoded as
	// 27 characters of unpadded URL-safe base64 (A-Z a-z 0-9 - _).
	Current
)

// Encoded and raw sizes of the two layouts.
const (
	ClassicLen = 24 // characters in a Classic token
	CurrentLen = 27 // characters in a Current token

	classicRawLen = 18
	currentRawLen = 20

	// RootLen is the size of the per-process random root of the Current
	// layout.
	RootLen = 10
)

// String returns "classic", "current" or, for any other value, a
// description of the invalid layout.
func (l Layout) String() string {
	switch l {
	case Classic:
		return "classic"
	case Current:
		return "current"
	}
	return fmt.Sprintf("Layout(%d)", uint8(l))
}

// EncodedLen returns the length in characters of a token of layout l, or 0
// if l is not a valid layout.
func (l Layout) EncodedLen() int {
	switch l {
	case Classic:
		return ClassicLen
	case Current:
		return CurrentLen
	}
	return 0
}

// ErrMalformed is the error wrapped by every failure of Parse and
// Token.UnmarshalText. Test for it with errors.Is.
var ErrMalformed = errors.New("uniqueid: malformed token")

// ErrInvalidToken is wrapped by Token.MarshalText and Token.AppendText when
// a Token's fields cannot be represented in its layout.
var ErrInvalidToken = errors.New("uniqueid: token cannot be encoded")

// Token is a decoded mod_unique_id token.
//
// Addr and PID are set only for the Classic layout and Root only for the
// Current layout; encoding ignores the fields of the other layout.
type Token struct {
	// Layout is the layout the token was parsed from or is to be encoded in.
	Layout Layout

	// Time is the token's timestamp, with a resolution of one second. Parse
	// returns it in UTC. Encoding truncates it to the second and requires
	// it to lie between 1970-01-01T00:00:00Z and 2106-02-07T06:28:15Z, the
	// range of the 32-bit unsigned field.
	Time time.Time

	// Counter is the 16-bit per-process counter.
	Counter uint16

	// ThreadIndex is the 32-bit thread index: in httpd 2.4 the connection
	// ID, in this package's generators the extension of the counter (see
	// the package documentation).
	ThreadIndex uint32

	// Addr is the IPv4 address of the machine (Classic only).
	Addr netip.Addr

	// PID is the ID of the process that made the token (Classic only).
	PID uint32

	// Root is the random per-process root (Current only).
	Root [RootLen]byte
}

// Parse decodes a token of either layout. The layout is recognised by the
// length of s (24 characters for Classic, 27 for Current) and every
// character must belong to that layout's alphabet. For the Current layout
// the two unused low bits of the last character must be zero, so that
// every token that Parse accepts is re-encoded byte for byte by
// Token.String.
//
// Every error returned wraps ErrMalformed.
// Parse decodes a token of either layout. The layout is recognised by the
// length of s (24 characters for Classic, 27 for Current) and every
// character must belong to that layout's alphabet. For the Current layout
// the two unused low bits of the last character must be zero, so that
// every token that Parse accepts is re-encoded byte for byte by
// Token.String.
//
// Every error returned wraps ErrMalformed.
func Parse(s string) (Token, error) {
	switch len(s) {
	case ClassicLen:
		c0, c1, c2, ok := decodeChunks(s, &classicDecode)
		if !ok {
			return Token{}, malformed(s, Classic)
		}
		return Token{
			Layout:      Classic,
			Time:        time.Unix(int64(c0>>16), 0).UTC(),
			Addr:        netip.AddrFrom4([4]byte{byte(c0 >> 8), byte(c0), byte(c1 >> 40), byte(c1 >> 32)}),
			PID:         uint32(c1),
			Counter:     uint16(c2 >> 32),
			ThreadIndex: uint32(c2),
		}, nil
	case CurrentLen:
		c0, c1, c2, ok := decodeChunks(s, &currentDecode)
		tail, tok := decodeTail(s[24:27], &currentDecode)
		if !ok || !tok || tail&3 != 0 {
			return Token{}, malformed(s, Current)
		}
		var root [RootLen]byte
		root[0], root[1] = byte(c0>>8), byte(c0)
		binary.BigEndian.PutUint16(root[2:4], uint16(c1>>32))
		binary.BigEndian.PutUint32(root[4:8], uint32(c1))
		binary.BigEndian.PutUint16(root[8:10], uint16(c2>>32))
		return Token{
			Layout:      Current,
			Time:        time.Unix(int64(c0>>16), 0).UTC(),
			Root:        root,
			Counter:     uint16(c2 >> 16),
			ThreadIndex: uint32(c2&0xffff)<<16 | tail>>2,
		}, nil
	}
	return Token{}, fmt.Errorf("%w: length %d, want %d (classic) or %d (current)",
		ErrMalformed, len(s), ClassicLen, CurrentLen)
}

// Valid reports whether s is a well-formed token of either layout, that is
// whether Parse accepts it.
func Valid(s string) bool {
	switch len(s) {
	case ClassicLen:
		_, _, _, ok := decodeChunks(s, &classicDecode)
		return ok
	case CurrentLen:
		_, _, _, ok := decodeChunks(s, &currentDecode)
		tail, tok := decodeTail(s[24:27], &currentDecode)
		return ok && tok && tail&3 == 0
	}
	return false
}

// malformed explains why s, of the right length for layout, was rejected.
func malformed(s string, layout Layout) error {
	table := &classicDecode
	if layout == Current {
		table = &currentDecode
	}
	for i := 0; i < len(s); i++ {
		if table[s[i]] == invalidSym {
			return badSymbol(s, i, layout)
		}
	}
	return fmt.Errorf("%w: final character %q has non-zero unused bits (not a canonical %s token)",
		ErrMalformed, s[len(s)-1], layout)
}

func badSymbol(s string, i int, layout Layout) error {
	c := s[i]
	hint := ""
	switch {
	case layout == Classic && c == '_':
		hint = "; '_' occurs only in current tokens, which are 27 characters long"
	case layout == Current && c == '@':
		hint = "; '@' occurs only in classic tokens, which are 24 characters long"
	}
	alphabet := "A-Z a-z 0-9 @ -"
	if layout == Current {
		alphabet = "A-Z a-z 0-9 - _"
	}
	return fmt.Errorf("%w: character %s at offset %d is not in the %s alphabet (%s)%s",
		ErrMalformed, quoteByte(c), i, layout, alphabet, hint)
}

// quoteByte quotes c as a Go character literal, showing bytes that are not
// ASCII as hexadecimal escapes rather than as Latin-1 characters.
func quoteByte(c byte) string {
	if c >= utf8.RuneSelf {
		return fmt.Sprintf(`'\x%02x'`, c)
	}
	return strconv.QuoteRune(rune(c))
}

// raw writes the binary form of t into dst and returns its length. dst must
// hold at least 20 bytes.
func (t Token) raw(dst *[currentRawLen]byte) (int, error) {
	sec := t.Time.Unix()
	if t.Time.IsZero() || sec < 0 || sec > math.MaxUint32 {
		return 0, fmt.Errorf("%w: time %v outside the 32-bit timestamp range", ErrInvalidToken, t.Time)
	}
	binary.BigEndian.PutUint32(dst[0:4], uint32(sec))
	switch t.Layout {
	case Classic:
		a := t.Addr.Unmap()
		if !a.Is4() {
			return 0, fmt.Errorf("%w: classic token needs an IPv4 address, have %v", ErrInvalidToken, t.Addr)
		}
		a4 := a.As4()
		copy(dst[4:8], a4[:])
		binary.BigEndian.PutUint32(dst[8:12], t.PID)
		binary.BigEndian.PutUint16(dst[12:14], t.Counter)
		binary.BigEndian.PutUint32(dst[14:18], t.ThreadIndex)
		return classicRawLen, nil
	case Current:
		copy(dst[4:14], t.Root[:])
		binary.BigEndian.PutUint16(dst[14:16], t.Counter)
		binary.BigEndian.PutUint32(dst[16:20], t.ThreadIndex)
		return currentRawLen, nil
	}
	return 0, fmt.Errorf("%w: invalid layout %v", ErrInvalidToken, t.Layout)
}

// AppendText appends the textual form of t to b. It fails, wrapping
// ErrInvalidToken, if t has an invalid Layout, a Time outside the 32-bit
// range, or (Classic) an Addr that is not IPv4.
func (t Token) AppendText(b []byte) ([]byte, error) {
	var raw [currentRawLen]byte
	n, err := t.raw(&raw)
	if err != nil {
		return b, err
	}
	if n == classicRawLen {
		return appendClassic(b, (*[classicRawLen]byte)(raw[:])), nil
	}
	return appendCurrent(b, &raw), nil
}

// MarshalText implements encoding.TextMarshaler; see AppendText.
func (t Token) MarshalText() ([]byte, error) {
	return t.AppendText(make([]byte, 0, CurrentLen))
}

// UnmarshalText implements encoding.TextUnmarshaler using Parse.
func (t *Token) UnmarshalText(text []byte) error {
	tok, err := Parse(string(text))
	if err != nil {
		return err
	}
	*t = tok
	return nil
}

// String returns the token in its layout's textual form. For a token
// returned by Parse it is exactly the parsed input. If t cannot be encoded
// (see AppendText) String returns the empty string.
func (t Token) String() string {
	var buf [CurrentLen]byte
	b, err := t.AppendText(buf[:0])
	if err != nil {
		return ""
	}
	return string(b)
}
