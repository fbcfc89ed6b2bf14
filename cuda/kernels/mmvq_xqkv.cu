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
// The second half of the file (MINFER_FUSE_QKV_ROPE) gives these kernels
// and the one-type _qkv_ kernels a form with the rope/store of
// qkv_rope_store.cu folded in (_qkvrs_), over the same row families.
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

// ------------------------------------------------------------------------
// MINFER_FUSE_QKV_ROPE: the decode q/k/v matvec with graph.OpQkvBiasRopeStore
// folded in (qkv_rope_store.cu's minfer_qkv_rope_store, one launch fewer a
// layer). For one token:
//   q' = rope(q + bq)   -> q [hd, nh]            (the rope/store's output)
//   k' = rope(k + bk)   -> K region cell win[0]
//   v' = v + bv         -> V region cell win[0]
// The raw q/k/v rows are never written.
//
//   minfer_mmvq_qkvrs_<t>          q, k, v of one type, GGUF blocks (mmvq.cu's _qkv_)
//   minfer_mmvqr_qkvrs_<t>         the three repacked (mmvq_repack.cu's _qkv_)
//   minfer_mmvq_xqkvrs_<qk>_<v>[r] the mixed pairs above
//
// Rows: one warp a row, MINFER_MMVQ_ROWS (4) a block, each row by its
// family's row function and its bias by the one rounded add of the plain
// kernels, so every value is bitwise what the q/k/v kernel writes. Only
// which rows a block holds changes: neox rope pairs dims (i, i + hd/2) of
// a head, so q / k block j of a head computes head rows {2j, 2j+1, half+2j,
// half+2j+1} (hd/4 blocks a head): warps 0 / 2 hold pair 2j, warps 1 / 3
// pair 2j+1. The 4 values meet in shared memory (one barrier); lanes 0 and
// 1 of warp 0 each rope one pair with rope.cuh (the angle in double at
// pos[0], as minfer_qkv_rope_store computes it) and write q' or store k'
// with kvput.cuh (f32, f16 RNE), minfer_qkv_rope_store's values and bytes.
// v blocks keep 4 consecutive rows and store them (no rope). pos and win
// are read on the device (graph replay); a cell outside [0, n_ctx) is not
// written. The launcher (cuda/mmvq_xqkv.go) takes only neox rope over the
// whole head (n_rot == hd), hd % 4 == 0, nq and nk whole heads, and an f32
// or f16 cache (a q8_0 block needs 32 consecutive values a warp): the
// route declines everything else at plan time.
#include "kvput.cuh"
#include "rope.cuh"

// MinferQkvrsTail is the rope/store half of the kernels' arguments.
struct MinferQkvrsTail {
    float* q;        // q' [hd, nh]
    const int* pos;  // i32 [1]
    const int* win;  // i32 [2] {start cell, kv_len}
    uint8_t* kreg;   // the layer's K region
    uint8_t* vreg;   // the layer's V region
    int format;      // mops::KV_F32 or KV_F16
    long long row_bytes;
    int n_ctx, hd;
    float theta;
};

// minfer_qkvrs_cell is the KV cell of the token, or -1 when it is outside
// [0, n_ctx) (nothing stored).
__device__ __forceinline__ long long minfer_qkvrs_cell(const MinferQkvrsTail& t) {
    const long long cell = t.win[0];
    return cell < 0 || cell >= t.n_ctx ? -1 : cell;
}

