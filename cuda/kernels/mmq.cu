// mmq.cu: prefill matmul (nt >= 9) over Q8_1-quantized activations as an
// int8 tensor-core GEMM (mma.sync m16n8k32 / m16n8k16 .s8.s8.s32, sm_80+).
//
//   out[t][j] = sum_i W[j][i] * a[t][i] (+ bias[j])
//
// a is nt activation rows already quantized to Q8_1 by minfer_quantize_q8_1
// (row t at t * (k / 32) * 36 bytes; block = f16 d, f16 s, 32 int8 q; 4-byte
// aligned). W is n rows of k values in their GGUF block format.
//
// Block tile: MINFER_MMQ_ROWS weight rows x MINFER_MMQ_TOKS tokens, k in
// stages of MINFER_MMQ_KB values (four 32-value blocks; a K-quant
// super-block is two stages). Per stage the block
//   - unpacks its weight tile to int8 in shared memory (one thread per
//     (row, 32-block) unit) with each block's f32 scale, and the min term's
//     f32 factor for the types that have one. Every integer offset is
//     applied exactly in int8: Q4_0 q - 8, Q5_0 q - 16, Q6_K q - 32;
//   - copies its activation tile's int8 quants to shared memory with d and
//     the block's exact quant sum (sum_i q_i, by __dp4a; the f16 s of the
//     Q8_1 block is not used, its rounding would be the largest error here);
//   - runs, per 32-block, one m16n8k32 MMA per 16x8 fragment (two m16n8k16
//     for Q6_K, whose scales are per 16 values: the two int32 halves are
//     combined with the int8 scales exactly in int32) and folds the int32
//     tile into f32 accumulators:
//         acc += float(c) * (d_w * d_a)            (+ m_w * d_a * sum q_a)
//     float(c) is exact (|c| < 2^22 for every type but Q6_K, converted with
//     the 1.5 * 2^23 magic add; Q6_K's |c| <= 2^24 with cvt.rn, also exact),
//     so the only roundings are d_w * d_a and the f32 accumulation.
//   Q8_0 / Q4_0 / Q5_0: d_w = d;           no min term
//   Q4_1 / Q5_1:        d_w = d;           m_w = m
//   Q4_K / Q5_K:        d_w = d * sc;      m_w = -dmin * m   (per 32-sub-block)
//   Q6_K:               d_w = d;           int32 c = sc_lo * c_lo + sc_hi * c_hi
// Eight warps in a 4 (rows) x 2 (tokens) grid each own a 32 x 32 output
// tile: 2 (m16 rows) x 4 (n8 tokens) MMA fragments. Shared memory rows are
// padded to 144 bytes (36 words), so the fragment loads (row g, word tig)
// hit 32 distinct banks.
// Edges: rows >= n, tokens >= nt and 32-blocks >= k / 32 load as zeros
// (scale 0), so any n, nt and any k that is a multiple of the type's block
// work. Static shared memory (MINFER_MMQ_SMEM_BYTES < 48 KiB): no opt-in.
//
// Alignment: the 32-bit weight loads need 4-byte aligned rows for Q4_1 and
// Q5_1 (block sizes 20, 24), 2-byte for Q8_0, Q4_0, Q5_0 and Q6_K (34, 18,
// 22, 210); the plain Q4_K / Q5_K kernels' 16-byte loads need 16-byte
// aligned rows (144, 176), their async variants 4-byte; the launcher checks.
//
// Async variants (MINFER_MMQ_ASYNC): the same tile, fold and output, but a
// stage's weight and activation bytes are copied as stored, 16 bytes at a
// time with cp.async (no register), into a raw staging area of dynamic
// shared memory one stage ahead: the block unpacks stage s from shared
// memory while the bytes of stage s + 1 are in flight, where the plain
// kernel waits on every global load (ncu 2026-12-03: long_scoreboard the
// largest stall, 22% occupancy). Each row's span of the stage (small types:
// the stage's 4 blocks; K-quants: the whole super-block) is copied from its
// 16-byte aligned start, so every byte keeps its address mod 16 and the
// unpack reads it with the same alignment as from global memory. Results
// are bitwise the plain kernel's.
//
// Repacked variant (minfer_mmq_q6_kr and its _r64): the same tile, fold and
// output over the 16-byte aligned repacked copy of a Q6_K matrix
// (cuda/mmvq_repack.go RepackHost: quants, then scales, then d, each array
// over the whole matrix), for a device that keeps only that copy. Only the
// weight loads differ (aligned 16-byte loads of the quants): bitwise the
// GGUF kernel. No async variant. (A Q8_0 prefill over its one copy runs the
// f16 GEMM of gemm16.cu; its int8 form here lost: reports/MINFER_MMQ_F16.)
//
// Q4_K / Q5_K loads: the plain kernels read each unit's quants (and Q5_K's
// high bits) with two 16-byte loads (Q5_K four) instead of eight 4-byte
// ones (sixteen): pp512 +8% on 7B Q4_K_M, bitwise the same
// (reports/MINFER_MMQ_WIDE_LOADS; the lever that switched them is
// retired). The async variants keep the 4-byte loads, so their weights
// still need only 4-byte alignment; bitwise the plain kernels.
//
// Kernel names: minfer_mmq_<type>, minfer_mmq_<type>_async, minfer_mmq_q6_kr.
#include "cpasync.cuh"
#include "dequant.cuh"

