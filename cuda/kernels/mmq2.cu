// mmq2.cu: MINFER_MMQ_V2. The prefill int8 tensor-core GEMM of mmq.cu
// (same operands, same tiles, same split-K, same per-output arithmetic)
// software-pipelined over two shared-memory stages.
//
// v1 loads + unpacks a k stage into its one shared tile, syncs, multiplies,
// syncs again: every stage's global latency is exposed, and only 16 warps
// per SM (2 blocks of 256 threads at 128 registers) are there to hide it.
// v2 keeps two stage buffers. While the MMAs of stage s read buffer s & 1:
//   - the raw global words of the weight units of stage s + 1 are already
//     in flight to registers (issued before the MMA loop; unpacked and
//     stored to the other buffer after it: weights need unpacking, so a
//     register prefetch);
//   - the activation quants of stage s + 1 (already int8 Q8_1) go straight
//     into the other buffer by cp.async (4-byte LDGSTS: the Q8_1 blocks are
//     36 bytes, only 4-byte aligned); the issuing thread reads its own
//     words back after cp.async.wait_group for the exact quant sum.
// One __syncthreads per stage: a thread that writes the other buffer in
// stage s has passed the barrier that ended stage s - 1, the last reader.
//
// Bitwise v1: each output is the same sequence of f32 operations in the
// same order (per 32-block int32 MMA result c, acc += float(c) * (d_w *
// d_a) (+ m_w * (d_a * sum q_a)), 32-blocks in increasing k), with the same
// scales (the decode below computes exactly v1's unit values; only the
// moment the global bytes are read moves). The split of k over blockIdx.z
// is v1's (stages of MINFER_MMQ2_KB values), and minfer_mmq_reduce adds the
// parts as for v1.
//
// Weight units are taken in pairs per thread (ROWS x 2 pairs per stage,
// one per thread in both tiles): the two units of a pair share raw words
// for the K-quants, which keeps the prefetch registers low:
//   Q4_K / Q5_K: sub-blocks (j, j + 1), j even: the same 32 qs bytes (low /
//                high nibbles), Q5_K also the same 32 qh bytes;
//   Q6_K:        sub-blocks (j, j + 2) of one 128-value half: the same ql
//                and qh bytes, other shifts;
//   32-value types: blocks (b, b + 1), nothing shared.
//
// This file is self-contained (helpers prefixed minfer_mmq2_), so it does
// not depend on the include order of mmq.cu; the constants equal v1's.
// Dynamic shared memory, 2 x MINFER_MMQ2_STAGE_BYTES: 71680 bytes for the
// 128-row tile (launcher opts in above 48 KiB), 47104 for the 64-row one.
//
// Kernel names: minfer_mmq2_<type>, minfer_mmq2_<type>_r64.
#include "dequant.cuh"
#include "pdl.cuh"

#define MINFER_MMQ2_ROWS 128      // weight rows per block tile, big variant (4 x 2 warps)
#define MINFER_MMQ2_ROWS_SMALL 64 // _r64 variant (2 x 2 warps)
#define MINFER_MMQ2_TOKS 64
#define MINFER_MMQ2_KB 128
#define MINFER_MMQ2_NB (MINFER_MMQ2_KB / MINFER_QK) // 32-blocks per stage
#define MINFER_MMQ2_THREADS 256
#define MINFER_MMQ2_THREADS_SMALL 128
#define MINFER_MMQ2_LD (MINFER_MMQ2_KB + 16) // bytes per shared row
#define MINFER_MMQ2_Q8_1_BYTES 36
#define MINFER_MMQ2_STAGES 2
// The MMA loop over a stage's four 32-blocks is not unrolled: unrolled, ptxas
// hoists all four blocks' fragment loads and, with the prefetch registers
// live, spills 140-360 bytes for the min-term types and Q6_K at the
// 128-register cap; rolled, no kernel spills (nvcc 11.8, sm_90).
#ifndef MINFER_MMQ2_BI_UNROLL
#define MINFER_MMQ2_BI_UNROLL 1
#endif

// One stage buffer of a ROWS x TOKS tile; the kernel's dynamic shared
// memory is MINFER_MMQ2_STAGES of them (cuda/launch_mmq2.go: mmq2SmemBytes).
#define MINFER_MMQ2_STAGE_BYTES(R, M) \
    (((R) + (M)) * MINFER_MMQ2_LD + 3 * (R) * MINFER_MMQ2_NB * 4 + 2 * (M) * MINFER_MMQ2_NB * 4)

