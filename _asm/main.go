// Command _asm generates the amd64 Sparx-64/128 batch kernels of package
// randflake (../sparx64_amd64.s) and their Go declarations
// (../sparx64_amd64_stubs.go) with avo. Run it through go generate in the
// parent directory; see kernel_amd64.go for the exact command.
//
// Both kernels are word-sliced: a group of IDs is transposed so that one
// vector register holds word j (j = 0..3) of every block of the group, with
// each 16-bit word already converted from the ID's little-endian bytes to
// the big-endian word the cipher works on. Every cipher operation then acts
// on all blocks of the group at once, and the transposition is undone on
// output. Several independent groups (zGroups, yGroups) are processed
// interleaved per loop iteration to hide instruction latency, with shorter
// paths for the remainder.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Cipher geometry; see sparx64.go.
const (
	steps      = 8
	rounds     = 3
	groupWords = 2 * rounds // 16-bit key words per branch key
	whitening  = 2 * steps  // index of the whitening key group
)

const signature = "func(rk *[102]uint32, dst, src *uint64, n int)"

func main() {
	ConstraintExpr("amd64,gc,!purego")

	avx512Data()
	avx512Kernel("encryptAVX512", true)
	avx512Kernel("decryptAVX512", false)

	avx2Data()
	avx2Kernel("encryptAVX2", true)
	avx2Kernel("decryptAVX2", false)

	Generate()
}

// keyWord addresses round key word j of key group g in rk32. Each uint32
// holds the 16-bit key word in both halves, so a 32-bit broadcast of it
// gives the word in every 16-bit lane.
func keyWord(rk Register, g, j int) Mem {
	return Mem{Base: rk, Disp: 4 * (groupWords*g + j)}
}

// byteTable emits a read-only table of bytes.
func byteTable(name string, b []byte) Mem {
	m := GLOBL(name, RODATA|NOPTR)
	for i := 0; i < len(b); i += 8 {
		var v uint64
		for k := 7; k >= 0; k-- {
			v = v<<8 | uint64(b[i+k])
		}
		DATA(i, U64(v))
	}
	return m
}

// loadArgs loads the kernel arguments into fixed registers.
func loadArgs() (rk, dst, src, n Register) {
	rk, dst, src, n = RAX, RDI, RSI, RCX
	Load(Param("rk"), rk)
	Load(Param("dst"), dst)
	Load(Param("src"), src)
	Load(Param("n"), n)
	return
}

// loopGroups emits the loop over the n IDs at src and dst, in units of
// groups of width IDs (n is a multiple of width). counts lists, in
// descending order, the numbers of groups that body(k) can process
// interleaved; each must be half the one before it. The largest count is
// looped over; every smaller one then runs at most once for the remainder.
func loopGroups(n, src, dst Register, width int, counts []int, body func(k int)) {
	for i, k := range counts {
		ids := k * width
		here := fmt.Sprintf("groups%d", k)
		next := "done"
		if i+1 < len(counts) {
			next = fmt.Sprintf("groups%d", counts[i+1])
		}
		Label(here)
		CMPQ(n, U32(ids))
		JB(LabelRef(next))
		if k == 1 {
			Comment(fmt.Sprintf("%d IDs: one group.", ids))
		} else {
			Comment(fmt.Sprintf("%d IDs: %d interleaved groups of %d.", ids, k, width))
		}
		body(k)
		if i+1 == len(counts) {
			continue // n is now 0
		}
		ADDQ(U32(8*ids), src)
		ADDQ(U32(8*ids), dst)
		SUBQ(U32(ids), n)
		if i == 0 {
			JMP(LabelRef(here))
		}
	}
	Label("done")
}

// kernelHead begins a kernel: its declaration and documentation, and the
// loading of its arguments. It returns the kernel's direction of the cipher.
func kernelHead[S any](name string, enc bool, width int, requires string, encrypt, decrypt func(Register, []S)) (cipher func(Register, []S), rk, dst, src, n Register) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	verb, cipher := "encrypts", encrypt
	if !enc {
		verb, cipher = "decrypts", decrypt
	}
	Doc(fmt.Sprintf("%s %s n IDs from src into dst, %d at a time.", name, verb, width),
		fmt.Sprintf("n must be a positive multiple of %d; dst may equal src.", width),
		"Requires "+requires+".")
	rk, dst, src, n = loadArgs()
	return cipher, rk, dst, src, n
}

