//go:build gc && !purego

#include "textflag.h"

// Sparx-64/128 on 8-lane vectors of 16-bit words (ASIMD).
//
// VLD4 of eight IDs de-interleaves them into four vectors, one per word
// x0..x3 of the block, with word j of the 8 IDs in the 8 lanes of vector j;
// VREV16 then turns each little-endian halfword into the big-endian word the
// cipher works on (see unpackID). VST4 is the inverse. Such a set of four
// vectors holds 8 blocks.
//
// The main loop runs 4 sets (32 IDs) at once, each instruction of a round
// issued for the 4 sets in turn, so that 4 independent dependency chains
// hide the latency of the vector unit. A second loop runs one set (8 IDs)
// for the remainder, the left and right branch interleaved. The kernel
// width is therefore 8: n must be a positive multiple of 8.
//
// Round keys come from rk32, where each 16-bit key word fills both halves
// of a 32-bit word: VLD4R of four consecutive 32-bit elements broadcasts
// four key words, each into all 8 halfword lanes of a vector. A step's 12
// key words (left branch k0..k5, right branch k6..k11) are loaded with
// three VLD4R into K0..K11.
//
// The linear layer's branch swap is done by renaming: a step writes the new
// x0, x1 into the registers of the old x2, x3, so two steps, the second with
// the roles of the register pairs exchanged, restore the register order.
// The step loop runs 4 times two steps.
//
// Rotates are VSHL into a temporary followed by VSRI (shift right and
// insert) from the same source; rotate by 8 is VREV16 on bytes.
//
// Vector instructions per set of 8 blocks and step: 6 rounds of 8
// (2 key xors, rotate 2, add, rotate 2, xor) plus 6 for the linear layer,
// 54; plus 3 key loads per step shared by all sets.

// Sets of 8 blocks: A = V0..V3, B = V4..V7, C = V8..V11, D = V12..V15.
// Temporaries, one per set.
#define T0 V16
#define T1 V17
#define T2 V18
#define T3 V19

// Key words of the current step.
#define K0 V20
#define K1 V21
#define K2 V22
#define K3 V23
#define K4 V24
#define K5 V25
#define K6 V26
#define K7 V27
#define K8 V28
#define K9 V29
#define K10 V30
#define K11 V31

// Loads the 12 key words of one step at (R4) and advances R4 past them.
#define LOADKEYS \
	VLD4R.P	16(R4), [K0.S4, K1.S4, K2.S4, K3.S4] \
	VLD4R.P	16(R4), [K4.S4, K5.S4, K6.S4, K7.S4] \
	VLD4R.P	16(R4), [K8.S4, K9.S4, K10.S4, K11.S4]

// Byte swap of each 16-bit word of four vectors.
#define REV4(a, b, c, d) \
	VREV16	a.B16, a.B16 \
	VREV16	b.B16, b.B16 \
	VREV16	c.B16, c.B16 \
	VREV16	d.B16, d.B16

// Xor of one key vector into four vectors.
#define XOR4(k, a, b, c, d) \
	VEOR	k.B16, a.B16, a.B16 \
	VEOR	k.B16, b.B16, b.B16 \
	VEOR	k.B16, c.B16, c.B16 \
	VEOR	k.B16, d.B16, d.B16

