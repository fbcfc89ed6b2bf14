// mmvq_repack.cu: MINFER_MMVQ_REPACK. Decode matmul (nt = 1) of Q8_0 and
// Q6_K weights over Q8_1 activations, reading a repacked copy of the weight
// whose quants are 16-byte aligned, so each lane issues 16-byte loads.
//
// The GGUF blocks of Q8_0 (34 bytes) and Q6_K (210 bytes) are only 2-byte
// aligned, which limits minfer_mmvq_<t> (mmvq.cu) to 2-byte loads: few bytes
// in flight per lane, and decode of large matrices stays well under the HBM
// bandwidth. The repacked copy keeps every byte of the file and only moves
// them: with N the number of blocks of the matrix (all rows, in file order),
//
//   Q8_0: [0, 32 N)        the 32 int8 quants of block i at 32 i
//         [32 N, 34 N)     the f16 d of block i at 32 N + 2 i
//   Q6_K: [0, 192 N)       ql (128 bytes) then qh (64) of super-block i at 192 i
//         [192 N, 208 N)   its 16 int8 scales at 192 N + 16 i
//         [208 N, 210 N)   its f16 d at 208 N + 2 i
//
// so the copy is as large as the original (which stays: prefill and
// get_rows read the GGUF blocks). minfer_repack_<t> builds it on the device
// from the uploaded original (one thread per block).
//
// minfer_mmvqr_<t> (+ _qkv_ and _ffn_ forms, the kernels of mmvq.cu with the
// same signatures) compute, per lane and per 16-value unit, exactly what
// minfer_mmvq_<t> computes: the same int32 __dp4a sums, the same _rn f32
// scaling, units l, l + 32, ... accumulated in the same order, the same
// butterfly. Only the loads differ: a unit's quants are one 16-byte load
// (Q8_0) or two (Q6_K: ql and qh), and each lane first issues the loads of
// MINFER_MMVQR_UNITS units and then computes them in order. So every output
// is bitwise the unrepacked kernel's (the device tests check it).
//
// This file uses MinferMmvqActG, minfer_mmvq_silu and MINFER_MMVQ_Q8_1_BYTES
// from mmvq.cu, which the one translation unit includes before it (files in
// name order: "mmvq.cu" < "mmvq_repack.cu").
#include "dequant.cuh"
#include "repacked.cuh"

#define MINFER_MMVQR_ROWS 4
#define MINFER_MMVQR_THREADS (32 * MINFER_MMVQR_ROWS)
#define MINFER_MMVQR_UNITS 4
// The plain kernels are held to 64 registers (8 blocks = 32 warps per SM):
// without it the Q6_K one takes 119 (4 blocks); with it neither spills. The
// fused forms keep their registers (capping them spills the Q6_K FFN).
#define MINFER_MMVQR_MIN_BLOCKS 8
#define MINFER_REPACK_THREADS 256

// ---------------------------------------------------------------- per type
//
// Row: the row's pointers into the repacked copy (row r of a weight of n
// rows); Raw: what one unit loads; load issues the unit's loads, dot does
// the unrepacked kernel's arithmetic on them.

struct MinferMmvqrQ8_0 {
    using Row = MinferRepackedQ8_0;
    struct Raw {
        uint4 q;
        unsigned short d;
    };
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    static __device__ __forceinline__ Row row(const uint8_t* w, int n, int k, int r) { return Row::row(w, n, k, r); }
    static __device__ __forceinline__ Raw load(const Row& w, int u) { return Raw{__ldg(w.q + u), __ldg(w.d + (u >> 1))}; }
    template <class A>
    static __device__ __forceinline__ float dot(const Raw& w, const A& a, int u) {
        const int blk = u >> 1, h = u & 1;
        const int4 a4 = a.q4(blk, h);
        int sumi = 0;
        sumi = __dp4a((int)w.q.x, a4.x, sumi);
        sumi = __dp4a((int)w.q.y, a4.y, sumi);
        sumi = __dp4a((int)w.q.z, a4.z, sumi);
        sumi = __dp4a((int)w.q.w, a4.w, sumi);
        return __fmul_rn(__fmul_rn(minfer_h2f(w.d), a.d(blk)), (float)sumi);
    }
};

