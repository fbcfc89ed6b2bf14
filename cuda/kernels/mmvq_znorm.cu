// mmvq_znorm.cu: MINFER_FUSE_NORM_MMVQ. The decode (nt = 1) fused q/k/v and
// gate/up matvecs whose graph node carries the folded RMS norm
// (graph.FuseNormQ8) run without the minfer_rms_norm_q8_1 launch before
// them: every block of the consumer norms the f32 row itself and writes its
// Q8_1 quantization into shared memory, then runs the plain kernel's rows
// over that row. No step crosses blocks (the three forms that did lost:
// reports/MINFER_FUSE_NORM_MMVQ/NOTE.md).
//
//   minfer_mmvqn_qkv_<t>, minfer_mmvqn_ffn_<t>     mmvq.cu's _qkv_ / _ffn_
//   minfer_mmvqnr_qkv_<t>, minfer_mmvqnr_ffn_<t>   mmvq_repack.cu's (Q8_0, Q6_K)
//   minfer_mmvqn_xqkv_<qk>_<v>[r]                  mmvq_xqkv.cu's mixed pairs
//   minfer_mmvqn_qkvrs_<t>, minfer_mmvqnr_qkvrs_<t>,
//   minfer_mmvqn_xqkvrs_<qk>_<v>[r]                the roped forms (MINFER_FUSE_QKV_ROPE)
//
// Each takes its plain kernel's arguments with the Q8_1 row `a` replaced by
// (x, nw, eps): the un-normed f32 row of k values, the norm weight and eps.
//
// Bitwise: the prologue is minfer_rms_norm_q8_1 (norm.cu, mops::rms_q8_1)
// played by this block. That kernel runs in opsRowBlock(k) = max(32,
// min(256, roundup32(k))) threads (nb): its thread v sums x[v + m nb]^2,
// m = 0, 1, ... in order, then the block tree sum (mops::block_sum: a warp
// butterfly, one partial a warp into scratch, a butterfly over the first
// nb / 32 lanes). Here thread t of the 128 plays virtual threads t and
// t + 128 (those below nb), so each virtual thread has the same partial
// sum, each virtual warp (a real warp's lanes, so the same butterfly) the
// same warp sum, and the second butterfly the same lanes: the same scale,
// computed as that kernel does (__fdiv_rn, sqrt in double). The values
// x * scale * w and their quantization (minfer_q8_1_warp, the warp of
// 32 consecutive values) are per element, so the Q8_1 bytes are the norm
// kernel's. The row functions then read them through MinferMmvqActG over
// the shared row (generic addresses; after inlining the compiler sees the
// shared array), so every output is the plain kernel's.
//
// This file uses the row functions of mmvq.cu, mmvq_repack.cu and
// mmvq_xqkv.cu, which the one translation unit includes before it (files
// in name order; the "z" sorts it last).
#include "common.cuh"
#include "q8_1.cuh"

// The largest row the prologue holds (k values): 8 a virtual thread of a
// 256-thread norm block. The launcher declines larger rows at plan time
// (the 7B's 3584 keeps the norm launch).
#define MINFER_MMVQN_MAX_K 2048
// minfer_rms_norm_q8_1's block cap (cuda/kernels.go opsThreads).
#define MINFER_MMVQN_OPS_THREADS 256
// Virtual threads a thread plays, values a virtual thread holds.
#define MINFER_MMVQN_VT ((MINFER_MMVQN_OPS_THREADS + MINFER_MMVQ_THREADS - 1) / MINFER_MMVQ_THREADS)
#define MINFER_MMVQN_DEPTH (MINFER_MMVQN_MAX_K / MINFER_MMVQN_OPS_THREADS)

static_assert(MINFER_MMVQ_THREADS % 32 == 0 && MINFER_MMVQ_THREADS == MINFER_MMVQR_THREADS, "one block shape for every normed form");

// The block's Q8_1 row (k / 32 blocks of 36 bytes, as minfer_rms_norm_q8_1
// writes it to global memory) and the norm's per-warp partials. File
// scope, so the emulator can poison them between blocks.
__align__(16) __shared__ uint8_t minfer_mmvqn_row[MINFER_MMVQN_MAX_K / MINFER_QK * MINFER_Q8_1_BYTES];
__shared__ float minfer_mmvqn_scratch[MINFER_MMVQN_OPS_THREADS / 32];

