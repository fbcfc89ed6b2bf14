// mmvq_nt.cu: MINFER_MMVQ_NT. Small-batch matmul (nt = 2..8 tokens) over
// Q8_1-quantized activations with integer dot products, for the weight
// types of mmvq.cu (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K):
//
//   minfer_mmvq_nt_<t>  out[t][j] = sum_i W[j][i] * a_t[i] (+ bias[j]), t < nt
//
// and minfer_mmvq_nt_q8_0r / _q6_kr, the same over the repacked Q8_0 / Q6_K
// copy of mmvq_repack.cu, bitwise the GGUF kernels' outputs (below).
//
// a is nt Q8_1 rows back to back (minfer_quantize_q8_1 of nt rows: row t
// starts at t * (k / 32) * 36 bytes); out is nt rows of n f32.
//
// Geometry: that of minfer_mmvq_<t> (one warp per weight row,
// MINFER_MMVQNT_ROWS rows per block, lane l takes 16-value units l, l + 32,
// ...), but each lane decodes a unit's weight fields ONCE (load: the weight
// loads, nibble / high-bit assembly, the f32 weight scales) and dots them
// against the nt activation rows (dot: the activation loads, the __dp4a sums
// and the f32 scaling), into nt accumulators. So the weight bytes are read
// once for all nt tokens, and per token the arithmetic is exactly
// minfer_mmvq_<t>'s on that token's Q8_1 row: the same int32 sums, the same
// _rn f32 operations in the same order, units accumulated in the same order
// per lane, the same butterfly, the bias added the same way. Every output is
// therefore bitwise what minfer_mmvq_<t> gives for that token alone (the
// device tests check it). Each lane issues the loads of two units (u and
// u + 32) before computing them, in order, for more bytes in flight.
//
// This file uses MinferMmvqActG, the minfer_mmvq_ld2 / ld4 / f16 / hbits
// helpers and MINFER_MMVQ_Q8_1_BYTES from mmvq.cu, which the one
// translation unit includes before it (files in name order).
#include "dequant.cuh"
#include "repacked.cuh"

#define MINFER_MMVQNT_ROWS 4
#define MINFER_MMVQNT_THREADS (32 * MINFER_MMVQNT_ROWS)
#define MINFER_MMVQNT_MIN_NT 2
#define MINFER_MMVQNT_MAX_NT 8

// ---------------------------------------------------------------- per type
//
// Raw is one unit's decoded weight fields; load(row, u) reads them for unit
// u of a row; dot(w, a, u) is the rest of mmvq.cu's unit(row, a, u): the
// same expression with the weight fields taken from w. Row is what load
// takes for a row and row(w, n, k, r, rowBytes) finds it: for the GGUF
// layout (MinferMmvqntGguf) the row's bytes, r * rowBytes into w; the
// repacked types (below) have their own.

struct MinferMmvqntGguf {
    using Row = const uint8_t*;
    static __device__ __forceinline__ Row row(const uint8_t* w, int, int, int r, size_t rowBytes) {
        return w + (size_t)r * rowBytes;
    }
};

struct MinferMmvqntQ8_0 : MinferMmvqntGguf {
    struct Raw {
        int q[4];
        float d;
    };
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    static __device__ __forceinline__ Raw load(const uint8_t* row, int u) {
        const int blk = u >> 1, h = u & 1;
        const uint8_t* wb = row + (size_t)blk * MINFER_Q8_0_BYTES;
        const uint8_t* wq = wb + 2 + 16 * h;
        Raw r;
#pragma unroll
        for (int t = 0; t < 4; t++) r.q[t] = (int)minfer_mmvq_ld2(wq + 4 * t);
        r.d = minfer_mmvq_f16(wb);
        return r;
    }
    static __device__ __forceinline__ float dot(const Raw& w, const MinferMmvqActG& a, int u) {
        const int blk = u >> 1, h = u & 1;
        const int4 a4 = a.q4(blk, h);
        const int aw[4] = {a4.x, a4.y, a4.z, a4.w};
        int sumi = 0;
#pragma unroll
        for (int t = 0; t < 4; t++) sumi = __dp4a(w.q[t], aw[t], sumi);
        return __fmul_rn(__fmul_rn(w.d, a.d(blk)), (float)sumi);
    }
};