#define MINFER_MMQ_ROWS 128      // weight rows per block tile, big variant (4 x 2 warps)
#define MINFER_MMQ_ROWS_SMALL 64 // weight rows per block tile, _r64 variant (2 x 2 warps)
#define MINFER_MMQ_TOKS 64
#define MINFER_MMQ_KB 128
#define MINFER_MMQ_NB (MINFER_MMQ_KB / MINFER_QK) // 32-blocks per stage
#define MINFER_MMQ_THREADS 256       // big variant
#define MINFER_MMQ_THREADS_SMALL 128 // _r64 variant
#define MINFER_MMQ_LD (MINFER_MMQ_KB + 16) // bytes per shared row
#define MINFER_MMQ_Q8_1_BYTES 36
#define MINFER_MMQ_REDUCE_THREADS 256
// Async staging: 16-byte chunks per activation row of a stage (4 Q8_1
// blocks, 144 bytes, from any address mod 16: ceil((144 + 15) / 16)).
#define MINFER_MMQ_ACT_CHUNKS 10
#define MINFER_MMQ_CHUNKS(span) (((span) + 30) / 16) // ceil((span + 15) / 16)

// Shared memory bytes of a ROWS x TOKS tile (cuda/launch_mmq.go:
// mmqSmemBytes carries the same sum).
#define MINFER_MMQ_SMEM_BYTES(R, M) (((R) + (M)) * MINFER_MMQ_LD + 3 * (R) * MINFER_MMQ_NB * 4 + 2 * (M) * MINFER_MMQ_NB * 4)

template <int R, int M> struct __align__(16) MinferMmqSmem {
    int8_t wq[R * MINFER_MMQ_LD];
    int8_t xq[M * MINFER_MMQ_LD];
    float wd[R * MINFER_MMQ_NB];  // weight scale per (row, block)
    float wm[R * MINFER_MMQ_NB];  // min-term factor per (row, block)
    int wsc[R * MINFER_MMQ_NB];   // Q6_K: the two int8 scales, packed
    float xd[M * MINFER_MMQ_NB];  // activation d per (token, block)
    float xs[M * MINFER_MMQ_NB];  // d * sum q per (token, block)
};
static_assert(sizeof(MinferMmqSmem<MINFER_MMQ_ROWS, MINFER_MMQ_TOKS>) ==
                  MINFER_MMQ_SMEM_BYTES(MINFER_MMQ_ROWS, MINFER_MMQ_TOKS),
              "mmq smem layout");
static_assert(sizeof(MinferMmqSmem<MINFER_MMQ_ROWS_SMALL, MINFER_MMQ_TOKS>) ==
                  MINFER_MMQ_SMEM_BYTES(MINFER_MMQ_ROWS_SMALL, MINFER_MMQ_TOKS),
              "mmq smem layout");

// One unpacked weight unit: 32 int8 values (8 words) and the scales.
struct MinferMmqUnit {
    uint32_t q[8];
    float d, m;
    int sc;
};

__device__ __forceinline__ uint32_t minfer_mmq_u16(const uint8_t* p) {
    return *reinterpret_cast<const unsigned short*>(p);
}

// 32-bit word at a 2-byte aligned address.
__device__ __forceinline__ uint32_t minfer_mmq_w2(const uint8_t* p) {
    return minfer_mmq_u16(p) | (minfer_mmq_u16(p + 2) << 16);
}

__device__ __forceinline__ uint32_t minfer_mmq_w4(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Eight 32-bit words at p: eight 4-byte loads (the async Q4_K / Q5_K), or
// with W16 (p 16-byte aligned; the plain Q4_K / Q5_K) two 16-byte loads of
// the same bytes.
template <bool W16> __device__ __forceinline__ void minfer_mmq_load8(const uint8_t* p, uint32_t v[8]) {
    if constexpr (W16) {
#ifdef MINFER_KERNEL_EMU
        if (reinterpret_cast<uintptr_t>(p) & 15) __builtin_trap(); // the GPU would fault: the emulation must too
#endif
        const uint4 a = reinterpret_cast<const uint4*>(p)[0], b = reinterpret_cast<const uint4*>(p)[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = minfer_mmq_w4(p + 4 * i);
    }
}

// Bit e (0..3) of h -> bit 8e + 4: the fifth bit of four packed values.
__device__ __forceinline__ uint32_t minfer_mmq_spread4(uint32_t h) {
    return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25);
}

// ---------------------------------------------------------------- per type
//
// unit(row, kb, u): decodes 32-block kb of the row (kb counts 32-value
// blocks along the row; for K-quants sub-block kb % 8 of super-block kb / 8).

template <int T> struct MinferMmqW;

template <> struct MinferMmqW<MINFER_T_Q8_0> {
    static constexpr int bs = MINFER_QK, bb = MINFER_Q8_0_BYTES, align = 2;
    static __device__ __forceinline__ void unit(const uint8_t* row, int kb, MinferMmqUnit& u) {
        const uint8_t* b = row + (size_t)kb * bb;
        u.d = minfer_h2f(minfer_mmq_u16(b));
        u.m = 0.0f;
        u.sc = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) u.q[i] = minfer_mmq_w2(b + 2 + 4 * i);
    }
};

