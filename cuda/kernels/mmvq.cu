// mmvq.cu: decode matmul (nt = 1) over Q8_1-quantized activations with
// integer dot products (__dp4a), for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
// Q5_K and Q6_K weights, plus its fused forms (one launch each):
//
//   minfer_mmvq_<t>     out[j] = sum_i W[j][i] * a[i] (+ bias[j])
//   minfer_mmvq_qkv_<t> the q, k and v projections of one activation: rows
//                       j < nq of Wq, then nk of Wk, then nv of Wv, into one
//                       output (q, then k, then v), each with its bias
//   minfer_mmvq_ffn_<t> out[j] = silu(Wg[j] . a) * (Wu[j] . a) (SwiGLU FFN)
//   minfer_mmvq_res_<t> out[j] = res[j] + (W[j] . a (+ bias[j])): the plain
//                       form with the graph's residual add folded in
//                       (MINFER_FUSE_RESIDUAL; res may be out)
//
// a is the activation row already quantized to Q8_1 by minfer_quantize_q8_1
// (quantize_act.cu): k / 32 blocks of 36 bytes (f16 d, f16 s, 32 int8 q),
// read 4-byte aligned (the launcher checks the scratch pointer). W is n rows
// of k values in their GGUF block format. The launcher asks for a 4-byte
// aligned weight base; then every row and block starts at a multiple of its
// block size, so each field is read with the widest load its offset allows:
// 16-byte loads for the Q4_K quants (144-byte blocks, quants at +16) and the
// Q5_K quants and high bits (176-byte blocks, qh at +16, qs at +48), 4-byte
// loads for Q4_1 / Q5_1 (20 / 24-byte blocks), 2-byte loads for the 2-byte
// aligned Q8_0 / Q4_0 / Q5_0 / Q6_K blocks (34 / 18 / 22 / 210 bytes).
//
// One warp per output row, MINFER_MMVQ_ROWS rows per block. The row is cut
// into 16-value units: each unit lies inside one 32-value Q8_1 activation
// block and under one weight scale, so a unit is four __dp4a of int8 weight
// values against int8 activation values (an exact int32), times the f32
// scales. Lane l takes units l, l + 32, ... and the partial sums are reduced
// with a butterfly. Every integer offset ((q - 8) for Q4_0, (q - 16) for
// Q5_0, (q - 32) for Q6_K, the min terms) is applied exactly in the integer
// domain, so the only rounding is the f32 scaling and accumulation of the
// per-unit sums. All f32 arithmetic is written with _rn intrinsics so nvcc
// cannot contract it differently in the fused kernels: a fused kernel's row
// is bitwise the plain kernel's row (the device tests check it).
//
//   Q8_0: unit = half a 32-block:     d_w * d_a * sum q_w q_a
//   Q4_0: unit = half a 32-block:     d_w * d_a * sum (q_w - 8) q_a
//   Q5_0: unit = half a 32-block:     d_w * d_a * sum (q_w - 16) q_a
//   Q4_1 / Q5_1: half a 32-block:     d_a * (d_w * sum q_w q_a + m_w * sum q_a)
//   Q4_K: unit = half a 32-sub-block: d_a * (d*sc * sum q_w q_a - dmin*m * sum q_a)
//   Q5_K: as Q4_K, q_w with its fifth bit (0..31)
//   Q6_K: unit = one 16-value scale:  d_a * d*sc * sum (q_w - 32) q_a
#include "dequant.cuh"

#define MINFER_MMVQ_ROWS 4
#define MINFER_MMVQ_THREADS (32 * MINFER_MMVQ_ROWS)
#define MINFER_MMVQ_Q8_1_BYTES 36