// The 32-value formats with 4-bit (or 5-bit) values: unit h of a block is
// packed bytes 8h .. 8h+7, low nibbles values 8h .., high nibbles 16+8h ..
// lo[t] / hi[t] are the words mmvq.cu hands to __dp4a against activation
// words 2h + t and 4 + 2h + t.
struct MinferMmvqntQ4_0 : MinferMmvqntGguf {
    struct Raw {
        int lo[2], hi[2];
        float d;
    };
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    static __device__ __forceinline__ Raw load(const uint8_t* row, int u) {
        const int blk = u >> 1, h = u & 1;
        const uint8_t* wb = row + (size_t)blk * MINFER_Q4_0_BYTES;
        const uint8_t* wq = wb + 2 + 8 * h;
        Raw r;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const uint32_t v = minfer_mmvq_ld2(wq + 4 * t);
            r.lo[t] = (int)__vsub4(v & 0x0F0F0F0Fu, 0x08080808u);
            r.hi[t] = (int)__vsub4((v >> 4) & 0x0F0F0F0Fu, 0x08080808u);
        }
        r.d = minfer_mmvq_f16(wb);
        return r;
    }
    static __device__ __forceinline__ float dot(const Raw& w, const MinferMmvqActG& a, int u) {
        const int blk = u >> 1, h = u & 1;
        const int2 al2 = a.q2(blk, 2 * h), ah2 = a.q2(blk, 4 + 2 * h);
        const int alw[2] = {al2.x, al2.y}, ahw[2] = {ah2.x, ah2.y};
        int sumi = 0;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            sumi = __dp4a(w.lo[t], alw[t], sumi);
            sumi = __dp4a(w.hi[t], ahw[t], sumi);
        }
        return __fmul_rn(__fmul_rn(w.d, a.d(blk)), (float)sumi);
    }
};

struct MinferMmvqntQ4_1 : MinferMmvqntGguf {
    struct Raw {
        int lo[2], hi[2];
        float d, m;
    };
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    static __device__ __forceinline__ Raw load(const uint8_t* row, int u) {
        const int blk = u >> 1, h = u & 1;
        const uint8_t* wb = row + (size_t)blk * MINFER_Q4_1_BYTES;
        const uint8_t* wq = wb + 4 + 8 * h;
        Raw r;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const uint32_t v = minfer_mmvq_ld4(wq + 4 * t);
            r.lo[t] = (int)(v & 0x0F0F0F0Fu);
            r.hi[t] = (int)((v >> 4) & 0x0F0F0F0Fu);
        }
        r.d = minfer_mmvq_f16(wb);
        r.m = minfer_mmvq_f16(wb + 2);
        return r;
    }
    static __device__ __forceinline__ float dot(const Raw& w, const MinferMmvqActG& a, int u) {
        const int blk = u >> 1, h = u & 1;
        const int2 al2 = a.q2(blk, 2 * h), ah2 = a.q2(blk, 4 + 2 * h);
        const int alw[2] = {al2.x, al2.y}, ahw[2] = {ah2.x, ah2.y};
        int sumi = 0, suma = 0;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const int al = alw[t], ah = ahw[t];
            sumi = __dp4a(w.lo[t], al, sumi);
            sumi = __dp4a(w.hi[t], ah, sumi);
            suma = __dp4a(0x01010101, al, suma);
            suma = __dp4a(0x01010101, ah, suma);
        }
        const float dq = __fmul_rn(w.d, (float)sumi);
        const float mq = __fmul_rn(w.m, (float)suma);
        return __fmul_rn(a.d(blk), __fadd_rn(dq, mq));
    }
};

