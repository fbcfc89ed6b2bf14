// mmvq_resn.cu (MINFER_FUSE_RES_NORM_Q8): the decode residual matvec that
// also writes the next RMS norm's Q8_1 row, one launch where there were two
// (minfer_mmvq[r]_res_<t> then minfer_rms_norm_q8_1):
//
//   minfer_mmvq_resn_<t>   minfer_mmvq_res_<t> over the GGUF bytes, then the tail
//   minfer_mmvqr_resn_<t>  minfer_mmvqr_res_<t> over the repacked copy, then the tail
//
// Every block writes its f32 rows exactly as the _res_ kernel does (the same
// device function: bitwise its rows; the residual row is still written, the
// next residual add reads it), fences and counts itself on *counter; the
// block that completes the count (the last of the launch to finish) reads
// the whole row back from L2 and writes the Q8_1 row of its RMS norm (weight
// nw, eps) at q8, then leaves the counter at 0 for the next launch (layer,
// graph replay). The norm's bytes are minfer_rms_norm_q8_1's (norm.cu) in
// its block of vb = opsRowBlock(n) threads: the scale is the same per-thread
// partial sums (thread j of vb: x[j], x[j + vb], ... in that order) and the
// same block tree sum (warp xor trees, then the vb / 32 warp sums by one
// warp), with this block's 128 threads standing in for the vb virtual
// threads; the values and their quantization (minfer_q8_1_warp, exact per
// 32-value block) do not depend on which thread holds them.
//
// q8 may be the matvec's own activation row a: the last block writes it only
// after every block has counted itself, so after every read of a in the
// launch. n % 32 == 0, vb % 32 == 0 (the launcher checks).
#include "common.cuh"
#include "q8_1.cuh"

// Loads in flight at once in the last block: MINFER_RESN_SUM_DEPTH values
// of each of a thread's two virtual threads (the sums), then
// MINFER_RESN_Q_DEPTH blocks of a warp (the quantization). The tail is one
// block's latency on every launch's critical path: loaded one dependent
// round trip at a time, it took 8-10 us of a 12 us launch (ncu, H100,
// 2026-12-07, qwen2-0.5b Q4_K_M, tg128 -23.6%); batched, the 0.5b's row
// (896 values, vb 256) costs one round trip a phase.
#define MINFER_RESN_SUM_DEPTH 4
#define MINFER_RESN_Q_DEPTH 8

// minfer_resn_tail: run by every thread of every block after the block's
// rows are written; nblocks is the launch's grid (ceil(n / rows a block)).
// The last block's thread t stands in for virtual threads t and t + nb of
// the norm's vb (vb <= 2 nb: opsRowBlock gives at most 256, these blocks
// have 128 threads), each summing x[v], x[v + vb], ... in that order.
__device__ __forceinline__ void minfer_resn_tail(const float* out, const float* __restrict__ nw, float eps, int n, int vb,
                                                 uint8_t* q8, int* counter, int nblocks) {
    __shared__ float scratch[32];
    __shared__ int last;
    __threadfence(); // this thread's rows, before the block counts itself
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(counter, 1) == nblocks - 1;
        if (last) *counter = 0; // every launch leaves the counter at 0 (graph replays)
    }
    __syncthreads();
    if (!last) return; // block-uniform
    __threadfence();
    const int tid = threadIdx.x, lane = tid & 31, nb = blockDim.x;
    const int v0 = tid, v1 = tid + nb;
    const bool h0 = v0 < vb, h1 = v1 < vb; // warp-uniform: vb and nb are multiples of 32
    float s0 = 0.0f, s1 = 0.0f;
    for (int m0 = 0; m0 * vb < n; m0 += MINFER_RESN_SUM_DEPTH) {
        float a[MINFER_RESN_SUM_DEPTH], b[MINFER_RESN_SUM_DEPTH];
#pragma unroll
        for (int c = 0; c < MINFER_RESN_SUM_DEPTH; c++) {
            const int i0 = v0 + (m0 + c) * vb, i1 = v1 + (m0 + c) * vb;
            a[c] = h0 && i0 < n ? __ldcg(out + i0) : 0.0f;
            b[c] = h1 && i1 < n ? __ldcg(out + i1) : 0.0f;
        }
#pragma unroll
        for (int c = 0; c < MINFER_RESN_SUM_DEPTH; c++) {
            if (h0 && v0 + (m0 + c) * vb < n) s0 = __fadd_rn(s0, __fmul_rn(a[c], a[c]));
            if (h1 && v1 + (m0 + c) * vb < n) s1 = __fadd_rn(s1, __fmul_rn(b[c], b[c]));
        }
    }
    if (h0) {
        s0 = mops::warp_sum(s0);
        if (lane == 0) scratch[v0 >> 5] = s0;
    }
    if (h1) {
        s1 = mops::warp_sum(s1);
        if (lane == 0) scratch[v1 >> 5] = s1;
    }
    __syncthreads();
    float s = lane < (vb >> 5) ? scratch[lane] : 0.0f;
    s = mops::warp_sum(s);
    const float mean = __fdiv_rn(s, (float)n);
    const float scale = __fdiv_rn(1.0f, (float)sqrt((double)__fadd_rn(mean, eps)));
    // Warp w quantizes blocks w, w + nb / 32, ... (b < nq is warp-uniform).
    const int nq = n / 32, ws = nb >> 5;
    for (int q0 = tid >> 5; q0 < nq; q0 += MINFER_RESN_Q_DEPTH * ws) {
        float xv[MINFER_RESN_Q_DEPTH], wv[MINFER_RESN_Q_DEPTH];
#pragma unroll
        for (int c = 0; c < MINFER_RESN_Q_DEPTH; c++) {
            const int b = q0 + c * ws, i = 32 * b + lane;
            xv[c] = b < nq ? __ldcg(out + i) : 0.0f;
            wv[c] = nw && b < nq ? nw[i] : 1.0f;
        }
#pragma unroll
        for (int c = 0; c < MINFER_RESN_Q_DEPTH; c++) {
            const int b = q0 + c * ws;
            if (b < nq) {
                const float y = __fmul_rn(xv[c], scale);
                minfer_q8_1_warp(q8 + (size_t)b * MINFER_Q8_1_BYTES, nw ? __fmul_rn(y, wv[c]) : y, lane);
            }
        }
    }
}