// kernelLoop ends a kernel: its loop over groups of register sets, each
// loaded from src, enciphered and stored to dst, then the return.
func kernelLoop[S any](rk, n, src, dst Register, width int, counts []int, sets []S,
	load func(S, Register), cipher func(Register, []S), store func(S, Register)) {
	loopGroups(n, src, dst, width, counts, func(k int) {
		for _, s := range sets[:k] {
			load(s, src)
		}
		cipher(rk, sets[:k])
		for _, s := range sets[:k] {
			store(s, dst)
		}
	})
	VZEROUPPER()
	RET()
}

func zmm(i int) VecPhysical {
	return []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15, Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}[i]
}

func ymm(i int) VecPhysical {
	return []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15}[i]
}

// Groups interleaved per loop iteration, then for the remainder.
var (
	zGroups = []int{4, 2, 1}
	yGroups = []int{2, 1}
)

// ---------------------------------------------------------------------------
// AVX-512 kernel: 32 blocks per group of four zmm registers.
//
// Requires AVX512F, AVX512BW (16-bit adds), AVX512_VBMI (VPERMT2B),
// AVX512_VBMI2 (VPSHLDW rotates) and AVX (VZEROUPPER); only zmm registers
// are used, so not AVX512VL.

var (
	zPermIn  Mem // VPERMT2B indices: 16 IDs (two zmm) -> words 0,1 | words 2,3
	zPermOut Mem // VPERMT2B indices: words 0,1 | words 2,3 -> IDs 0-7 | IDs 8-15

	// Index vectors held in registers for the whole call.
	zIn  = [2]VecPhysical{Z28, Z29}
	zOut = [2]VecPhysical{Z30, Z31}
)

func avx512Data() {
	// Input: the 128-byte table is 16 consecutive IDs (8 bytes each, little
	// endian). Output vector h (h = 0, 1) holds in 16-bit lane l the word
	// 2h + l/16 of ID l%16, big endian (bytes of the ID word swapped).
	in := make([]byte, 0, 128)
	for h := 0; h < 2; h++ {
		for p := 0; p < 64; p++ {
			lane, hi := p/2, p%2
			id, word := lane%16, 2*h+lane/16
			in = append(in, byte(8*id+2*word+1-hi))
		}
	}
	// Output: the table is the two vectors above (words 0,1 then words
	// 2,3); output vector h holds IDs 8h..8h+7 in memory order.
	out := make([]byte, 0, 128)
	for h := 0; h < 2; h++ {
		for q := 0; q < 64; q++ {
			id, c := 8*h+q/8, q%8
			word, b := c/2, c%2
			out = append(out, byte(64*(word/2)+2*(16*(word%2)+id)+1-b))
		}
	}
	zPermIn = byteTable("sparxPermInAVX512", in)
	zPermOut = byteTable("sparxPermOutAVX512", out)
}

// zset is one group of 32 blocks: x holds the four word vectors in cipher
// order (renamed by the linear layer's branch swap), t is scratch.
type zset struct {
	x   [4]VecPhysical
	t   [2]VecPhysical
	off int // byte offset of the group within an iteration
}

// zload reads 32 IDs at src+off and transposes them into s.x.
func zload(s *zset, src Register) {
	at := func(d int) Mem { return Mem{Base: src, Disp: s.off + d} }
	// b0, b1: words 0,1 and words 2,3 of IDs 0-15; c0, c1: the same for
	// IDs 16-31 (x1 and x3 serve as scratch until overwritten last).
	b0, b1, c0, c1 := s.t[0], s.t[1], s.x[1], s.x[3]
	VMOVDQU64(at(0), b0)
	VMOVDQU64(at(0), b1)
	VMOVDQU64(at(128), c0)
	VMOVDQU64(at(128), c1)
	VPERMT2B(at(64), zIn[0], b0)
	VPERMT2B(at(64), zIn[1], b1)
	VPERMT2B(at(192), zIn[0], c0)
	VPERMT2B(at(192), zIn[1], c1)
	// Word j of IDs 0-15 is half j%2 of b[j/2], of IDs 16-31 of c[j/2].
	VSHUFI64X2(U8(0x44), c0, b0, s.x[0])
	VSHUFI64X2(U8(0xee), c0, b0, s.x[1])
	VSHUFI64X2(U8(0x44), c1, b1, s.x[2])
	VSHUFI64X2(U8(0xee), c1, b1, s.x[3])
}