// The activation row is read through an accessor: block b's f32 scale d(b)
// (the f16 d, widened), and its 8 int32 words of int8 quants, 4 at a time
// (q4(b, h): words 4h .. 4h+3) or 2 (q2(b, w): words w, w+1, w even).
// MinferMmvqActG reads the Q8_1 blocks of minfer_quantize_q8_1 in global
// memory (36-byte blocks, 4-byte loads).
struct MinferMmvqActG {
    const uint8_t* a;
    __device__ __forceinline__ const uint8_t* blk(int b) const { return a + (size_t)b * MINFER_MMVQ_Q8_1_BYTES; }
    __device__ __forceinline__ float d(int b) const { return minfer_h2f(*reinterpret_cast<const unsigned short*>(blk(b))); }
    __device__ __forceinline__ int4 q4(int b, int h) const {
        const int* q = reinterpret_cast<const int*>(blk(b) + 4) + 4 * h;
        return make_int4(q[0], q[1], q[2], q[3]);
    }
    __device__ __forceinline__ int2 q2(int b, int w) const {
        const int* q = reinterpret_cast<const int*>(blk(b) + 4) + w;
        return make_int2(q[0], q[1]);
    }
};

// Weight reads by alignment: a 32-bit word at a 2-byte aligned address (two
// 16-bit loads), at a 4-byte aligned one, and an f16 at a 2-byte aligned one.
__device__ __forceinline__ uint32_t minfer_mmvq_ld2(const uint8_t* p) {
    const unsigned short* h = reinterpret_cast<const unsigned short*>(p);
    return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
}

__device__ __forceinline__ uint32_t minfer_mmvq_ld4(const uint8_t* p) {
    return *reinterpret_cast<const uint32_t*>(p);
}

__device__ __forceinline__ float minfer_mmvq_f16(const uint8_t* p) {
    return minfer_h2f(*reinterpret_cast<const unsigned short*>(p));
}

// minfer_mmvq_hbits spreads the low 4 bits of n to bit 4 of the 4 bytes of
// a word (byte b gets bit b): the fifth bits of 4 consecutive Q5 values.
__device__ __forceinline__ uint32_t minfer_mmvq_hbits(uint32_t n) {
    return ((n << 4) | (n << 11) | (n << 18) | (n << 25)) & 0x10101010u;
}

// ---------------------------------------------------------------- per type
//
// unit(row, a, u) returns the f32 contribution of unit u (16 values) of the
// row against activation accessor a; units(k) is the number of units in a
// row of k values.

struct MinferMmvqQ8_0 {
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    template <class A>
    static __device__ __forceinline__ float unit(const uint8_t* row, const A& a, int u) {
        const int blk = u >> 1, h = u & 1;
        const uint8_t* wb = row + (size_t)blk * MINFER_Q8_0_BYTES;
        const uint8_t* wq = wb + 2 + 16 * h;
        const int4 a4 = a.q4(blk, h);
        const int aw[4] = {a4.x, a4.y, a4.z, a4.w};
        int sumi = 0;
#pragma unroll
        for (int t = 0; t < 4; t++) sumi = __dp4a((int)minfer_mmvq_ld2(wq + 4 * t), aw[t], sumi);
        return __fmul_rn(__fmul_rn(minfer_mmvq_f16(wb), a.d(blk)), (float)sumi);
    }
};

struct MinferMmvqQ4_0 {
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    // Unit h of a block: packed bytes 8h .. 8h+7, whose low nibbles are
    // values 8h .. 8h+7 and high nibbles values 16+8h .. 16+8h+7.
    template <class A>
    static __device__ __forceinline__ float unit(const uint8_t* row, const A& a, int u) {
        const int blk = u >> 1, h = u & 1;
        const uint8_t* wb = row + (size_t)blk * MINFER_Q4_0_BYTES;
        const uint8_t* wq = wb + 2 + 8 * h;
        const int2 al2 = a.q2(blk, 2 * h), ah2 = a.q2(blk, 4 + 2 * h);
        const int alw[2] = {al2.x, al2.y}, ahw[2] = {ah2.x, ah2.y};
        int sumi = 0;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const uint32_t v = minfer_mmvq_ld2(wq + 4 * t);
            const int lo = (int)__vsub4(v & 0x0F0F0F0Fu, 0x08080808u);        // values 8h+4t ..
            const int hi = (int)__vsub4((v >> 4) & 0x0F0F0F0Fu, 0x08080808u); // values 16+8h+4t ..
            sumi = __dp4a(lo, alw[t], sumi);
            sumi = __dp4a(hi, ahw[t], sumi);
        }
        return __fmul_rn(__fmul_rn(minfer_mmvq_f16(wb), a.d(blk)), (float)sumi);
    }
};

