// mmvq_split.cu: MINFER_MMVQ_SPLIT. Decode matmul (nt = 1) over Q8_1
// activations with MINFER_MMVQS_WARPS warps per output row, for matrices of
// few rows and long rows (7B: o-proj 3584 x 3584, ffn_down 3584 x 18944,
// q/k/v 4608 x 3584).
//
// Why: the one-warp-per-row kernels (mmvq.cu, mmvq_repack.cu) put 3,584
// warps on 132 SMs for a 3,584-row matrix (27 per SM, 42% achieved
// occupancy on the H200) and each warp walks a row of 3.8-20 KB with a
// handful of loads in flight: latency-bound, 36-52% of the HBM floor (ncu
// 2026-11-29). Several warps per row put W times the warps, and W times the
// independent loads, on the same bytes.
//
// Geometry: grid (rows), block (32 W), one output row per block. Thread
// t = 32 w + l of the row's block sums units t, t + 32 W, ... in order:
// warp w's 32 lanes read 32 consecutive units per step, so each warp's
// loads stay coalesced and, for the repacked layout, 16 bytes per lane (the
// same Q::unit / Q::load / Q::dot code as the one-warp kernels, through
// minfer_mmvq_part / minfer_mmvqr_part with stride 32 W). Each warp reduces
// its partial with the butterfly of the one-warp kernels (xor 16, 8, 4, 2,
// 1); lane 0 of warp w stores it in shared memory; after a barrier thread 0
// sums warp 0 + 1 + ... + W-1 in that fixed order, then adds the bias and
// (RES) the residual exactly as the one-warp RES form does, and writes.
// Only the f32 summation order of the per-unit values differs from the
// one-warp kernels (tolerance class: accumulation order); the result does
// not depend on scheduling.
//
//   minfer_mmvq_s_<t> / minfer_mmvq_res_s_<t> / minfer_mmvq_qkv_s_<t>:
//       GGUF blocks, the signatures of minfer_mmvq_<t> / _res_ / _qkv_
//   minfer_mmvqr_s_<t> / minfer_mmvqr_res_s_<t> / minfer_mmvqr_qkv_s_<t>:
//       the repacked copy (Q8_0, Q6_K), the signatures of minfer_mmvqr_*
//
// Every name matches minfer_mmvq*_s_* and no older kernel does (the
// liveness rule of the lever). This file uses the templates of mmvq.cu and
// mmvq_repack.cu, which the one translation unit includes before it (files
// in name order).
#include "dequant.cuh"

#define MINFER_MMVQS_WARPS 4
#define MINFER_MMVQS_THREADS (32 * MINFER_MMVQS_WARPS)
// Blocks per SM the registers are budgeted for (ptxas -v, sm_90, no spills):
// 16 blocks of 128 threads is the sm_90 maximum of 64 warps (at most 32
// registers), which the GGUF kernels fit. The repacked ones keep their
// 16-byte loads of MINFER_MMVQR_UNITS units in registers: Q8_0 fits 40
// registers (12 blocks, 48 warps; it spills at 32), Q6_K 64 (8 blocks, 32
// warps; it spills at 40).
#define MINFER_MMVQS_MIN_BLOCKS 16
#define MINFER_MMVQRS_MIN_BLOCKS_Q8_0 12
#define MINFER_MMVQRS_MIN_BLOCKS_Q6_K 8

// minfer_mmvqs_finish reduces the block's per-thread partials of output row
// row (butterfly per warp, then warp 0 + 1 + ... in order) and writes
// out[row] = (res[row] +) (sum (+ bias[brow])) from thread 0. Every thread
// of the block must call it (it holds a barrier). res may be out (thread 0
// reads its element before writing it).
template <bool RES>
__device__ __forceinline__ void minfer_mmvqs_finish(float part, float* out, const float* bias, const float* res,
                                                    int row, int brow) {
    __shared__ float sums[MINFER_MMVQS_WARPS];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) part = __fadd_rn(part, __shfl_xor_sync(0xffffffffu, part, off));
    if ((threadIdx.x & 31) == 0) sums[threadIdx.x >> 5] = part;
    __syncthreads();
    if (threadIdx.x == 0) {
        float acc = sums[0];
#pragma unroll
        for (int w = 1; w < MINFER_MMVQS_WARPS; w++) acc = __fadd_rn(acc, sums[w]);
        if (bias != nullptr) acc = __fadd_rn(acc, bias[brow]);
        if (RES) acc = __fadd_rn(res[row], acc);
        out[row] = acc;
    }
}