struct MinferMmvqrQ6_K {
    using Row = MinferRepackedQ6_K;
    using Raw = MinferRepackedQ6_K::Unit;
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    static __device__ __forceinline__ Row row(const uint8_t* w, int n, int k, int r) { return Row::row(w, n, k, r); }
    static __device__ __forceinline__ Raw load(const Row& w, int u) { return w.unit(u); }
    template <class A>
    static __device__ __forceinline__ float dot(const Raw& w, const A& a, int u) {
        const int sb = u >> 4, r = u & 15, sub = r >> 1, h = r & 1;
        const int quarter = sub & 3;
        const int ab = 8 * sb + sub;
        const int lshift = 4 * (quarter >> 1), hshift = 2 * quarter;
        const int4 a4 = a.q4(ab, h);
        const uint32_t lw[4] = {w.ql.x, w.ql.y, w.ql.z, w.ql.w}, hw[4] = {w.qh.x, w.qh.y, w.qh.z, w.qh.w};
        const int aw[4] = {a4.x, a4.y, a4.z, a4.w};
        int sumi = 0;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const uint32_t lo = (lw[t] >> lshift) & 0x0F0F0F0Fu;
            const uint32_t hi = ((hw[t] >> hshift) & 0x03030303u) << 4;
            const int w6 = (int)__vsub4(lo | hi, 0x20202020u); // q - 32 in [-32, 31]
            sumi = __dp4a(w6, aw[t], sumi);
        }
        const float dsc = __fmul_rn(minfer_h2f(w.d), (float)w.sc);
        return __fmul_rn(a.d(ab), __fmul_rn(dsc, (float)sumi));
    }
};

// minfer_mmvqr_part is one thread's share of a row's dot product: units
// first, first + STRIDE, ... summed in order, the loads of
// MINFER_MMVQR_UNITS units issued before the first is used (no reduction).
// The one-warp row takes (lane, 32); the split kernels (mmvq_split.cu)
// (32 w + lane, 32 W).
template <class Q, int STRIDE, class A>
__device__ __forceinline__ float minfer_mmvqr_part(const typename Q::Row& w, const A& a, int k, int first) {
    const int nu = Q::units(k);
    float acc = 0.0f;
    for (int u0 = first; u0 < nu; u0 += STRIDE * MINFER_MMVQR_UNITS) {
        typename Q::Raw raw[MINFER_MMVQR_UNITS];
#pragma unroll
        for (int j = 0; j < MINFER_MMVQR_UNITS; j++) {
            if (u0 + STRIDE * j < nu) raw[j] = Q::load(w, u0 + STRIDE * j);
        }
#pragma unroll
        for (int j = 0; j < MINFER_MMVQR_UNITS; j++) {
            if (u0 + STRIDE * j < nu) acc = __fadd_rn(acc, Q::dot(raw[j], a, u0 + STRIDE * j));
        }
    }
    return acc;
}

// minfer_mmvqr_row is one row's dot product (every lane gets it): lane l
// sums units l, l + 32, ... in order, as minfer_mmvq_row does, with the
// loads of MINFER_MMVQR_UNITS units issued before the first is used.
template <class Q, class A>
__device__ __forceinline__ float minfer_mmvqr_row(const typename Q::Row& w, const A& a, int k) {
    float acc = minfer_mmvqr_part<Q, 32>(w, a, k, threadIdx.x & 31);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, off));
    return acc;
}