template <int R, int M> struct MinferMmq2Stage {
    int8_t wq[R * MINFER_MMQ2_LD];
    int8_t xq[M * MINFER_MMQ2_LD];
    float wd[R * MINFER_MMQ2_NB]; // weight scale per (row, block)
    float wm[R * MINFER_MMQ2_NB]; // min-term factor per (row, block)
    int wsc[R * MINFER_MMQ2_NB];  // Q6_K: the two int8 scales, packed
    float xd[M * MINFER_MMQ2_NB]; // activation d per (token, block)
    float xs[M * MINFER_MMQ2_NB]; // d * sum q per (token, block)
};
static_assert(sizeof(MinferMmq2Stage<MINFER_MMQ2_ROWS, MINFER_MMQ2_TOKS>) ==
                  MINFER_MMQ2_STAGE_BYTES(MINFER_MMQ2_ROWS, MINFER_MMQ2_TOKS),
              "mmq2 stage layout");
static_assert(sizeof(MinferMmq2Stage<MINFER_MMQ2_ROWS_SMALL, MINFER_MMQ2_TOKS>) ==
                  MINFER_MMQ2_STAGE_BYTES(MINFER_MMQ2_ROWS_SMALL, MINFER_MMQ2_TOKS),
              "mmq2 stage layout");
static_assert(MINFER_MMQ2_STAGE_BYTES(MINFER_MMQ2_ROWS, MINFER_MMQ2_TOKS) % 16 == 0 &&
                  MINFER_MMQ2_STAGE_BYTES(MINFER_MMQ2_ROWS_SMALL, MINFER_MMQ2_TOKS) % 16 == 0,
              "mmq2 stages stay 16-byte aligned");

extern __shared__ __align__(16) unsigned char minfer_mmq2_smem[];

__device__ __forceinline__ uint32_t minfer_mmq2_u16(const uint8_t* p) {
    return *reinterpret_cast<const unsigned short*>(p);
}

// 32-bit word at a 2-byte aligned address.
__device__ __forceinline__ uint32_t minfer_mmq2_w2(const uint8_t* p) {
    return minfer_mmq2_u16(p) | (minfer_mmq2_u16(p + 2) << 16);
}

__device__ __forceinline__ uint32_t minfer_mmq2_w4(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Bit e (0..3) of h -> bit 8e + 4: the fifth bit of four packed values.
__device__ __forceinline__ uint32_t minfer_mmq2_spread4(uint32_t h) {
    return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25);
}

// Byte i (0..11) of the 12 K-quant scale bytes held as three words.
__device__ __forceinline__ uint32_t minfer_mmq2_byte12(const uint32_t s[3], int i) {
    const uint32_t w = i < 4 ? s[0] : (i < 8 ? s[1] : s[2]);
    return (w >> (8 * (i & 3))) & 0xFFu;
}

// minfer_kscale_min (dequant.cuh) over the scale words in registers.
__device__ __forceinline__ void minfer_mmq2_kscale(const uint32_t s[3], int j, int* sc, int* mn) {
    if (j < 4) {
        *sc = (int)(minfer_mmq2_byte12(s, j) & 63u);
        *mn = (int)(minfer_mmq2_byte12(s, j + 4) & 63u);
    } else {
        *sc = (int)((minfer_mmq2_byte12(s, j + 4) & 0xFu) | ((minfer_mmq2_byte12(s, j - 4) >> 6) << 4));
        *mn = (int)((minfer_mmq2_byte12(s, j + 4) >> 4) | ((minfer_mmq2_byte12(s, j) >> 6) << 4));
    }
}

// One decoded weight unit: 32 int8 values (8 words) and the scales.
struct MinferMmq2Unit {
    uint32_t q[8];
    float d, m;
    int sc;
};

// ---------------------------------------------------------------- per type
//
// A pair is units kb0 and kb0 + stride (kb counts 32-value blocks along the
// row; a K-quant's sub-block kb % 8 of super-block kb / 8). load issues the
// global reads of the valid units into Raw; decode(r, u, kb0, out) unpacks
// unit u (0 / 1, a constant after unrolling) to exactly mmq.cu's values.
// The pair's first unit within a stage: bi0(half) = half * (stride == 1 ? 2
// : 1), so the pairs of a row cover the stage's four 32-blocks.

template <int T> struct MinferMmq2W;