// zstore transposes s.x back into 32 IDs and writes them to dst+off.
func zstore(s *zset, dst Register) {
	at := func(d int) Mem { return Mem{Base: dst, Disp: s.off + d} }
	x := s.x
	b0, c0 := s.t[0], s.t[1]
	VSHUFI64X2(U8(0x44), x[1], x[0], b0)   // words 0,1 of IDs 0-15
	VSHUFI64X2(U8(0xee), x[1], x[0], c0)   // words 0,1 of IDs 16-31
	VSHUFI64X2(U8(0x44), x[3], x[2], x[0]) // words 2,3 of IDs 0-15
	VSHUFI64X2(U8(0xee), x[3], x[2], x[1]) // words 2,3 of IDs 16-31
	VMOVDQA64(b0, x[2])
	VPERMT2B(x[0], zOut[0], x[2])
	VPERMT2B(x[0], zOut[1], b0)
	VMOVDQA64(c0, x[3])
	VPERMT2B(x[1], zOut[0], x[3])
	VPERMT2B(x[1], zOut[1], c0)
	VMOVDQU64(x[2], at(0))
	VMOVDQU64(b0, at(64))
	VMOVDQU64(x[3], at(128))
	VMOVDQU64(c0, at(192))
}

// zchain is one branch (pair of words) of one group: the unit of
// independent work that the round code interleaves.
type zchain struct {
	l, r VecPhysical
	g    int // key group

	// Encryption only:
	rKeyed bool        // r already holds its round-0 key (see absorb)
	tOut   VecPhysical // left branch: receives t of the linear layer
	absorb *Mem        // right branch: key to fold into the final r

	// Decryption only:
	rIn VecPhysical // left branch: r ^ l, already computed by zDecrypt
}

// zEncBranches runs the three rounds of one step on each chain.
//
// Key xors are folded into the three-way VPTERNLOGD that ends a round
// where possible: the next round's r key, and for the right branch the
// next step's key for x1 (the right branch's final r is only used in the
// linear layer's x3 ^ x1 ^ t, which becomes x1). For the left branch the
// linear layer's x0 ^ x1 equals rotl(r, 2) before the final xor, so
// t = rotl(r, 10) is taken from r directly.
func zEncBranches(rk Register, cs []zchain) {
	for _, c := range cs {
		VPXORD_BCST(keyWord(rk, c.g, 0), c.l, c.l)
	}
	for _, c := range cs {
		if !c.rKeyed {
			VPXORD_BCST(keyWord(rk, c.g, 1), c.r, c.r)
		}
	}
	for i := 0; i < rounds; i++ {
		for _, c := range cs {
			VPSHLDW(U8(9), c.l, c.l, c.l)
		}
		for _, c := range cs {
			VPADDW(c.r, c.l, c.l)
		}
		if i == rounds-1 {
			for _, c := range cs {
				if c.tOut != nil {
					VPSHLDW(U8(10), c.r, c.r, c.tOut)
				}
			}
		}
		for _, c := range cs {
			VPSHLDW(U8(2), c.r, c.r, c.r)
		}
		if i == rounds-1 {
			for _, c := range cs {
				if c.absorb != nil {
					VPTERNLOGD_BCST(U8(0x96), *c.absorb, c.l, c.r)
				} else {
					VPXORD(c.l, c.r, c.r)
				}
			}
			continue
		}
		// r = rotl(r, 2) ^ l ^ key for the next round's r; then key the l.
		for _, c := range cs {
			VPTERNLOGD_BCST(U8(0x96), keyWord(rk, c.g, 2*i+3), c.l, c.r)
		}
		for _, c := range cs {
			VPXORD_BCST(keyWord(rk, c.g, 2*i+2), c.l, c.l)
		}
	}
}

// zDecBranches inverts zEncBranches. A key xor into r before an inverse
// round is folded into that round's r ^ l.
func zDecBranches(rk Register, cs []zchain) {
	for i := rounds - 1; i >= 0; i-- {
		for _, c := range cs {
			switch {
			case i < rounds-1:
				VPTERNLOGD_BCST(U8(0x96), keyWord(rk, c.g, 2*i+3), c.l, c.r)
				VPSHLDW(U8(14), c.r, c.r, c.r)
			case c.rIn != nil:
				VPSHLDW(U8(14), c.rIn, c.rIn, c.r)
			default:
				VPXORD(c.l, c.r, c.r)
				VPSHLDW(U8(14), c.r, c.r, c.r)
			}
		}
		for _, c := range cs {
			VPSUBW(c.r, c.l, c.l)
		}
		for _, c := range cs {
			VPSHLDW(U8(7), c.l, c.l, c.l)
		}
		for _, c := range cs {
			VPXORD_BCST(keyWord(rk, c.g, 2*i), c.l, c.l)
		}
	}
	for _, c := range cs {
		VPXORD_BCST(keyWord(rk, c.g, 1), c.r, c.r)
	}
}