template <> struct MinferMmqW<MINFER_T_Q4_0> {
    static constexpr int bs = MINFER_QK, bb = MINFER_Q4_0_BYTES, align = 2;
    static __device__ __forceinline__ void unit(const uint8_t* row, int kb, MinferMmqUnit& u) {
        const uint8_t* b = row + (size_t)kb * bb;
        u.d = minfer_h2f(minfer_mmq_u16(b));
        u.m = 0.0f;
        u.sc = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t v = minfer_mmq_w2(b + 2 + 4 * i);
            u.q[i] = __vsub4(v & 0x0F0F0F0Fu, 0x08080808u);
            u.q[4 + i] = __vsub4((v >> 4) & 0x0F0F0F0Fu, 0x08080808u);
        }
    }
};

template <> struct MinferMmqW<MINFER_T_Q5_0> {
    static constexpr int bs = MINFER_QK, bb = MINFER_Q5_0_BYTES, align = 2;
    static __device__ __forceinline__ void unit(const uint8_t* row, int kb, MinferMmqUnit& u) {
        const uint8_t* b = row + (size_t)kb * bb;
        u.d = minfer_h2f(minfer_mmq_u16(b));
        u.m = 0.0f;
        u.sc = 0;
        const uint32_t qh = minfer_mmq_w2(b + 2);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t v = minfer_mmq_w2(b + 6 + 4 * i);
            const uint32_t lo = (v & 0x0F0F0F0Fu) | minfer_mmq_spread4((qh >> (4 * i)) & 15u);
            const uint32_t hi = ((v >> 4) & 0x0F0F0F0Fu) | minfer_mmq_spread4((qh >> (16 + 4 * i)) & 15u);
            u.q[i] = __vsub4(lo, 0x10101010u);
            u.q[4 + i] = __vsub4(hi, 0x10101010u);
        }
    }
};

template <> struct MinferMmqW<MINFER_T_Q4_1> {
    static constexpr int bs = MINFER_QK, bb = MINFER_Q4_1_BYTES, align = 4;
    static __device__ __forceinline__ void unit(const uint8_t* row, int kb, MinferMmqUnit& u) {
        const uint8_t* b = row + (size_t)kb * bb;
        const uint32_t dm = minfer_mmq_w4(b);
        u.d = minfer_h2f(dm & 0xFFFFu);
        u.m = minfer_h2f(dm >> 16);
        u.sc = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t v = minfer_mmq_w4(b + 4 + 4 * i);
            u.q[i] = v & 0x0F0F0F0Fu;
            u.q[4 + i] = (v >> 4) & 0x0F0F0F0Fu;
        }
    }
};

template <> struct MinferMmqW<MINFER_T_Q5_1> {
    static constexpr int bs = MINFER_QK, bb = MINFER_Q5_1_BYTES, align = 4;
    static __device__ __forceinline__ void unit(const uint8_t* row, int kb, MinferMmqUnit& u) {
        const uint8_t* b = row + (size_t)kb * bb;
        const uint32_t dm = minfer_mmq_w4(b);
        u.d = minfer_h2f(dm & 0xFFFFu);
        u.m = minfer_h2f(dm >> 16);
        u.sc = 0;
        const uint32_t qh = minfer_mmq_w4(b + 4);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t v = minfer_mmq_w4(b + 8 + 4 * i);
            u.q[i] = (v & 0x0F0F0F0Fu) | minfer_mmq_spread4((qh >> (4 * i)) & 15u);
            u.q[4 + i] = ((v >> 4) & 0x0F0F0F0Fu) | minfer_mmq_spread4((qh >> (16 + 4 * i)) & 15u);
        }
    }
};

// Q4_K and Q5_K: W16 reads the quants (and Q5_K's high bits) with 16-byte
// loads (the plain kernels), else 4-byte ones (the async kernels, whose
// weights need only 4-byte alignment: MinferMmqUnitOf). Their blocks (144,
// 176 bytes) are 16-byte multiples and every unit's bytes start at a
// 16-byte offset in the block, so a row that starts 16-byte aligned needs
// nothing else (the launcher checks).
template <bool W16> struct MinferMmqQ4K {
    static constexpr int bs = MINFER_QKK, bb = MINFER_Q4_K_BYTES, align = W16 ? 16 : 4;
    static __device__ __forceinline__ void unit(const uint8_t* row, int kb, MinferMmqUnit& u) {
        const uint8_t* b = row + (size_t)(kb >> 3) * bb;
        const int j = kb & 7;
        int sc, mn;
        minfer_kscale_min(b + 4, j, &sc, &mn);
        const uint32_t dm = minfer_mmq_w4(b);
        u.d = __fmul_rn(minfer_h2f(dm & 0xFFFFu), (float)sc);
        u.m = -__fmul_rn(minfer_h2f(dm >> 16), (float)mn);
        u.sc = 0;
        const int shift = 4 * (j & 1);
        uint32_t v[8];
        minfer_mmq_load8<W16>(b + 16 + 32 * (j >> 1), v);
#pragma unroll
        for (int i = 0; i < 8; i++) u.q[i] = (v[i] >> shift) & 0x0F0F0F0Fu;
    }
};
template <> struct MinferMmqW<MINFER_T_Q4_K> : MinferMmqQ4K<true> {};

