// qkv_rope_store.cu: graph.OpQkvBiasRopeStore in one launch: the tail of the
// q, k, v projections of one layer (engine/cpu qkvBiasRopeStore, attn.go).
// For every token t:
//   q' = rope(q + bq)       -> out [hd, nh, nt]
//   k' = rope(k + bk)       -> K region cell win[0] + t
//   v' = v + bv             -> V region cell win[0] + t
// with the arithmetic of the unfused device chain step for step: the bias
// add is one rounded f32 add (the matmul epilogue / minfer_add_f32), the
// rotation is rope.cuh (minfer_rope_f32's), the store is kvput.cuh
// (minfer_kv_store's: f32, f16 RNE, q8_0 reference quantizer), so the output
// and the KV bytes are bitwise those of bias add + rope + kv_store. Biases
// may be null (no bias). Positions and the KV window {start, kv_len} are
// read from device memory, so a captured graph replays with fresh values;
// cells outside [0, n_ctx) are not written (as minfer_kv_store).
//
// Geometry: grid (nt, 2 + ceil(nh / qhpb)), block QRS_THREADS (256).
//   blockIdx.y == 0: the K row of token t (all KV heads): rope into shared
//                    memory, then the store (q8_0 needs 32 consecutive
//                    values per warp, which a neox or interleaved pair
//                    layout does not give in registers);
//   blockIdx.y == 1: the V row of token t: bias add and store;
//   blockIdx.y >= 2: qhpb query heads of token t (qhpb = 256 / (n_rot/2) by
//                    default: one pair per thread).
// A decode step of qwen2-0.5b (14 q heads, 2 KV heads of 64) is 4 blocks of
// 256 threads on 4 SMs: every thread loads its operands first, then
// computes its own angle in double (no table, no barrier on the q side), so
// the launch costs one load round trip plus one pow + sincos; one block per
// token would serialise the 16 heads over 256 threads and the K stage
// behind the q heads. Per-thread angles repeat the double math per head,
// which the H200's FP64 rate absorbs at these sizes.
#include "common.cuh"
#include "kvput.cuh"
#include "rope.cuh"

namespace mops {
constexpr int QRS_THREADS = 256;

// qrs_load is x[i] + bias[i] (one rounded add), or x[i] without a bias.
__device__ __forceinline__ float qrs_load(const float* x, const float* bias, long long xi, int bi) {
    const float v = x[xi];
    return bias ? __fadd_rn(v, bias[bi]) : v;
}

// qrs_rope_heads ropes nhb heads of one token: src/bias head rows start at
// head h0 (src already offset to the token), dst receives the rotated row.
// dst is global memory (q) or the shared K row.
__device__ __forceinline__ void qrs_rope_heads(float* dst, const float* src, const float* bias, int h0, int nhb, int hd,
                                               int n_rot, double p, float theta, int neox) {
    const int half = n_rot / 2;
    int ci = -1;
    float c = 0.0f, s = 0.0f;
    for (int j = threadIdx.x; j < nhb * half; j += blockDim.x) {
        const int i = j % half;
        const int o = (h0 + j / half) * hd;
        int a, b;
        rope_dims(i, half, neox, &a, &b);
        const float x0 = qrs_load(src, bias, o + a, o + a); // in flight during the angle
        const float x1 = qrs_load(src, bias, o + b, o + b);
        if (i != ci) {
            rope_angle(p, i, n_rot, theta, &c, &s);
            ci = i;
        }
        float y0, y1;
        rope_rotate(x0, x1, c, s, &y0, &y1);
        dst[o + a] = y0;
        dst[o + b] = y1;
    }
    const int rest = hd - n_rot;
    for (int j = threadIdx.x; j < nhb * rest; j += blockDim.x) {
        const int o = (h0 + j / rest) * hd + n_rot + j % rest;
        dst[o] = qrs_load(src, bias, o, o);
    }
}
} // namespace mops