template <> struct MinferMmq2W<MINFER_T_Q8_0> {
    static constexpr int bs = MINFER_QK, bb = MINFER_Q8_0_BYTES, stride = 1;
    struct Raw {
        uint32_t d[2], q[2][8];
    };
    static __device__ __forceinline__ void load(const uint8_t* row, int kb0, bool ok0, bool ok1, Raw& r) {
#pragma unroll
        for (int u = 0; u < 2; u++) {
            if (!(u == 0 ? ok0 : ok1)) continue;
            const uint8_t* b = row + (size_t)(kb0 + u) * bb;
            r.d[u] = minfer_mmq2_u16(b);
#pragma unroll
            for (int i = 0; i < 8; i++) r.q[u][i] = minfer_mmq2_w2(b + 2 + 4 * i);
        }
    }
    static __device__ __forceinline__ void decode(const Raw& r, int u, int, MinferMmq2Unit& o) {
        o.d = minfer_h2f(r.d[u]);
        o.m = 0.0f;
        o.sc = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) o.q[i] = r.q[u][i];
    }
};

template <> struct MinferMmq2W<MINFER_T_Q4_0> {
    static constexpr int bs = MINFER_QK, bb = MINFER_Q4_0_BYTES, stride = 1;
    struct Raw {
        uint32_t d[2], v[2][4];
    };
    static __device__ __forceinline__ void load(const uint8_t* row, int kb0, bool ok0, bool ok1, Raw& r) {
#pragma unroll
        for (int u = 0; u < 2; u++) {
            if (!(u == 0 ? ok0 : ok1)) continue;
            const uint8_t* b = row + (size_t)(kb0 + u) * bb;
            r.d[u] = minfer_mmq2_u16(b);
#pragma unroll
            for (int i = 0; i < 4; i++) r.v[u][i] = minfer_mmq2_w2(b + 2 + 4 * i);
        }
    }
    static __device__ __forceinline__ void decode(const Raw& r, int u, int, MinferMmq2Unit& o) {
        o.d = minfer_h2f(r.d[u]);
        o.m = 0.0f;
        o.sc = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t v = r.v[u][i];
            o.q[i] = __vsub4(v & 0x0F0F0F0Fu, 0x08080808u);
            o.q[4 + i] = __vsub4((v >> 4) & 0x0F0F0F0Fu, 0x08080808u);
        }
    }
};

template <> struct MinferMmq2W<MINFER_T_Q5_0> {
    static constexpr int bs = MINFER_QK, bb = MINFER_Q5_0_BYTES, stride = 1;
    struct Raw {
        uint32_t d[2], qh[2], v[2][4];
    };
    static __device__ __forceinline__ void load(const uint8_t* row, int kb0, bool ok0, bool ok1, Raw& r) {
#pragma unroll
        for (int u = 0; u < 2; u++) {
            if (!(u == 0 ? ok0 : ok1)) continue;
            const uint8_t* b = row + (size_t)(kb0 + u) * bb;
            r.d[u] = minfer_mmq2_u16(b);
            r.qh[u] = minfer_mmq2_w2(b + 2);
#pragma unroll
            for (int i = 0; i < 4; i++) r.v[u][i] = minfer_mmq2_w2(b + 6 + 4 * i);
        }
    }
    static __device__ __forceinline__ void decode(const Raw& r, int u, int, MinferMmq2Unit& o) {
        o.d = minfer_h2f(r.d[u]);
        o.m = 0.0f;
        o.sc = 0;
        const uint32_t qh = r.qh[u];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t v = r.v[u][i];
            const uint32_t lo = (v & 0x0F0F0F0Fu) | minfer_mmq2_spread4((qh >> (4 * i)) & 15u);
            const uint32_t hi = ((v >> 4) & 0x0F0F0F0Fu) | minfer_mmq2_spread4((qh >> (16 + 4 * i)) & 15u);
            o.q[i] = __vsub4(lo, 0x10101010u);
            o.q[4 + i] = __vsub4(hi, 0x10101010u);
        }
    }
};

template <> struct MinferMmq2W<MINFER_T_Q4_1> {
    static constexpr int bs = MINFER_QK, bb = MINFER_Q4_1_BYTES, stride = 1;
    struct Raw {
        uint32_t dm[2], v[2][4];
    };
    static __device__ __forceinline__ void load(const uint8_t* row, int kb0, bool ok0, bool ok1, Raw& r) {
#pragma unroll
        for (int u = 0; u < 2; u++) {
            if (!(u == 0 ? ok0 : ok1)) continue;
            const uint8_t* b = row + (size_t)(kb0 + u) * bb;
            r.dm[u] = minfer_mmq2_w4(b);
#pragma unroll
            for (int i = 0; i < 4; i++) r.v[u][i] = minfer_mmq2_w4(b + 4 + 4 * i);
        }
    }
    static __device__ __forceinline__ void decode(const Raw& r, int u, int, MinferMmq2Unit& o) {
        o.d = minfer_h2f(r.dm[u] & 0xFFFFu);
        o.m = minfer_h2f(r.dm[u] >> 16);
        o.sc = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t v = r.v[u][i];
            o.q[i] = v & 0x0F0F0F0Fu;
            o.q[4 + i] = (v >> 4) & 0x0F0F0F0Fu;
        }
    }
};