// One round on one branch of the four sets, (l, r) per set:
// l ^= kl; r ^= kr; l = rotl(l, 9) + r; r = rotl(r, 2) ^ l.
#define ARX4(kl, kr, la, ra, lb, rb, lc, rc, ld, rd) \
	XOR4(kl, la, lb, lc, ld) \
	XOR4(kr, ra, rb, rc, rd) \
	VSHL	$9, la.H8, T0.H8 \
	VSHL	$9, lb.H8, T1.H8 \
	VSHL	$9, lc.H8, T2.H8 \
	VSHL	$9, ld.H8, T3.H8 \
	VSRI	$7, la.H8, T0.H8 \
	VSRI	$7, lb.H8, T1.H8 \
	VSRI	$7, lc.H8, T2.H8 \
	VSRI	$7, ld.H8, T3.H8 \
	VADD	ra.H8, T0.H8, la.H8 \
	VADD	rb.H8, T1.H8, lb.H8 \
	VADD	rc.H8, T2.H8, lc.H8 \
	VADD	rd.H8, T3.H8, ld.H8 \
	VSHL	$2, ra.H8, T0.H8 \
	VSHL	$2, rb.H8, T1.H8 \
	VSHL	$2, rc.H8, T2.H8 \
	VSHL	$2, rd.H8, T3.H8 \
	VSRI	$14, ra.H8, T0.H8 \
	VSRI	$14, rb.H8, T1.H8 \
	VSRI	$14, rc.H8, T2.H8 \
	VSRI	$14, rd.H8, T3.H8 \
	VEOR	la.B16, T0.B16, ra.B16 \
	VEOR	lb.B16, T1.B16, rb.B16 \
	VEOR	lc.B16, T2.B16, rc.B16 \
	VEOR	ld.B16, T3.B16, rd.B16

// Inverse round on one branch of the four sets, then the key xor:
// r = rotl(r ^ l, 14); l = rotl(l - r, 7); l ^= kl; r ^= kr.
#define ARXINV4(kl, kr, la, ra, lb, rb, lc, rc, ld, rd) \
	VEOR	la.B16, ra.B16, T0.B16 \
	VEOR	lb.B16, rb.B16, T1.B16 \
	VEOR	lc.B16, rc.B16, T2.B16 \
	VEOR	ld.B16, rd.B16, T3.B16 \
	VSHL	$14, T0.H8, ra.H8 \
	VSHL	$14, T1.H8, rb.H8 \
	VSHL	$14, T2.H8, rc.H8 \
	VSHL	$14, T3.H8, rd.H8 \
	VSRI	$2, T0.H8, ra.H8 \
	VSRI	$2, T1.H8, rb.H8 \
	VSRI	$2, T2.H8, rc.H8 \
	VSRI	$2, T3.H8, rd.H8 \
	VSUB	ra.H8, la.H8, T0.H8 \
	VSUB	rb.H8, lb.H8, T1.H8 \
	VSUB	rc.H8, lc.H8, T2.H8 \
	VSUB	rd.H8, ld.H8, T3.H8 \
	VSHL	$7, T0.H8, la.H8 \
	VSHL	$7, T1.H8, lb.H8 \
	VSHL	$7, T2.H8, lc.H8 \
	VSHL	$7, T3.H8, ld.H8 \
	VSRI	$9, T0.H8, la.H8 \
	VSRI	$9, T1.H8, lb.H8 \
	VSRI	$9, T2.H8, lc.H8 \
	VSRI	$9, T3.H8, ld.H8 \
	XOR4(kl, la, lb, lc, ld) \
	XOR4(kr, ra, rb, rc, rd)

// Linear layer of the four sets, in place on (p, q) with (u, v) the other
// branch of each set: t = rotl(u ^ v, 8); p ^= u ^ t; q ^= v ^ t.
// For encryption (u, v) is the left branch (x0, x1) and (p, q) the right
// (x2, x3), which then holds the new x0, x1. Decryption applies the same
// function with (u, v) = (x2, x3) and (p, q) = (x0, x1).
#define LIN4(ua, va, pa, qa, ub, vb, pb, qb, uc, vc, pc, qc, ud, vd, pd, qd) \
	VEOR	ua.B16, va.B16, T0.B16 \
	VEOR	ub.B16, vb.B16, T1.B16 \
	VEOR	uc.B16, vc.B16, T2.B16 \
	VEOR	ud.B16, vd.B16, T3.B16 \
	VREV16	T0.B16, T0.B16 \
	VREV16	T1.B16, T1.B16 \
	VREV16	T2.B16, T2.B16 \
	VREV16	T3.B16, T3.B16 \
	VEOR	ua.B16, pa.B16, pa.B16 \
	VEOR	ub.B16, pb.B16, pb.B16 \
	VEOR	uc.B16, pc.B16, pc.B16 \
	VEOR	ud.B16, pd.B16, pd.B16 \
	VEOR	va.B16, qa.B16, qa.B16 \
	VEOR	vb.B16, qb.B16, qb.B16 \
	VEOR	vc.B16, qc.B16, qc.B16 \
	VEOR	vd.B16, qd.B16, qd.B16 \
	VEOR	T0.B16, pa.B16, pa.B16 \
	VEOR	T1.B16, pb.B16, pb.B16 \
	VEOR	T2.B16, pc.B16, pc.B16 \
	VEOR	T3.B16, pd.B16, pd.B16 \
	VEOR	T0.B16, qa.B16, qa.B16 \
	VEOR	T1.B16, qb.B16, qb.B16 \
	VEOR	T2.B16, qc.B16, qc.B16 \
	VEOR	T3.B16, qd.B16, qd.B16