func swap(s *zset) {
	s.x[0], s.x[1], s.x[2], s.x[3] = s.x[2], s.x[3], s.x[0], s.x[1]
}

func zEncrypt(rk Register, sets []*zset) {
	for st := 0; st < steps; st++ {
		// The key of the next step's x1 (or the whitening key) is folded
		// into the right branch; see zEncBranches.
		next := keyWord(rk, 2*st+2, 1)
		if st == steps-1 {
			next = keyWord(rk, whitening, 1)
		}
		var cs []zchain
		for _, s := range sets {
			cs = append(cs,
				zchain{l: s.x[0], r: s.x[1], g: 2 * st, rKeyed: st > 0, tOut: s.t[0]},
				zchain{l: s.x[2], r: s.x[3], g: 2*st + 1, absorb: &next})
		}
		zEncBranches(rk, cs)
		// Linear layer: x2 ^= x0 ^ t, x3 ^= x1 ^ t, then swap the branches.
		for _, s := range sets {
			VPTERNLOGD(U8(0x96), s.t[0], s.x[0], s.x[2])
		}
		for _, s := range sets {
			VPTERNLOGD(U8(0x96), s.t[0], s.x[1], s.x[3])
		}
		for _, s := range sets {
			swap(s)
		}
	}
	for _, j := range []int{0, 2, 3} { // word 1 is already whitened
		for _, s := range sets {
			VPXORD_BCST(keyWord(rk, whitening, j), s.x[j], s.x[j])
		}
	}
}

func zDecrypt(rk Register, sets []*zset) {
	for j := 0; j < 4; j++ {
		for _, s := range sets {
			VPXORD_BCST(keyWord(rk, whitening, j), s.x[j], s.x[j])
		}
	}
	for st := steps - 1; st >= 0; st-- {
		// Swap the branches back, then undo the linear layer's mix:
		// x2 ^= x0 ^ t, x3 ^= x1 ^ t with t = rotl(x0 ^ x1, 8). x0 ^ x1 is
		// also the first value of the left branch's inverse round.
		for _, s := range sets {
			swap(s)
		}
		for _, s := range sets {
			VPXORD(s.x[1], s.x[0], s.t[0])
		}
		for _, s := range sets {
			VPSHLDW(U8(8), s.t[0], s.t[0], s.t[1])
		}
		for _, s := range sets {
			VPTERNLOGD(U8(0x96), s.t[1], s.x[0], s.x[2])
		}
		for _, s := range sets {
			VPTERNLOGD(U8(0x96), s.t[1], s.x[1], s.x[3])
		}
		var cs []zchain
		for _, s := range sets {
			cs = append(cs,
				zchain{l: s.x[0], r: s.x[1], g: 2 * st, rIn: s.t[0]},
				zchain{l: s.x[2], r: s.x[3], g: 2*st + 1})
		}
		zDecBranches(rk, cs)
	}
}

func avx512Kernel(name string, enc bool) {
	cipher, rk, dst, src, n := kernelHead(name, enc, 32, "AVX, AVX512F, AVX512BW, AVX512_VBMI and AVX512_VBMI2", zEncrypt, zDecrypt)
	VMOVDQU64(zPermIn.Offset(0), zIn[0])
	VMOVDQU64(zPermIn.Offset(64), zIn[1])
	VMOVDQU64(zPermOut.Offset(0), zOut[0])
	VMOVDQU64(zPermOut.Offset(64), zOut[1])

	var sets []*zset
	for i := 0; i < zGroups[0]; i++ {
		sets = append(sets, &zset{
			x:   [4]VecPhysical{zmm(6 * i), zmm(6*i + 1), zmm(6*i + 2), zmm(6*i + 3)},
			t:   [2]VecPhysical{zmm(6*i + 4), zmm(6*i + 5)},
			off: 256 * i,
		})
	}
	kernelLoop(rk, n, src, dst, 32, zGroups, sets, zload, cipher, zstore)
}

// ---------------------------------------------------------------------------
// AVX2 kernel: 16 blocks per group of four ymm registers.
//
// Requires AVX and AVX2 only.

var (
	yShufIn  Mem // VPSHUFB: per 128-bit lane, 2 IDs -> dword j = word j of both, swapped
	yShufOut Mem // VPSHUFB: inverse of yShufIn
	yRot8    Mem // VPSHUFB: swap the bytes of every 16-bit word
)