// The fused SwiGLU row: gate and up rows j in one pass, each accumulator in
// minfer_mmvqr_row's order (so bitwise minfer_mmvq_ffn_row's).
template <class Q, class A>
__device__ __forceinline__ float minfer_mmvqr_ffn(const typename Q::Row& wg, const typename Q::Row& wu, const A& a,
                                                  int k) {
    const int lane = threadIdx.x & 31;
    const int nu = Q::units(k);
    float g = 0.0f, u = 0.0f;
    for (int u0 = lane; u0 < nu; u0 += 32 * MINFER_MMVQR_UNITS) {
        typename Q::Raw rg[MINFER_MMVQR_UNITS], ru[MINFER_MMVQR_UNITS];
#pragma unroll
        for (int j = 0; j < MINFER_MMVQR_UNITS; j++) {
            if (u0 + 32 * j < nu) {
                rg[j] = Q::load(wg, u0 + 32 * j);
                ru[j] = Q::load(wu, u0 + 32 * j);
            }
        }
#pragma unroll
        for (int j = 0; j < MINFER_MMVQR_UNITS; j++) {
            if (u0 + 32 * j < nu) {
                g = __fadd_rn(g, Q::dot(rg[j], a, u0 + 32 * j));
                u = __fadd_rn(u, Q::dot(ru[j], a, u0 + 32 * j));
            }
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        g = __fadd_rn(g, __shfl_xor_sync(0xffffffffu, g, off));
        u = __fadd_rn(u, __shfl_xor_sync(0xffffffffu, u, off));
    }
    return __fmul_rn(minfer_mmvq_silu(g), u);
}

// Kernels: grid (ceil(rows / MINFER_MMVQR_ROWS)), block
// (MINFER_MMVQR_THREADS), no smem; one warp per output row. a: the Q8_1
// activation row (k / 32 blocks of 36 bytes, 4-byte aligned); w*: repacked
// copies (16-byte aligned); n* the rows of each weight (the scales follow
// all the quants, so a row's pointers need its weight's row count).
//
// minfer_mmvqr_res_<t> (MINFER_FUSE_RESIDUAL) is the plain kernel with the
// graph's residual add folded in: out[row] = res[row] + (dot + bias), one
// __fadd_rn as minfer_add_f32 does it, so bitwise the unfused chain (res
// may be out: the writing lane reads its element first).
template <class Q, bool RES>
__device__ __forceinline__ void minfer_mmvqr_plain(float* out, const uint8_t* a, const uint8_t* w, const float* bias,
                                                   const float* res, int k, int n) {
    const int row = blockIdx.x * MINFER_MMVQR_ROWS + (threadIdx.x >> 5);
    if (row >= n) return; // the whole warp leaves together
    float acc = minfer_mmvqr_row<Q>(Q::row(w, n, k, row), MinferMmvqActG{a}, k);
    if ((threadIdx.x & 31) == 0) {
        if (bias != nullptr) acc = __fadd_rn(acc, bias[row]);
        if (RES) acc = __fadd_rn(res[row], acc);
        out[row] = acc;
    }
}

#define MINFER_MMVQR_KERNEL(name, Q)                                                                          \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQR_THREADS, MINFER_MMVQR_MIN_BLOCKS)               \
        minfer_mmvqr_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, int n) {  \
        minfer_mmvqr_plain<Q, false>(out, a, w, bias, nullptr, k, n);                                        \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQR_THREADS, MINFER_MMVQR_MIN_BLOCKS)               \
        minfer_mmvqr_res_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, int n, \
                                const float* res) {                                                           \
        minfer_mmvqr_plain<Q, true>(out, a, w, bias, res, k, n);                                             \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQR_THREADS)                                        \
        minfer_mmvqr_qkv_##name(float* out, const uint8_t* a, const uint8_t* wq, const uint8_t* wk,             \
                                const uint8_t* wv, const float* bq, const float* bk, const float* bv, int k,    \
                                int nq, int nk, int nv) {                                                      \
        const int row = blockIdx.x * MINFER_MMVQR_ROWS + (threadIdx.x >> 5);                                 \
        if (row >= nq + nk + nv) return;                                                                     \
        const uint8_t* w = wq;                                                                               \
        const float* bias = bq;                                                                              \
        int r = row, n = nq;                                                                                 \
        if (r >= nq) {                                                                                       \
            r -= nq;                                                                                         \
            w = wk, bias = bk, n = nk;                                                                       \
            if (r >= nk) {                                                                                   \
                r -= nk;                                                                                     \
                w = wv, bias = bv, n = nv;                                                                   \
            }                                                                                                \
        }                                                                                                    \
        float acc = minfer_mmvqr_row<Q>(Q::row(w, n, k, r), MinferMmvqActG{a}, k);                           \
        if ((threadIdx.x & 31) == 0) {                                                                       \
            if (bias != nullptr) acc = __fadd_rn(acc, bias[r]);                                              \
            out[row] = acc;                                                                                  \
        }                                                                                                    \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQR_THREADS)                                        \
        minfer_mmvqr_ffn_##name(float* out, const uint8_t* a, const uint8_t* wg, const uint8_t* wu, int k, int n) { \
        const int row = blockIdx.x * MINFER_MMVQR_ROWS + (threadIdx.x >> 5);                                 \
        if (row >= n) return;                                                                                \
        const float v = minfer_mmvqr_ffn<Q>(Q::row(wg, n, k, row), Q::row(wu, n, k, row), MinferMmvqActG{a}, k); \
        if ((threadIdx.x & 31) == 0) out[row] = v;                                                           \
    }

