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
// The warpgroup MMA of sm_90a (wgmma; the f16 GEMM's MINFER_MMQ_WGMMA form):
// 128 threads issue one asynchronous D += A B with A (64 x 16) and B (N x
// 16) read from shared memory through descriptors, both K-major without
// swizzle: 8 x 8 core matrices (8 rows of 16 bytes, 128 contiguous bytes),
// lbo the byte step between core matrices along K, sbo along M / N (PTX
// ISA "matrix descriptor"). Thread T (warp w = T / 32 of the group, lane L:
// g = L / 4, t = L % 4) holds D element (16 w + g + 8 ((i / 2) % 2), 8 (i /
// 4) + 2 t + i % 2) in d[i]. Shared memory written by the threads (st.shared
// or cp.async) reaches the MMA only after wgmma_proxy_fence and a barrier.
__device__ __forceinline__ uint64_t wgmma_desc(const void* smem, uint32_t lbo, uint32_t sbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((a >> 4) & 0x3FFF) | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 | (uint64_t)((sbo >> 4) & 0x3FFF) << 32;
}
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t da, uint64_t db) {
    // scale-d is a predicate operand (true: D += A B), set from a register.
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void wgmma_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// wgmma_hold ties the accumulators to the point where it is called: after
// the wgmma_wait that completes their MMAs, no read of them can be hoisted
// above that wait (the wait names no register; this does).
__device__ __forceinline__ void wgmma_hold(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
}
#endif