struct MinferMmvqQ4_1 {
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    // Q4_0's unit layout with unsigned nibbles and a min: value = q d + m
    // (blocks of 20 bytes: f16 d, f16 m, 16 packed bytes, all 4-byte aligned).
    template <class A>
    static __device__ __forceinline__ float unit(const uint8_t* row, const A& a, int u) {
        const int blk = u >> 1, h = u & 1;
        const uint8_t* wb = row + (size_t)blk * MINFER_Q4_1_BYTES;
        const uint8_t* wq = wb + 4 + 8 * h;
        const int2 al2 = a.q2(blk, 2 * h), ah2 = a.q2(blk, 4 + 2 * h);
        const int alw[2] = {al2.x, al2.y}, ahw[2] = {ah2.x, ah2.y};
        int sumi = 0, suma = 0;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const uint32_t v = minfer_mmvq_ld4(wq + 4 * t);
            const int al = alw[t], ah = ahw[t];
            sumi = __dp4a((int)(v & 0x0F0F0F0Fu), al, sumi);
            sumi = __dp4a((int)((v >> 4) & 0x0F0F0F0Fu), ah, sumi);
            suma = __dp4a(0x01010101, al, suma);
            suma = __dp4a(0x01010101, ah, suma);
        }
        const float dq = __fmul_rn(minfer_mmvq_f16(wb), (float)sumi);
        const float mq = __fmul_rn(minfer_mmvq_f16(wb + 2), (float)suma);
        return __fmul_rn(a.d(blk), __fadd_rn(dq, mq));
    }
};

struct MinferMmvqQ5_0 {
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    // Q4_0's unit layout (blocks of 22 bytes: f16 d, u32 qh, 16 packed
    // bytes) plus the fifth bit of value j, bit j of qh; value = (q - 16) d.
    template <class A>
    static __device__ __forceinline__ float unit(const uint8_t* row, const A& a, int u) {
        const int blk = u >> 1, h = u & 1;
        const uint8_t* wb = row + (size_t)blk * MINFER_Q5_0_BYTES;
        const uint32_t qh = minfer_mmvq_ld2(wb + 2);
        const uint8_t* wq = wb + 6 + 8 * h;
        const int2 al2 = a.q2(blk, 2 * h), ah2 = a.q2(blk, 4 + 2 * h);
        const int alw[2] = {al2.x, al2.y}, ahw[2] = {ah2.x, ah2.y};
        int sumi = 0;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const uint32_t v = minfer_mmvq_ld2(wq + 4 * t);
            const int j = 8 * h + 4 * t; // first value of the low nibbles
            const uint32_t lo = (v & 0x0F0F0F0Fu) | minfer_mmvq_hbits((qh >> j) & 15u);
            const uint32_t hi = ((v >> 4) & 0x0F0F0F0Fu) | minfer_mmvq_hbits((qh >> (16 + j)) & 15u);
            sumi = __dp4a((int)__vsub4(lo, 0x10101010u), alw[t], sumi);
            sumi = __dp4a((int)__vsub4(hi, 0x10101010u), ahw[t], sumi);
        }
        return __fmul_rn(__fmul_rn(minfer_mmvq_f16(wb), a.d(blk)), (float)sumi);
    }
};