template <bool W16> struct MinferMmqQ5K {
    static constexpr int bs = MINFER_QKK, bb = MINFER_Q5_K_BYTES, align = W16 ? 16 : 4;
    static __device__ __forceinline__ void unit(const uint8_t* row, int kb, MinferMmqUnit& u) {
        const uint8_t* b = row + (size_t)(kb >> 3) * bb;
        const int j = kb & 7;
        int sc, mn;
        minfer_kscale_min(b + 4, j, &sc, &mn);
        const uint32_t dm = minfer_mmq_w4(b);
        u.d = __fmul_rn(minfer_h2f(dm & 0xFFFFu), (float)sc);
        u.m = -__fmul_rn(minfer_h2f(dm >> 16), (float)mn);
        u.sc = 0;
        const int shift = 4 * (j & 1);
        uint32_t qs[8], qh[8];
        minfer_mmq_load8<W16>(b + 48 + 32 * (j >> 1), qs);
        minfer_mmq_load8<W16>(b + 16, qh);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t lo = (qs[i] >> shift) & 0x0F0F0F0Fu;
            const uint32_t hi = ((qh[i] >> j) & 0x01010101u) << 4;
            u.q[i] = lo | hi;
        }
    }
};
template <> struct MinferMmqW<MINFER_T_Q5_K> : MinferMmqQ5K<true> {};

// minfer_mmq_q6k_quants fills u.q with sub-block j of the Q6_K ql + qh
// bytes at b (a GGUF block and the repacked copy keep them alike): each
// 32-bit word read as two 16-bit halves (W4 false: a GGUF block is 2-byte
// aligned) or whole (the repacked copy's 16-byte aligned blocks).
template <bool W4> __device__ __forceinline__ void minfer_mmq_q6k_quants(const uint8_t* b, int j, MinferMmqUnit& u) {
    const int hh = j >> 2, quarter = j & 3;
    const uint8_t* ql = b + 64 * hh + 32 * (quarter & 1);
    const uint8_t* qh = b + 128 + 32 * hh;
    const int lshift = 4 * (quarter >> 1), hshift = 2 * quarter;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint32_t lw = W4 ? minfer_mmq_w4(ql + 4 * i) : minfer_mmq_w2(ql + 4 * i);
        const uint32_t hw = W4 ? minfer_mmq_w4(qh + 4 * i) : minfer_mmq_w2(qh + 4 * i);
        const uint32_t lo = (lw >> lshift) & 0x0F0F0F0Fu;
        const uint32_t hi = ((hw >> hshift) & 0x03030303u) << 4;
        u.q[i] = __vsub4(lo | hi, 0x20202020u);
    }
}

template <> struct MinferMmqW<MINFER_T_Q6_K> {
    static constexpr int bs = MINFER_QKK, bb = MINFER_Q6_K_BYTES, align = 2;
    // Sub-block j = 4 hh + quarter: value l from the low (quarter < 2) or
    // high nibble of ql[64 hh + 32 (quarter & 1) + l] and bits 2 quarter of
    // qh[32 hh + l]; scales[8 hh + 2 quarter + (l >= 16)].
    static __device__ __forceinline__ void unit(const uint8_t* row, int kb, MinferMmqUnit& u) {
        const uint8_t* b = row + (size_t)(kb >> 3) * bb;
        const int j = kb & 7, hh = j >> 2, quarter = j & 3;
        minfer_mmq_q6k_quants<false>(b, j, u);
        u.sc = (int)minfer_mmq_u16(b + 192 + 8 * hh + 2 * quarter); // two int8, low = values 0..15
        u.d = minfer_h2f(minfer_mmq_u16(b + 208));
        u.m = 0.0f;
    }
};

// The repacked layout. unit_r(w, nb, i, kb, u) decodes 32-block kb of
// block i (the super-block row * k / 256 + kb / 8) of the copy w of nb
// blocks: the same unit as the GGUF decoder of its type, read from the
// three arrays.
#define MINFER_MMQ_T_Q6_KR (MINFER_T_Q6_K + 1000)

template <> struct MinferMmqW<MINFER_MMQ_T_Q6_KR> {
    static constexpr int bs = MINFER_QKK, bb = MINFER_Q6_K_BYTES, align = 16;
    static __device__ __forceinline__ void unit_r(const uint8_t* w, size_t nb, size_t i, int kb, MinferMmqUnit& u) {
        const int j = kb & 7, hh = j >> 2, quarter = j & 3;
        minfer_mmq_q6k_quants<true>(w + 192 * i, j, u); // ql, then qh
        u.sc = (int)minfer_mmq_u16(w + 192 * nb + 16 * i + 8 * hh + 2 * quarter);
        u.d = minfer_h2f(minfer_mmq_u16(w + 208 * nb + 2 * i));
        u.m = 0.0f;
    }
};

// MinferMmqUnitOf<T, ASYNC>: the unit decoder of T's plain (ASYNC false)
// or async kernel: MinferMmqW<T>, but the async Q4_K / Q5_K keep the 4-byte
// loads: MINFER_MMQ_ASYNC asks only 4-byte aligned weights of them, and the
// staged copy keeps each byte's address mod 16, so a 16-byte load there
// would need what the global one needs.
template <int T, bool ASYNC> struct MinferMmqUnitOf : MinferMmqW<T> {};
template <> struct MinferMmqUnitOf<MINFER_T_Q4_K, true> : MinferMmqQ4K<false> {};
template <> struct MinferMmqUnitOf<MINFER_T_Q5_K, true> : MinferMmqQ5K<false> {};