struct MinferMmvqntQ5_0 : MinferMmvqntGguf {
    struct Raw {
        int lo[2], hi[2];
        float d;
    };
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    static __device__ __forceinline__ Raw load(const uint8_t* row, int u) {
        const int blk = u >> 1, h = u & 1;
        const uint8_t* wb = row + (size_t)blk * MINFER_Q5_0_BYTES;
        const uint32_t qh = minfer_mmvq_ld2(wb + 2);
        const uint8_t* wq = wb + 6 + 8 * h;
        Raw r;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const uint32_t v = minfer_mmvq_ld2(wq + 4 * t);
            const int j = 8 * h + 4 * t;
            const uint32_t lo = (v & 0x0F0F0F0Fu) | minfer_mmvq_hbits((qh >> j) & 15u);
            const uint32_t hi = ((v >> 4) & 0x0F0F0F0Fu) | minfer_mmvq_hbits((qh >> (16 + j)) & 15u);
            r.lo[t] = (int)__vsub4(lo, 0x10101010u);
            r.hi[t] = (int)__vsub4(hi, 0x10101010u);
        }
        r.d = minfer_mmvq_f16(wb);
        return r;
    }
    static __device__ __forceinline__ float dot(const Raw& w, const MinferMmvqActG& a, int u) {
        return MinferMmvqntQ4_0::dot(MinferMmvqntQ4_0::Raw{{w.lo[0], w.lo[1]}, {w.hi[0], w.hi[1]}, w.d}, a, u);
    }
};

struct MinferMmvqntQ5_1 : MinferMmvqntGguf {
    using Raw = MinferMmvqntQ4_1::Raw;
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    static __device__ __forceinline__ Raw load(const uint8_t* row, int u) {
        const int blk = u >> 1, h = u & 1;
        const uint8_t* wb = row + (size_t)blk * MINFER_Q5_1_BYTES;
        const uint32_t qh = minfer_mmvq_ld4(wb + 4);
        const uint8_t* wq = wb + 8 + 8 * h;
        Raw r;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const uint32_t v = minfer_mmvq_ld4(wq + 4 * t);
            const int j = 8 * h + 4 * t;
            r.lo[t] = (int)((v & 0x0F0F0F0Fu) | minfer_mmvq_hbits((qh >> j) & 15u));
            r.hi[t] = (int)(((v >> 4) & 0x0F0F0F0Fu) | minfer_mmvq_hbits((qh >> (16 + j)) & 15u));
        }
        r.d = minfer_mmvq_f16(wb);
        r.m = minfer_mmvq_f16(wb + 2);
        return r;
    }
    static __device__ __forceinline__ float dot(const Raw& w, const MinferMmvqActG& a, int u) {
        return MinferMmvqntQ4_1::dot(w, a, u);
    }
};

// K-quants: unit u is super-block u / 16, sub-block sub = (u % 16) / 2
// (activation block 8 sb + sub), half h (activation words 4h .. 4h+3).
struct MinferMmvqntQ4_K : MinferMmvqntGguf {
    struct Raw {
        int q[4];
        float dsc, dmn;
    };
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    static __device__ __forceinline__ Raw load(const uint8_t* row, int u) {
        const int sb = u >> 4, r4 = u & 15, sub = r4 >> 1, h = r4 & 1;
        const uint8_t* wb = row + (size_t)sb * MINFER_Q4_K_BYTES;
        const uint4 q4 = *reinterpret_cast<const uint4*>(wb + 16 + 32 * (sub >> 1) + 16 * h);
        const uint32_t qw[4] = {q4.x, q4.y, q4.z, q4.w};
        const int shift = 4 * (sub & 1);
        Raw r;
#pragma unroll
        for (int t = 0; t < 4; t++) r.q[t] = (int)((qw[t] >> shift) & 0x0F0F0F0Fu);
        int sc, mn;
        minfer_kscale_min(wb + 4, sub, &sc, &mn);
        r.dsc = __fmul_rn(minfer_mmvq_f16(wb), (float)sc);
        r.dmn = __fmul_rn(minfer_mmvq_f16(wb + 2), (float)mn);
        return r;
    }
    static __device__ __forceinline__ float dot(const Raw& w, const MinferMmvqActG& a, int u) {
        const int sb = u >> 4, r4 = u & 15, sub = r4 >> 1, h = r4 & 1;
        const int ab = 8 * sb + sub;
        const int4 a4 = a.q4(ab, h);
        const int aw[4] = {a4.x, a4.y, a4.z, a4.w};
        int sumi = 0, suma = 0;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const int aq = aw[t];
            sumi = __dp4a(w.q[t], aq, sumi);
            suma = __dp4a(0x01010101, aq, suma);
        }
        return __fmul_rn(a.d(ab), __fsub_rn(__fmul_rn(w.dsc, (float)sumi), __fmul_rn(w.dmn, (float)suma)));
    }
};