// q [hd, nh, nt], k and v [hd*nkv, nt] (bias-less), biases of nh*hd,
// nkv*hd, nkv*hd or null; out [hd, nh, nt]; kreg / vreg one layer's
// regions of n_ctx cells of row_bytes. Dynamic smem: 4 * nkv*hd bytes.
extern "C" __global__ void __launch_bounds__(mops::QRS_THREADS)
minfer_qkv_rope_store(float* out, const float* q, const float* k, const float* v, const float* bq, const float* bk,
                      const float* bv, const int* pos, const int* win, uint8_t* kreg, uint8_t* vreg, int format,
                      long long row_bytes, int n_ctx, int nh, int nkv, int hd, int n_rot, float theta, int neox,
                      int qhpb) {
    extern __shared__ float qrs_krow[];
    const int t = blockIdx.x;
    const int part = blockIdx.y;
    const int row_len = nkv * hd;
    if (part >= 2) {
        const int h0 = (part - 2) * qhpb;
        const int nhb = min(nh - h0, qhpb);
        if (nhb <= 0) return;
        const long long tq = (long long)t * nh * hd;
        mops::qrs_rope_heads(out + tq, q + tq, bq, h0, nhb, hd, n_rot, (double)pos[t], theta, neox);
        return;
    }
    const long long cell = (long long)win[0] + t;
    if (cell < 0 || cell >= n_ctx) return; // block-uniform: nothing of this row is stored
    const long long tk = (long long)t * row_len;
    if (part == 1) {
        uint8_t* row = mops::kv_row(vreg, cell, row_bytes);
        // q8_0: row_len % 32 == 0 and blockDim % 32 == 0, so whole warps iterate together.
        for (int i = threadIdx.x; i < row_len; i += blockDim.x) {
            mops::kv_put(format, row, i, mops::qrs_load(v + tk, bv, i, i));
        }
        return;
    }
    mops::qrs_rope_heads(qrs_krow, k + tk, bk, 0, nkv, hd, n_rot, (double)pos[t], theta, neox);
    __syncthreads();
    uint8_t* row = mops::kv_row(kreg, cell, row_bytes);
    for (int i = threadIdx.x; i < row_len; i += blockDim.x) mops::kv_put(format, row, i, qrs_krow[i]);
}

// minfer_qkv_norm_rope_store: graph.OpQkvBiasRopeStore with q/k norm
// weights (qwen3, lever MINFER_FUSE_QKNORM): for every token t
//   q' = rope(rms_norm_head(q + bq, wq))   -> out [hd, nh, nt]
//   k' = rope(rms_norm_head(k + bk, wk))   -> K region cell win[0] + t
//   v' = v + bv                            -> V region cell win[0] + t
// where the unfused device chain runs minfer_rms_norm_f32 twice (one block
// of hd threads per head row), minfer_rope_f32 twice and minfer_kv_store
// twice. The norm here is that kernel's arithmetic for one head row step
// for step: thread e of a head holds x[e] (rms_row's one value per thread
// when blockDim == n == hd), its partial 0 + x*x, the warp xor butterfly,
// then warp sums in order folded by the same butterfly (zeros beyond the
// head's warps: norm.cu's block_sum), mean = sum / hd, scale = 1 /
// f32(sqrt_double(mean + eps)), y = f32(x * scale) * w. Rope is rope.cuh,
// the store kvput.cuh, so q and the K / V bytes are bitwise the chain's.
//
// Geometry: grid (nt, 2*gkv + gq), block QNRS_THREADS (256), hpb = 256 / hd
// heads a block (hd 64 or 128: the launcher refuses others), one value per
// thread, gkv = ceil(nkv / hpb), gq = ceil(nh / hpb):
//   blockIdx.y <  gkv:         K heads hpb*y ..: norm, rope, store;
//   blockIdx.y <  2*gkv:       hpb*hd values of the V row: bias, store;
//   blockIdx.y >= 2*gkv:       q heads: norm, rope, write out.
// A qwen3-0.6b decode step (16 q heads, 8 KV heads of 128) is 16 blocks.
// A head spans hd / 32 whole warps, so head validity and the q8_0 store's
// 32-value blocks are warp-uniform.
namespace mops {
constexpr int QNRS_THREADS = 256;

// qnrs_norm_rope_heads norms and ropes heads h0 .. h0 + blockDim/hd - 1 of
// one token (src offset to the token, nheads heads of hd) into xs (one
// value per thread, xs[tid] is element tid % hd of local head tid / hd)
// and returns whether this thread's head exists. Every thread of the block
// must call it (barriers).
__device__ __forceinline__ bool qnrs_norm_rope_heads(float* xs, float* wsum, const float* src, const float* bias,
                                                     const float* nw, int h0, int nheads, int hd, int n_rot, double p,
                                                     float theta, int neox, float eps) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int hh = tid / hd, e = tid - hh * hd;
    const bool valid = h0 + hh < nheads;
    const int o = (h0 + hh) * hd + e;
    const float x = valid ? qrs_load(src, bias, o, o) : 0.0f;
    const float w = valid ? nw[e] : 0.0f;
    const float s = warp_sum(__fadd_rn(0.0f, __fmul_rn(x, x)));
    if (lane == 0) wsum[warp] = s;
    __syncthreads();
    const int nwh = hd >> 5;
    const float tot = warp_sum(lane < nwh ? wsum[hh * nwh + lane] : 0.0f);
    const float mean = __fdiv_rn(tot, (float)hd);
    const float scale = __fdiv_rn(1.0f, (float)sqrt((double)__fadd_rn(mean, eps)));
    xs[tid] = __fmul_rn(__fmul_rn(x, scale), w);
    __syncthreads();
    // Rope in place: a pair's two values are read and written by one thread.
    const int half = n_rot / 2, hpb = blockDim.x / hd;
    for (int j = tid; j < hpb * half; j += blockDim.x) {
        const int jh = j / half, i = j - jh * half;
        if (h0 + jh >= nheads) break; // j grows with the head
        int a, b;
        rope_dims(i, half, neox, &a, &b);
        float c, sn;
        rope_angle(p, i, n_rot, theta, &c, &sn);
        float y0, y1;
        rope_rotate(xs[jh * hd + a], xs[jh * hd + b], c, sn, &y0, &y1);
        xs[jh * hd + a] = y0;
        xs[jh * hd + b] = y1;
    }
    __syncthreads();
    return valid;
}
} // namespace mops

