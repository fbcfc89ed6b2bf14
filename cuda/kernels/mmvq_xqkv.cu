// mmvq_xqkv.cu: MINFER_MMVQ_QKV_MIXED. The decode (nt = 1) q, k and v
// projections of one Q8_1 activation row in one launch when v's weight type
// (or layout) is not q's and k's: the quantizer's _M mixes give attn_v more
// bits on a third of the layers (qwen2-0.5b Q4_K_M: q/k Q5_0, v Q8_0 read
// from its repacked copy; qwen2-7b and qwen3-0.6b Q4_K_M: q/k Q4_K, v Q6_K
// repacked), where the one-type minfer_mmvq[r]_qkv_<t> cannot run and the
// backend otherwise launches three matvecs.
//
//   minfer_mmvq_xqkv_<qk>_<v>[r]: the signature of minfer_mmvq_qkv_<t>
//       (mmvq.cu): out = q rows, then k rows, then v rows, each with its
//       bias (a bias may be null); q and k of type <qk> in GGUF blocks, v of
//       type <v> in GGUF blocks, or in the repacked copy (mmvq_repack.cu's
//       layout, suffix r).
//
// One warp per output row, MINFER_MMVQ_ROWS rows a block, as every one-warp
// MMVQ kernel. The launcher takes only nq and nk that are multiples of
// MINFER_MMVQ_ROWS (every Qwen shape: 896 / 128, 3584 / 512, 2048 / 1024),
// so each block holds rows of one matrix only and the choice of row body
// (q/k type or v type) is uniform over the block; a shape it cannot take
// keeps the three launches (the route is decided at plan time,
// cuda/mmvq_xqkv.go). A row is computed by the very row function of its
// separate launch (minfer_mmvq_row, minfer_mmvqr_row: the same int32 unit
// sums, the same _rn f32 scaling and order, the same butterfly), then its
// bias added by the lane that writes it as minfer_mmvq_<t> / minfer_mmvqr_<t>
// do, so every output is bitwise what the three launches write (the device
// tests and scripts/kernel-emu/xqkv-emu.sh check it).
//
// This file uses the templates of mmvq.cu and mmvq_repack.cu, which the one
// translation unit includes before it (files in name order; "x" sorts it
// after mmvq_split.cu).
#include "dequant.cuh"

// Registers: the kernel holds the larger of its two row bodies, and the
// repacked Q6_K row takes 109 unbounded (minfer_mmvqr_qkv_q6_k); it is held
// to the plain repacked kernels' bound (8 blocks of 128 threads an SM, 64
// registers: no spill, ptxas -v, sm_90), so the q/k rows, most of the
// launch, keep that occupancy.
#define MINFER_XQKV_MIN_BLOCKS 8

static_assert(MINFER_MMVQ_ROWS == MINFER_MMVQR_ROWS, "the two row families share the block of rows");

// Row families: row(w, n, k, r, a) is row r's dot product (every lane of
// the warp gets it) of the n-row weight w against the Q8_1 row a.
// MinferXqkvG: GGUF blocks of BS values in BB bytes (mmvq.cu's rows);
// MinferXqkvR: the repacked copy (mmvq_repack.cu's rows).
template <class Q, int BS, int BB>
struct MinferXqkvG {
    template <class A>
    static __device__ __forceinline__ float row(const uint8_t* w, int n, int k, int r, const A& a) {
        return minfer_mmvq_row<Q>(w + (size_t)r * ((size_t)(k / BS) * BB), a, k);
    }
};

template <class Q>
struct MinferXqkvR {
    template <class A>
    static __device__ __forceinline__ float row(const uint8_t* w, int n, int k, int r, const A& a) {
        return minfer_mmvqr_row<Q>(Q::row(w, n, k, r), a, k);
    }
};

// minfer_mmvq_xqkv: global row j of nq + nk + nv; the block's first row
// says which matrix all its rows belong to (nq, nk multiples of the rows a
// block).
template <class QK, class V>
__device__ __forceinline__ void minfer_mmvq_xqkv(float* __restrict__ out, const uint8_t* a, const uint8_t* wq,
                                                 const uint8_t* wk, const uint8_t* wv, const float* bq,
                                                 const float* bk, const float* bv, int k, int nq, int nk, int nv) {
    const int first = blockIdx.x * MINFER_MMVQ_ROWS;
    const int row = first + (threadIdx.x >> 5);
    if (row >= nq + nk + nv) return; // the whole warp leaves together
    const MinferMmvqActG act{a};
    float acc;
    const float* bias;
    int r;
    if (first < nq + nk) { // block-uniform: a q block or a k block
        const bool isq = first < nq;
        r = isq ? row : row - nq;
        bias = isq ? bq : bk;
        acc = QK::row(isq ? wq : wk, isq ? nq : nk, k, r, act);
    } else {
        r = row - nq - nk;
        bias = bv;
        acc = V::row(wv, nv, k, r, act);
    }
    if ((threadIdx.x & 31) == 0) {
        if (bias != nullptr) acc = __fadd_rn(acc, bias[r]);
        out[row] = acc;
    }
}

