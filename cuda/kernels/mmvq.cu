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

// ------------------------------------------------------------- wide loads
//
// minfer_mmvqw_<t> (+ _res_, _qkv_, _ffn_, the signatures above), Q8_0 and
// Q6_K only (MINFER_MMVQ_WIDE): the kernels above over the same GGUF bytes,
// with 16-byte loads and no second copy of the weight (the repacked copy of
// mmvq_repack.cu gets its 16-byte loads by doubling the memory).
//
// Why staging: a Q8_0 row of k values is k / 32 * 34 bytes, a Q6_K row
// k / 256 * 210; a row starts 16-byte aligned iff (k / 32) % 8 == 0 (Q8_0:
// k = 3584, 4864, 18944, 1024, 3072 do; 896 does not) or (k / 256) % 8 == 0
// (Q6_K), and inside a row the 16-value units sit at every even offset. So
// one warp per row walks it in chunks of whole blocks (64 Q8_0 blocks =
// 2176 bytes, 8 Q6_K super-blocks = 1680 bytes: both multiples of 16, so
// every chunk of a row starts at the row's own offset mod 16, its lead):
// lane i loads 16-byte words i, i + 32, ... of the chunk's aligned span
// (lead + chunk bytes, rounded up: at most 137 / 106 words, 5 / 4 uint4 per
// lane in flight) into registers, stores them to the warp's shared buffer,
// and loads the next chunk into registers while it computes this one from
// shared memory. Unaligned rows need no prologue: the span starts at the
// aligned word below the row (bytes of the previous row, never used); the
// one partial word at the end of the matrix is read with 2-byte loads.
//
// Bitwise: lane l computes units l, l + 32, ... (a chunk is 128 units, a
// multiple of 32, so the sequence runs on across chunks), each unit with
// the same int32 __dp4a sum of the same 4 words (a funnel shift of two
// aligned shared words gives what minfer_mmvq_ld2 gives), the same _rn f32
// scaling, accumulated in the same order, then the same butterfly: every
// output is bitwise minfer_mmvq_<t>'s (cuda/mmvq_wide_device_test.go).

#define MINFER_MMVQW_ROWS 4
#define MINFER_MMVQW_THREADS (32 * MINFER_MMVQW_ROWS)
#define MINFER_MMVQW_Q8_0_CHUNK 64
#define MINFER_MMVQW_Q6_K_CHUNK 8
// The shared words of one row's buffer: the chunk's 16-byte words, one more
// for a lead, one more read past the last unit by minfer_mmvqw_ld16.
#define MINFER_MMVQW_Q8_0_VECS 138
#define MINFER_MMVQW_Q6_K_VECS 107

static_assert((MINFER_MMVQW_Q8_0_CHUNK * MINFER_Q8_0_BYTES) % 16 == 0, "a Q8_0 chunk is whole 16-byte words");
static_assert((MINFER_MMVQW_Q6_K_CHUNK * MINFER_Q6_K_BYTES) % 16 == 0, "a Q6_K chunk is whole 16-byte words");
static_assert((MINFER_MMVQW_Q8_0_CHUNK * 2) % 32 == 0 && (MINFER_MMVQW_Q6_K_CHUNK * 16) % 32 == 0,
              "a chunk is whole rounds of 32 units");
static_assert(MINFER_MMVQW_Q8_0_VECS * 16 >= MINFER_MMVQW_Q8_0_CHUNK * MINFER_Q8_0_BYTES + 14 + 4 + 16 - 2,
              "the Q8_0 buffer holds a chunk, its lead and the read past it");
static_assert(MINFER_MMVQW_Q6_K_VECS * 16 >= MINFER_MMVQW_Q6_K_CHUNK * MINFER_Q6_K_BYTES + 14 + 16,
              "the Q6_K buffer holds a chunk, its lead and the read past it");