// minfer_mmvqn_norm_d writes the Q8_1 row of rms_norm(x) * w (k values,
// k % 32 == 0, k <= D * nb) into minfer_mmvqn_row; every thread of the
// block calls it and the row is complete when it returns.
template <int D>
__device__ __forceinline__ void minfer_mmvqn_norm_d(const float* __restrict__ x, const float* __restrict__ w, int k,
                                                    float eps) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int nb = max(32, min(MINFER_MMVQN_OPS_THREADS, (k + 31) / 32 * 32)), nw = nb >> 5;
    // Every load at once (predicated), as mops::rms_scale issues them: one
    // round trip for the row and the weight.
    float xv[MINFER_MMVQN_VT][D], wv[MINFER_MMVQN_VT][D];
#pragma unroll
    for (int j = 0; j < MINFER_MMVQN_VT; j++) {
        const int v = tid + j * MINFER_MMVQ_THREADS;
#pragma unroll
        for (int m = 0; m < D; m++) {
            const int i = v + m * nb;
            const bool in = v < nb && i < k;
            xv[j][m] = in ? x[i] : 0.0f;
            wv[j][m] = in ? w[i] : 1.0f;
        }
    }
    // Virtual thread v's partial sum, in m order (rms_scale's loop).
    float s[MINFER_MMVQN_VT];
#pragma unroll
    for (int j = 0; j < MINFER_MMVQN_VT; j++) {
        const int v = tid + j * MINFER_MMVQ_THREADS;
        s[j] = 0.0f;
#pragma unroll
        for (int m = 0; m < D; m++) {
            if (v < nb && v + m * nb < k) s[j] = __fadd_rn(s[j], __fmul_rn(xv[j][m], xv[j][m]));
        }
    }
    // block_sum: virtual warp vw = warp + 4 j reduces its lanes and leaves
    // its partial at scratch[vw] (warp-uniform branches).
#pragma unroll
    for (int j = 0; j < MINFER_MMVQN_VT; j++) {
        const int vw = warp + j * (MINFER_MMVQ_THREADS / 32);
        if (vw < nw) {
            const float p = mops::warp_sum(s[j]);
            if (lane == 0) minfer_mmvqn_scratch[vw] = p;
        }
    }
    __syncthreads();
    const float tot = mops::warp_sum(lane < nw ? minfer_mmvqn_scratch[lane] : 0.0f);
    const float mean = __fdiv_rn(tot, (float)k);
    const float scale = __fdiv_rn(1.0f, (float)sqrt((double)__fadd_rn(mean, eps)));
    // rms_q8_1's quantization: at depth m virtual warp vw holds the 32
    // values from m nb + 32 vw, one Q8_1 block.
#pragma unroll
    for (int j = 0; j < MINFER_MMVQN_VT; j++) {
        const int vw = warp + j * (MINFER_MMVQ_THREADS / 32);
#pragma unroll
        for (int m = 0; m < D; m++) {
            const int i0 = m * nb + 32 * vw;
            if (vw < nw && i0 < k) { // warp-uniform
                const float y = __fmul_rn(xv[j][m], scale);
                minfer_q8_1_warp(minfer_mmvqn_row + (size_t)(i0 / 32) * MINFER_Q8_1_BYTES, __fmul_rn(y, wv[j][m]), lane);
            }
        }
    }
    __syncthreads(); // the row, written by every warp, before any row reads it
}

// minfer_mmvqn_norm picks the register depth for k (block-uniform): 4
// values a virtual thread up to 1024 (qwen2-0.5b's 896, qwen3-0.6b's 1024),
// 8 up to MINFER_MMVQN_MAX_K. Returns the accessor of the shared row.
__device__ __forceinline__ MinferMmvqActG minfer_mmvqn_norm(const float* x, const float* w, int k, float eps) {
    if (k <= 4 * MINFER_MMVQN_OPS_THREADS) {
        minfer_mmvqn_norm_d<4>(x, w, k, eps);
    } else {
        minfer_mmvqn_norm_d<MINFER_MMVQN_DEPTH>(x, w, k, eps);
    }
    return MinferMmvqActG{minfer_mmvqn_row};
}