// The row families of the instantiated types.
using MinferXqkvQ5_0 = MinferXqkvG<MinferMmvqQ5_0, MINFER_QK, MINFER_Q5_0_BYTES>;
using MinferXqkvQ5_1 = MinferXqkvG<MinferMmvqQ5_1, MINFER_QK, MINFER_Q5_1_BYTES>;
using MinferXqkvQ8_0 = MinferXqkvG<MinferMmvqQ8_0, MINFER_QK, MINFER_Q8_0_BYTES>;
using MinferXqkvQ4_K = MinferXqkvG<MinferMmvqQ4_K, MINFER_QKK, MINFER_Q4_K_BYTES>;
using MinferXqkvQ5_K = MinferXqkvG<MinferMmvqQ5_K, MINFER_QKK, MINFER_Q5_K_BYTES>;
using MinferXqkvQ6_K = MinferXqkvG<MinferMmvqQ6_K, MINFER_QKK, MINFER_Q6_K_BYTES>;
using MinferXqkvQ8_0r = MinferXqkvR<MinferMmvqrQ8_0>;
using MinferXqkvQ6_Kr = MinferXqkvR<MinferMmvqrQ6_K>;

// Kernels: grid (ceil((nq + nk + nv) / MINFER_MMVQ_ROWS)), block
// (MINFER_MMVQ_THREADS), no smem. a: the Q8_1 row (k / 32 blocks of 36
// bytes, 4-byte aligned); GGUF weights aligned as mmvq.cu's kernels read
// them, repacked ones 16-byte aligned.
#define MINFER_XQKV_KERNEL(name, QK, V)                                                                        \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQ_THREADS, MINFER_XQKV_MIN_BLOCKS)                  \
        minfer_mmvq_xqkv_##name(float* out, const uint8_t* a, const uint8_t* wq, const uint8_t* wk,              \
                                const uint8_t* wv, const float* bq, const float* bk, const float* bv, int k,     \
                                int nq, int nk, int nv) {                                                      \
        minfer_mmvq_xqkv<QK, V>(out, a, wq, wk, wv, bq, bk, bv, k, nq, nk, nv);                                \
    }

// The pairs of the quantizer's recipes (engine/quantize TypeFor): the _M
// mixes' v of more bits, repacked (MINFER_MMVQ_REPACK, the default) or not,
// and Q4_K_S's first layers.
MINFER_XQKV_KERNEL(q5_0_q8_0r, MinferXqkvQ5_0, MinferXqkvQ8_0r) // qwen2-0.5b Q4_K_M
MINFER_XQKV_KERNEL(q5_0_q8_0, MinferXqkvQ5_0, MinferXqkvQ8_0)
MINFER_XQKV_KERNEL(q4_k_q6_kr, MinferXqkvQ4_K, MinferXqkvQ6_Kr) // qwen2-7b, qwen3-0.6b Q4_K_M
MINFER_XQKV_KERNEL(q4_k_q6_k, MinferXqkvQ4_K, MinferXqkvQ6_K)
MINFER_XQKV_KERNEL(q5_1_q8_0r, MinferXqkvQ5_1, MinferXqkvQ8_0r) // qwen2-0.5b Q5_K_M
MINFER_XQKV_KERNEL(q5_1_q8_0, MinferXqkvQ5_1, MinferXqkvQ8_0)
MINFER_XQKV_KERNEL(q5_k_q6_kr, MinferXqkvQ5_K, MinferXqkvQ6_Kr) // qwen2-7b, qwen3-0.6b Q5_K_M
MINFER_XQKV_KERNEL(q5_k_q6_k, MinferXqkvQ5_K, MinferXqkvQ6_K)
MINFER_XQKV_KERNEL(q5_0_q5_1, MinferXqkvQ5_0, MinferXqkvQ5_1) // qwen2-0.5b Q4_K_S (layers 0-3)
MINFER_XQKV_KERNEL(q4_k_q5_k, MinferXqkvQ4_K, MinferXqkvQ5_K) // qwen2-7b, qwen3-0.6b Q4_K_S

#undef MINFER_XQKV_KERNEL