func avx2Data() {
	var in, out, rot [32]byte
	for lane := 0; lane < 2; lane++ {
		for q := 0; q < 16; q++ {
			// in: destination byte q is byte (1-hi) of word j of ID id.
			j, id, hi := q/4, (q/2)%2, q%2
			in[16*lane+q] = byte(8*id + 2*j + 1 - hi)
			// out: destination byte q is byte c of ID id.
			id, c := q/8, q%8
			j, b := c/2, c%2
			out[16*lane+q] = byte(4*j + 2*id + 1 - b)
			rot[16*lane+q] = byte(q ^ 1)
		}
	}
	yShufIn = byteTable("sparxShufInAVX2", in[:])
	yShufOut = byteTable("sparxShufOutAVX2", out[:])
	yRot8 = byteTable("sparxRot8AVX2", rot[:])
}

type yset struct {
	x   [4]VecPhysical
	t   [2]VecPhysical // chain temporaries, one per branch
	off int
}

// ytranspose transposes the 4x4 matrix of dwords held in each 128-bit lane
// of x (dword j of row m becomes dword m of row j), using t as scratch, and
// returns the registers now holding rows 0..3.
func ytranspose(x [4]VecPhysical, t [2]VecPhysical) [4]VecPhysical {
	VPUNPCKLDQ(x[1], x[0], t[0])  // a0 b0 a1 b1
	VPUNPCKHDQ(x[1], x[0], t[1])  // a2 b2 a3 b3
	VPUNPCKLDQ(x[3], x[2], x[0])  // c0 d0 c1 d1
	VPUNPCKHDQ(x[3], x[2], x[1])  // c2 d2 c3 d3
	VPUNPCKLQDQ(x[0], t[0], x[2]) // a0 b0 c0 d0
	VPUNPCKHQDQ(x[0], t[0], x[3]) // a1 b1 c1 d1
	VPUNPCKLQDQ(x[1], t[1], x[0]) // a2 b2 c2 d2
	VPUNPCKHQDQ(x[1], t[1], x[1]) // a3 b3 c3 d3
	return [4]VecPhysical{x[2], x[3], x[0], x[1]}
}

// yload reads 16 IDs at src+off into s.x, word-sliced.
func yload(s *yset, src Register) {
	for m := 0; m < 4; m++ {
		VMOVDQU(Mem{Base: src, Disp: s.off + 32*m}, s.x[m])
	}
	for m := 0; m < 4; m++ {
		VPSHUFB(yShufIn, s.x[m], s.x[m])
	}
	s.x = ytranspose(s.x, s.t)
}

// ystore writes s.x back as 16 IDs at dst+off.
func ystore(s *yset, dst Register) {
	s.x = ytranspose(s.x, s.t)
	for m := 0; m < 4; m++ {
		VPSHUFB(yShufOut, s.x[m], s.x[m])
	}
	for m := 0; m < 4; m++ {
		VMOVDQU(s.x[m], Mem{Base: dst, Disp: s.off + 32*m})
	}
}

// yrotl rotates every 16-bit lane of x left by k, using t as scratch.
func yrotl(x, t VecPhysical, k int) {
	VPSLLW(U8(k), x, t)
	VPSRLW(U8(16-k), x, x)
	VPOR(t, x, x)
}

type ychain struct {
	l, r, t VecPhysical // t: scratch
	b       int         // branch: 0 left, 1 right
	left    bool        // see yEncBranches and yDecBranches
}

func ychains(sets []*yset) []ychain {
	var cs []ychain
	for _, s := range sets {
		cs = append(cs,
			ychain{s.x[0], s.x[1], s.t[0], 0, true},
			ychain{s.x[2], s.x[3], s.t[1], 1, false})
	}
	return cs
}

// Broadcast round keys: yKey[branch][0] for l, [1] for r.
var yKey = [2][2]VecPhysical{{Y12, Y13}, {Y14, Y15}}

func yBroadcastKeys(rk Register, step, i int) {
	for b := 0; b < 2; b++ {
		VPBROADCASTD(keyWord(rk, 2*step+b, 2*i), yKey[b][0])
		VPBROADCASTD(keyWord(rk, 2*step+b, 2*i+1), yKey[b][1])
	}
}