// minfer_mmvqw_ld16 is the 16 bytes at the even byte offset off of a warp's
// shared buffer s (4-byte aligned, 4 bytes readable past off + 16): five
// aligned 32-bit loads and a funnel shift (by 0 or 16 bits) per word.
__device__ __forceinline__ uint4 minfer_mmvqw_ld16(const uint32_t* s, int off) {
    const uint32_t* p = s + (off >> 2);
    const uint32_t sh = (uint32_t)(off & 2) << 3;
    const uint32_t w0 = p[0], w1 = p[1], w2 = p[2], w3 = p[3], w4 = p[4];
    return make_uint4(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh), __funnelshift_r(w2, w3, sh),
                      __funnelshift_r(w3, w4, sh));
}

// Per type: QK values and BYTES bytes per block, UNITS 16-value units and
// ACT Q8_1 activation blocks per block, CHUNK blocks per chunk, VECS shared
// words per row; unit(s, lead, a, u) is unit u of a chunk staged at byte
// lead of s, against the activation accessor a of the chunk's first block:
// the arithmetic of MinferMmvq<t>::unit, operation for operation.
struct MinferMmvqwQ8_0 {
    static constexpr int QK = MINFER_QK, BYTES = MINFER_Q8_0_BYTES, UNITS = 2, ACT = 1;
    static constexpr int CHUNK = MINFER_MMVQW_Q8_0_CHUNK, VECS = MINFER_MMVQW_Q8_0_VECS;
    template <class A>
    static __device__ __forceinline__ float unit(const uint8_t* s, int lead, const A& a, int u) {
        const int blk = u >> 1, h = u & 1;
        const int off = lead + blk * MINFER_Q8_0_BYTES;
        const uint4 q = minfer_mmvqw_ld16(reinterpret_cast<const uint32_t*>(s), off + 2 + 16 * h);
        const int4 a4 = a.q4(blk, h);
        int sumi = 0;
        sumi = __dp4a((int)q.x, a4.x, sumi);
        sumi = __dp4a((int)q.y, a4.y, sumi);
        sumi = __dp4a((int)q.z, a4.z, sumi);
        sumi = __dp4a((int)q.w, a4.w, sumi);
        return __fmul_rn(__fmul_rn(minfer_mmvq_f16(s + off), a.d(blk)), (float)sumi);
    }
};

struct MinferMmvqwQ6_K {
    static constexpr int QK = MINFER_QKK, BYTES = MINFER_Q6_K_BYTES, UNITS = 16, ACT = 8;
    static constexpr int CHUNK = MINFER_MMVQW_Q6_K_CHUNK, VECS = MINFER_MMVQW_Q6_K_VECS;
    // Unit u as in MinferMmvqQ6_K: super-block u / 16, sub-block sub = 4 hh +
    // quarter, half h; ql bytes at 64 hh + 32 (quarter & 1) + 16 h, qh bytes
    // at 128 + 32 hh + 16 h of the super-block.
    template <class A>
    static __device__ __forceinline__ float unit(const uint8_t* s, int lead, const A& a, int u) {
        const int sb = u >> 4, r = u & 15, sub = r >> 1, h = r & 1;
        const int hh = sub >> 2, quarter = sub & 3;
        const int off = lead + sb * MINFER_Q6_K_BYTES;
        const int ab = 8 * sb + sub;
        const uint32_t* s32 = reinterpret_cast<const uint32_t*>(s);
        const uint4 ql = minfer_mmvqw_ld16(s32, off + 64 * hh + 32 * (quarter & 1) + 16 * h);
        const uint4 qh = minfer_mmvqw_ld16(s32, off + 128 + 32 * hh + 16 * h);
        const int lshift = 4 * (quarter >> 1), hshift = 2 * quarter;
        const int4 a4 = a.q4(ab, h);
        const uint32_t lw[4] = {ql.x, ql.y, ql.z, ql.w}, hw[4] = {qh.x, qh.y, qh.z, qh.w};
        const int aw[4] = {a4.x, a4.y, a4.z, a4.w};
        int sumi = 0;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const uint32_t lo = (lw[t] >> lshift) & 0x0F0F0F0Fu;
            const uint32_t hi = ((hw[t] >> hshift) & 0x03030303u) << 4;
            const int w6 = (int)__vsub4(lo | hi, 0x20202020u); // q - 32 in [-32, 31]
            sumi = __dp4a(w6, aw[t], sumi);
        }
        const int sc = (int8_t)s[off + 192 + 8 * hh + 2 * quarter + h];
        const float dsc = __fmul_rn(minfer_mmvq_f16(s + off + 208), (float)sc);
        return __fmul_rn(a.d(ab), __fmul_rn(dsc, (float)sumi));
    }
};