// MinferMmqRepacked<T>: whether T is a repacked layout (unit_r, no async).
template <int T> struct MinferMmqRepacked {
    static constexpr bool value = T == MINFER_MMQ_T_Q6_KR;
};

// ---------------------------------------------------------------- MMA

#ifndef MINFER_KERNEL_EMU
// The emulation (scripts/kernel-emu/include/mma.h) defines both on the CPU.
__device__ __forceinline__ void minfer_mmq_mma_k32(int c[4], const int a[4], int b0, int b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

__device__ __forceinline__ void minfer_mmq_mma_k16(int c[4], int a0, int a1, int b0) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}
#endif

// Exact int32 -> f32 for |c| < 2^22: add the bits of 1.5 * 2^23, subtract
// it in f32 (two full-rate ops instead of one quarter-rate I2F).
__device__ __forceinline__ float minfer_mmq_i2f(int c) {
    return __fsub_rn(__int_as_float(c + 0x4B400000), 12582912.0f);
}


// MinferMmqRaw<T>: the async staging of one weight row's stage: its span
// (small types: the stage's MINFER_MMQ_NB blocks; K-quants: the super-block
// holding the stage, which is half of one) and the 16-byte chunks that
// cover it from any address mod 16.
template <int T> struct MinferMmqRaw {
    using W = MinferMmqW<T>;
    static constexpr bool kSuper = W::bs == MINFER_QKK;
    static constexpr int span = kSuper ? W::bb : MINFER_MMQ_NB * W::bb;
    static constexpr int chunks = MINFER_MMQ_CHUNKS(span);
    // Byte offset in the row of the span of the stage starting at 32-block kb.
    static __device__ __forceinline__ size_t off(int kb) {
        return kSuper ? (size_t)(kb / 8) * W::bb : (size_t)kb * W::bb;
    }
    // Span bytes of the stage at kb when the row's blocks end at kbEnd.
    static __device__ __forceinline__ int bytes(int kb, int kbEnd) {
        return kSuper ? W::bb : min(MINFER_MMQ_NB, kbEnd - kb) * W::bb;
    }
};

// Dynamic shared memory of the async variant of T with a ROWS x TOKS tile
// (cuda/mmq.go mmqAsyncSmemBytes carries the same sum).
#define MINFER_MMQ_RAW_BYTES(chunks, R, M) (16 * ((R) * (chunks) + (M) * MINFER_MMQ_ACT_CHUNKS))

// minfer_mmq_stage_copy issues the cp.async copies of the stage at kb
// (32-block index; the row's blocks end at kbEnd) into raw: weight row lr at
// raw + 16 * chunks * lr, token lt after the ROWS weight rows at
// 16 * MINFER_MMQ_ACT_CHUNKS each. Rows >= n and tokens >= nt copy nothing
// (the unpack zeroes them). Every chunk is read whole from a 16-byte aligned
// address inside the row's span but for the span's first and last chunk,
// which read src_bytes only: never a byte past the span's end, and before
// its start only bytes of the same 16-byte aligned piece (an allocation is
// at least 16-byte aligned, so that piece is inside it).
// minfer_mmq_chunk issues chunk c of the span [g0, g1) copied from its
// 16-byte aligned start into dst (nothing when the span ends before it).
__device__ __forceinline__ void minfer_mmq_chunk(uint8_t* dst, const uint8_t* g0, const uint8_t* g1, int c) {
    const uint8_t* src = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(g0) & ~(uintptr_t)15) + 16 * c;
    if (src < g1) minfer_cp_async16(dst, src, min(16, (int)(g1 - src)));
}

template <int T, int ROWS, int TOKS, int THREADS>
__device__ __forceinline__ void minfer_mmq_stage_copy(uint8_t* raw, const uint8_t* __restrict__ w,
                                                      const uint8_t* __restrict__ a, size_t rowBytes, size_t actRow,
                                                      int n0, int n, int m0, int nt, int kb, int kbEnd) {
    using R = MinferMmqRaw<T>;
    for (int job = threadIdx.x; job < ROWS * R::chunks; job += THREADS) {
        const int lr = job / R::chunks, c = job % R::chunks;
        if (n0 + lr >= n) continue;
        const uint8_t* g0 = w + (size_t)(n0 + lr) * rowBytes + R::off(kb);
        minfer_mmq_chunk(raw + 16 * (R::chunks * lr + c), g0, g0 + R::bytes(kb, kbEnd), c);
    }
    uint8_t* rawA = raw + 16 * R::chunks * ROWS;
    const int nblk = min(MINFER_MMQ_NB, kbEnd - kb);
    for (int job = threadIdx.x; job < TOKS * MINFER_MMQ_ACT_CHUNKS; job += THREADS) {
        const int lt = job / MINFER_MMQ_ACT_CHUNKS, c = job % MINFER_MMQ_ACT_CHUNKS;
        if (m0 + lt >= nt) continue;
        const uint8_t* g0 = a + (size_t)(m0 + lt) * actRow + (size_t)kb * MINFER_MMQ_Q8_1_BYTES;
        minfer_mmq_chunk(rawA + 16 * (MINFER_MMQ_ACT_CHUNKS * lt + c), g0, g0 + nblk * MINFER_MMQ_Q8_1_BYTES, c);
    }
}