// yEncBranches runs the three rounds of one step on each chain. The left
// branch leaves in its scratch register t = rotl(x0 ^ x1, 8) for the
// linear layer: x0 ^ x1 is rotl(r, 2) before the final xor.
func yEncBranches(rk Register, step int, cs []ychain) {
	for i := 0; i < rounds; i++ {
		yBroadcastKeys(rk, step, i)
		for _, c := range cs {
			VPXOR(yKey[c.b][0], c.l, c.l)
			VPXOR(yKey[c.b][1], c.r, c.r)
		}
		for _, c := range cs {
			yrotl(c.l, c.t, 9)
		}
		for _, c := range cs {
			VPADDW(c.r, c.l, c.l)
		}
		for _, c := range cs {
			yrotl(c.r, c.t, 2)
		}
		if i == rounds-1 {
			for _, c := range cs {
				if c.left {
					VPSHUFB(yRot8, c.r, c.t)
				}
			}
		}
		for _, c := range cs {
			VPXOR(c.l, c.r, c.r)
		}
	}
}

// yDecBranches inverts yEncBranches. The left branch finds r ^ l of its
// first inverse round in its scratch register (see yDecrypt).
func yDecBranches(rk Register, step int, cs []ychain) {
	for i := rounds - 1; i >= 0; i-- {
		for _, c := range cs {
			if c.left && i == rounds-1 {
				// r = rotl(t, 14), clobbering t.
				VPSRLW(U8(2), c.t, c.r)
				VPSLLW(U8(14), c.t, c.t)
				VPOR(c.t, c.r, c.r)
				continue
			}
			VPXOR(c.l, c.r, c.r)
			yrotl(c.r, c.t, 14)
		}
		for _, c := range cs {
			VPSUBW(c.r, c.l, c.l)
		}
		for _, c := range cs {
			yrotl(c.l, c.t, 7)
		}
		yBroadcastKeys(rk, step, i)
		for _, c := range cs {
			VPXOR(yKey[c.b][0], c.l, c.l)
			VPXOR(yKey[c.b][1], c.r, c.r)
		}
	}
}

// yMix applies the linear layer's x2 ^= x0 ^ t, x3 ^= x1 ^ t, given t.
func yMix(s *yset, t VecPhysical) {
	VPXOR(s.x[0], s.x[2], s.x[2])
	VPXOR(s.x[1], s.x[3], s.x[3])
	VPXOR(t, s.x[2], s.x[2])
	VPXOR(t, s.x[3], s.x[3])
}

func yWhiten(rk Register, sets []*yset) {
	for j := 0; j < 4; j++ {
		VPBROADCASTD(keyWord(rk, whitening, j), yKey[j/2][j%2])
	}
	for j := 0; j < 4; j++ {
		for _, s := range sets {
			VPXOR(yKey[j/2][j%2], s.x[j], s.x[j])
		}
	}
}

func yswap(s *yset) {
	s.x[0], s.x[1], s.x[2], s.x[3] = s.x[2], s.x[3], s.x[0], s.x[1]
}

func yEncrypt(rk Register, sets []*yset) {
	for st := 0; st < steps; st++ {
		yEncBranches(rk, st, ychains(sets))
		for _, s := range sets {
			yMix(s, s.t[0])
			yswap(s)
		}
	}
	yWhiten(rk, sets)
}

func yDecrypt(rk Register, sets []*yset) {
	yWhiten(rk, sets)
	for st := steps - 1; st >= 0; st-- {
		// Swap back, then undo the mix with t = rotl(x0 ^ x1, 8); x0 ^ x1
		// stays in t[0] for the left branch.
		for _, s := range sets {
			yswap(s)
			VPXOR(s.x[1], s.x[0], s.t[0])
		}
		for _, s := range sets {
			VPSHUFB(yRot8, s.t[0], s.t[1])
		}
		for _, s := range sets {
			yMix(s, s.t[1])
		}
		yDecBranches(rk, st, ychains(sets))
	}
}

func avx2Kernel(name string, enc bool) {
	cipher, rk, dst, src, n := kernelHead(name, enc, 16, "AVX and AVX2", yEncrypt, yDecrypt)
	var sets []*yset
	for i := 0; i < yGroups[0]; i++ {
		sets = append(sets, &yset{
			x:   [4]VecPhysical{ymm(4 * i), ymm(4*i + 1), ymm(4*i + 2), ymm(4*i + 3)},
			t:   [2]VecPhysical{ymm(8 + 2*i), ymm(8 + 2*i + 1)},
			off: 128 * i,
		})
	}
	kernelLoop(rk, n, src, dst, 16, yGroups, sets, yload, cipher, ystore)
}