MINFER_MMVQR_KERNEL(q8_0, MinferMmvqrQ8_0)
MINFER_MMVQR_KERNEL(q6_k, MinferMmvqrQ6_K)

#undef MINFER_MMVQR_KERNEL

// ------------------------------------------------------------- repacking
//
// minfer_repack_<t>(dst, src, nblocks): src the nblocks GGUF blocks of a
// matrix (2-byte aligned), dst the repacked copy (16-byte aligned, as large
// as src). Grid-stride, one thread per block; 2-byte loads, 16-byte stores
// for the quants. Runs once per weight, at registration.

__device__ __forceinline__ uint32_t minfer_repack_ld(const unsigned short* h) {
    return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
}

// minfer_repack_copy16 copies 16 bytes from a 2-byte aligned source to a
// 16-byte aligned destination.
__device__ __forceinline__ void minfer_repack_copy16(uint4* dst, const uint8_t* src) {
    const unsigned short* h = reinterpret_cast<const unsigned short*>(src);
    *dst = make_uint4(minfer_repack_ld(h), minfer_repack_ld(h + 2), minfer_repack_ld(h + 4), minfer_repack_ld(h + 6));
}

extern "C" __global__ void __launch_bounds__(MINFER_REPACK_THREADS)
    minfer_repack_q8_0(uint8_t* dst, const uint8_t* src, long long nblocks) {
    uint4* q = reinterpret_cast<uint4*>(dst);
    unsigned short* d = reinterpret_cast<unsigned short*>(dst + (size_t)nblocks * 32);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < nblocks;
         i += (long long)gridDim.x * blockDim.x) {
        const uint8_t* b = src + (size_t)i * MINFER_Q8_0_BYTES;
        d[i] = *reinterpret_cast<const unsigned short*>(b);
        minfer_repack_copy16(q + 2 * i, b + 2);
        minfer_repack_copy16(q + 2 * i + 1, b + 18);
    }
}

extern "C" __global__ void __launch_bounds__(MINFER_REPACK_THREADS)
    minfer_repack_q6_k(uint8_t* dst, const uint8_t* src, long long nblocks) {
    uint4* q = reinterpret_cast<uint4*>(dst);
    uint4* sc = reinterpret_cast<uint4*>(dst + (size_t)nblocks * MINFER_MMVQR_Q6_K_QBYTES);
    unsigned short* d = reinterpret_cast<unsigned short*>(dst + (size_t)nblocks * (MINFER_MMVQR_Q6_K_QBYTES + 16));
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < nblocks;
         i += (long long)gridDim.x * blockDim.x) {
        const uint8_t* b = src + (size_t)i * MINFER_Q6_K_BYTES;
#pragma unroll
        for (int j = 0; j < MINFER_MMVQR_Q6_K_QBYTES / 16; j++) minfer_repack_copy16(q + 12 * i + j, b + 16 * j);
        minfer_repack_copy16(sc + i, b + MINFER_MMVQR_Q6_K_QBYTES);
        d[i] = *reinterpret_cast<const unsigned short*>(b + MINFER_MMVQR_Q6_K_QBYTES + 16);
    }
}