template <> struct MinferMmq2W<MINFER_T_Q5_1> {
    static constexpr int bs = MINFER_QK, bb = MINFER_Q5_1_BYTES, stride = 1;
    struct Raw {
        uint32_t dm[2], qh[2], v[2][4];
    };
    static __device__ __forceinline__ void load(const uint8_t* row, int kb0, bool ok0, bool ok1, Raw& r) {
#pragma unroll
        for (int u = 0; u < 2; u++) {
            if (!(u == 0 ? ok0 : ok1)) continue;
            const uint8_t* b = row + (size_t)(kb0 + u) * bb;
            r.dm[u] = minfer_mmq2_w4(b);
            r.qh[u] = minfer_mmq2_w4(b + 4);
#pragma unroll
            for (int i = 0; i < 4; i++) r.v[u][i] = minfer_mmq2_w4(b + 8 + 4 * i);
        }
    }
    static __device__ __forceinline__ void decode(const Raw& r, int u, int, MinferMmq2Unit& o) {
        o.d = minfer_h2f(r.dm[u] & 0xFFFFu);
        o.m = minfer_h2f(r.dm[u] >> 16);
        o.sc = 0;
        const uint32_t qh = r.qh[u];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t v = r.v[u][i];
            o.q[i] = (v & 0x0F0F0F0Fu) | minfer_mmq2_spread4((qh >> (4 * i)) & 15u);
            o.q[4 + i] = ((v >> 4) & 0x0F0F0F0Fu) | minfer_mmq2_spread4((qh >> (16 + 4 * i)) & 15u);
        }
    }
};

// Q4_K pair: sub-blocks j, j + 1 (j even) of one super-block: the same 32
// qs bytes, low then high nibbles. The pair is valid or not as a whole (k
// and every split bound are multiples of 4 sub-blocks for a K-quant).
template <> struct MinferMmq2W<MINFER_T_Q4_K> {
    static constexpr int bs = MINFER_QKK, bb = MINFER_Q4_K_BYTES, stride = 1;
    struct Raw {
        uint32_t dm, s[3], qs[8];
    };
    static __device__ __forceinline__ void load(const uint8_t* row, int kb0, bool ok0, bool, Raw& r) {
        if (!ok0) return;
        const uint8_t* b = row + (size_t)(kb0 >> 3) * bb;
        const int j = kb0 & 7;
        r.dm = minfer_mmq2_w4(b);
#pragma unroll
        for (int i = 0; i < 3; i++) r.s[i] = minfer_mmq2_w4(b + 4 + 4 * i);
        const uint8_t* qs = b + 16 + 32 * (j >> 1);
#pragma unroll
        for (int i = 0; i < 8; i++) r.qs[i] = minfer_mmq2_w4(qs + 4 * i);
    }
    static __device__ __forceinline__ void decode(const Raw& r, int u, int kb0, MinferMmq2Unit& o) {
        const int j = (kb0 & 7) + u;
        int sc, mn;
        minfer_mmq2_kscale(r.s, j, &sc, &mn);
        o.d = __fmul_rn(minfer_h2f(r.dm & 0xFFFFu), (float)sc);
        o.m = -__fmul_rn(minfer_h2f(r.dm >> 16), (float)mn);
        o.sc = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) o.q[i] = (r.qs[i] >> (4 * u)) & 0x0F0F0F0Fu;
    }
};