// MinferMmvqwSrc is one weight row: its matrix w (16-byte aligned), the
// row's first byte in it and the matrix's size in bytes (no load passes it).
struct MinferMmvqwSrc {
    const uint8_t* w;
    size_t start, total;
};

// minfer_mmvqw_nvec is the 16-byte words of chunk c of a row of nb blocks
// whose first byte sits at lead mod 16.
template <class Q>
__device__ __forceinline__ int minfer_mmvqw_nvec(int lead, int nb, int c) {
    const int cb = min(Q::CHUNK, nb - c * Q::CHUNK);
    return (lead + cb * Q::BYTES + 15) >> 4;
}

// minfer_mmvqw_tail is the word at p of which only avail (even, < 16) bytes
// lie inside the matrix: those by 2-byte loads, the rest 0 (never used).
__device__ __forceinline__ uint4 minfer_mmvqw_tail(const uint8_t* p, size_t avail) {
    const unsigned short* h = reinterpret_cast<const unsigned short*>(p);
    uint32_t v[4];
#pragma unroll
    for (int t = 0; t < 4; t++) {
        const uint32_t lo = (size_t)(4 * t) < avail ? (uint32_t)h[2 * t] : 0u;
        const uint32_t hi = (size_t)(4 * t + 2) < avail ? (uint32_t)h[2 * t + 1] : 0u;
        v[t] = lo | (hi << 16);
    }
    return make_uint4(v[0], v[1], v[2], v[3]);
}

// minfer_mmvqw_fetch loads words lane, lane + 32, ... (< nvec) of the span
// at the 16-byte aligned byte g0 of src's matrix into r.
template <int LOADS>
__device__ __forceinline__ void minfer_mmvqw_fetch(uint4 (&r)[LOADS], const MinferMmvqwSrc& src, size_t g0, int nvec) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < LOADS; j++) {
        const int i = lane + 32 * j;
        if (i < nvec) {
            const size_t g = g0 + 16 * (size_t)i;
            r[j] = g + 16 <= src.total ? __ldg(reinterpret_cast<const uint4*>(src.w + g))
                                       : minfer_mmvqw_tail(src.w + g, src.total - g);
        }
    }
}