// The address in the staging copy of global byte g of a span copied from
// its 16-byte aligned start g0 into dst.
__device__ __forceinline__ const uint8_t* minfer_mmq_staged(const uint8_t* dst, const uint8_t* g0, const uint8_t* g) {
    return dst + (reinterpret_cast<uintptr_t>(g0) & 15) + (g - g0);
}

// WR x WT warps, each a 32 x 32 output tile: the block tile is 32 WR
// weight rows x 32 WT tokens. blockIdx.z is the split-K index: split z
// runs stages [z * sps, min((z + 1) * sps, stages)) with sps =
// ceil(stages / gridDim.z) and writes its partial sums to out + z * nt * n
// (the launcher passes bias only when gridDim.z is 1; minfer_mmq_reduce adds
// the partials in z order, then the bias).
//
// ASYNC: the stage's bytes come from raw (MINFER_MMQ_RAW_BYTES of dynamic
// shared memory), copied one stage ahead by minfer_mmq_stage_copy; the
// unpack reads them there. Same arithmetic in the same order: bitwise the
// plain body.
template <int T, int WR, int WT, bool ASYNC>
__device__ __forceinline__ void minfer_mmq_body(float* __restrict__ out, const uint8_t* __restrict__ a,
                                                const uint8_t* __restrict__ w, const float* __restrict__ bias,
                                                int k, int n, int nt, uint8_t* raw) {
    using W = MinferMmqUnitOf<T, ASYNC>;
    constexpr int ROWS = 32 * WR, TOKS = 32 * WT, THREADS = 32 * WR * WT;
    constexpr bool kQ6K = T == MINFER_T_Q6_K || T == MINFER_MMQ_T_Q6_KR;
    constexpr bool kRepacked = MinferMmqRepacked<T>::value;
    static_assert(!(ASYNC && kRepacked), "the repacked layouts have no async variant");
    constexpr bool kMin = T == MINFER_T_Q4_1 || T == MINFER_T_Q5_1 || T == MINFER_T_Q4_K || T == MINFER_T_Q5_K;
    static_assert(ROWS * MINFER_MMQ_NB % THREADS == 0 && TOKS * MINFER_MMQ_NB % THREADS == 0, "mmq tile split");
    __shared__ MinferMmqSmem<ROWS, TOKS> sm; // 16-byte aligned (the struct)

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tig = lane & 3;
    const int wr = warp % WR; // rows 32 wr ..
    const int wt = warp / WR; // tokens 32 wt ..
    const int n0 = blockIdx.x * ROWS;
    const int m0 = blockIdx.y * TOKS;
    const int kblocks = k / MINFER_QK;
    const int stages = (kblocks + MINFER_MMQ_NB - 1) / MINFER_MMQ_NB;
    const int sps = (stages + (int)gridDim.z - 1) / (int)gridDim.z;
    const int kbBegin = (int)blockIdx.z * sps * MINFER_MMQ_NB;
    const int kbEnd = min(kblocks, kbBegin + sps * MINFER_MMQ_NB);
    out += (size_t)blockIdx.z * (size_t)nt * (size_t)n;
    const size_t rowBytes = (size_t)(k / W::bs) * W::bb;
    const size_t actRow = (size_t)kblocks * MINFER_MMQ_Q8_1_BYTES;

    float acc[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.0f;

    using R = MinferMmqRaw<T>;
    const uint8_t* rawA = ASYNC ? raw + 16 * R::chunks * ROWS : nullptr;
    if (ASYNC && kbBegin < kbEnd) {
        minfer_mmq_stage_copy<T, ROWS, TOKS, THREADS>(raw, w, a, rowBytes, actRow, n0, n, m0, nt, kbBegin, kbEnd);
        minfer_cp_async_commit();
    }

    for (int k0 = kbBegin; k0 < kbEnd; k0 += MINFER_MMQ_NB) {
        if (ASYNC) {
            minfer_cp_async_wait<0>(); // this thread's copies of stage k0 have landed
            __syncthreads();          // and every thread's
        }
        // Weight tile: ROWS x NB units; four adjacent threads take the four
        // blocks of one row (contiguous bytes).
#pragma unroll
        for (int r = 0; r < ROWS * MINFER_MMQ_NB / THREADS; r++) {
            const int job = tid + r * THREADS;
            const int lr = job / MINFER_MMQ_NB, bi = job % MINFER_MMQ_NB;
            const int row = n0 + lr, kb = k0 + bi;
            MinferMmqUnit u;
            if (row < n && kb < kbEnd) {
                if constexpr (kRepacked) {
                    // Block index in the copy: per block of W::bs values
                    // (Q6_K: a super-block; the matrix is n * k / bs of them).
                    const size_t perRow = (size_t)(k / W::bs);
                    W::unit_r(w, (size_t)n * perRow, (size_t)row * perRow + (size_t)(kb / (W::bs / MINFER_QK)), kb, u);
                } else {
                    const uint8_t* grow = w + (size_t)row * rowBytes;
                    if (ASYNC) {
                        // The unit reads grow + offsets; point it into the
                        // staging copy of the span (same address mod 16).
                        const uint8_t* g0 = grow + R::off(k0);
                        const uint8_t* srow = minfer_mmq_staged(raw + 16 * R::chunks * lr, g0, grow);
                        W::unit(srow, kb, u);
                    } else {
                        W::unit(grow, kb, u);
                    }
                }
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) u.q[i] = 0;
                u.d = 0.0f;
                u.m = 0.0f;
                u.sc = 0;
            }
            uint4* dst = reinterpret_cast<uint4*>(sm.wq + lr * MINFER_MMQ_LD + MINFER_QK * bi);
            dst[0] = make_uint4(u.q[0], u.q[1], u.q[2], u.q[3]);
            dst[1] = make_uint4(u.q[4], u.q[5], u.q[6], u.q[7]);
            sm.wd[lr * MINFER_MMQ_NB + bi] = u.d;
            if (kMin) sm.wm[lr * MINFER_MMQ_NB + bi] = u.m;
            if (kQ6K) sm.wsc[lr * MINFER_MMQ_NB + bi] = u.sc;
        }
        // Activation tile: TOKS x NB Q8_1 blocks.
#pragma unroll
        for (int r = 0; r < TOKS * MINFER_MMQ_NB / THREADS; r++) {
            const int job = tid + r * THREADS;
            const int lt = job / MINFER_MMQ_NB, bi = job % MINFER_MMQ_NB;
            const int tok = m0 + lt, kb = k0 + bi;
            uint32_t q[8];
            float d = 0.0f;
            int sum = 0;
            if (tok < nt && kb < kbEnd) {
                const uint8_t* ab = a + (size_t)tok * actRow + (size_t)kb * MINFER_MMQ_Q8_1_BYTES;
                if (ASYNC) {
                    const uint8_t* g0 = a + (size_t)tok * actRow + (size_t)k0 * MINFER_MMQ_Q8_1_BYTES;
                    ab = minfer_mmq_staged(rawA + 16 * MINFER_MMQ_ACT_CHUNKS * lt, g0, ab);
                }
                const uint32_t* aw = reinterpret_cast<const uint32_t*>(ab);
                d = minfer_h2f(aw[0] & 0xFFFFu);
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    q[i] = aw[1 + i];
                    sum = __dp4a((int)q[i], 0x01010101, sum);
                }
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) q[i] = 0;
            }
            uint4* dst = reinterpret_cast<uint4*>(sm.xq + lt * MINFER_MMQ_LD + MINFER_QK * bi);
            dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
            dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
            sm.xd[lt * MINFER_MMQ_NB + bi] = d;
            if (kMin) sm.xs[lt * MINFER_MMQ_NB + bi] = __fmul_rn(d, (float)sum);
        }
        __syncthreads();
        if (ASYNC && k0 + MINFER_MMQ_NB < kbEnd) {
            // Every thread has unpacked raw: refill it with the next stage
            // while this one's MMAs run.
            minfer_mmq_stage_copy<T, ROWS, TOKS, THREADS>(raw, w, a, rowBytes, actRow, n0, n, m0, nt, k0 + MINFER_MMQ_NB, kbEnd);
            minfer_cp_async_commit();
        }