struct MinferMmvqQ5_1 {
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    // Q5_0 with unsigned values and a min (blocks of 24 bytes: f16 d, f16 m,
    // u32 qh, 16 packed bytes, all 4-byte aligned): value = q d + m.
    template <class A>
    static __device__ __forceinline__ float unit(const uint8_t* row, const A& a, int u) {
        const int blk = u >> 1, h = u & 1;
        const uint8_t* wb = row + (size_t)blk * MINFER_Q5_1_BYTES;
        const uint32_t qh = minfer_mmvq_ld4(wb + 4);
        const uint8_t* wq = wb + 8 + 8 * h;
        const int2 al2 = a.q2(blk, 2 * h), ah2 = a.q2(blk, 4 + 2 * h);
        const int alw[2] = {al2.x, al2.y}, ahw[2] = {ah2.x, ah2.y};
        int sumi = 0, suma = 0;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const uint32_t v = minfer_mmvq_ld4(wq + 4 * t);
            const int j = 8 * h + 4 * t;
            const uint32_t lo = (v & 0x0F0F0F0Fu) | minfer_mmvq_hbits((qh >> j) & 15u);
            const uint32_t hi = ((v >> 4) & 0x0F0F0F0Fu) | minfer_mmvq_hbits((qh >> (16 + j)) & 15u);
            const int al = alw[t], ah = ahw[t];
            sumi = __dp4a((int)lo, al, sumi);
            sumi = __dp4a((int)hi, ah, sumi);
            suma = __dp4a(0x01010101, al, suma);
            suma = __dp4a(0x01010101, ah, suma);
        }
        const float dq = __fmul_rn(minfer_mmvq_f16(wb), (float)sumi);
        const float mq = __fmul_rn(minfer_mmvq_f16(wb + 2), (float)suma);
        return __fmul_rn(a.d(blk), __fadd_rn(dq, mq));
    }
};

struct MinferMmvqQ4_K {
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    // Unit u of a row: super-block u / 16, sub-block sub = (u % 16) / 2 (its
    // values are activation block 8 sb + sub), half h. Value l of sub-block
    // sub is the low (sub even) or high (sub odd) nibble of qs[32 (sub/2) + l].
    // The unit's 16 quant bytes start at a multiple of 16 (one uint4 load).
    template <class A>
    static __device__ __forceinline__ float unit(const uint8_t* row, const A& a, int u) {
        const int sb = u >> 4, r = u & 15, sub = r >> 1, h = r & 1;
        const uint8_t* wb = row + (size_t)sb * MINFER_Q4_K_BYTES;
        const int ab = 8 * sb + sub;
        const uint4 q4 = *reinterpret_cast<const uint4*>(wb + 16 + 32 * (sub >> 1) + 16 * h);
        const uint32_t qw[4] = {q4.x, q4.y, q4.z, q4.w};
        const int shift = 4 * (sub & 1);
        const int4 a4 = a.q4(ab, h);
        const int aw[4] = {a4.x, a4.y, a4.z, a4.w};
        int sumi = 0, suma = 0;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const int w4 = (int)((qw[t] >> shift) & 0x0F0F0F0Fu);
            const int aq = aw[t];
            sumi = __dp4a(w4, aq, sumi);
            suma = __dp4a(0x01010101, aq, suma);
        }
        int sc, mn;
        minfer_kscale_min(wb + 4, sub, &sc, &mn);
        const float dsc = __fmul_rn(minfer_mmvq_f16(wb), (float)sc);
        const float dmn = __fmul_rn(minfer_mmvq_f16(wb + 2), (float)mn);
        return __fmul_rn(a.d(ab), __fsub_rn(__fmul_rn(dsc, (float)sumi), __fmul_rn(dmn, (float)suma)));
    }
};

