// mmvq.cu: decode matmul (nt = 1) over Q8_1-quantized activations with
// integer dot products (__dp4a), for Q8_0, Q4_0, Q4_K and Q6_K weights.
//
//   out[j] = sum_i W[j][i] * a[i] (+ bias[j])
//
// a is the activation row already quantized to Q8_1 by minfer_quantize_q8_1
// (quantize_act.cu): k / 32 blocks of 36 bytes (f16 d, f16 s, 32 int8 q),
// read 4-byte aligned (the launcher checks the scratch pointer). W is n rows
// of k values in their GGUF block format; its blocks (18 / 34 / 144 / 210
// bytes) are at best 2-byte aligned, so every weight word is assembled from
// byte loads (minfer_ld_u32).
//
// One warp per output row, MINFER_MMVQ_ROWS rows per block. The row is cut
// into 16-value units: each unit lies inside one 32-value Q8_1 activation
// block and under one weight scale, so a unit is four __dp4a of int8 weight
// values against int8 activation values (an exact int32), times the f32
// scales. Lane l takes units l, l + 32, ... and the partial sums are reduced
// with a butterfly. Every integer offset ((q - 8) for Q4_0, (q - 32) for
// Q6_K, the Q4_K min term) is applied exactly in the integer domain, so the
// only rounding is the f32 scaling and accumulation of the per-unit sums.
//
//   Q8_0: unit = half a 32-block:     d_w * d_a * sum q_w q_a
//   Q4_0: unit = half a 32-block:     d_w * d_a * sum (q_w - 8) q_a
//   Q4_K: unit = half a 32-sub-block: d_a * (d*sc * sum q_w q_a - dmin*m * sum q_a)
//   Q6_K: unit = one 16-value scale:  d_a * d*sc * sum (q_w - 32) q_a
#include "dequant.cuh"

#define MINFER_MMVQ_ROWS 4
#define MINFER_MMVQ_THREADS (32 * MINFER_MMVQ_ROWS)
#define MINFER_MMVQ_Q8_1_BYTES 36

// Activation block b: its f32 scale and its 8 int32 words of int8 quants.
__device__ __forceinline__ const uint8_t* minfer_mmvq_ablk(const uint8_t* a, int b) {
    return a + (size_t)b * MINFER_MMVQ_Q8_1_BYTES;
}

__device__ __forceinline__ float minfer_mmvq_ad(const uint8_t* ab) {
    return minfer_h2f(*reinterpret_cast<const unsigned short*>(ab));
}

__device__ __forceinline__ int minfer_mmvq_aq(const uint8_t* ab, int word) {
    return reinterpret_cast<const int*>(ab + 4)[word];
}

// ---------------------------------------------------------------- per type
//
// unit(row, a, u) returns the f32 contribution of unit u (16 values) of the
// row; units(k) is the number of units in a row of k values.

struct MinferMmvqQ8_0 {
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    static __device__ __forceinline__ float unit(const uint8_t* row, const uint8_t* a, int u) {
        const int blk = u >> 1, h = u & 1;
        const uint8_t* wb = row + (size_t)blk * MINFER_Q8_0_BYTES;
        const uint8_t* ab = minfer_mmvq_ablk(a, blk);
        const uint8_t* wq = wb + 2 + 16 * h;
        int sumi = 0;
#pragma unroll
        for (int t = 0; t < 4; t++) sumi = __dp4a((int)minfer_ld_u32(wq + 4 * t), minfer_mmvq_aq(ab, 4 * h + t), sumi);
        return __fmul_rn(minfer_ld_f16(wb), minfer_mmvq_ad(ab)) * (float)sumi;
    }
};

struct MinferMmvqQ4_0 {
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    // Unit h of a block: packed bytes 8h .. 8h+7, whose low nibbles are
    // values 8h .. 8h+7 and high nibbles values 16+8h .. 16+8h+7.
    static __device__ __forceinline__ float unit(const uint8_t* row, const uint8_t* a, int u) {
        const int blk = u >> 1, h = u & 1;
        const uint8_t* wb = row + (size_t)blk * MINFER_Q4_0_BYTES;
        const uint8_t* ab = minfer_mmvq_ablk(a, blk);
        const uint8_t* wq = wb + 2 + 8 * h;
        int sumi = 0;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const uint32_t v = minfer_ld_u32(wq + 4 * t);
            const int lo = (int)__vsub4(v & 0x0F0F0F0Fu, 0x08080808u);        // values 8h+4t ..
            const int hi = (int)__vsub4((v >> 4) & 0x0F0F0F0Fu, 0x08080808u); // values 16+8h+4t ..
            sumi = __dp4a(lo, minfer_mmvq_aq(ab, 2 * h + t), sumi);
            sumi = __dp4a(hi, minfer_mmvq_aq(ab, 4 + 2 * h + t), sumi);
        }
        return __fmul_rn(minfer_ld_f16(wb), minfer_mmvq_ad(ab)) * (float)sumi;
    }
};

