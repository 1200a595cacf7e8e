package randflake

import (
	"encoding/binary"
	"testing"
)

// FuzzEncryptIDs checks every batch kernel this CPU can run against the
// scalar cipher for any key, any batch length and any offset into the
// batch, and that decryption inverts it, in place and not.
func FuzzEncryptIDs(f *testing.F) {
	f.Add(make([]byte, 16), make([]byte, 8*33), uint8(0))
	f.Add([]byte("0123456789abcdef"), make([]byte, 8*100+3), uint8(5))
	f.Fuzz(func(t *testing.T, key, data []byte, off uint8) {
		s, err := NewSparx64(key)
		if len(key) != 16 {
			if err == nil {
				t.Fatalf("%d-byte key accepted", len(key))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]uint64, len(data)/8)
		for i := range ids {
			ids[i] = binary.LittleEndian.Uint64(data[8*i:])
		}
		src := ids[int(off)%(len(ids)+1):]
		for _, k := range kernels() {
			kernelsRun.Store(k.name, true)
			dst := make([]uint64, len(src))
			k.encrypt(s, dst, src)
			for i, x := range src {
				if want := s.EncryptID(x); dst[i] != want {
					t.Fatalf("kernel %s, n=%d: ID %d: %#x, want %#x", k.name, len(src), i, dst[i], want)
				}
			}
			back := append([]uint64(nil), dst...)
			k.decrypt(s, back, back)
			for i := range back {
				if back[i] != src[i] {
					t.Fatalf("kernel %s, n=%d: round trip of ID %d failed", k.name, len(src), i)
				}
			}
		}
	})
}