struct MinferMmvqntQ6_K : MinferMmvqntGguf {
    struct Raw {
        int q[4];
        float dsc;
    };
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    static __device__ __forceinline__ Raw load(const uint8_t* row, int u) {
        const int sb = u >> 4, r4 = u & 15, sub = r4 >> 1, h = r4 & 1;
        const int hh = sub >> 2, quarter = sub & 3;
        const uint8_t* wb = row + (size_t)sb * MINFER_Q6_K_BYTES;
        const uint8_t* ql = wb + 64 * hh + 32 * (quarter & 1) + 16 * h;
        const uint8_t* qh = wb + 128 + 32 * hh + 16 * h;
        const int lshift = 4 * (quarter >> 1), hshift = 2 * quarter;
        Raw r;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const uint32_t lo = (minfer_mmvq_ld2(ql + 4 * t) >> lshift) & 0x0F0F0F0Fu;
            const uint32_t hi = ((minfer_mmvq_ld2(qh + 4 * t) >> hshift) & 0x03030303u) << 4;
            r.q[t] = (int)__vsub4(lo | hi, 0x20202020u); // q - 32 in [-32, 31]
        }
        const int sc = (int8_t)wb[192 + 8 * hh + 2 * quarter + h];
        r.dsc = __fmul_rn(minfer_mmvq_f16(wb + 208), (float)sc);
        return r;
    }
    static __device__ __forceinline__ float dot(const Raw& w, const MinferMmvqActG& a, int u) {
        const int sb = u >> 4, r4 = u & 15, sub = r4 >> 1, h = r4 & 1;
        const int ab = 8 * sb + sub;
        const int4 a4 = a.q4(ab, h);
        const int aw[4] = {a4.x, a4.y, a4.z, a4.w};
        int sumi = 0;
#pragma unroll
        for (int t = 0; t < 4; t++) sumi = __dp4a(w.q[t], aw[t], sumi);
        return __fmul_rn(a.d(ab), __fmul_rn(w.dsc, (float)sumi));
    }
};

// ------------------------------------------------- repacked Q8_0 and Q6_K
//
// minfer_mmvq_nt_q8_0r / _q6_kr read the repacked copy of mmvq_repack.cu
// (built by minfer_repack_<t>; cuda.RepackHost is its host reference):
// with N = n * (k / bs) blocks of the whole n x k matrix, block i = r *
// (k / bs) + b of row r,
//
//   Q8_0: its 32 quants at 32 i, its f16 d at 32 N + 2 i
//   Q6_K: its ql (128 bytes) then qh (64) at 192 i, its 16 int8 scales at
//         192 N + 16 i, its f16 d at 208 N + 2 i
//
// So a row's pointers need n, the row count the copy was built with, and
// the kernels cannot run on a subset of a matrix's rows. Raw and dot are
// the GGUF types': load gives the same fields from the same bytes (the
// quant words assembled from 16-byte loads instead of 2-byte ones, the
// same f16 d and int8 scale), so every output is bitwise the GGUF
// kernel's. With w 16-byte aligned every load below is aligned: a Q8_0
// unit's 16 quants sit at 16 u of its row, which starts at 32 (k / 32) r;
// a Q6_K unit's ql and qh are 16-byte words of its 192-byte block
// (repacked.cuh, shared with the decode kernels).