// Kernels: grid and block of the plain form (ceil(rows / 4) blocks of
// MINFER_MMVQ_THREADS; the roped forms nq/4 + nk/4 + ceil(nv/4)), static
// shared memory only. x and nw: k f32 values each, 4-byte aligned; k a
// multiple of 32 (and of the weight's block) and at most
// MINFER_MMVQN_MAX_K. The prologue runs before any row check: every thread
// reaches its barriers. Launch bounds are the plain forms'.
#define MINFER_MMVQN_KERNEL(name, Q, BS, BB)                                                                   \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQ_THREADS)                                         \
        minfer_mmvqn_qkv_##name(float* out, const float* x, const float* nw, float eps, const uint8_t* wq,       \
                                const uint8_t* wk, const uint8_t* wv, const float* bq, const float* bk,         \
                                const float* bv, int k, int nq, int nk, int nv) {                              \
        const MinferMmvqActG act = minfer_mmvqn_norm(x, nw, k, eps);                                          \
        const int row = blockIdx.x * MINFER_MMVQ_ROWS + (threadIdx.x >> 5);                                   \
        if (row >= nq + nk + nv) return;                                                                      \
        minfer_mmvq_qkv_row<Q>(out, act, wq, wk, wv, bq, bk, bv, k, nq, nk, row, (size_t)(k / (BS)) * (BB));   \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQ_THREADS)                                         \
        minfer_mmvqn_ffn_##name(float* out, const float* x, const float* nw, float eps, const uint8_t* wg,       \
                                const uint8_t* wu, int k, int n) {                                             \
        const MinferMmvqActG act = minfer_mmvqn_norm(x, nw, k, eps);                                          \
        const int row = blockIdx.x * MINFER_MMVQ_ROWS + (threadIdx.x >> 5);                                   \
        if (row >= n) return;                                                                                 \
        minfer_mmvq_ffn_row<Q>(out, act, wg, wu, k, row, (size_t)(k / (BS)) * (BB));                           \
    }

MINFER_MMVQN_KERNEL(q8_0, MinferMmvqQ8_0, MINFER_QK, MINFER_Q8_0_BYTES)
MINFER_MMVQN_KERNEL(q4_0, MinferMmvqQ4_0, MINFER_QK, MINFER_Q4_0_BYTES)
MINFER_MMVQN_KERNEL(q4_1, MinferMmvqQ4_1, MINFER_QK, MINFER_Q4_1_BYTES)
MINFER_MMVQN_KERNEL(q5_0, MinferMmvqQ5_0, MINFER_QK, MINFER_Q5_0_BYTES)
MINFER_MMVQN_KERNEL(q5_1, MinferMmvqQ5_1, MINFER_QK, MINFER_Q5_1_BYTES)
MINFER_MMVQN_KERNEL(q4_k, MinferMmvqQ4_K, MINFER_QKK, MINFER_Q4_K_BYTES)
MINFER_MMVQN_KERNEL(q5_k, MinferMmvqQ5_K, MINFER_QKK, MINFER_Q5_K_BYTES)
MINFER_MMVQN_KERNEL(q6_k, MinferMmvqQ6_K, MINFER_QKK, MINFER_Q6_K_BYTES)

// The repacked copies (mmvq_repack.cu's _qkv_ and _ffn_ bodies).
#define MINFER_MMVQNR_KERNEL(name, Q)                                                                          \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQR_THREADS)                                        \
        minfer_mmvqnr_qkv_##name(float* out, const float* x, const float* nw, float eps, const uint8_t* wq,      \
                                 const uint8_t* wk, const uint8_t* wv, const float* bq, const float* bk,        \
                                 const float* bv, int k, int nq, int nk, int nv) {                             \
        const MinferMmvqActG act = minfer_mmvqn_norm(x, nw, k, eps);                                          \
        const int row = blockIdx.x * MINFER_MMVQR_ROWS + (threadIdx.x >> 5);                                  \
        if (row >= nq + nk + nv) return;                                                                      \
        const uint8_t* w = wq;                                                                                \
        const float* bias = bq;                                                                               \
        int r = row, n = nq;                                                                                  \
        if (r >= nq) {                                                                                        \
            r -= nq;                                                                                          \
            w = wk, bias = bk, n = nk;                                                                        \
            if (r >= nk) {                                                                                    \
                r -= nk;                                                                                      \
                w = wv, bias = bv, n = nv;                                                                    \
            }                                                                                                 \
        }                                                                                                     \
        float acc = minfer_mmvqr_row<Q>(Q::row(w, n, k, r), act, k);                                          \
        if ((threadIdx.x & 31) == 0) {                                                                        \
            if (bias != nullptr) acc = __fadd_rn(acc, bias[r]);                                               \
            out[row] = acc;                                                                                   \
        }                                                                                                     \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQR_THREADS)                                        \
        minfer_mmvqnr_ffn_##name(float* out, const float* x, const float* nw, float eps, const uint8_t* wg,      \
                                 const uint8_t* wu, int k, int n) {                                            \
        const MinferMmvqActG act = minfer_mmvqn_norm(x, nw, k, eps);                                          \
        const int row = blockIdx.x * MINFER_MMVQR_ROWS + (threadIdx.x >> 5);                                  \
        if (row >= n) return;                                                                                 \
        const float v = minfer_mmvqr_ffn<Q>(Q::row(wg, n, k, row), Q::row(wu, n, k, row), act, k);            \
        if ((threadIdx.x & 31) == 0) out[row] = v;                                                            \
    }