#pragma unroll
        for (int bi = 0; bi < MINFER_MMQ_NB; bi++) {
            int af[2][4];
            float dw[2][2], mw[2][2];
            int scw[2][2];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                const int lr = 32 * wr + 16 * mi + g;
                const int8_t* p = sm.wq + lr * MINFER_MMQ_LD + MINFER_QK * bi + 4 * tig;
                af[mi][0] = *reinterpret_cast<const int*>(p);
                af[mi][1] = *reinterpret_cast<const int*>(p + 8 * MINFER_MMQ_LD);
                af[mi][2] = *reinterpret_cast<const int*>(p + 16);
                af[mi][3] = *reinterpret_cast<const int*>(p + 8 * MINFER_MMQ_LD + 16);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int s = (lr + 8 * h) * MINFER_MMQ_NB + bi;
                    dw[mi][h] = sm.wd[s];
                    mw[mi][h] = kMin ? sm.wm[s] : 0.0f;
                    scw[mi][h] = kQ6K ? sm.wsc[s] : 0;
                }
            }
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                const int lt = 32 * wt + 8 * ni;
                const int8_t* p = sm.xq + (lt + g) * MINFER_MMQ_LD + MINFER_QK * bi + 4 * tig;
                const int b0 = *reinterpret_cast<const int*>(p);
                const int b1 = *reinterpret_cast<const int*>(p + 16);
                float dx[2], sx[2];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int s = (lt + 2 * tig + e) * MINFER_MMQ_NB + bi;
                    dx[e] = sm.xd[s];
                    sx[e] = kMin ? sm.xs[s] : 0.0f;
                }
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    int c[4];
                    if (kQ6K) {
                        int lo[4], hi[4];
                        minfer_mmq_mma_k16(lo, af[mi][0], af[mi][1], b0);
                        minfer_mmq_mma_k16(hi, af[mi][2], af[mi][3], b1);
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int sw = scw[mi][e >> 1];
                            const int slo = (int)(int8_t)(sw & 0xFF), shi = (int)(int8_t)((sw >> 8) & 0xFF);
                            c[e] = slo * lo[e] + shi * hi[e];
                        }
                    } else {
                        minfer_mmq_mma_k32(c, af[mi], b0, b1);
                    }
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int h = e >> 1, x = e & 1; // c0,c1: row g; c2,c3: row g+8; tokens 2 tig + x
                        const float cf = kQ6K ? __int2float_rn(c[e]) : minfer_mmq_i2f(c[e]);
                        acc[mi][ni][e] = __fmaf_rn(cf, __fmul_rn(dw[mi][h], dx[x]), acc[mi][ni][e]);
                        if (kMin) acc[mi][ni][e] = __fmaf_rn(mw[mi][h], sx[x], acc[mi][ni][e]);
                    }
                }
            }
        }
        if (!ASYNC) __syncthreads(); // ASYNC: the next stage's barrier after its wait orders the tiles' reuse
    }