// Q5_K pair: as Q4_K, plus the 32 qh bytes every sub-block shares (bit j).
template <> struct MinferMmq2W<MINFER_T_Q5_K> {
    static constexpr int bs = MINFER_QKK, bb = MINFER_Q5_K_BYTES, stride = 1;
    struct Raw {
        uint32_t dm, s[3], qs[8], qh[8];
    };
    static __device__ __forceinline__ void load(const uint8_t* row, int kb0, bool ok0, bool, Raw& r) {
        if (!ok0) return;
        const uint8_t* b = row + (size_t)(kb0 >> 3) * bb;
        const int j = kb0 & 7;
        r.dm = minfer_mmq2_w4(b);
#pragma unroll
        for (int i = 0; i < 3; i++) r.s[i] = minfer_mmq2_w4(b + 4 + 4 * i);
        const uint8_t* qs = b + 48 + 32 * (j >> 1);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            r.qs[i] = minfer_mmq2_w4(qs + 4 * i);
            r.qh[i] = minfer_mmq2_w4(b + 16 + 4 * i);
        }
    }
    static __device__ __forceinline__ void decode(const Raw& r, int u, int kb0, MinferMmq2Unit& o) {
        const int j = (kb0 & 7) + u;
        int sc, mn;
        minfer_mmq2_kscale(r.s, j, &sc, &mn);
        o.d = __fmul_rn(minfer_h2f(r.dm & 0xFFFFu), (float)sc);
        o.m = -__fmul_rn(minfer_h2f(r.dm >> 16), (float)mn);
        o.sc = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t lo = (r.qs[i] >> (4 * u)) & 0x0F0F0F0Fu;
            const uint32_t hi = ((r.qh[i] >> j) & 0x01010101u) << 4;
            o.q[i] = lo | hi;
        }
    }
};

// Q6_K pair: sub-blocks j, j + 2 (j % 4 < 2) of one 128-value half hh:
// quarters q and q + 2 read the same ql bytes (low, high nibble) and the
// same qh bytes (bits 2q, 2q + 4).
template <> struct MinferMmq2W<MINFER_T_Q6_K> {
    static constexpr int bs = MINFER_QKK, bb = MINFER_Q6_K_BYTES, stride = 2;
    struct Raw {
        uint32_t ql[8], qh[8], sc[2], d;
    };
    static __device__ __forceinline__ void load(const uint8_t* row, int kb0, bool ok0, bool, Raw& r) {
        if (!ok0) return;
        const uint8_t* b = row + (size_t)(kb0 >> 3) * bb;
        const int j = kb0 & 7, hh = j >> 2, quarter = j & 3;
        const uint8_t* ql = b + 64 * hh + 32 * (quarter & 1);
        const uint8_t* qh = b + 128 + 32 * hh;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            r.ql[i] = minfer_mmq2_w2(ql + 4 * i);
            r.qh[i] = minfer_mmq2_w2(qh + 4 * i);
        }
        r.sc[0] = minfer_mmq2_u16(b + 192 + 8 * hh + 2 * quarter);
        r.sc[1] = minfer_mmq2_u16(b + 192 + 8 * hh + 2 * (quarter + 2));
        r.d = minfer_mmq2_u16(b + 208);
    }
    static __device__ __forceinline__ void decode(const Raw& r, int u, int kb0, MinferMmq2Unit& o) {
        const int quarter = (kb0 & 3) + 2 * u;
        const int lshift = 4 * u, hshift = 2 * quarter;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t lo = (r.ql[i] >> lshift) & 0x0F0F0F0Fu;
            const uint32_t hi = ((r.qh[i] >> hshift) & 0x03030303u) << 4;
            o.q[i] = __vsub4(lo | hi, 0x20202020u);
        }
        o.sc = (int)r.sc[u];
        o.d = minfer_h2f(r.d);
        o.m = 0.0f;
    }
};

// ---------------------------------------------------------------- MMA