MINFER_MMVQNR_KERNEL(q8_0, MinferMmvqrQ8_0)
MINFER_MMVQNR_KERNEL(q6_k, MinferMmvqrQ6_K)

// The mixed pairs (mmvq_xqkv.cu's minfer_mmvq_xqkv over the shared row).
#define MINFER_MMVQN_XQKV_KERNEL(name, QK, V)                                                                  \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQ_THREADS, MINFER_XQKV_MIN_BLOCKS)                  \
        minfer_mmvqn_xqkv_##name(float* out, const float* x, const float* nw, float eps, const uint8_t* wq,      \
                                 const uint8_t* wk, const uint8_t* wv, const float* bq, const float* bk,        \
                                 const float* bv, int k, int nq, int nk, int nv) {                             \
        minfer_mmvqn_norm(x, nw, k, eps);                                                                     \
        minfer_mmvq_xqkv<QK, V>(out, minfer_mmvqn_row, wq, wk, wv, bq, bk, bv, k, nq, nk, nv);                 \
    }

MINFER_MMVQN_XQKV_KERNEL(q5_0_q8_0r, MinferXqkvQ5_0, MinferXqkvQ8_0r) // qwen2-0.5b Q4_K_M
MINFER_MMVQN_XQKV_KERNEL(q5_0_q8_0, MinferXqkvQ5_0, MinferXqkvQ8_0)
MINFER_MMVQN_XQKV_KERNEL(q4_k_q6_kr, MinferXqkvQ4_K, MinferXqkvQ6_Kr) // qwen3-0.6b Q4_K_M
MINFER_MMVQN_XQKV_KERNEL(q4_k_q6_k, MinferXqkvQ4_K, MinferXqkvQ6_K)
MINFER_MMVQN_XQKV_KERNEL(q5_1_q8_0r, MinferXqkvQ5_1, MinferXqkvQ8_0r)
MINFER_MMVQN_XQKV_KERNEL(q5_1_q8_0, MinferXqkvQ5_1, MinferXqkvQ8_0)
MINFER_MMVQN_XQKV_KERNEL(q5_k_q6_kr, MinferXqkvQ5_K, MinferXqkvQ6_Kr)
MINFER_MMVQN_XQKV_KERNEL(q5_k_q6_k, MinferXqkvQ5_K, MinferXqkvQ6_K)
MINFER_MMVQN_XQKV_KERNEL(q5_0_q5_1, MinferXqkvQ5_0, MinferXqkvQ5_1)
MINFER_MMVQN_XQKV_KERNEL(q4_k_q5_k, MinferXqkvQ4_K, MinferXqkvQ5_K)

// The roped forms (mmvq_xqkv.cu's minfer_mmvq_qkvrs over the shared row):
// the _qkvrs_ kernels' arguments with a replaced by (x, nw, eps).
#define MINFER_MMVQN_QKVRS_PARAMS                                                                              \
    const float *x, const float *nw, float eps, const uint8_t *wq, const uint8_t *wk, const uint8_t *wv,          \
        const float *bq, const float *bk, const float *bv, int k, int nq, int nk, int nv, float *q, const int *pos, \
        const int *win, uint8_t *kreg, uint8_t *vreg, int format, long long row_bytes, int n_ctx, int hd, float theta
#define MINFER_MMVQN_QKVRS_CALL(QK, V)                                                                         \
    minfer_mmvqn_norm(x, nw, k, eps);                                                                         \
    minfer_mmvq_qkvrs<QK, V>(minfer_mmvqn_row, wq, wk, wv, bq, bk, bv, k, nq, nk, nv,                          \
                             MinferQkvrsTail{q, pos, win, kreg, vreg, format, row_bytes, n_ctx, hd, theta})