struct MinferMmvqQ4_K {
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    // Unit u of a row: super-block u / 16, sub-block sub = (u % 16) / 2 (its
    // values are activation block 8 sb + sub), half h. Value l of sub-block
    // sub is the low (sub even) or high (sub odd) nibble of qs[32 (sub/2) + l].
    static __device__ __forceinline__ float unit(const uint8_t* row, const uint8_t* a, int u) {
        const int sb = u >> 4, r = u & 15, sub = r >> 1, h = r & 1;
        const uint8_t* wb = row + (size_t)sb * MINFER_Q4_K_BYTES;
        const uint8_t* ab = minfer_mmvq_ablk(a, 8 * sb + sub);
        const uint8_t* wq = wb + 16 + 32 * (sub >> 1) + 16 * h;
        const int shift = 4 * (sub & 1);
        int sumi = 0, suma = 0;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const int w4 = (int)((minfer_ld_u32(wq + 4 * t) >> shift) & 0x0F0F0F0Fu);
            const int aq = minfer_mmvq_aq(ab, 4 * h + t);
            sumi = __dp4a(w4, aq, sumi);
            suma = __dp4a(0x01010101, aq, suma);
        }
        int sc, mn;
        minfer_kscale_min(wb + 4, sub, &sc, &mn);
        const float dsc = __fmul_rn(minfer_ld_f16(wb), (float)sc);
        const float dmn = __fmul_rn(minfer_ld_f16(wb + 2), (float)mn);
        return minfer_mmvq_ad(ab) * (dsc * (float)sumi - dmn * (float)suma);
    }
};

struct MinferMmvqQ6_K {
    static __device__ __forceinline__ int units(int k) { return k / 16; }
    // Unit u: super-block u / 16, sub-block sub = (u % 16) / 2 = 4 hh + quarter
    // (activation block 8 sb + sub), half h: values l = 16h .. 16h+15 of the
    // sub-block, all under scale scales[8 hh + 2 quarter + h]. The low 4 bits
    // come from ql[64 hh + 32 (quarter & 1) + l] (low nibble for quarter < 2),
    // the high 2 from bits 2 quarter of qh[32 hh + l].
    static __device__ __forceinline__ float unit(const uint8_t* row, const uint8_t* a, int u) {
        const int sb = u >> 4, r = u & 15, sub = r >> 1, h = r & 1;
        const int hh = sub >> 2, quarter = sub & 3;
        const uint8_t* wb = row + (size_t)sb * MINFER_Q6_K_BYTES;
        const uint8_t* ab = minfer_mmvq_ablk(a, 8 * sb + sub);
        const uint8_t* ql = wb + 64 * hh + 32 * (quarter & 1) + 16 * h;
        const uint8_t* qh = wb + 128 + 32 * hh + 16 * h;
        const int lshift = 4 * (quarter >> 1), hshift = 2 * quarter;
        int sumi = 0;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const uint32_t lo = (minfer_ld_u32(ql + 4 * t) >> lshift) & 0x0F0F0F0Fu;
            const uint32_t hi = ((minfer_ld_u32(qh + 4 * t) >> hshift) & 0x03030303u) << 4;
            const int w6 = (int)__vsub4(lo | hi, 0x20202020u); // q - 32 in [-32, 31]
            sumi = __dp4a(w6, minfer_mmvq_aq(ab, 4 * h + t), sumi);
        }
        const int sc = (int8_t)wb[192 + 8 * hh + 2 * quarter + h];
        const float dsc = __fmul_rn(minfer_ld_f16(wb + 208), (float)sc);
        return minfer_mmvq_ad(ab) * (dsc * (float)sumi);
    }
};

template <class Q>
__device__ __forceinline__ void minfer_mmvq_body(float* __restrict__ out, const uint8_t* __restrict__ a,
                                                 const uint8_t* __restrict__ w, const float* __restrict__ bias,
                                                 int k, int n, size_t rowBytes) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * MINFER_MMVQ_ROWS + (threadIdx.x >> 5);
    if (row >= n) return; // the whole warp leaves together
    const uint8_t* wr = w + (size_t)row * rowBytes;
    float acc = 0.0f;
    const int nu = Q::units(k);
    for (int u = lane; u < nu; u += 32) acc += Q::unit(wr, a, u);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) {
        if (bias != nullptr) acc += bias[row];
        out[row] = acc;
    }
}

// grid (ceil(n / MINFER_MMVQ_ROWS)), block (MINFER_MMVQ_THREADS), no smem.
// a: the Q8_1 activation row (k / 32 blocks, 4-byte aligned); k a multiple
// of the weight's block size.
#define MINFER_MMVQ_KERNEL(name, Q, BS, BB)                                                                 \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQ_THREADS)                                      \
        minfer_mmvq_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, int n) { \
        minfer_mmvq_body<Q>(out, a, w, bias, k, n, (size_t)(k / (BS)) * (BB));                               \
    }

MINFER_MMVQ_KERNEL(q8_0, MinferMmvqQ8_0, MINFER_QK, MINFER_Q8_0_BYTES)
MINFER_MMVQ_KERNEL(q4_0, MinferMmvqQ4_0, MINFER_QK, MINFER_Q4_0_BYTES)
MINFER_MMVQ_KERNEL(q4_k, MinferMmvqQ4_K, MINFER_QKK, MINFER_Q4_K_BYTES)
MINFER_MMVQ_KERNEL(q6_k, MinferMmvqQ6_K, MINFER_QKK, MINFER_Q6_K_BYTES)

#undef MINFER_MMVQ_KERNEL