__device__ __forceinline__ void minfer_mmq2_mma_k32(int c[4], const int a[4], int b0, int b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

__device__ __forceinline__ void minfer_mmq2_mma_k16(int c[4], int a0, int a1, int b0) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

// Exact int32 -> f32 for |c| < 2^22 (mmq.cu minfer_mmq_i2f).
__device__ __forceinline__ float minfer_mmq2_i2f(int c) {
    return __fsub_rn(__int_as_float(c + 0x4B400000), 12582912.0f);
}

__device__ __forceinline__ void minfer_mmq2_cp4(void* dst, const void* src) {
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}

__device__ __forceinline__ void minfer_mmq2_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

__device__ __forceinline__ void minfer_mmq2_cp_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// ---------------------------------------------------------------- pipeline

// Per-thread stage loader of a ROWS x TOKS tile: the weight pair(s) and
// the activation unit(s) this thread owns, and their raw registers.
template <int T, int ROWS, int TOKS, int THREADS> struct MinferMmq2Loader {
    using W = MinferMmq2W<T>;
    using Stage = MinferMmq2Stage<ROWS, TOKS>;
    static constexpr bool kMin = T == MINFER_T_Q4_1 || T == MINFER_T_Q5_1 || T == MINFER_T_Q4_K || T == MINFER_T_Q5_K;
    static constexpr bool kQ6K = T == MINFER_T_Q6_K;
    static constexpr int PAIRS = ROWS * MINFER_MMQ2_NB / 2 / THREADS; // weight pairs per thread
    static constexpr int ACTS = TOKS * MINFER_MMQ2_NB / THREADS;      // activation units per thread
    static_assert(ROWS * MINFER_MMQ2_NB / 2 % THREADS == 0 && TOKS * MINFER_MMQ2_NB % THREADS == 0, "mmq2 tile split");

    typename W::Raw raw[PAIRS];
    bool ok[PAIRS][2];
    uint32_t ad[ACTS]; // raw f16 d of each activation unit (0: out of range)
    bool aok[ACTS];

    // Pair p of this thread: row lr, first 32-block of the stage bi0.
    static __device__ __forceinline__ void pairAt(int tid, int p, int& lr, int& bi0) {
        const int job = tid + p * THREADS;
        lr = job >> 1;
        bi0 = (job & 1) * (W::stride == 1 ? 2 : 1);
    }

    // Issue stage k0's reads: weight words to registers, activation quants
    // by cp.async into st (committed as one group), d to a register.
    __device__ __forceinline__ void issue(Stage& st, const uint8_t* __restrict__ a, const uint8_t* __restrict__ w,
                                          int tid, int n0, int m0, int k0, int kbEnd, int n, int nt, size_t rowBytes,
                                          size_t actRow) {
#pragma unroll
        for (int p = 0; p < PAIRS; p++) {
            int lr, bi0;
            pairAt(tid, p, lr, bi0);
            const int row = n0 + lr, kb0 = k0 + bi0;
            ok[p][0] = row < n && kb0 < kbEnd;
            ok[p][1] = row < n && kb0 + W::stride < kbEnd;
            W::load(w + (size_t)min(row, n - 1) * rowBytes, kb0, ok[p][0], ok[p][1], raw[p]);
        }
#pragma unroll
        for (int r = 0; r < ACTS; r++) {
            const int job = tid + r * THREADS;
            const int lt = job / MINFER_MMQ2_NB, bi = job % MINFER_MMQ2_NB;
            const int tok = m0 + lt, kb = k0 + bi;
            aok[r] = tok < nt && kb < kbEnd;
            int8_t* dst = st.xq + lt * MINFER_MMQ2_LD + MINFER_QK * bi;
            if (aok[r]) {
                const uint8_t* ab = a + (size_t)tok * actRow + (size_t)kb * MINFER_MMQ2_Q8_1_BYTES;
                ad[r] = *reinterpret_cast<const uint32_t*>(ab) & 0xFFFFu;
#pragma unroll
                for (int i = 0; i < 8; i++) minfer_mmq2_cp4(dst + 4 * i, ab + 4 + 4 * i);
            } else {
                ad[r] = 0;
                uint4* d4 = reinterpret_cast<uint4*>(dst);
                d4[0] = make_uint4(0, 0, 0, 0);
                d4[1] = make_uint4(0, 0, 0, 0);
            }
        }
        minfer_mmq2_cp_commit();
    }

    // Finish the stage issued into st: unpack and store the weight units,
    // wait for this thread's cp.async, then the activation scales.
    __device__ __forceinline__ void finish(Stage& st, int tid, int k0) {
#pragma unroll
        for (int p = 0; p < PAIRS; p++) {
            int lr, bi0;
            pairAt(tid, p, lr, bi0);
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int bi = bi0 + u * W::stride;
                MinferMmq2Unit o;
                if (ok[p][u]) {
                    W::decode(raw[p], u, k0 + bi0, o);
                } else {
#pragma unroll
                    for (int i = 0; i < 8; i++) o.q[i] = 0;
                    o.d = 0.0f;
                    o.m = 0.0f;
                    o.sc = 0;
                }
                uint4* dst = reinterpret_cast<uint4*>(st.wq + lr * MINFER_MMQ2_LD + MINFER_QK * bi);
                dst[0] = make_uint4(o.q[0], o.q[1], o.q[2], o.q[3]);
                dst[1] = make_uint4(o.q[4], o.q[5], o.q[6], o.q[7]);
                st.wd[lr * MINFER_MMQ2_NB + bi] = o.d;
                if (kMin) st.wm[lr * MINFER_MMQ2_NB + bi] = o.m;
                if (kQ6K) st.wsc[lr * MINFER_MMQ2_NB + bi] = o.sc;
            }
        }
        minfer_mmq2_cp_wait_all();
#pragma unroll
        for (int r = 0; r < ACTS; r++) {
            const int job = tid + r * THREADS;
            const int lt = job / MINFER_MMQ2_NB, bi = job % MINFER_MMQ2_NB;
            const float d = aok[r] ? minfer_h2f(ad[r]) : 0.0f;
            st.xd[lt * MINFER_MMQ2_NB + bi] = d;
            if (kMin) {
                // The exact quant sum (mmq.cu), over the words this thread's
                // own cp.async wrote (visible to it after the wait).
                const uint32_t* q = reinterpret_cast<const uint32_t*>(st.xq + lt * MINFER_MMQ2_LD + MINFER_QK * bi);
                int sum = 0;
#pragma unroll
                for (int i = 0; i < 8; i++) sum = __dp4a((int)q[i], 0x01010101, sum);
                st.xs[lt * MINFER_MMQ2_NB + bi] = __fmul_rn(d, (float)sum);
            }
        }
    }
};