struct MinferMmvqQ5_K {
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    // Q4_K's units (blocks of 176 bytes: f16 d, f16 dmin, scales[12],
    // qh[32] at +16, qs[128] at +48) plus the fifth bit of value l of
    // sub-block sub: bit sub of qh[l]. The unit's 16 quant bytes and its 16
    // qh bytes (qh[16h .. 16h+15]) each start at a multiple of 16.
    template <class A>
    static __device__ __forceinline__ float unit(const uint8_t* row, const A& a, int u) {
        const int sb = u >> 4, r = u & 15, sub = r >> 1, h = r & 1;
        const uint8_t* wb = row + (size_t)sb * MINFER_Q5_K_BYTES;
        const int ab = 8 * sb + sub;
        const uint4 q4 = *reinterpret_cast<const uint4*>(wb + 48 + 32 * (sub >> 1) + 16 * h);
        const uint4 h4 = *reinterpret_cast<const uint4*>(wb + 16 + 16 * h);
        const uint32_t qw[4] = {q4.x, q4.y, q4.z, q4.w};
        const uint32_t hw[4] = {h4.x, h4.y, h4.z, h4.w};
        const int shift = 4 * (sub & 1);
        const int4 a4 = a.q4(ab, h);
        const int aw[4] = {a4.x, a4.y, a4.z, a4.w};
        int sumi = 0, suma = 0;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            // Byte i: low nibble of the quant, bit 4 = bit sub of its qh byte
            // (sub < 8, so the mask keeps each byte's own bit).
            const int w5 = (int)(((qw[t] >> shift) & 0x0F0F0F0Fu) | (((hw[t] >> sub) & 0x01010101u) << 4));
            const int aq = aw[t];
            sumi = __dp4a(w5, aq, sumi);
            suma = __dp4a(0x01010101, aq, suma);
        }
        int sc, mn;
        minfer_kscale_min(wb + 4, sub, &sc, &mn);
        const float dsc = __fmul_rn(minfer_mmvq_f16(wb), (float)sc);
        const float dmn = __fmul_rn(minfer_mmvq_f16(wb + 2), (float)mn);
        return __fmul_rn(a.d(ab), __fsub_rn(__fmul_rn(dsc, (float)sumi), __fmul_rn(dmn, (float)suma)));
    }
};

struct MinferMmvqQ6_K {
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    // Unit u: super-block u / 16, sub-block sub = (u % 16) / 2 = 4 hh + quarter
    // (activation block 8 sb + sub), half h: values l = 16h .. 16h+15 of the
    // sub-block, all under scale scales[8 hh + 2 quarter + h]. The low 4 bits
    // come from ql[64 hh + 32 (quarter & 1) + l] (low nibble for quarter < 2),
    // the high 2 from bits 2 quarter of qh[32 hh + l].
    template <class A>
    static __device__ __forceinline__ float unit(const uint8_t* row, const A& a, int u) {
        const int sb = u >> 4, r = u & 15, sub = r >> 1, h = r & 1;
        const int hh = sub >> 2, quarter = sub & 3;
        const uint8_t* wb = row + (size_t)sb * MINFER_Q6_K_BYTES;
        const int ab = 8 * sb + sub;
        const uint8_t* ql = wb + 64 * hh + 32 * (quarter & 1) + 16 * h;
        const uint8_t* qh = wb + 128 + 32 * hh + 16 * h;
        const int lshift = 4 * (quarter >> 1), hshift = 2 * quarter;
        const int4 a4 = a.q4(ab, h);
        const int aw[4] = {a4.x, a4.y, a4.z, a4.w};
        int sumi = 0;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const uint32_t lo = (minfer_mmvq_ld2(ql + 4 * t) >> lshift) & 0x0F0F0F0Fu;
            const uint32_t hi = ((minfer_mmvq_ld2(qh + 4 * t) >> hshift) & 0x03030303u) << 4;
            const int w6 = (int)__vsub4(lo | hi, 0x20202020u); // q - 32 in [-32, 31]
            sumi = __dp4a(w6, aw[t], sumi);
        }
        const int sc = (int8_t)wb[192 + 8 * hh + 2 * quarter + h];
        const float dsc = __fmul_rn(minfer_mmvq_f16(wb + 208), (float)sc);
        return __fmul_rn(a.d(ab), __fmul_rn(dsc, (float)sumi));
    }
};

// minfer_mmvq_part is one thread's share of a row's dot product: units
// first, first + STRIDE, ... summed in order (no reduction). The one-warp
// row takes (lane, 32); the split kernels (mmvq_split.cu) (32 w + lane, 32 W).
template <class Q, int STRIDE, class A>
__device__ __forceinline__ float minfer_mmvq_part(const uint8_t* __restrict__ wr, const A& a, int k, int first) {
    float acc = 0.0f;
    const int nu = Q::units(k);
    for (int u = first; u < nu; u += STRIDE) acc = __fadd_rn(acc, Q::unit(wr, a, u));
    return acc;
}

