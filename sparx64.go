package randflake

import (
	"crypto/cipher"
	"encoding/binary"
	"strconv"
)

// Sparx64BlockSize is the Sparx-64/128 block size in bytes.
const Sparx64BlockSize = 8

// Sparx64KeySize is the Sparx-64/128 key size in bytes.
const Sparx64KeySize = 16

const (
	sparxSteps    = 8                         // steps of the 64-bit variant
	sparxRounds   = 3                         // rounds per step and branch
	sparxRoundKey = 2 * sparxRounds           // 16-bit words of key per branch and step
	sparxKeys     = 2*sparxSteps + 1          // 16 branch keys and the final whitening key
	roundKeyWords = sparxKeys * sparxRoundKey // 102
)

// Sparx64 is the Sparx-64/128 block cipher (Dinu et al., ASIACRYPT 2016) with
// an expanded key. It implements crypto/cipher.Block with the byte order of
// the specification, and offers batch entry points on 64-bit IDs that run on
// the fastest kernel this CPU supports (see Kernel).
//
// A Sparx64 is safe for concurrent use: it is never modified after
// NewSparx64 returns.
type Sparx64 struct {
	// rk holds the round keys in schedule order: 17 groups of six 16-bit
	// words, branch keys for step s at groups 2s (left) and 2s+1 (right),
	// whitening key at group 16.
	rk [roundKeyWords]uint16
	// rk32 repeats each round key word in both halves of a 32-bit word, so
	// SIMD kernels can broadcast it with a single 32-bit load.
	rk32 [roundKeyWords]uint32
}

var _ cipher.Block = (*Sparx64)(nil)

// NewSparx64 expands a 16-byte key. Any other length returns an error
// that wraps ErrInvalidSecret and says the length.
func NewSparx64(key []byte) (*Sparx64, error) {
	if len(key) != Sparx64KeySize {
		return nil, keySizeError(len(key))
	}
	s := new(Sparx64)
	var k [8]uint16
	for i := range k {
		k[i] = binary.BigEndian.Uint16(key[2*i:])
	}
	for c := 0; c < sparxKeys; c++ {
		copy(s.rk[c*sparxRoundKey:], k[:sparxRoundKey])
		// Key permutation of Sparx-64/128.
		k[0], k[1] = arx(k[0], k[1])
		k[2] += k[0]
		k[3] += k[1]
		k[7] += uint16(c + 1)
		k = [8]uint16{k[6], k[7], k[0], k[1], k[2], k[3], k[4], k[5]}
	}
	for i, w := range s.rk {
		s.rk32[i] = uint32(w) | uint32(w)<<16
	}
	return s, nil
}

type keySizeError int

func (e keySizeError) Error() string {
	return "randflake: Sparx-64/128 key must be 16 bytes, got " + strconv.Itoa(int(e))
}

func (e keySizeError) Is(target error) bool { return target == ErrInvalidSecret }

// BlockSize returns the cipher's block size, 8 bytes.
func (s *Sparx64) BlockSize() int { return Sparx64BlockSize }

// Encrypt encrypts the first block of src into dst. dst and src may overlap
// entirely. Like the standard library's block ciphers it panics if either is
// shorter than a block; the ID entry points never panic.
func (s *Sparx64) Encrypt(dst, src []byte) { s.block(dst, src, encryptBlock) }

// Decrypt decrypts the first block of src into dst. dst and src may overlap
// entirely. It panics if either is shorter than a block.
func (s *Sparx64) Decrypt(dst, src []byte) { s.block(dst, src, decryptBlock) }

// block runs one direction of the cipher on the first block of src, read
// and written in the specification's big-endian byte order.
func (s *Sparx64) block(dst, src []byte, f func(rk *[roundKeyWords]uint16, x0, x1, x2, x3 uint16) (uint16, uint16, uint16, uint16)) {
	if len(src) < Sparx64BlockSize || len(dst) < Sparx64BlockSize {
		panic("randflake: Sparx64 input or output not a full block")
	}
	x0, x1, x2, x3 := f(&s.rk,
		binary.BigEndian.Uint16(src[0:]), binary.BigEndian.Uint16(src[2:]),
		binary.BigEndian.Uint16(src[4:]), binary.BigEndian.Uint16(src[6:]))
	binary.BigEndian.PutUint16(dst[0:], x0)
	binary.BigEndian.PutUint16(dst[2:], x1)
	binary.BigEndian.PutUint16(dst[4:], x2)
	binary.BigEndian.PutUint16(dst[6:], x3)
}

// EncryptID encrypts one ID the way Randflake does: the ID's eight bytes in
// little-endian order form the block.
func (s *Sparx64) EncryptID(id uint64) uint64 {
	x0, x1, x2, x3 := unpackID(id)
	return packID(encryptBlock(&s.rk, x0, x1, x2, x3))
}

// DecryptID is the inverse of EncryptID.
func (s *Sparx64) DecryptID(id uint64) uint64 {
	x0, x1, x2, x3 := unpackID(id)
	return packID(decryptBlock(&s.rk, x0, x1, x2, x3))
}

// EncryptIDs encrypts min(len(dst), len(src)) IDs from src into dst with
// the selected kernel. Each ID is mapped to a block as in EncryptID. dst may
// alias src exactly; partial overlap gives unspecified results. It does not
// allocate.
func (s *Sparx64) EncryptIDs(dst, src []uint64) {
	n := min(len(dst), len(src))
	activeKernel.run(s, dst[:n], src[:n], false)
}

// DecryptIDs decrypts min(len(dst), len(src)) IDs from src into dst; it is
// the inverse of EncryptIDs, with the same aliasing rules.
func (s *Sparx64) DecryptIDs(dst, src []uint64) {
	n := min(len(dst), len(src))
	activeKernel.run(s, dst[:n], src[:n], true)
}

// unpackID maps an ID to the four big-endian 16-bit words of its
// little-endian byte representation.
func unpackID(id uint64) (x0, x1, x2, x3 uint16) {
	return bswap16(uint16(id)), bswap16(uint16(id >> 16)),
		bswap16(uint16(id >> 32)), bswap16(uint16(id >> 48))
}

func packID(x0, x1, x2, x3 uint16) uint64 {
	return uint64(bswap16(x0)) | uint64(bswap16(x1))<<16 |
		uint64(bswap16(x2))<<32 | uint64(bswap16(x3))<<48
}

func bswap16(x uint16) uint16 { return x<<8 | x>>8 }