// WR x WT warps, each a 32 x 32 output tile (mmq.cu minfer_mmq_body: the
// same tile, split-K and fold; only the staging differs).
template <int T, int WR, int WT>
__device__ __forceinline__ void minfer_mmq2_body(float* __restrict__ out, const uint8_t* __restrict__ a,
                                                 const uint8_t* __restrict__ w, const float* __restrict__ bias,
                                                 int k, int n, int nt) {
    using W = MinferMmq2W<T>;
    constexpr int ROWS = 32 * WR, TOKS = 32 * WT, THREADS = 32 * WR * WT;
    using Stage = MinferMmq2Stage<ROWS, TOKS>;
    using Loader = MinferMmq2Loader<T, ROWS, TOKS, THREADS>;
    constexpr bool kQ6K = Loader::kQ6K;
    constexpr bool kMin = Loader::kMin;
    Stage* sm = reinterpret_cast<Stage*>(minfer_mmq2_smem);
    constexpr int kBiUnroll = MINFER_MMQ2_BI_UNROLL;

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tig = lane & 3;
    const int wr = warp % WR; // rows 32 wr ..
    const int wt = warp / WR; // tokens 32 wt ..
    const int n0 = blockIdx.x * ROWS;
    const int m0 = blockIdx.y * TOKS;
    const int kblocks = k / MINFER_QK;
    const int stages = (kblocks + MINFER_MMQ2_NB - 1) / MINFER_MMQ2_NB;
    const int sps = (stages + (int)gridDim.z - 1) / (int)gridDim.z;
    const int kbBegin = (int)blockIdx.z * sps * MINFER_MMQ2_NB;
    const int kbEnd = min(kblocks, kbBegin + sps * MINFER_MMQ2_NB);
    const int nst = kbEnd > kbBegin ? (kbEnd - kbBegin + MINFER_MMQ2_NB - 1) / MINFER_MMQ2_NB : 0;
    out += (size_t)blockIdx.z * (size_t)nt * (size_t)n;
    const size_t rowBytes = (size_t)(k / W::bs) * W::bb;
    const size_t actRow = (size_t)kblocks * MINFER_MMQ2_Q8_1_BYTES;

    float acc[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.0f;

    Loader ld;
    if (nst > 0) {
        ld.issue(sm[0], a, w, tid, n0, m0, kbBegin, kbEnd, n, nt, rowBytes, actRow);
        ld.finish(sm[0], tid, kbBegin);
        __syncthreads();
    }

    for (int s = 0; s < nst; s++) {
        const Stage& cur = sm[s & 1];
        Stage& nxt = sm[(s & 1) ^ 1];
        const int kn = kbBegin + (s + 1) * MINFER_MMQ2_NB;
        const bool more = s + 1 < nst; // uniform over the block
        if (more) ld.issue(nxt, a, w, tid, n0, m0, kn, kbEnd, n, nt, rowBytes, actRow);

#pragma unroll kBiUnroll
        for (int bi = 0; bi < MINFER_MMQ2_NB; bi++) {
            int af[2][4];
            float dw[2][2], mw[2][2];
            int scw[2][2];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                const int lr = 32 * wr + 16 * mi + g;
                const int8_t* p = cur.wq + lr * MINFER_MMQ2_LD + MINFER_QK * bi + 4 * tig;
                af[mi][0] = *reinterpret_cast<const int*>(p);
                af[mi][1] = *reinterpret_cast<const int*>(p + 8 * MINFER_MMQ2_LD);
                af[mi][2] = *reinterpret_cast<const int*>(p + 16);
                af[mi][3] = *reinterpret_cast<const int*>(p + 8 * MINFER_MMQ2_LD + 16);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int si = (lr + 8 * h) * MINFER_MMQ2_NB + bi;
                    dw[mi][h] = cur.wd[si];
                    mw[mi][h] = kMin ? cur.wm[si] : 0.0f;
                    scw[mi][h] = kQ6K ? cur.wsc[si] : 0;
                }
            }
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                const int lt = 32 * wt + 8 * ni;
                const int8_t* p = cur.xq + (lt + g) * MINFER_MMQ2_LD + MINFER_QK * bi + 4 * tig;
                const int b0 = *reinterpret_cast<const int*>(p);
                const int b1 = *reinterpret_cast<const int*>(p + 16);
                float dx[2], sx[2];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int si = (lt + 2 * tig + e) * MINFER_MMQ2_NB + bi;
                    dx[e] = cur.xd[si];
                    sx[e] = kMin ? cur.xs[si] : 0.0f;
                }
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    int c[4];
                    if (kQ6K) {
                        int lo[4], hi[4];
                        minfer_mmq2_mma_k16(lo, af[mi][0], af[mi][1], b0);
                        minfer_mmq2_mma_k16(hi, af[mi][2], af[mi][3], b1);
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int sw = scw[mi][e >> 1];
                            const int slo = (int)(int8_t)(sw & 0xFF), shi = (int)(int8_t)((sw >> 8) & 0xFF);
                            c[e] = slo * lo[e] + shi * hi[e];
                        }
                    } else {
                        minfer_mmq2_mma_k32(c, af[mi], b0, b1);
                    }
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int h = e >> 1, x = e & 1; // c0,c1: row g; c2,c3: row g+8; tokens 2 tig + x
                        const float cf = kQ6K ? __int2float_rn(c[e]) : minfer_mmq2_i2f(c[e]);
                        acc[mi][ni][e] = __fmaf_rn(cf, __fmul_rn(dw[mi][h], dx[x]), acc[mi][ni][e]);
                        if (kMin) acc[mi][ni][e] = __fmaf_rn(mw[mi][h], sx[x], acc[mi][ni][e]);
                    }
                }
            }
        }

        if (more) ld.finish(nxt, tid, kn);
        __syncthreads();
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

