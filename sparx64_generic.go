package randflake

import "math/bits"

// This file holds the portable Sparx-64/128 implementation. It is the
// reference every SIMD kernel is tested against, the kernel used with the
// purego build tag and on architectures without assembly, and the tail
// handler for batches shorter than a SIMD kernel's width.

// arx is the Sparx round function A: one keyless round of Speck-32.
func arx(l, r uint16) (uint16, uint16) {
	l = bits.RotateLeft16(l, 9) + r
	r = bits.RotateLeft16(r, 2) ^ l
	return l, r
}

// arxInv is the inverse of arx.
func arxInv(l, r uint16) (uint16, uint16) {
	r = bits.RotateLeft16(r^l, 14)
	l = bits.RotateLeft16(l-r, 7)
	return l, r
}

// encryptBlock encrypts one block held as four 16-bit words.
func encryptBlock(rk *[roundKeyWords]uint16, x0, x1, x2, x3 uint16) (uint16, uint16, uint16, uint16) {
	for s := 0; s < sparxSteps; s++ {
		k := (*[2 * sparxRoundKey]uint16)(rk[2*sparxRoundKey*s:])
		x0, x1 = arx(x0^k[0], x1^k[1])
		x0, x1 = arx(x0^k[2], x1^k[3])
		x0, x1 = arx(x0^k[4], x1^k[5])
		x2, x3 = arx(x2^k[6], x3^k[7])
		x2, x3 = arx(x2^k[8], x3^k[9])
		x2, x3 = arx(x2^k[10], x3^k[11])
		// Linear layer L: Feistel-like mix of the right branch with a
		// function of the left, then a branch swap.
		t := bits.RotateLeft16(x0^x1, 8)
		x0, x1, x2, x3 = x2^x0^t, x3^x1^t, x0, x1
	}
	w := (*[4]uint16)(rk[2*sparxSteps*sparxRoundKey:])
	return x0 ^ w[0], x1 ^ w[1], x2 ^ w[2], x3 ^ w[3]
}

// decryptBlock is the inverse of encryptBlock.
func decryptBlock(rk *[roundKeyWords]uint16, x0, x1, x2, x3 uint16) (uint16, uint16, uint16, uint16) {
	w := (*[4]uint16)(rk[2*sparxSteps*sparxRoundKey:])
	x0, x1, x2, x3 = x0^w[0], x1^w[1], x2^w[2], x3^w[3]
	for s := sparxSteps - 1; s >= 0; s-- {
		k := (*[2 * sparxRoundKey]uint16)(rk[2*sparxRoundKey*s:])
		x0, x1, x2, x3 = x2, x3, x0, x1
		t := bits.RotateLeft16(x0^x1, 8)
		x2, x3 = x2^x0^t, x3^x1^t
		// The rounds of each branch in reverse, the left's keys k[0:6],
		// the right's k[6:12].
		for r := 2 * (sparxRounds - 1); r >= 0; r -= 2 {
			x0, x1 = arxInv(x0, x1)
			x0, x1 = x0^k[r], x1^k[r+1]
			x2, x3 = arxInv(x2, x3)
			x2, x3 = x2^k[r+6], x3^k[r+7]
		}
	}
	return x0, x1, x2, x3
}

// encryptBlock2 encrypts two independent blocks in one pass, so that the
// four dependency chains keep more of the CPU's execution ports busy than a
// single block's two.
func encryptBlock2(rk *[roundKeyWords]uint16, a, b uint64) (uint64, uint64) {
	a0, a1, a2, a3 := unpackID(a)
	b0, b1, b2, b3 := unpackID(b)
	for s := 0; s < sparxSteps; s++ {
		k := (*[2 * sparxRoundKey]uint16)(rk[2*sparxRoundKey*s:])
		for r := 0; r < 2*sparxRounds; r += 2 {
			a0, a1 = arx(a0^k[r], a1^k[r+1])
			a2, a3 = arx(a2^k[r+6], a3^k[r+7])
			b0, b1 = arx(b0^k[r], b1^k[r+1])
			b2, b3 = arx(b2^k[r+6], b3^k[r+7])
		}
		ta := bits.RotateLeft16(a0^a1, 8)
		tb := bits.RotateLeft16(b0^b1, 8)
		a0, a1, a2, a3 = a2^a0^ta, a3^a1^ta, a0, a1
		b0, b1, b2, b3 = b2^b0^tb, b3^b1^tb, b0, b1
	}
	w := (*[4]uint16)(rk[2*sparxSteps*sparxRoundKey:])
	return packID(a0^w[0], a1^w[1], a2^w[2], a3^w[3]),
		packID(b0^w[0], b1^w[1], b2^w[2], b3^w[3])
}

// decryptBlock2 is the inverse of encryptBlock2.
func decryptBlock2(rk *[roundKeyWords]uint16, a, b uint64) (uint64, uint64) {
	a0, a1, a2, a3 := unpackID(a)
	b0, b1, b2, b3 := unpackID(b)
	w := (*[4]uint16)(rk[2*sparxSteps*sparxRoundKey:])
	a0, a1, a2, a3 = a0^w[0], a1^w[1], a2^w[2], a3^w[3]
	b0, b1, b2, b3 = b0^w[0], b1^w[1], b2^w[2], b3^w[3]
	for s := sparxSteps - 1; s >= 0; s-- {
		k := (*[2 * sparxRoundKey]uint16)(rk[2*sparxRoundKey*s:])
		a0, a1, a2, a3 = a2, a3, a0, a1
		b0, b1, b2, b3 = b2, b3, b0, b1
		ta := bits.RotateLeft16(a0^a1, 8)
		tb := bits.RotateLeft16(b0^b1, 8)
		a2, a3 = a2^a0^ta, a3^a1^ta
		b2, b3 = b2^b0^tb, b3^b1^tb
		for r := 2*sparxRounds - 2; r >= 0; r -= 2 {
			a0, a1 = arxInv(a0, a1)
			a2, a3 = arxInv(a2, a3)
			b0, b1 = arxInv(b0, b1)
			b2, b3 = arxInv(b2, b3)
			a0, a1, a2, a3 = a0^k[r], a1^k[r+1], a2^k[r+6], a3^k[r+7]
			b0, b1, b2, b3 = b0^k[r], b1^k[r+1], b2^k[r+6], b3^k[r+7]
		}
	}
	return packID(a0, a1, a2, a3), packID(b0, b1, b2, b3)
}

// encryptIDsGeneric encrypts len(dst) IDs (len(src) >= len(dst)), two at a
// time.
func encryptIDsGeneric(s *Sparx64, dst, src []uint64) {
	idsGeneric(s, dst, src, encryptBlock2, (*Sparx64).EncryptID)
}

// decryptIDsGeneric is the inverse of encryptIDsGeneric.
func decryptIDsGeneric(s *Sparx64, dst, src []uint64) {
	idsGeneric(s, dst, src, decryptBlock2, (*Sparx64).DecryptID)
}

// idsGeneric runs one direction of the cipher over IDs, pair by pair, and
// the last one alone.
func idsGeneric(s *Sparx64, dst, src []uint64, pair func(*[roundKeyWords]uint16, uint64, uint64) (uint64, uint64), one func(*Sparx64, uint64) uint64) {
	src = src[:len(dst)]
	i := 0
	for ; i+2 <= len(dst); i += 2 {
		dst[i], dst[i+1] = pair(&s.rk, src[i], src[i+1])
	}
	if i < len(dst) {
		dst[i] = one(s, src[i])
	}
}