#define MINFER_MMVQN_QKVRS_KERNEL(name, F)                                                                     \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQ_THREADS)                                         \
        minfer_mmvqn_qkvrs_##name(MINFER_MMVQN_QKVRS_PARAMS) {                                                 \
        MINFER_MMVQN_QKVRS_CALL(F, F);                                                                        \
    }
#define MINFER_MMVQNR_QKVRS_KERNEL(name, F)                                                                    \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQR_THREADS)                                        \
        minfer_mmvqnr_qkvrs_##name(MINFER_MMVQN_QKVRS_PARAMS) {                                                \
        MINFER_MMVQN_QKVRS_CALL(F, F);                                                                        \
    }
#define MINFER_MMVQN_XQKVRS_KERNEL(name, QK, V)                                                                \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQ_THREADS, MINFER_XQKV_MIN_BLOCKS)                  \
        minfer_mmvqn_xqkvrs_##name(MINFER_MMVQN_QKVRS_PARAMS) {                                                \
        MINFER_MMVQN_QKVRS_CALL(QK, V);                                                                       \
    }

MINFER_MMVQN_QKVRS_KERNEL(q8_0, MinferXqkvQ8_0)
MINFER_MMVQN_QKVRS_KERNEL(q4_0, MinferXqkvQ4_0)
MINFER_MMVQN_QKVRS_KERNEL(q4_1, MinferXqkvQ4_1)
MINFER_MMVQN_QKVRS_KERNEL(q5_0, MinferXqkvQ5_0) // qwen2-0.5b Q4_K_M
MINFER_MMVQN_QKVRS_KERNEL(q5_1, MinferXqkvQ5_1)
MINFER_MMVQN_QKVRS_KERNEL(q4_k, MinferXqkvQ4_K)
MINFER_MMVQN_QKVRS_KERNEL(q5_k, MinferXqkvQ5_K)
MINFER_MMVQN_QKVRS_KERNEL(q6_k, MinferXqkvQ6_K)
MINFER_MMVQNR_QKVRS_KERNEL(q8_0, MinferXqkvQ8_0r)
MINFER_MMVQNR_QKVRS_KERNEL(q6_k, MinferXqkvQ6_Kr)
MINFER_MMVQN_XQKVRS_KERNEL(q5_0_q8_0r, MinferXqkvQ5_0, MinferXqkvQ8_0r) // qwen2-0.5b Q4_K_M
MINFER_MMVQN_XQKVRS_KERNEL(q5_0_q8_0, MinferXqkvQ5_0, MinferXqkvQ8_0)
MINFER_MMVQN_XQKVRS_KERNEL(q4_k_q6_kr, MinferXqkvQ4_K, MinferXqkvQ6_Kr)
MINFER_MMVQN_XQKVRS_KERNEL(q4_k_q6_k, MinferXqkvQ4_K, MinferXqkvQ6_K)
MINFER_MMVQN_XQKVRS_KERNEL(q5_1_q8_0r, MinferXqkvQ5_1, MinferXqkvQ8_0r)
MINFER_MMVQN_XQKVRS_KERNEL(q5_1_q8_0, MinferXqkvQ5_1, MinferXqkvQ8_0)
MINFER_MMVQN_XQKVRS_KERNEL(q5_k_q6_kr, MinferXqkvQ5_K, MinferXqkvQ6_Kr)
MINFER_MMVQN_XQKVRS_KERNEL(q5_k_q6_k, MinferXqkvQ5_K, MinferXqkvQ6_K)
MINFER_MMVQN_XQKVRS_KERNEL(q5_0_q5_1, MinferXqkvQ5_0, MinferXqkvQ5_1)
MINFER_MMVQN_XQKVRS_KERNEL(q4_k_q5_k, MinferXqkvQ4_K, MinferXqkvQ5_K)

#undef MINFER_MMVQN_KERNEL
#undef MINFER_MMVQNR_KERNEL
#undef MINFER_MMVQN_XQKV_KERNEL
#undef MINFER_MMVQN_QKVRS_PARAMS
#undef MINFER_MMVQN_QKVRS_CALL
#undef MINFER_MMVQN_QKVRS_KERNEL
#undef MINFER_MMVQNR_QKVRS_KERNEL
#undef MINFER_MMVQN_XQKVRS_KERNEL