// minfer_mmq2_<type>: grid (ceil(n / MINFER_MMQ2_ROWS), ceil(nt /
// MINFER_MMQ2_TOKS), splits), block MINFER_MMQ2_THREADS, dynamic shared
// memory 2 * MINFER_MMQ2_STAGE_BYTES(ROWS, TOKS). _r64: the 64-row tile,
// block MINFER_MMQ2_THREADS_SMALL. The launcher (cuda/launch_mmq2.go) picks
// the variant and split with v1's plan (mmqPlanFor).
#define MINFER_MMQ2_KERNEL(name, T)                                                                          \
    extern "C" __global__ void __launch_bounds__(MINFER_MMQ2_THREADS, 2)                                      \
        minfer_mmq2_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, int n, \
                           int nt) {                                                                         \
        MINFER_KERNEL_ENTRY();                                                                               \
        minfer_mmq2_body<T, 4, 2>(out, a, w, bias, k, n, nt);                                                \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(MINFER_MMQ2_THREADS_SMALL, 4)                                \
        minfer_mmq2_##name##_r64(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k,    \
                                 int n, int nt) {                                                            \
        MINFER_KERNEL_ENTRY();                                                                               \
        minfer_mmq2_body<T, 2, 2>(out, a, w, bias, k, n, nt);                                                \
    }

MINFER_MMQ2_KERNEL(q8_0, MINFER_T_Q8_0)
MINFER_MMQ2_KERNEL(q4_0, MINFER_T_Q4_0)
MINFER_MMQ2_KERNEL(q4_1, MINFER_T_Q4_1)
MINFER_MMQ2_KERNEL(q5_0, MINFER_T_Q5_0)
MINFER_MMQ2_KERNEL(q5_1, MINFER_T_Q5_1)
MINFER_MMQ2_KERNEL(q4_k, MINFER_T_Q4_K)
MINFER_MMQ2_KERNEL(q5_k, MINFER_T_Q5_K)
MINFER_MMQ2_KERNEL(q6_k, MINFER_T_Q6_K)

#undef MINFER_MMQ2_KERNEL
