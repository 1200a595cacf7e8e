package fuzz

import (
	"encoding/binary"
	"testing"

	"github.com/randflake/randflake"
)

// idsFromBytes reads little-endian uint64s; the remainder of data is
// ignored.
func idsFromBytes(data []byte) []uint64 {
	ids := make([]uint64, len(data)/8)
	for i := range ids {
		ids[i] = binary.LittleEndian.Uint64(data[8*i:])
	}
	return ids
}

// FuzzEncryptIDs checks the selected batch kernel against the scalar
// cipher for any key, any batch length and any offset into the batch, and
// that decryption inverts it, in place and not.
func FuzzEncryptIDs(f *testing.F) {
	f.Add(make([]byte, 16), make([]byte, 8*33), uint8(0))
	f.Add([]byte("0123456789abcdef"), make([]byte, 8*100+3), uint8(5))
	f.Fuzz(func(t *testing.T, key, data []byte, off uint8) {
		s, err := randflake.NewSparx64(key)
		if len(key) != 16 {
			if err == nil {
				t.Fatalf("%d-byte key accepted", len(key))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		ids := idsFromBytes(data)
		o := int(off) % (len(ids) + 1)
		src := ids[o:]
		dst := make([]uint64, len(src))
		s.EncryptIDs(dst, src)
		for i, x := range src {
			if want := s.EncryptID(x); dst[i] != want {
				t.Fatalf("kernel %s, n=%d: ID %d: %#x, want %#x", randflake.Kernel(), len(src), i, dst[i], want)
			}
		}
		back := append([]uint64(nil), dst...)
		s.DecryptIDs(back, back)
		for i := range back {
			if back[i] != src[i] {
				t.Fatalf("kernel %s, n=%d: round trip of ID %d failed", randflake.Kernel(), len(src), i)
			}
		}
	})
}
