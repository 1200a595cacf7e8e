package randflake

import (
	"bytes"
	"crypto/cipher"
	"math/rand/v2"
	"testing"
)

// The crypto/cipher.Block contract, checked the way the standard library
// checks its own block ciphers: block size, round trips, in-place use,
// inputs left alone, only the first block touched, the key copied at
// construction, and short buffers refused.
func TestBlockContract(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	key := random(Sparx64KeySize)
	var b cipher.Block = mustCipher(t, key)
	if b.BlockSize() != Sparx64BlockSize {
		t.Fatalf("BlockSize() = %d, want %d", b.BlockSize(), Sparx64BlockSize)
	}
	for i := 0; i < 200; i++ {
		src := random(Sparx64BlockSize)
		orig := bytes.Clone(src)
		enc := make([]byte, Sparx64BlockSize)
		b.Encrypt(enc, src)
		if !bytes.Equal(src, orig) {
			t.Fatalf("Encrypt modified its input")
		}
		dec := make([]byte, Sparx64BlockSize)
		b.Decrypt(dec, enc)
		if !bytes.Equal(dec, src) {
			t.Fatalf("Decrypt(Encrypt(%x)) = %x", src, dec)
		}
		// In place.
		buf := bytes.Clone(src)
		b.Encrypt(buf, buf)
		if !bytes.Equal(buf, enc) {
			t.Fatalf("in-place Encrypt gave %x, want %x", buf, enc)
		}
		b.Decrypt(buf, buf)
		if !bytes.Equal(buf, src) {
			t.Fatalf("in-place Decrypt gave %x, want %x", buf, src)
		}
		// Longer buffers: only the first block is read and written.
		long := append(bytes.Clone(src), random(11)...)
		out := random(Sparx64BlockSize + 9)
		tail := bytes.Clone(out[Sparx64BlockSize:])
		b.Encrypt(out, long)
		if !bytes.Equal(out[:Sparx64BlockSize], enc) || !bytes.Equal(out[Sparx64BlockSize:], tail) {
			t.Fatalf("Encrypt with longer buffers: %x, want %x then the untouched %x", out, enc, tail)
		}
		b.Decrypt(out, out)
		if !bytes.Equal(out[:Sparx64BlockSize], src) || !bytes.Equal(out[Sparx64BlockSize:], tail) {
			t.Fatalf("Decrypt with longer buffers touched more than a block")
		}
	}
	// The key is copied: changing it afterwards changes nothing.
	src := random(Sparx64BlockSize)
	before := make([]byte, Sparx64BlockSize)
	b.Encrypt(before, src)
	for i := range key {
		key[i] ^= 0xff
	}
	after := make([]byte, Sparx64BlockSize)
	b.Encrypt(after, src)
	if !bytes.Equal(before, after) {
		t.Fatal("changing the key slice after NewSparx64 changed the cipher")
	}
	// Short buffers panic, like the standard library's block ciphers.
	for _, c := range []struct {
		name     string
		dst, src int
	}{{"short src", 8, 7}, {"short dst", 7, 8}, {"empty", 0, 0}} {
		for _, op := range []struct {
			name string
			f    func(dst, src []byte)
		}{{"Encrypt", b.Encrypt}, {"Decrypt", b.Decrypt}} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s with %s did not panic", op.name, c.name)
					}
				}()
				op.f(make([]byte, c.dst), make([]byte, c.src))
			}()
		}
	}
}