#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = n0 + 32 * wr + 16 * mi + g + 8 * h;
            if (row >= n) continue;
            const float bv = bias != nullptr ? bias[row] : 0.0f;
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int x = 0; x < 2; x++) {
                    const int tok = m0 + 32 * wt + 8 * ni + 2 * tig + x;
                    if (tok < nt) out[(size_t)tok * n + row] = acc[mi][ni][2 * h + x] + bv;
                }
        }
}

// minfer_mmq_<type>: grid (ceil(n / MINFER_MMQ_ROWS), ceil(nt /
// MINFER_MMQ_TOKS), splits), block (MINFER_MMQ_THREADS). _r64: the 64-row
// tile (grid ceil(n / MINFER_MMQ_ROWS_SMALL) wide, block
// MINFER_MMQ_THREADS_SMALL), twice the blocks for shapes whose 128-row grid
// leaves SMs idle. Static smem. a: nt Q8_1 rows (4-byte aligned). The
// launcher (cuda/launch_mmq.go mmqPlanFor) picks the variant and splits.
//
// _async, _async_r64: the async variants of both tiles (MINFER_MMQ_ASYNC),
// with MINFER_MMQ_RAW_BYTES(chunks of T, rows, MINFER_MMQ_TOKS) of dynamic
// shared memory (above the 48 KiB default with the static tile: the
// launcher opts them in at init).
#ifdef MINFER_KERNEL_EMU
static uint8_t minfer_mmq_dyn[MINFER_MMQ_RAW_BYTES(MINFER_MMQ_CHUNKS(MINFER_Q6_K_BYTES), MINFER_MMQ_ROWS, MINFER_MMQ_TOKS)];
#define MINFER_MMQ_DYN minfer_mmq_dyn
#else
extern __shared__ __align__(16) uint8_t minfer_mmq_dyn[];
#define MINFER_MMQ_DYN minfer_mmq_dyn
#endif
// MINFER_MMQ_TILES defines both tiles of one variant: minfer_mmq_<name>
// (128 rows) and minfer_mmq_<name>_r64.
#define MINFER_MMQ_TILES(name, T, ASYNC, DYN)                                                              \
    extern "C" __global__ void __launch_bounds__(MINFER_MMQ_THREADS, 2)                                     \
        minfer_mmq_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, int n, \
                          int nt) {                                                                        \
        minfer_mmq_body<T, 4, 2, ASYNC>(out, a, w, bias, k, n, nt, DYN);                                   \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(MINFER_MMQ_THREADS_SMALL, 4)                               \
        minfer_mmq_##name##_r64(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k,   \
                                int n, int nt) {                                                           \
        minfer_mmq_body<T, 2, 2, ASYNC>(out, a, w, bias, k, n, nt, DYN);                                   \
    }
#define MINFER_MMQ_KERNEL(name, T) \
    MINFER_MMQ_TILES(name, T, false, nullptr) MINFER_MMQ_TILES(name##_async, T, true, MINFER_MMQ_DYN)

MINFER_MMQ_KERNEL(q8_0, MINFER_T_Q8_0)
MINFER_MMQ_KERNEL(q4_0, MINFER_T_Q4_0)
MINFER_MMQ_KERNEL(q4_1, MINFER_T_Q4_1)
MINFER_MMQ_KERNEL(q5_0, MINFER_T_Q5_0)
MINFER_MMQ_KERNEL(q5_1, MINFER_T_Q5_1)
MINFER_MMQ_KERNEL(q4_k, MINFER_T_Q4_K)
MINFER_MMQ_KERNEL(q5_k, MINFER_T_Q5_K)
MINFER_MMQ_KERNEL(q6_k, MINFER_T_Q6_K)

// minfer_mmq_q6_kr, _r64: the repacked layout (w: the copy of all n rows;
// 16-byte aligned), the plain tiles only.
MINFER_MMQ_TILES(q6_kr, MINFER_MMQ_T_Q6_KR, false, nullptr)

#undef MINFER_MMQ_KERNEL
#undef MINFER_MMQ_TILES

// Split-K reduction: out[i] = ((part[0][i] + part[1][i]) + ...) + bias[i %
// n] over total = nt * n outputs, the splits added in index order (one
// fixed order: deterministic, and a replayed graph gives the same bits).
// grid ceil(total / MINFER_MMQ_REDUCE_THREADS), block
// MINFER_MMQ_REDUCE_THREADS.
extern "C" __global__ void __launch_bounds__(MINFER_MMQ_REDUCE_THREADS)
    minfer_mmq_reduce(float* __restrict__ out, const float* __restrict__ part, const float* __restrict__ bias,
                      int n, int total, int splits) {
    const int i = blockIdx.x * MINFER_MMQ_REDUCE_THREADS + threadIdx.x;
    if (i >= total) return;
    float v = part[i];
    for (int z = 1; z < splits; z++) v = __fadd_rn(v, part[(size_t)z * (size_t)total + i]);
    if (bias != nullptr) v = __fadd_rn(v, bias[i % n]);
    out[i] = v;
}
