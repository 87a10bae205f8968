//go:build amd64 && !purego

#include "textflag.h"

// func markBlocksAVX2(p *byte, n int, bs, qs, cs *uint64)
//
// For each 64-byte block: two 32-byte loads, an equality test against
// '\\' and '"' each, and x == min(x, 0x1f) for the control bytes; each
// test's byte mask becomes a 64-bit word with VPMOVMSKB.
TEXT ·markBlocksAVX2(SB), NOSPLIT, $0-40
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ bs+16(FP), DI
	MOVQ qs+24(FP), R8
	MOVQ cs+32(FP), R9
	TESTQ CX, CX
	JZ   done
	MOVQ $0x5c, AX
	MOVQ AX, X0
	VPBROADCASTB X0, Y10
	MOVQ $0x22, AX
	MOVQ AX, X0
	VPBROADCASTB X0, Y11
	MOVQ $0x1f, AX
	MOVQ AX, X0
	VPBROADCASTB X0, Y12

loop:
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1

	VPCMPEQB  Y10, Y0, Y2
	VPCMPEQB  Y10, Y1, Y3
	VPMOVMSKB Y2, AX
	VPMOVMSKB Y3, BX
	SHLQ      $32, BX
	ORQ       BX, AX
	MOVQ      AX, (DI)

	VPCMPEQB  Y11, Y0, Y4
	VPCMPEQB  Y11, Y1, Y5
	VPMOVMSKB Y4, AX
	VPMOVMSKB Y5, BX
	SHLQ      $32, BX
	ORQ       BX, AX
	MOVQ      AX, (R8)

	VPMINUB   Y12, Y0, Y6
	VPMINUB   Y12, Y1, Y7
	VPCMPEQB  Y0, Y6, Y6
	VPCMPEQB  Y1, Y7, Y7
	VPMOVMSKB Y6, AX
	VPMOVMSKB Y7, BX
	SHLQ      $32, BX
	ORQ       BX, AX
	MOVQ      AX, (R9)

	ADDQ $64, SI
	ADDQ $8, DI
	ADDQ $8, R8
	ADDQ $8, R9
	DECQ CX
	JNZ  loop
	VZEROUPPER

done:
	RET

// func markPairAVX2(p *byte, n int, c uint64, xs, ys *uint64)
//
// For each 64-byte block: two 32-byte loads and an equality test against
// the byte x (c's low byte) and y (its next byte) each, made words with
// VPMOVMSKB.
TEXT ·markPairAVX2(SB), NOSPLIT, $0-40
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ c+16(FP), DX
	MOVQ xs+24(FP), DI
	MOVQ ys+32(FP), R8
	TESTQ CX, CX
	JZ   pairdone
	MOVQ DX, AX
	ANDQ $0xff, AX
	MOVQ AX, X0
	VPBROADCASTB X0, Y10
	MOVQ DX, AX
	SHRQ $8, AX
	ANDQ $0xff, AX
	MOVQ AX, X0
	VPBROADCASTB X0, Y11

pairloop:
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1

	VPCMPEQB  Y10, Y0, Y2
	VPCMPEQB  Y10, Y1, Y3
	VPMOVMSKB Y2, AX
	VPMOVMSKB Y3, BX
	SHLQ      $32, BX
	ORQ       BX, AX
	MOVQ      AX, (DI)

	VPCMPEQB  Y11, Y0, Y4
	VPCMPEQB  Y11, Y1, Y5
	VPMOVMSKB Y4, AX
	VPMOVMSKB Y5, BX
	SHLQ      $32, BX
	ORQ       BX, AX
	MOVQ      AX, (R8)

	ADDQ $64, SI
	ADDQ $8, DI
	ADDQ $8, R8
	DECQ CX
	JNZ  pairloop
	VZEROUPPER

pairdone:
	RET
