package randflake

import "unsafe"

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
// return ErrInvalidID.
func DecodeString(s string) (int64, error) {
	v, ok := decodeBase32hex(unsafe.Slice(unsafe.StringData(s), len(s)))
	if !ok {
		return 0, ErrInvalidID
	}
	return int64(v), nil
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