// minfer_mmvq_row is one row's dot product, every lane of the warp gets it:
// lane l sums units l, l + 32, ... in order, then a butterfly.
template <class Q, class A>
__device__ __forceinline__ float minfer_mmvq_row(const uint8_t* __restrict__ wr, const A& a, int k) {
    float acc = minfer_mmvq_part<Q, 32>(wr, a, k, threadIdx.x & 31);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, off));
    return acc;
}

// silu as engine/cpu computes it (and minfer_swiglu_f32 in elementwise.cu):
// x / (1 + exp(-x)) with the exponential in double, rounded once to f32.
__device__ __forceinline__ float minfer_mmvq_silu(float x) {
    const float e = (float)exp(-(double)x);
    return __fdiv_rn(x, __fadd_rn(1.0f, e));
}

// The three forms, one output row each (row < rows, warp-uniform); the
// kernels below pick the rows.
//
// RES (MINFER_FUSE_RESIDUAL, the minfer_mmvq_res_<t> kernels): out[row] =
// res[row] + (dot + bias), the residual add of the graph done by the lane
// that writes the row, after the dot is complete and in the same f32
// operations as the separate minfer_add_f32 (one __fadd_rn; the add is
// commutative, so operand order does not matter): bitwise the unfused
// chain. res may be out itself (an in-place add): the one lane reads its
// element before writing it, so neither pointer is __restrict__.
template <class Q, bool RES, class A>
__device__ __forceinline__ void minfer_mmvq_plain_row(float* out, const A& a, const uint8_t* __restrict__ w,
                                                      const float* __restrict__ bias, const float* res, int k, int row,
                                                      size_t rowBytes) {
    float acc = minfer_mmvq_row<Q>(w + (size_t)row * rowBytes, a, k);
    if ((threadIdx.x & 31) == 0) {
        if (bias != nullptr) acc = __fadd_rn(acc, bias[row]);
        if (RES) acc = __fadd_rn(res[row], acc);
        out[row] = acc;
    }
}

// The body of minfer_mmvq_<t> (RES false) and minfer_mmvq_res_<t> (RES
// true): one row per warp.
template <class Q, bool RES>
__device__ __forceinline__ void minfer_mmvq_plain(float* out, const uint8_t* a, const uint8_t* w, const float* bias,
                                                  const float* res, int k, int n, size_t rowBytes) {
    const int row = blockIdx.x * MINFER_MMVQ_ROWS + (threadIdx.x >> 5);
    if (row >= n) return; // the whole warp leaves together
    minfer_mmvq_plain_row<Q, RES>(out, MinferMmvqActG{a}, w, bias, res, k, row, rowBytes);
}

// Fused q/k/v: global row j of nq + nk + nv picks its weight, bias and
// local row; out is the three outputs back to back.
template <class Q, class A>
__device__ __forceinline__ void minfer_mmvq_qkv_row(float* __restrict__ out, const A& a, const uint8_t* wq,
                                                    const uint8_t* wk, const uint8_t* wv, const float* bq,
                                                    const float* bk, const float* bv, int k, int nq, int nk, int row,
                                                    size_t rowBytes) {
    const uint8_t* w = wq;
    const float* bias = bq;
    int r = row;
    if (r >= nq) {
        r -= nq;
        w = wk, bias = bk;
        if (r >= nk) {
            r -= nk;
            w = wv, bias = bv;
        }
    }
    float acc = minfer_mmvq_row<Q>(w + (size_t)r * rowBytes, a, k);
    if ((threadIdx.x & 31) == 0) {
        if (bias != nullptr) acc = __fadd_rn(acc, bias[r]);
        out[row] = acc;
    }
}