struct MinferMmvqntQ8_0r {
    using Raw = MinferMmvqntQ8_0::Raw;
    using Row = MinferRepackedQ8_0;
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    static __device__ __forceinline__ Row row(const uint8_t* w, int n, int k, int r, size_t) { return Row::row(w, n, k, r); }
    static __device__ __forceinline__ Raw load(const Row& w, int u) {
        const uint4 q = __ldg(w.q + u);
        Raw r;
        r.q[0] = (int)q.x;
        r.q[1] = (int)q.y;
        r.q[2] = (int)q.z;
        r.q[3] = (int)q.w;
        r.d = minfer_h2f(__ldg(w.d + (u >> 1)));
        return r;
    }
    static __device__ __forceinline__ float dot(const Raw& w, const MinferMmvqActG& a, int u) {
        return MinferMmvqntQ8_0::dot(w, a, u);
    }
};

struct MinferMmvqntQ6_Kr {
    using Raw = MinferMmvqntQ6_K::Raw;
    using Row = MinferRepackedQ6_K;
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    static __device__ __forceinline__ Row row(const uint8_t* w, int n, int k, int r, size_t) { return Row::row(w, n, k, r); }
    // MinferMmvqntQ6_K::load's decode of the same bytes (repacked.cuh's
    // unit: the uint4 words of the ql and qh, the scale byte, the d).
    static __device__ __forceinline__ Raw load(const Row& w, int u) {
        const int quarter = ((u & 15) >> 1) & 3;
        const MinferRepackedQ6_K::Unit x = w.unit(u);
        const uint4 ql = x.ql, qh = x.qh;
        const uint32_t lw[4] = {ql.x, ql.y, ql.z, ql.w}, hw[4] = {qh.x, qh.y, qh.z, qh.w};
        const int lshift = 4 * (quarter >> 1), hshift = 2 * quarter;
        Raw r;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const uint32_t lo = (lw[t] >> lshift) & 0x0F0F0F0Fu;
            const uint32_t hi = ((hw[t] >> hshift) & 0x03030303u) << 4;
            r.q[t] = (int)__vsub4(lo | hi, 0x20202020u); // q - 32 in [-32, 31]
        }
        r.dsc = __fmul_rn(minfer_h2f(x.d), (float)x.sc);
        return r;
    }
    static __device__ __forceinline__ float dot(const Raw& w, const MinferMmvqActG& a, int u) {
        return MinferMmvqntQ6_K::dot(w, a, u);
    }
};

// ------------------------------------------------------------------ body
//
// One row per warp, NT accumulators per lane. Lane l handles units
// l, l + 32, l + 64, ... in that order (two per iteration: both loads
// first, then the dots of u before those of u + 32), so each accumulator
// sees minfer_mmvq_row's sequence of __fadd_rn.
template <class Q, int NT>
__device__ __forceinline__ void minfer_mmvqnt_body(float* __restrict__ out, const uint8_t* __restrict__ a,
                                                   const uint8_t* __restrict__ w, const float* __restrict__ bias,
                                                   int k, int n, size_t rowBytes) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * MINFER_MMVQNT_ROWS + (threadIdx.x >> 5);
    if (row >= n) return; // the whole warp leaves together
    const typename Q::Row wr = Q::row(w, n, k, row, rowBytes);
    const size_t aStride = (size_t)(k / MINFER_QK) * MINFER_MMVQ_Q8_1_BYTES; // one token's Q8_1 row

    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;

    const int nu = Q::units(k);
    for (int u = lane; u < nu; u += 64) {
        const bool two = u + 32 < nu;
        const typename Q::Raw w0 = Q::load(wr, u);
        typename Q::Raw w1 = w0;
        if (two) w1 = Q::load(wr, u + 32);
#pragma unroll
        for (int t = 0; t < NT; t++) acc[t] = __fadd_rn(acc[t], Q::dot(w0, MinferMmvqActG{a + t * aStride}, u));
        if (two) {
#pragma unroll
            for (int t = 0; t < NT; t++)
                acc[t] = __fadd_rn(acc[t], Q::dot(w1, MinferMmvqActG{a + t * aStride}, u + 32));
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[t] = __fadd_rn(acc[t], __shfl_xor_sync(0xffffffffu, acc[t], off));
    }
    // Every lane holds every reduced sum (the butterfly's adds are
    // commutative, so all lanes agree bitwise); lane t writes token t.
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (lane == t) {
            float r = acc[t];
            if (bias != nullptr) r = __fadd_rn(r, bias[row]);
            out[(size_t)t * n + row] = r;
        }
    }
}

