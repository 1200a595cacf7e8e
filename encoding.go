package randflake

import (
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// The string form of an ID is its 64 bits as an unsigned number in
// base32hex (RFC 4648 alphabet 0-9a-v), lowercase, without leading zeros or
// padding: 1 to 13 characters. It is bit-exact with the reference.

const base32hexDigits = "0123456789abcdefghijklmnopqrstuv"

// maxEncodedLen is the length of the string form of the largest ID.
const maxEncodedLen = 13

// base32hexValues maps a byte to its digit value, or 0xff. Upper-case
// digits are accepted as the reference accepts them.
var base32hexValues = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i := 0; i < len(base32hexDigits); i++ {
		c := base32hexDigits[i]
		t[c] = byte(i)
		if c >= 'a' {
			t[c-'a'+'A'] = byte(i)
		}
	}
	return t
}()

// EncodeString returns the string form of id.
func EncodeString(id int64) string {
	var buf [maxEncodedLen]byte
	return string(appendEncoded(buf[:0], uint64(id)))
}

// AppendString appends the string form of id to dst.
func AppendString(dst []byte, id int64) []byte {
	return appendEncoded(dst, uint64(id))
}

func appendEncoded(dst []byte, v uint64) []byte {
	var buf [maxEncodedLen]byte
	i := len(buf)
	for {
		i--
		buf[i] = base32hexDigits[v&31]
		v >>= 5
		if v == 0 {
			break
		}
	}
	return append(dst, buf[i:]...)
}

// DecodeString parses the string form of an ID. It is strict where the
// reference is lenient: the empty string, more than 13 characters, a value
// that does not fit in 64 bits and any character outside 0-9, a-v (A-V)
// are an error that wraps ErrInvalidID (test it with errors.Is), quotes
// the input (its first 64 bytes) and says what is wrong with it.
func DecodeString(s string) (int64, error) {
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	v, ok := decodeBase32hex(b)
	if !ok {
		return 0, invalidID(b)
	}
	return int64(v), nil
}

// maxQuotedInput bounds the bytes of a rejected input that its error
// quotes, so that a huge input makes no huge message.
const maxQuotedInput = 64

// invalidIDError is ErrInvalidID for one input.
type invalidIDError struct {
	input  string // the input's first maxQuotedInput bytes at most, copied
	size   int    // the input's length in bytes
	reason string // what is wrong with it
}

// Error quotes the input, marks it cut if it was, and gives the reason.
func (e *invalidIDError) Error() string {
	q := strconv.Quote(e.input)
	if e.size > len(e.input) {
		q += "... (" + strconv.Itoa(e.size) + " bytes)"
	}
	return ErrInvalidID.Error() + " " + q + ": " + e.reason
}

// Unwrap returns ErrInvalidID.
func (e *invalidIDError) Unwrap() error { return ErrInvalidID }

// invalidID returns the error for b, which decodeBase32hex refused. It
// copies what it quotes: b may be the caller's buffer.
func invalidID(b []byte) error {
	e := &invalidIDError{size: len(b)}
	n := min(len(b), maxQuotedInput)
	for n < len(b) && n > 0 && !utf8.RuneStart(b[n]) {
		n-- // cut before a character, not inside one
	}
	e.input = string(b[:n])
	switch {
	case len(b) == 0:
		e.reason = "empty"
	case len(b) > maxEncodedLen:
		e.reason = "longer than the 13 characters of the longest ID"
	default:
		e.reason = "a value over 64 bits (an ID of 13 characters begins with 0-f)"
		for i, c := range b {
			if base32hexValues[c] == 0xff {
				e.reason = "byte " + strconv.Itoa(i) + " (" + strconv.Quote(string(b[i:i+1])) + ") is not a base32hex digit (0-9, a-v)"
				break
			}
		}
	}
	return e
}

func decodeBase32hex(s []byte) (uint64, bool) {
	if len(s) == 0 || len(s) > maxEncodedLen {
		return 0, false
	}
	// 13 digits hold 65 bits: the first of 13 must be below 16.
	if len(s) == maxEncodedLen && base32hexValues[s[0]] >= 16 {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		d := base32hexValues[c]
		if d == 0xff {
			return 0, false
		}
		v = v<<5 | uint64(d)
	}
	return v, true
}

// stringOf is the string form of a generated ID, passing an error on: the
// GenerateString of every generator.
func stringOf(id int64, err error) (string, error) {
	if err != nil {
		return "", err
	}
	return EncodeString(id), nil
}