// minfer_mmvqs_pick maps global row `row` of a fused q/k/v launch to its
// weight, bias, local row and weight row count (q rows, then k, then v).
__device__ __forceinline__ void minfer_mmvqs_pick(int row, const uint8_t* wq, const uint8_t* wk, const uint8_t* wv,
                                                  const float* bq, const float* bk, const float* bv, int nq, int nk,
                                                  int nv, const uint8_t** w, const float** bias, int* r, int* n) {
    *w = wq, *bias = bq, *r = row, *n = nq;
    if (*r >= nq) {
        *r -= nq;
        *w = wk, *bias = bk, *n = nk;
        if (*r >= nk) {
            *r -= nk;
            *w = wv, *bias = bv, *n = nv;
        }
    }
}

// GGUF blocks: row r of a weight starts at r * rowBytes.
template <class Q, bool RES>
__device__ __forceinline__ void minfer_mmvqs_plain(float* out, const uint8_t* a, const uint8_t* w, const float* bias,
                                                   const float* res, int k, size_t rowBytes) {
    const int row = blockIdx.x;
    const float part = minfer_mmvq_part<Q, 32 * MINFER_MMVQS_WARPS>(w + (size_t)row * rowBytes, MinferMmvqActG{a}, k,
                                                                   threadIdx.x);
    minfer_mmvqs_finish<RES>(part, out, bias, res, row, row);
}

template <class Q>
__device__ __forceinline__ void minfer_mmvqs_qkv(float* out, const uint8_t* a, const uint8_t* wq, const uint8_t* wk,
                                                 const uint8_t* wv, const float* bq, const float* bk, const float* bv,
                                                 int k, int nq, int nk, int nv, size_t rowBytes) {
    const int row = blockIdx.x;
    const uint8_t* w;
    const float* bias;
    int r, n;
    minfer_mmvqs_pick(row, wq, wk, wv, bq, bk, bv, nq, nk, nv, &w, &bias, &r, &n);
    const float part = minfer_mmvq_part<Q, 32 * MINFER_MMVQS_WARPS>(w + (size_t)r * rowBytes, MinferMmvqActG{a}, k,
                                                                   threadIdx.x);
    minfer_mmvqs_finish<false>(part, out, bias, nullptr, row, r);
}

// Repacked copies: the row's pointers need its weight's row count.
template <class Q, bool RES>
__device__ __forceinline__ void minfer_mmvqrs_plain(float* out, const uint8_t* a, const uint8_t* w, const float* bias,
                                                    const float* res, int k, int n) {
    const int row = blockIdx.x;
    const float part = minfer_mmvqr_part<Q, 32 * MINFER_MMVQS_WARPS>(Q::row(w, n, k, row), MinferMmvqActG{a}, k,
                                                                    threadIdx.x);
    minfer_mmvqs_finish<RES>(part, out, bias, res, row, row);
}

template <class Q>
__device__ __forceinline__ void minfer_mmvqrs_qkv(float* out, const uint8_t* a, const uint8_t* wq, const uint8_t* wk,
                                                  const uint8_t* wv, const float* bq, const float* bk, const float* bv,
                                                  int k, int nq, int nk, int nv) {
    const int row = blockIdx.x;
    const uint8_t* w;
    const float* bias;
    int r, n;
    minfer_mmvqs_pick(row, wq, wk, wv, bq, bk, bv, nq, nk, nv, &w, &bias, &r, &n);
    const float part = minfer_mmvqr_part<Q, 32 * MINFER_MMVQS_WARPS>(Q::row(w, n, k, r), MinferMmvqActG{a}, k,
                                                                    threadIdx.x);
    minfer_mmvqs_finish<false>(part, out, bias, nullptr, row, r);
}