// minfer_mmvq_qkvrs: QK's rows for q and k, V's for v (QK == V for the
// one-type kernels). Every thread of a q / k block reaches the barrier:
// nq and nk are whole heads of hd % 4 == 0 rows, so those blocks are full.
template <class QK, class V>
__device__ __forceinline__ void minfer_mmvq_qkvrs(const uint8_t* a, const uint8_t* wq, const uint8_t* wk,
                                                  const uint8_t* wv, const float* bq, const float* bk, const float* bv,
                                                  int k, int nq, int nk, int nv, const MinferQkvrsTail& t) {
    __shared__ float xs[MINFER_MMVQ_ROWS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int qblocks = nq / MINFER_MMVQ_ROWS, qkblocks = qblocks + nk / MINFER_MMVQ_ROWS;
    const int blk = blockIdx.x;
    const MinferMmvqActG act{a};
    if (blk >= qkblocks) { // a v block: 4 consecutive rows, stored as they are
        const int r = (blk - qkblocks) * MINFER_MMVQ_ROWS + warp;
        if (r >= nv) return; // the whole warp leaves together
        float acc = V::row(wv, nv, k, r, act);
        if (lane == 0) {
            if (bv != nullptr) acc = __fadd_rn(acc, bv[r]);
            const long long cell = minfer_qkvrs_cell(t);
            if (cell >= 0) mops::kv_put(t.format, mops::kv_row(t.vreg, cell, t.row_bytes), r, acc);
        }
        return;
    }
    const bool isq = blk < qblocks; // block-uniform
    const int lb = isq ? blk : blk - qblocks;
    const int bph = t.hd / MINFER_MMVQ_ROWS, half = t.hd >> 1;
    const int head = lb / bph, j = lb - head * bph;
    const int r = head * t.hd + 2 * j + (warp & 1) + (warp >> 1) * half;
    float acc = QK::row(isq ? wq : wk, isq ? nq : nk, k, r, act);
    if (lane == 0) {
        const float* bias = isq ? bq : bk;
        if (bias != nullptr) acc = __fadd_rn(acc, bias[r]);
        xs[warp] = acc;
    }
    __syncthreads();
    if (threadIdx.x >= 2) return;
    // Thread p (0, 1) ropes pair i = 2j + p: dims i (warp p's row) and
    // i + half (warp p + 2's).
    const int p = threadIdx.x, i = 2 * j + p;
    int da, db;
    mops::rope_dims(i, half, 1, &da, &db);
    float c, s;
    mops::rope_angle((double)t.pos[0], i, t.hd, t.theta, &c, &s);
    float y0, y1;
    mops::rope_rotate(xs[p], xs[p + 2], c, s, &y0, &y1);
    const int o = head * t.hd;
    if (isq) {
        t.q[o + da] = y0;
        t.q[o + db] = y1;
        return;
    }
    const long long cell = minfer_qkvrs_cell(t);
    if (cell < 0) return;
    uint8_t* row = mops::kv_row(t.kreg, cell, t.row_bytes);
    mops::kv_put(t.format, row, o + da, y0);
    mops::kv_put(t.format, row, o + db, y1);
}

// Kernels: grid (nq/4 + nk/4 + ceil(nv/4)), block (MINFER_MMVQ_THREADS),
// no dynamic smem. The arguments of the _qkv_ kernels, then the rope/store
// tail. The launch bounds are the plain forms': the one-type GGUF and
// repacked _qkv_ kernels unbounded, the mixed ones held as above.
#define MINFER_QKVRS_PARAMS                                                                                     \
    const uint8_t *a, const uint8_t *wq, const uint8_t *wk, const uint8_t *wv, const float *bq, const float *bk, \
        const float *bv, int k, int nq, int nk, int nv, float *q, const int *pos, const int *win, uint8_t *kreg,   \
        uint8_t *vreg, int format, long long row_bytes, int n_ctx, int hd, float theta
#define MINFER_QKVRS_CALL(QK, V)                                                                                \
    minfer_mmvq_qkvrs<QK, V>(a, wq, wk, wv, bq, bk, bv, k, nq, nk, nv,                                          \
                             MinferQkvrsTail{q, pos, win, kreg, vreg, format, row_bytes, n_ctx, hd, theta})
#define MINFER_QKVRS_KERNEL(name, F)                                                                            \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQ_THREADS) minfer_mmvq_qkvrs_##name(MINFER_QKVRS_PARAMS) { \
        MINFER_QKVRS_CALL(F, F);                                                                                \
    }