// q [hd, nh, nt], k and v [hd*nkv, nt] (bias-less), biases of nh*hd,
// nkv*hd, nkv*hd or null; wq, wk the norm weights of hd (not null); out
// [hd, nh, nt]; kreg / vreg one layer's regions of n_ctx cells of
// row_bytes.
extern "C" __global__ void __launch_bounds__(mops::QNRS_THREADS)
minfer_qkv_norm_rope_store(float* out, const float* q, const float* k, const float* v, const float* bq, const float* bk,
                           const float* bv, const float* wq, const float* wk, const int* pos, const int* win,
                           uint8_t* kreg, uint8_t* vreg, int format, long long row_bytes, int n_ctx, int nh, int nkv,
                           int hd, int n_rot, float theta, int neox, float eps, int gkv) {
    __shared__ float qnrs_xs[mops::QNRS_THREADS];
    __shared__ float qnrs_wsum[mops::QNRS_THREADS / 32];
    const int t = blockIdx.x;
    const int part = blockIdx.y;
    const int hpb = blockDim.x / hd;
    const int row_len = nkv * hd;
    const double p = (double)pos[t];
    if (part >= 2 * gkv) {
        const int h0 = (part - 2 * gkv) * hpb;
        const long long tq = (long long)t * nh * hd;
        if (mops::qnrs_norm_rope_heads(qnrs_xs, qnrs_wsum, q + tq, bq, wq, h0, nh, hd, n_rot, p, theta, neox, eps)) {
            out[tq + (long long)h0 * hd + threadIdx.x] = qnrs_xs[threadIdx.x];
        }
        return;
    }
    const long long cell = (long long)win[0] + t;
    if (cell < 0 || cell >= n_ctx) return; // block-uniform, before any barrier: nothing of this row is stored
    const long long tk = (long long)t * row_len;
    if (part >= gkv) {
        uint8_t* row = mops::kv_row(vreg, cell, row_bytes);
        const int i = (part - gkv) * blockDim.x + threadIdx.x;
        if (i < row_len) mops::kv_put(format, row, i, mops::qrs_load(v + tk, bv, i, i)); // row_len % 32 == 0: whole warps
        return;
    }
    const int h0 = part * hpb;
    if (mops::qnrs_norm_rope_heads(qnrs_xs, qnrs_wsum, k + tk, bk, wk, h0, nkv, hd, n_rot, p, theta, neox, eps)) {
        uint8_t* row = mops::kv_row(kreg, cell, row_bytes);
        mops::kv_put(format, row, h0 * hd + threadIdx.x, qnrs_xs[threadIdx.x]);
    }
}
