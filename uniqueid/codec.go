package uniqueid

import "encoding/binary"

// Both layouts are encoded like base64 without padding: every three bytes
// become four characters, most significant bits first. The codec works on
// 48-bit chunks (six bytes, eight characters): a Classic record is three
// chunks; a Current record is three chunks and a two-byte tail, which
// becomes three characters whose last two bits are zero.

// The two alphabets share their first 62 symbols and differ in the last two:
// in the classic alphabet '-' is 63, in the current one '-' is 62.
const (
	classicAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789@-"
	currentAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
)

// invalidSym marks bytes outside an alphabet in the decoding tables. Valid
// symbols are below 64, so OR-ing the values of several characters and
// testing the top bits detects any invalid one.
const invalidSym = 0xff

var (
	classicEncode = [64]byte([]byte(classicAlphabet))
	currentEncode = [64]byte([]byte(currentAlphabet))
	classicDecode = decodeTable(classicAlphabet)
	currentDecode = decodeTable(currentAlphabet)
)

func decodeTable(alphabet string) [256]byte {
	var t [256]byte
	for i := range t {
		t[i] = invalidSym
	}
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = byte(i)
	}
	return t
}

// put48 writes the eight characters of the 48-bit value v to out[0:8].
func put48(out []byte, v uint64, enc *[64]byte) {
	_ = out[7]
	out[0] = enc[v>>42&63]
	out[1] = enc[v>>36&63]
	out[2] = enc[v>>30&63]
	out[3] = enc[v>>24&63]
	out[4] = enc[v>>18&63]
	out[5] = enc[v>>12&63]
	out[6] = enc[v>>6&63]
	out[7] = enc[v&63]
}

// putTail writes the three characters of a 16-bit tail: its bits followed
// by two zero bits.
func putTail(out []byte, v uint16, enc *[64]byte) {
	_ = out[2]
	t := uint32(v) << 2
	out[0] = enc[t>>12&63]
	out[1] = enc[t>>6&63]
	out[2] = enc[t&63]
}

// get48 decodes eight characters into a 48-bit value; ok is false if any
// is outside the alphabet.
func get48(s string, dec *[256]byte) (v uint64, ok bool) {
	_ = s[7]
	a, b, c, d := dec[s[0]], dec[s[1]], dec[s[2]], dec[s[3]]
	e, f, g, h := dec[s[4]], dec[s[5]], dec[s[6]], dec[s[7]]
	if (a|b|c|d|e|f|g|h)&0xc0 != 0 {
		return 0, false
	}
	v = uint64(a)<<42 | uint64(b)<<36 | uint64(c)<<30 | uint64(d)<<24 |
		uint64(e)<<18 | uint64(f)<<12 | uint64(g)<<6 | uint64(h)
	return v, true
}

// decodeChunks decodes the first 24 characters of s as three chunks.
func decodeChunks(s string, dec *[256]byte) (c0, c1, c2 uint64, ok bool) {
	_ = s[23]
	c0, ok0 := get48(s[0:8], dec)
	c1, ok1 := get48(s[8:16], dec)
	c2, ok2 := get48(s[16:24], dec)
	return c0, c1, c2, ok0 && ok1 && ok2
}

// decodeTail decodes three characters into 18 bits: the 16-bit tail and,
// in the low two bits, what should be zero padding.
func decodeTail(s string, dec *[256]byte) (v uint32, ok bool) {
	_ = s[2]
	a, b, c := dec[s[0]], dec[s[1]], dec[s[2]]
	if (a|b|c)&0xc0 != 0 {
		return 0, false
	}
	return uint32(a)<<12 | uint32(b)<<6 | uint32(c), true
}

// be48 reads six big-endian bytes.
func be48(b []byte) uint64 {
	_ = b[5]
	return uint64(binary.BigEndian.Uint32(b))<<16 | uint64(binary.BigEndian.Uint16(b[4:]))
}

// appendClassic appends the 24-character encoding of an 18-byte record.
func appendClassic(b []byte, raw *[classicRawLen]byte) []byte {
	b, out := extend(b, ClassicLen)
	put48(out[0:8], be48(raw[0:6]), &classicEncode)
	put48(out[8:16], be48(raw[6:12]), &classicEncode)
	put48(out[16:24], be48(raw[12:18]), &classicEncode)
	return b
}

// appendCurrent appends the 27-character encoding of a 20-byte record.
func appendCurrent(b []byte, raw *[currentRawLen]byte) []byte {
	b, out := extend(b, CurrentLen)
	put48(out[0:8], be48(raw[0:6]), &currentEncode)
	put48(out[8:16], be48(raw[6:12]), &currentEncode)
	put48(out[16:24], be48(raw[12:18]), &currentEncode)
	putTail(out[24:27], binary.BigEndian.Uint16(raw[18:20]), &currentEncode)
	return b
}

// extend lengthens b by n bytes, reallocating only if its capacity is too
// small, and returns the lengthened slice and its last n bytes, which the
// caller overwrites.
func extend(b []byte, n int) ([]byte, []byte) {
	l := len(b)
	if cap(b)-l < n {
		nb := make([]byte, l, 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	b = b[:l+n]
	return b, b[l:]
}