// minfer_mmvqw_dots gives every lane of the warp the dot products of NR
// rows (1; 2 for the FFN's gate and up) with the Q8_1 row a, staged through
// the warp's NR shared buffers buf: each accumulator sums units l, l + 32,
// ... in order and ends with minfer_mmvq_row's butterfly.
template <class Q, int NR>
__device__ __forceinline__ void minfer_mmvqw_dots(float (&acc)[NR], uint4 (*buf)[Q::VECS], const MinferMmvqwSrc (&src)[NR],
                                                  const uint8_t* a, int k) {
    constexpr int LOADS = (Q::VECS - 1 + 31) / 32;
    constexpr int ROUNDS = Q::CHUNK * Q::UNITS / 32;
    const int lane = threadIdx.x & 31;
    const int nb = k / Q::QK;
    const int nch = (nb + Q::CHUNK - 1) / Q::CHUNK;
    int lead[NR], nv[NR];
    size_t g0[NR];
    uint4 r[NR][LOADS];
#pragma unroll
    for (int j = 0; j < NR; j++) {
        lead[j] = (int)(src[j].start & 15);
        g0[j] = src[j].start - (size_t)lead[j];
        acc[j] = 0.0f;
        nv[j] = minfer_mmvqw_nvec<Q>(lead[j], nb, 0);
        minfer_mmvqw_fetch<LOADS>(r[j], src[j], g0[j], nv[j]);
    }
    for (int c = 0; c < nch; c++) {
        __syncwarp(); // every lane is done with the previous chunk
#pragma unroll
        for (int j = 0; j < NR; j++) {
#pragma unroll
            for (int t = 0; t < LOADS; t++) {
                if (lane + 32 * t < nv[j]) buf[j][lane + 32 * t] = r[j][t];
            }
        }
        __syncwarp(); // the chunk is in shared memory for every lane
        if (c + 1 < nch) { // the next chunk's loads fly while this one is computed
#pragma unroll
            for (int j = 0; j < NR; j++) {
                nv[j] = minfer_mmvqw_nvec<Q>(lead[j], nb, c + 1);
                minfer_mmvqw_fetch<LOADS>(r[j], src[j], g0[j] + (size_t)(c + 1) * (Q::CHUNK * Q::BYTES), nv[j]);
            }
        }
        const MinferMmvqActG ac{a + (size_t)c * (Q::CHUNK * Q::ACT * MINFER_MMVQ_Q8_1_BYTES)};
        const int nu = min(Q::CHUNK, nb - c * Q::CHUNK) * Q::UNITS;
#pragma unroll
        for (int t = 0; t < ROUNDS; t++) {
            const int u = lane + 32 * t;
            if (u < nu) {
#pragma unroll
                for (int j = 0; j < NR; j++) {
                    acc[j] = __fadd_rn(acc[j], Q::unit(reinterpret_cast<const uint8_t*>(buf[j]), lead[j], ac, u));
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < NR; j++) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[j] = __fadd_rn(acc[j], __shfl_xor_sync(0xffffffffu, acc[j], off));
    }
}

// The forms, one row per warp (row < rows, warp-uniform); buf is the
// warp's shared buffers. RES as in minfer_mmvq_plain_row (res may be out).
template <class Q, bool RES>
__device__ __forceinline__ void minfer_mmvqw_plain(uint4 (*buf)[Q::VECS], float* out, const uint8_t* a, const uint8_t* w,
                                                   const float* bias, const float* res, int k, int n) {
    const int row = blockIdx.x * MINFER_MMVQW_ROWS + (threadIdx.x >> 5);
    if (row >= n) return; // the whole warp leaves together
    const size_t rb = (size_t)(k / Q::QK) * Q::BYTES;
    const MinferMmvqwSrc src[1] = {{w, (size_t)row * rb, (size_t)n * rb}};
    float acc[1];
    minfer_mmvqw_dots<Q, 1>(acc, buf, src, a, k);
    if ((threadIdx.x & 31) == 0) {
        float v = acc[0];
        if (bias != nullptr) v = __fadd_rn(v, bias[row]);
        if (RES) v = __fadd_rn(res[row], v);
        out[row] = v;
    }
}

template <class Q>
__device__ __forceinline__ void minfer_mmvqw_qkv(uint4 (*buf)[Q::VECS], float* out, const uint8_t* a, const uint8_t* wq,
                                                 const uint8_t* wk, const uint8_t* wv, const float* bq, const float* bk,
                                                 const float* bv, int k, int nq, int nk, int nv) {
    const int row = blockIdx.x * MINFER_MMVQW_ROWS + (threadIdx.x >> 5);
    if (row >= nq + nk + nv) return;
    const uint8_t* w = wq;
    const float* bias = bq;
    int r = row, n = nq;
    if (r >= nq) {
        r -= nq;
        w = wk, bias = bk, n = nk;
        if (r >= nk) {
            r -= nk;
            w = wv, bias = bv, n = nv;
        }
    }
    const size_t rb = (size_t)(k / Q::QK) * Q::BYTES;
    const MinferMmvqwSrc src[1] = {{w, (size_t)r * rb, (size_t)n * rb}};
    float acc[1];
    minfer_mmvqw_dots<Q, 1>(acc, buf, src, a, k);
    if ((threadIdx.x & 31) == 0) {
        float v = acc[0];
        if (bias != nullptr) v = __fadd_rn(v, bias[r]);
        out[row] = v;
    }
}

template <class Q>
__device__ __forceinline__ void minfer_mmvqw_ffn(uint4 (*buf)[Q::VECS], float* out, const uint8_t* a, const uint8_t* wg,
                                                 const uint8_t* wu, int k, int n) {
    const int row = blockIdx.x * MINFER_MMVQW_ROWS + (threadIdx.x >> 5);
    if (row >= n) return;
    const size_t rb = (size_t)(k / Q::QK) * Q::BYTES;
    const MinferMmvqwSrc src[2] = {{wg, (size_t)row * rb, (size_t)n * rb}, {wu, (size_t)row * rb, (size_t)n * rb}};
    float acc[2];
    minfer_mmvqw_dots<Q, 2>(acc, buf, src, a, k);
    if ((threadIdx.x & 31) == 0) out[row] = __fmul_rn(minfer_mmvq_silu(acc[0]), acc[1]);
}

// Kernels: grid (ceil(rows / MINFER_MMVQW_ROWS)), block
// (MINFER_MMVQW_THREADS), static shared memory (Q8_0: 8,832 bytes, 17,664
// for the FFN; Q6_K: 6,848 / 13,696); a: the Q8_1 activation row (4-byte
// aligned); weights 16-byte aligned.
#define MINFER_MMVQW_KERNEL(name, Q)                                                                          \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQW_THREADS)                                        \
        minfer_mmvqw_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, int n) {  \
        __shared__ uint4 smem[MINFER_MMVQW_ROWS][1][Q::VECS];                                                \
        minfer_mmvqw_plain<Q, false>(smem[threadIdx.x >> 5], out, a, w, bias, nullptr, k, n);                \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQW_THREADS)                                        \
        minfer_mmvqw_res_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, int n, \
                                const float* res) {                                                           \
        __shared__ uint4 smem[MINFER_MMVQW_ROWS][1][Q::VECS];                                                \
        minfer_mmvqw_plain<Q, true>(smem[threadIdx.x >> 5], out, a, w, bias, res, k, n);                     \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQW_THREADS)                                        \
        minfer_mmvqw_qkv_##name(float* out, const uint8_t* a, const uint8_t* wq, const uint8_t* wk,             \
                                const uint8_t* wv, const float* bq, const float* bk, const float* bv, int k,    \
                                int nq, int nk, int nv) {                                                      \
        __shared__ uint4 smem[MINFER_MMVQW_ROWS][1][Q::VECS];                                                \
        minfer_mmvqw_qkv<Q>(smem[threadIdx.x >> 5], out, a, wq, wk, wv, bq, bk, bv, k, nq, nk, nv);           \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQW_THREADS)                                        \
        minfer_mmvqw_ffn_##name(float* out, const uint8_t* a, const uint8_t* wg, const uint8_t* wu, int k, int n) { \
        __shared__ uint4 smem[MINFER_MMVQW_ROWS][2][Q::VECS];                                                \
        minfer_mmvqw_ffn<Q>(smem[threadIdx.x >> 5], out, a, wg, wu, k, n);                                   \
    }

MINFER_MMVQW_KERNEL(q8_0, MinferMmvqwQ8_0)
MINFER_MMVQW_KERNEL(q6_k, MinferMmvqwQ6_K)

#undef MINFER_MMVQW_KERNEL