// Kernels: grid (rows: n, or nq + nk + nv), block (MINFER_MMVQS_THREADS),
// no dynamic smem. Arguments as the one-warp kernels'.
#define MINFER_MMVQS_KERNEL(name, Q, BS, BB)                                                                     \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQS_THREADS, MINFER_MMVQS_MIN_BLOCKS)                 \
        minfer_mmvq_s_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, int n) {   \
        minfer_mmvqs_plain<Q, false>(out, a, w, bias, nullptr, k, (size_t)(k / (BS)) * (BB));                   \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQS_THREADS, MINFER_MMVQS_MIN_BLOCKS)                 \
        minfer_mmvq_res_s_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, int n, \
                                 const float* res) {                                                             \
        minfer_mmvqs_plain<Q, true>(out, a, w, bias, res, k, (size_t)(k / (BS)) * (BB));                        \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQS_THREADS, MINFER_MMVQS_MIN_BLOCKS)                 \
        minfer_mmvq_qkv_s_##name(float* out, const uint8_t* a, const uint8_t* wq, const uint8_t* wk,              \
                                 const uint8_t* wv, const float* bq, const float* bk, const float* bv, int k,     \
                                 int nq, int nk, int nv) {                                                       \
        minfer_mmvqs_qkv<Q>(out, a, wq, wk, wv, bq, bk, bv, k, nq, nk, nv, (size_t)(k / (BS)) * (BB));          \
    }

MINFER_MMVQS_KERNEL(q8_0, MinferMmvqQ8_0, MINFER_QK, MINFER_Q8_0_BYTES)
MINFER_MMVQS_KERNEL(q4_0, MinferMmvqQ4_0, MINFER_QK, MINFER_Q4_0_BYTES)
MINFER_MMVQS_KERNEL(q4_1, MinferMmvqQ4_1, MINFER_QK, MINFER_Q4_1_BYTES)
MINFER_MMVQS_KERNEL(q5_0, MinferMmvqQ5_0, MINFER_QK, MINFER_Q5_0_BYTES)
MINFER_MMVQS_KERNEL(q5_1, MinferMmvqQ5_1, MINFER_QK, MINFER_Q5_1_BYTES)
MINFER_MMVQS_KERNEL(q4_k, MinferMmvqQ4_K, MINFER_QKK, MINFER_Q4_K_BYTES)
MINFER_MMVQS_KERNEL(q5_k, MinferMmvqQ5_K, MINFER_QKK, MINFER_Q5_K_BYTES)
MINFER_MMVQS_KERNEL(q6_k, MinferMmvqQ6_K, MINFER_QKK, MINFER_Q6_K_BYTES)

#undef MINFER_MMVQS_KERNEL

#define MINFER_MMVQRS_KERNEL(name, Q, MB)                                                                          \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQS_THREADS, MB)                                      \
        minfer_mmvqr_s_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, int n) {  \
        minfer_mmvqrs_plain<Q, false>(out, a, w, bias, nullptr, k, n);                                          \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQS_THREADS, MB)                                      \
        minfer_mmvqr_res_s_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, int n, \
                                  const float* res) {                                                            \
        minfer_mmvqrs_plain<Q, true>(out, a, w, bias, res, k, n);                                               \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQS_THREADS, MB)                                      \
        minfer_mmvqr_qkv_s_##name(float* out, const uint8_t* a, const uint8_t* wq, const uint8_t* wk,             \
                                  const uint8_t* wv, const float* bq, const float* bk, const float* bv, int k,    \
                                  int nq, int nk, int nv) {                                                      \
        minfer_mmvqrs_qkv<Q>(out, a, wq, wk, wv, bq, bk, bv, k, nq, nk, nv);                                    \
    }

MINFER_MMVQRS_KERNEL(q8_0, MinferMmvqrQ8_0, MINFER_MMVQRS_MIN_BLOCKS_Q8_0)
MINFER_MMVQRS_KERNEL(q6_k, MinferMmvqrQ6_K, MINFER_MMVQRS_MIN_BLOCKS_Q6_K)

#undef MINFER_MMVQRS_KERNEL