// One encryption step of the four sets; the arguments are the registers of
// x0..x3 of each set. Afterwards x0, x1 are in the registers given for x2,
// x3 and the reverse.
#define ENCSTEP4(a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3, d0, d1, d2, d3) \
	LOADKEYS \
	ARX4(K0, K1, a0, a1, b0, b1, c0, c1, d0, d1) \
	ARX4(K6, K7, a2, a3, b2, b3, c2, c3, d2, d3) \
	ARX4(K2, K3, a0, a1, b0, b1, c0, c1, d0, d1) \
	ARX4(K8, K9, a2, a3, b2, b3, c2, c3, d2, d3) \
	ARX4(K4, K5, a0, a1, b0, b1, c0, c1, d0, d1) \
	ARX4(K10, K11, a2, a3, b2, b3, c2, c3, d2, d3) \
	LIN4(a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3, d0, d1, d2, d3)

// One decryption step of the four sets (R4 at the step's keys); the
// arguments are the registers of x0..x3 of each set. Afterwards x0, x1 are
// in the registers given for x2, x3 and the reverse. R4 moves back to the
// previous step's keys.
#define DECSTEP4(a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3, d0, d1, d2, d3) \
	LOADKEYS \
	SUB	$96, R4, R4 \
	LIN4(a2, a3, a0, a1, b2, b3, b0, b1, c2, c3, c0, c1, d2, d3, d0, d1) \
	ARXINV4(K4, K5, a2, a3, b2, b3, c2, c3, d2, d3) \
	ARXINV4(K10, K11, a0, a1, b0, b1, c0, c1, d0, d1) \
	ARXINV4(K2, K3, a2, a3, b2, b3, c2, c3, d2, d3) \
	ARXINV4(K8, K9, a0, a1, b0, b1, c0, c1, d0, d1) \
	ARXINV4(K0, K1, a2, a3, b2, b3, c2, c3, d2, d3) \
	ARXINV4(K6, K7, a0, a1, b0, b1, c0, c1, d0, d1)

// One-set variants: the two branches (l, r) and (m, s) of one set
// interleaved, with temporaries T0 and T1.
#define ARX2(kl, kr, l, r, km, ks, m, s) \
	VEOR	kl.B16, l.B16, l.B16 \
	VEOR	km.B16, m.B16, m.B16 \
	VEOR	kr.B16, r.B16, r.B16 \
	VEOR	ks.B16, s.B16, s.B16 \
	VSHL	$9, l.H8, T0.H8 \
	VSHL	$9, m.H8, T1.H8 \
	VSRI	$7, l.H8, T0.H8 \
	VSRI	$7, m.H8, T1.H8 \
	VADD	r.H8, T0.H8, l.H8 \
	VADD	s.H8, T1.H8, m.H8 \
	VSHL	$2, r.H8, T0.H8 \
	VSHL	$2, s.H8, T1.H8 \
	VSRI	$14, r.H8, T0.H8 \
	VSRI	$14, s.H8, T1.H8 \
	VEOR	l.B16, T0.B16, r.B16 \
	VEOR	m.B16, T1.B16, s.B16