template <class Q>
__device__ __forceinline__ void minfer_mmvqnt_dispatch(float* out, const uint8_t* a, const uint8_t* w,
                                                       const float* bias, int k, int n, int nt, size_t rowBytes) {
    switch (nt) {
    case 2: minfer_mmvqnt_body<Q, 2>(out, a, w, bias, k, n, rowBytes); break;
    case 3: minfer_mmvqnt_body<Q, 3>(out, a, w, bias, k, n, rowBytes); break;
    case 4: minfer_mmvqnt_body<Q, 4>(out, a, w, bias, k, n, rowBytes); break;
    case 5: minfer_mmvqnt_body<Q, 5>(out, a, w, bias, k, n, rowBytes); break;
    case 6: minfer_mmvqnt_body<Q, 6>(out, a, w, bias, k, n, rowBytes); break;
    case 7: minfer_mmvqnt_body<Q, 7>(out, a, w, bias, k, n, rowBytes); break;
    case 8: minfer_mmvqnt_body<Q, 8>(out, a, w, bias, k, n, rowBytes); break;
    default: __trap(); // the launcher validates MINFER_MMVQNT_MIN_NT <= nt <= MINFER_MMVQNT_MAX_NT
    }
}

// grid (ceil(n / MINFER_MMVQNT_ROWS)), block (MINFER_MMVQNT_THREADS), no
// smem. a: nt Q8_1 rows (4-byte aligned); w: 4-byte aligned (16 for Q4_K);
// k a multiple of the weight's block size; 2 <= nt <= 8. The _q8_0r and
// _q6_kr kernels take w as the repacked copy of the whole n x k matrix
// (16-byte aligned, built for exactly these n and k); their row views
// ignore the GGUF row bytes the macro passes.
#define MINFER_MMVQNT_KERNEL(name, Q, BS, BB)                                                            \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQNT_THREADS)                                 \
        minfer_mmvq_nt_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, \
                              int n, int nt) {                                                          \
        minfer_mmvqnt_dispatch<Q>(out, a, w, bias, k, n, nt, (size_t)(k / (BS)) * (BB));                \
    }

MINFER_MMVQNT_KERNEL(q8_0, MinferMmvqntQ8_0, MINFER_QK, MINFER_Q8_0_BYTES)
MINFER_MMVQNT_KERNEL(q4_0, MinferMmvqntQ4_0, MINFER_QK, MINFER_Q4_0_BYTES)
MINFER_MMVQNT_KERNEL(q4_1, MinferMmvqntQ4_1, MINFER_QK, MINFER_Q4_1_BYTES)
MINFER_MMVQNT_KERNEL(q5_0, MinferMmvqntQ5_0, MINFER_QK, MINFER_Q5_0_BYTES)
MINFER_MMVQNT_KERNEL(q5_1, MinferMmvqntQ5_1, MINFER_QK, MINFER_Q5_1_BYTES)
MINFER_MMVQNT_KERNEL(q4_k, MinferMmvqntQ4_K, MINFER_QKK, MINFER_Q4_K_BYTES)
MINFER_MMVQNT_KERNEL(q6_k, MinferMmvqntQ6_K, MINFER_QKK, MINFER_Q6_K_BYTES)
MINFER_MMVQNT_KERNEL(q8_0r, MinferMmvqntQ8_0r, MINFER_QK, MINFER_Q8_0_BYTES)
MINFER_MMVQNT_KERNEL(q6_kr, MinferMmvqntQ6_Kr, MINFER_QKK, MINFER_Q6_K_BYTES)

#undef MINFER_MMVQNT_KERNEL