#define MINFER_QKVRSR_KERNEL(name, F)                                                                           \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQR_THREADS) minfer_mmvqr_qkvrs_##name(MINFER_QKVRS_PARAMS) { \
        MINFER_QKVRS_CALL(F, F);                                                                                \
    }
#define MINFER_XQKVRS_KERNEL(name, QK, V)                                                                       \
    extern "C" __global__ void __launch_bounds__(MINFER_MMVQ_THREADS, MINFER_XQKV_MIN_BLOCKS)                   \
        minfer_mmvq_xqkvrs_##name(MINFER_QKVRS_PARAMS) {                                                        \
        MINFER_QKVRS_CALL(QK, V);                                                                               \
    }

using MinferXqkvQ4_0 = MinferXqkvG<MinferMmvqQ4_0, MINFER_QK, MINFER_Q4_0_BYTES>;
using MinferXqkvQ4_1 = MinferXqkvG<MinferMmvqQ4_1, MINFER_QK, MINFER_Q4_1_BYTES>;

MINFER_QKVRS_KERNEL(q8_0, MinferXqkvQ8_0)
MINFER_QKVRS_KERNEL(q4_0, MinferXqkvQ4_0)
MINFER_QKVRS_KERNEL(q4_1, MinferXqkvQ4_1)
MINFER_QKVRS_KERNEL(q5_0, MinferXqkvQ5_0) // qwen2-0.5b Q4_K_M (the layers whose v is Q5_0 too)
MINFER_QKVRS_KERNEL(q5_1, MinferXqkvQ5_1)
MINFER_QKVRS_KERNEL(q4_k, MinferXqkvQ4_K) // qwen2-7b Q4_K_M (v Q4_K)
MINFER_QKVRS_KERNEL(q5_k, MinferXqkvQ5_K)
MINFER_QKVRS_KERNEL(q6_k, MinferXqkvQ6_K)
MINFER_QKVRSR_KERNEL(q8_0, MinferXqkvQ8_0r) // Q8_0 models (the repacked default)
MINFER_QKVRSR_KERNEL(q6_k, MinferXqkvQ6_Kr)
MINFER_XQKVRS_KERNEL(q5_0_q8_0r, MinferXqkvQ5_0, MinferXqkvQ8_0r) // qwen2-0.5b Q4_K_M
MINFER_XQKVRS_KERNEL(q5_0_q8_0, MinferXqkvQ5_0, MinferXqkvQ8_0)
MINFER_XQKVRS_KERNEL(q4_k_q6_kr, MinferXqkvQ4_K, MinferXqkvQ6_Kr) // qwen2-7b Q4_K_M
MINFER_XQKVRS_KERNEL(q4_k_q6_k, MinferXqkvQ4_K, MinferXqkvQ6_K)
MINFER_XQKVRS_KERNEL(q5_1_q8_0r, MinferXqkvQ5_1, MinferXqkvQ8_0r)
MINFER_XQKVRS_KERNEL(q5_1_q8_0, MinferXqkvQ5_1, MinferXqkvQ8_0)
MINFER_XQKVRS_KERNEL(q5_k_q6_kr, MinferXqkvQ5_K, MinferXqkvQ6_Kr)
MINFER_XQKVRS_KERNEL(q5_k_q6_k, MinferXqkvQ5_K, MinferXqkvQ6_K)
MINFER_XQKVRS_KERNEL(q5_0_q5_1, MinferXqkvQ5_0, MinferXqkvQ5_1)
MINFER_XQKVRS_KERNEL(q4_k_q5_k, MinferXqkvQ4_K, MinferXqkvQ5_K)

#undef MINFER_QKVRS_PARAMS
#undef MINFER_QKVRS_CALL
#undef MINFER_QKVRS_KERNEL
#undef MINFER_QKVRSR_KERNEL
#undef MINFER_XQKVRS_KERNEL