#define ARXINV2(kl, kr, l, r, km, ks, m, s) \
	VEOR	l.B16, r.B16, T0.B16 \
	VEOR	m.B16, s.B16, T1.B16 \
	VSHL	$14, T0.H8, r.H8 \
	VSHL	$14, T1.H8, s.H8 \
	VSRI	$2, T0.H8, r.H8 \
	VSRI	$2, T1.H8, s.H8 \
	VSUB	r.H8, l.H8, T0.H8 \
	VSUB	s.H8, m.H8, T1.H8 \
	VSHL	$7, T0.H8, l.H8 \
	VSHL	$7, T1.H8, m.H8 \
	VSRI	$9, T0.H8, l.H8 \
	VSRI	$9, T1.H8, m.H8 \
	VEOR	kl.B16, l.B16, l.B16 \
	VEOR	km.B16, m.B16, m.B16 \
	VEOR	kr.B16, r.B16, r.B16 \
	VEOR	ks.B16, s.B16, s.B16

// Linear layer of one set, as LIN4.
#define LIN1(u, v, p, q) \
	VEOR	u.B16, v.B16, T0.B16 \
	VEOR	u.B16, p.B16, p.B16 \
	VEOR	v.B16, q.B16, q.B16 \
	VREV16	T0.B16, T0.B16 \
	VEOR	T0.B16, p.B16, p.B16 \
	VEOR	T0.B16, q.B16, q.B16

#define ENCSTEP1(x0, x1, x2, x3) \
	LOADKEYS \
	ARX2(K0, K1, x0, x1, K6, K7, x2, x3) \
	ARX2(K2, K3, x0, x1, K8, K9, x2, x3) \
	ARX2(K4, K5, x0, x1, K10, K11, x2, x3) \
	LIN1(x0, x1, x2, x3)

#define DECSTEP1(x0, x1, x2, x3) \
	LOADKEYS \
	SUB	$96, R4, R4 \
	LIN1(x2, x3, x0, x1) \
	ARXINV2(K4, K5, x2, x3, K10, K11, x0, x1) \
	ARXINV2(K2, K3, x2, x3, K8, K9, x0, x1) \
	ARXINV2(K0, K1, x2, x3, K6, K7, x0, x1)

// Loads 8 IDs from (R2) into set a0..a3, advancing R2; STORESET stores a
// set to (R1), advancing R1.
#define LOADSET(a0, a1, a2, a3) \
	VLD4.P	64(R2), [a0.H8, a1.H8, a2.H8, a3.H8]

#define STORESET(a0, a1, a2, a3) \
	VST4.P	[a0.H8, a1.H8, a2.H8, a3.H8], 64(R1)

// Whitening key (rk32 words 96..99) xored into the four sets, from (R5).
#define WHITEN4 \
	VLD4R	(R5), [K0.S4, K1.S4, K2.S4, K3.S4] \
	XOR4(K0, V0, V4, V8, V12) \
	XOR4(K1, V1, V5, V9, V13) \
	XOR4(K2, V2, V6, V10, V14) \
	XOR4(K3, V3, V7, V11, V15)

#define WHITEN1 \
	VLD4R	(R5), [K0.S4, K1.S4, K2.S4, K3.S4] \
	VEOR	K0.B16, V0.B16, V0.B16 \
	VEOR	K1.B16, V1.B16, V1.B16 \
	VEOR	K2.B16, V2.B16, V2.B16 \
	VEOR	K3.B16, V3.B16, V3.B16

// func encryptNEON(rk *[102]uint32, dst, src *uint64, n int)
TEXT ·encryptNEON(SB), NOSPLIT, $0-32
	MOVD	rk+0(FP), R0
	MOVD	dst+8(FP), R1
	MOVD	src+16(FP), R2
	MOVD	n+24(FP), R3
	ADD	$384, R0, R5 // whitening key, rk32[96]
	CMP	$32, R3
	BLT	enc1