// Kernels: the _res_ kernel's grid and block (one warp a row, 4 rows a
// block), its arguments, then nw (the norm weight, may be null), eps, vb,
// q8 (n / 32 blocks of 36 bytes, 4-byte aligned) and counter (an int, 0
// between launches; launches on one counter stream-ordered).
#define MINFER_MMVQ_RESN_KERNEL(name, Q, BS, BB)                                                              \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQ_THREADS)                                         \
        minfer_mmvq_resn_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, int n, \
                                const float* res, const float* nw, float eps, int vb, uint8_t* q8, int* counter) { \
        minfer_mmvq_plain<Q, true>(out, a, w, bias, res, k, n, (size_t)(k / (BS)) * (BB));                    \
        minfer_resn_tail(out, nw, eps, n, vb, q8, counter, (n + MINFER_MMVQ_ROWS - 1) / MINFER_MMVQ_ROWS);      \
    }

MINFER_MMVQ_RESN_KERNEL(q8_0, MinferMmvqQ8_0, MINFER_QK, MINFER_Q8_0_BYTES)
MINFER_MMVQ_RESN_KERNEL(q4_0, MinferMmvqQ4_0, MINFER_QK, MINFER_Q4_0_BYTES)
MINFER_MMVQ_RESN_KERNEL(q4_1, MinferMmvqQ4_1, MINFER_QK, MINFER_Q4_1_BYTES)
MINFER_MMVQ_RESN_KERNEL(q5_0, MinferMmvqQ5_0, MINFER_QK, MINFER_Q5_0_BYTES)
MINFER_MMVQ_RESN_KERNEL(q5_1, MinferMmvqQ5_1, MINFER_QK, MINFER_Q5_1_BYTES)
MINFER_MMVQ_RESN_KERNEL(q4_k, MinferMmvqQ4_K, MINFER_QKK, MINFER_Q4_K_BYTES)
MINFER_MMVQ_RESN_KERNEL(q5_k, MinferMmvqQ5_K, MINFER_QKK, MINFER_Q5_K_BYTES)
MINFER_MMVQ_RESN_KERNEL(q6_k, MinferMmvqQ6_K, MINFER_QKK, MINFER_Q6_K_BYTES)

#undef MINFER_MMVQ_RESN_KERNEL

#define MINFER_MMVQR_RESN_KERNEL(name, Q)                                                                     \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQR_THREADS, MINFER_MMVQR_MIN_BLOCKS)               \
        minfer_mmvqr_resn_##name(float* out, const uint8_t* a, const uint8_t* w, const float* bias, int k, int n, \
                                 const float* res, const float* nw, float eps, int vb, uint8_t* q8, int* counter) { \
        minfer_mmvqr_plain<Q, true>(out, a, w, bias, res, k, n);                                             \
        minfer_resn_tail(out, nw, eps, n, vb, q8, counter, (n + MINFER_MMVQR_ROWS - 1) / MINFER_MMVQR_ROWS);    \
    }

MINFER_MMVQR_RESN_KERNEL(q8_0, MinferMmvqrQ8_0)
MINFER_MMVQR_RESN_KERNEL(q6_k, MinferMmvqrQ6_K)

#undef MINFER_MMVQR_RESN_KERNEL