// Fused SwiGLU FFN: both rows j of gate and up in one pass over the units
// (each accumulator in the same order as minfer_mmvq_row, so g and u are
// bitwise the plain kernel's), then silu(g) * u.
template <class Q, class A>
__device__ __forceinline__ void minfer_mmvq_ffn_row(float* __restrict__ out, const A& a, const uint8_t* __restrict__ wg,
                                                    const uint8_t* __restrict__ wu, int k, int row, size_t rowBytes) {
    const int lane = threadIdx.x & 31;
    const uint8_t* gr = wg + (size_t)row * rowBytes;
    const uint8_t* ur = wu + (size_t)row * rowBytes;
    float g = 0.0f, u = 0.0f;
    const int nu = Q::units(k);
    for (int i = lane; i < nu; i += 32) {
        g = __fadd_rn(g, Q::unit(gr, a, i));
        u = __fadd_rn(u, Q::unit(ur, a, i));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        g = __fadd_rn(g, __shfl_xor_sync(0xffffffffu, g, off));
        u = __fadd_rn(u, __shfl_xor_sync(0xffffffffu, u, off));
    }
    if (lane == 0) out[row] = __fmul_rn(minfer_mmvq_silu(g), u);
}

// mmvq kernels: grid (ceil(rows / MINFER_MMVQ_ROWS)), block
// (MINFER_MMVQ_THREADS), no smem; rows = n (plain, ffn) or nq + nk + nv.
// a: the Q8_1 activation row (k / 32 blocks, 4-byte aligned); weights
// 4-byte aligned; k a multiple of the weight's block size.

#define MINFER_MMVQ_KERNEL(name, Q, BS, BB)                                                                    \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQ_THREADS)                                         \
        minfer_mmvq_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, int n) {    \
        minfer_mmvq_plain<Q, false>(out, a, w, bias, nullptr, k, n, (size_t)(k / (BS)) * (BB));                \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQ_THREADS)                                         \
        minfer_mmvq_res_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, int n, \
                               const float* res) {                                                             \
        minfer_mmvq_plain<Q, true>(out, a, w, bias, res, k, n, (size_t)(k / (BS)) * (BB));                     \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQ_THREADS)                                         \
        minfer_mmvq_qkv_##name(float* out, const uint8_t* a, const uint8_t* wq, const uint8_t* wk,              \
                               const uint8_t* wv, const float* bq, const float* bk, const float* bv, int k,     \
                               int nq, int nk, int nv) {                                                       \
        const int row = blockIdx.x * MINFER_MMVQ_ROWS + (threadIdx.x >> 5);                                   \
        if (row >= nq + nk + nv) return;                                                                      \
        minfer_mmvq_qkv_row<Q>(out, MinferMmvqActG{a}, wq, wk, wv, bq, bk, bv, k, nq, nk, row,                 \
                               (size_t)(k / (BS)) * (BB));                                                    \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQ_THREADS)                                         \
        minfer_mmvq_ffn_##name(float* out, const uint8_t* a, const uint8_t* wg, const uint8_t* wu, int k, int n) { \
        const int row = blockIdx.x * MINFER_MMVQ_ROWS + (threadIdx.x >> 5);                                   \
        if (row >= n) return;                                                                                 \
        minfer_mmvq_ffn_row<Q>(out, MinferMmvqActG{a}, wg, wu, k, row, (size_t)(k / (BS)) * (BB));             \
    }

MINFER_MMVQ_KERNEL(q8_0, MinferMmvqQ8_0, MINFER_QK, MINFER_Q8_0_BYTES)
MINFER_MMVQ_KERNEL(q4_0, MinferMmvqQ4_0, MINFER_QK, MINFER_Q4_0_BYTES)
MINFER_MMVQ_KERNEL(q4_1, MinferMmvqQ4_1, MINFER_QK, MINFER_Q4_1_BYTES)
MINFER_MMVQ_KERNEL(q5_0, MinferMmvqQ5_0, MINFER_QK, MINFER_Q5_0_BYTES)
MINFER_MMVQ_KERNEL(q5_1, MinferMmvqQ5_1, MINFER_QK, MINFER_Q5_1_BYTES)
MINFER_MMVQ_KERNEL(q4_k, MinferMmvqQ4_K, MINFER_QKK, MINFER_Q4_K_BYTES)
MINFER_MMVQ_KERNEL(q5_k, MinferMmvqQ5_K, MINFER_QKK, MINFER_Q5_K_BYTES)
MINFER_MMVQ_KERNEL(q6_k, MinferMmvqQ6_K, MINFER_QKK, MINFER_Q6_K_BYTES)

#undef MINFER_MMVQ_KERNEL