enc4:
	LOADSET(V0, V1, V2, V3)
	LOADSET(V4, V5, V6, V7)
	LOADSET(V8, V9, V10, V11)
	LOADSET(V12, V13, V14, V15)
	REV4(V0, V1, V2, V3)
	REV4(V4, V5, V6, V7)
	REV4(V8, V9, V10, V11)
	REV4(V12, V13, V14, V15)
	MOVD	R0, R4
	MOVD	$4, R6

enc4steps:
	ENCSTEP4(V0, V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11, V12, V13, V14, V15)
	ENCSTEP4(V2, V3, V0, V1, V6, V7, V4, V5, V10, V11, V8, V9, V14, V15, V12, V13)
	SUB	$1, R6
	CBNZ	R6, enc4steps

	WHITEN4
	REV4(V0, V1, V2, V3)
	REV4(V4, V5, V6, V7)
	REV4(V8, V9, V10, V11)
	REV4(V12, V13, V14, V15)
	STORESET(V0, V1, V2, V3)
	STORESET(V4, V5, V6, V7)
	STORESET(V8, V9, V10, V11)
	STORESET(V12, V13, V14, V15)
	SUB	$32, R3
	CMP	$32, R3
	BGE	enc4

enc1:
	CBZ	R3, encdone

enc1loop:
	LOADSET(V0, V1, V2, V3)
	REV4(V0, V1, V2, V3)
	MOVD	R0, R4
	MOVD	$4, R6

enc1steps:
	ENCSTEP1(V0, V1, V2, V3)
	ENCSTEP1(V2, V3, V0, V1)
	SUB	$1, R6
	CBNZ	R6, enc1steps

	WHITEN1
	REV4(V0, V1, V2, V3)
	STORESET(V0, V1, V2, V3)
	SUBS	$8, R3
	BGT	enc1loop

encdone:
	RET

// func decryptNEON(rk *[102]uint32, dst, src *uint64, n int)
TEXT ·decryptNEON(SB), NOSPLIT, $0-32
	MOVD	rk+0(FP), R0
	MOVD	dst+8(FP), R1
	MOVD	src+16(FP), R2
	MOVD	n+24(FP), R3
	ADD	$384, R0, R5 // whitening key, rk32[96]
	ADD	$336, R0, R7 // keys of the last step, rk32[84]
	CMP	$32, R3
	BLT	dec1

dec4:
	LOADSET(V0, V1, V2, V3)
	LOADSET(V4, V5, V6, V7)
	LOADSET(V8, V9, V10, V11)
	LOADSET(V12, V13, V14, V15)
	REV4(V0, V1, V2, V3)
	REV4(V4, V5, V6, V7)
	REV4(V8, V9, V10, V11)
	REV4(V12, V13, V14, V15)
	WHITEN4
	MOVD	R7, R4
	MOVD	$4, R6

dec4steps:
	DECSTEP4(V0, V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11, V12, V13, V14, V15)
	DECSTEP4(V2, V3, V0, V1, V6, V7, V4, V5, V10, V11, V8, V9, V14, V15, V12, V13)
	SUB	$1, R6
	CBNZ	R6, dec4steps

	REV4(V0, V1, V2, V3)
	REV4(V4, V5, V6, V7)
	REV4(V8, V9, V10, V11)
	REV4(V12, V13, V14, V15)
	STORESET(V0, V1, V2, V3)
	STORESET(V4, V5, V6, V7)
	STORESET(V8, V9, V10, V11)
	STORESET(V12, V13, V14, V15)
	SUB	$32, R3
	CMP	$32, R3
	BGE	dec4

dec1:
	CBZ	R3, decdone

dec1loop:
	LOADSET(V0, V1, V2, V3)
	REV4(V0, V1, V2, V3)
	WHITEN1
	MOVD	R7, R4
	MOVD	$4, R6

dec1steps:
	DECSTEP1(V0, V1, V2, V3)
	DECSTEP1(V2, V3, V0, V1)
	SUB	$1, R6
	CBNZ	R6, dec1steps

	REV4(V0, V1, V2, V3)
	STORESET(V0, V1, V2, V3)
	SUBS	$8, R3
	BGT	dec1loop

decdone:
	RET
