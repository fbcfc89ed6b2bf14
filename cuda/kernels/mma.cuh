// mma.cuh: the warp-level tensor-core and shared-memory fragment
// instructions the f16 tile kernels share (the tensor-core prefill
// attention, attn_prefill2.cu; the f16 GEMM, gemm16.cu), and ex2. The
// emulation (scripts/kernel-emu/include/mma.h) defines the same functions
// on the CPU.
#pragma once
#include <stdint.h>

#ifndef MINFER_KERNEL_EMU
// d += a b for one warp: A 16x16 row-major, B 16x8 column-major, f16 in,
// f32 accumulate (PTX ISA: mma.m16n8k16 fragment layouts). The emulation
// (scripts/kernel-emu/include/mma.h) defines both functions on the CPU.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// ldsm_x4_trans: four 8x8 f16 matrices, transposed, for one warp; lane L
// names row L % 8 of matrix L / 8 (16 bytes in shared memory) and gets in
// r[i] elements [2 (L % 4)][L / 4] and [2 (L % 4) + 1][L / 4] of matrix i:
// over rows = cells, the B fragment of an m16n8k16 on V.
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const __half* row) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
// ldsm_x4: four 8x8 f16 matrices, not transposed; lane L names row L % 8
// of matrix L / 8 and gets in r[i] elements [L / 4][2 (L % 4)] and
// [L / 4][2 (L % 4) + 1] of matrix i: over rows = cells, the B fragment of
// an m16n8k16 on K^T.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const __half* row) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
// ex2: 2^x by the special-function unit (one instruction; relative error
// ~2^-22, far below P's f16 rounding); -inf gives 0.
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#endif
