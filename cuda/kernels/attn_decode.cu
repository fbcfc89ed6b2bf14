// attn_decode.cu: split-K ("flash-decoding") causal GQA attention for decode
// and the short multi-token paths (nt <= 8), the same semantics as
// minfer_attn_f32 (attention.cu): the query of token t sits at cell
// win[0] + t and attends to cells [max(0, cell - window + 1), cell]
// (window 0: from cell 0); query head h reads KV head h / G (G = n_head /
// n_head_kv); score = dot(q, k) * scale; out = softmax(scores) . V. A start
// < 0 or a cell >= n_ctx gives a NaN row.
//
// Why: the plain kernel runs one block per (token, head), each walking every
// cell serially, and every query head of a GQA group re-reads the same K/V.
// Decode attention is latency-bound (a 0.5b layer at 600 cells reads 600 KB),
// so this kernel is built for a short critical path, not for bandwidth.
//
// Geometry. Grid (nt * n_head_kv * nsub, nsplit), 128 threads (4 warps).
// Block x owns one token and a sub-group of at most 8 query heads that share
// one KV head (nsub = ceil(G / 8) sub-groups; G <= 8 is one), so each K/V
// row is read once for the whole group. Block y is one split of the cells.
// The grid depends on n_ctx and the shapes only (nsplit = min(32,
// ceil(n_ctx / SPLIT)), chosen by the launcher), never on kv_len: the window
// is read from device memory so a captured graph replays with fresh cells.
// The split count is chosen at RUN time from the attended length n:
//   n <= SINGLE (256): one split of n cells (at most two 32-cell tiles per
//     warp), which writes the output itself: no scratch, no fence, no atomic;
//   else: chunks of max(SPLIT (128: one tile per warp), ceil(n / nsplit))
//     cells, nact = ceil(n / chunk) active splits, combined as below.
// Blocks y >= nact exit right after reading the window.
//
// Inside a block the chunk is cut into 4 contiguous warp ranges, walked in
// tiles of 32 cells. Every lane first prefetches (to L1) the K and V rows of
// its cell of the warp's first tile, before the group's q is staged in
// shared memory, so the K/V latency overlaps the q load; each tile
// prefetches the next one. Scores: lane c computes the dot products of cell c
// with all the group's query heads (q in shared memory, K read with 16-byte
// loads for head_dim 64 / 128, pairs otherwise: no shuffles in the dot).
// Softmax: per head a warp max over the tile, one expf per (lane, head), the
// running (max, sum) of the warp rescaled per tile. V: lanes own element
// pairs of the head row (coalesced rows), cells in order, 8 rows per batch,
// two batches in flight. Warps 1..3 leave (m, l, acc) in shared memory
// (overlaying q and p, which are dead by then); warp 0 merges them in warp
// order into its registers and writes the output (one split) or the partial.
//
// Combine (nact > 1): "last block done". Each active block writes its
// unnormalised partial (m, l, acc[hd]) per head to scratch, fences, and
// counts itself on a per-block-x counter (atomicAdd); the block that brings
// the count to nact combines the nact partials in split order (weights
// exp(m_s - M) / L, so the result does not depend on which block came last),
// writes the output and resets the counter to 0, so the next launch (the
// next layer, or a graph replay) finds 0 again. One launch per attention node
// instead of two (a second kernel's launch gap costs about as much as a short
// decode attention itself); inactive splits neither write nor count.
//
// Numerics (accumulation-order class against the CPU): dot products in f32
// FMA in d order; exponentials with expf (CUDA's accurate expf, <= 2 ulp;
// the CPU takes exp in double rounded to f32); sums of exponentials and of
// p * v per warp in cell order, merged across warps and splits with
// rescaling; normalised at the end with 1/L. A KV element reads exactly as
// kv_elem (q8_0: d * q in f32).
//
// Scratch (allocated once by the backend, cuda/launch_attn.go): counters
// int[grid.x] (zero between launches), part_ml float2[grid.x][nsplit][hps],
// part_acc float[grid.x][nsplit][hps][hd], where hps is the heads per block.
#include "common.cuh"
#include "pdl.cuh"

namespace adec {
constexpr int THREADS = 128;
constexpr int WARPS = THREADS / 32;
constexpr int MINBLOCKS = 2; // __launch_bounds__: <= 255 registers, no spills (the grid is a wave at most)
constexpr int GMAX = 8;      // query heads per block
constexpr int TILE = 32;     // cells per warp pass: one per lane in the score pass
constexpr int VPAIRS = 8;    // V element pairs per lane per load batch (two batches in flight)
constexpr int MAXS = 32;     // splits (<= 32: the combine weighs one partial per lane)
constexpr int SPLIT = 128;   // fewest cells per active split once the range is split
constexpr int SINGLE = 256;  // attended ranges up to this many cells take one split
constexpr int CB = 16;       // partial loads in flight per thread in the combine
constexpr int HDMAX = 128;
static_assert(MAXS <= 32, "one partial per lane in the combine weights");
static_assert(SPLIT == WARPS * TILE, "a minimal split is one tile per warp");
static_assert(SINGLE >= SPLIT && MAXS % CB == 0, "split rule and combine batches");

// load2 reads elements e, e+1 (e even, same q8_0 block) of a KV row as f32.
template <int FMT>
__device__ __forceinline__ float2 load2(const uint8_t* __restrict__ row, int e) {
    if constexpr (FMT == mops::KV_F32) {
        return __ldg(reinterpret_cast<const float2*>(row) + (e >> 1));
    } else if constexpr (FMT == mops::KV_F16) {
        const unsigned int u = __ldg(reinterpret_cast<const unsigned int*>(row) + (e >> 1));
        return make_float2(mops::half_bits_to_float((uint16_t)(u & 0xffffu)), mops::half_bits_to_float((uint16_t)(u >> 16)));
    } else {
        const uint8_t* blk = row + (e / mops::Q8_0_LEN) * mops::Q8_0_BYTES;
        const float d = mops::half_bits_to_float(__ldg(reinterpret_cast<const unsigned short*>(blk)));
        const unsigned short qq = __ldg(reinterpret_cast<const unsigned short*>(blk + 2 + (e % mops::Q8_0_LEN)));
        return make_float2(__fmul_rn(d, (float)(int8_t)(qq & 0xff)), __fmul_rn(d, (float)(int8_t)(qq >> 8)));
    }
}

// load8 reads elements e .. e+7 (e % 8 == 0, head_dim % 8 == 0, so the
// 16-byte loads are aligned) of a KV row as f32.
template <int FMT>
__device__ __forceinline__ void load8(const uint8_t* __restrict__ row, int e, float (&x)[8]) {
    if constexpr (FMT == mops::KV_F32) {
        const float4 a = __ldg(reinterpret_cast<const float4*>(row) + (e >> 2));
        const float4 b = __ldg(reinterpret_cast<const float4*>(row) + (e >> 2) + 1);
        x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
    } else if constexpr (FMT == mops::KV_F16) {
        const uint4 u = __ldg(reinterpret_cast<const uint4*>(row + 2 * (long long)e));
        const unsigned int w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            x[2 * i] = mops::half_bits_to_float((uint16_t)(w[i] & 0xffffu));
            x[2 * i + 1] = mops::half_bits_to_float((uint16_t)(w[i] >> 16));
        }
    } else {
        const uint8_t* blk = row + (e / mops::Q8_0_LEN) * mops::Q8_0_BYTES;
        const float d = mops::half_bits_to_float(__ldg(reinterpret_cast<const unsigned short*>(blk)));
        const unsigned short* qs = reinterpret_cast<const unsigned short*>(blk + 2 + (e % mops::Q8_0_LEN));
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const unsigned short qq = __ldg(qs + i);
            x[2 * i] = __fmul_rn(d, (float)(int8_t)(qq & 0xff));
            x[2 * i + 1] = __fmul_rn(d, (float)(int8_t)(qq >> 8));
        }
    }
}

// span gives the byte range [b0, b1) of a KV head's elements [off, off+hd)
// inside a row (q8_0: the whole blocks that hold them).
template <int FMT>
__device__ __forceinline__ void span(int off, int hd, int& b0, int& b1) {
    if constexpr (FMT == mops::KV_F32) {
        b0 = 4 * off, b1 = 4 * (off + hd);
    } else if constexpr (FMT == mops::KV_F16) {
        b0 = 2 * off, b1 = 2 * (off + hd);
    } else {
        b0 = off / mops::Q8_0_LEN * mops::Q8_0_BYTES;
        b1 = (off + hd + mops::Q8_0_LEN - 1) / mops::Q8_0_LEN * mops::Q8_0_BYTES;
    }
}

// prefetch_cell asks L1 for the 128-byte lines of one cell's K and V head
// span. A hint only: the loads that follow are the same either way.
__device__ __forceinline__ void prefetch_cell(const uint8_t* kreg, const uint8_t* vreg, long long cell, long long row_bytes,
                                              int b0, int b1) {
    const size_t k = __cvta_generic_to_global(kreg + cell * row_bytes);
    const size_t v = __cvta_generic_to_global(vreg + cell * row_bytes);
    for (size_t a = (k + b0) & ~(size_t)127; a < k + b1; a += 128) asm volatile("prefetch.global.L1 [%0];" ::"l"(a));
    for (size_t a = (v + b0) & ~(size_t)127; a < v + b1; a += 128) asm volatile("prefetch.global.L1 [%0];" ::"l"(a));
}

// load_v fills v with the lane's element pairs (lane + 32 j) of the V rows
// of tile cells c0 .. c0+VB-1; cells at or beyond tcnt and pairs beyond the
// head give zeros.
template <int FMT, int VB, int NP>
__device__ __forceinline__ void load_v(float2 (&v)[VB][NP], const uint8_t* __restrict__ vreg, long long tile_cell, int c0,
                                       int tcnt, long long row_bytes, int off, int half, int lane) {
#pragma unroll
    for (int i = 0; i < VB; i++) {
        const bool ok = c0 + i < tcnt;
        const uint8_t* row = vreg + (tile_cell + c0 + i) * row_bytes;
#pragma unroll
        for (int j = 0; j < NP; j++) {
            const int pr = lane + 32 * j;
            v[i][j] = (ok && pr < half) ? load2<FMT>(row, off + 2 * pr) : make_float2(0.0f, 0.0f);
        }
    }
}

// accumulate adds p * v of tile cells c0 .. c0+VB-1 (p from the warp's
// shared row, zero beyond the tile) into acc, in cell order.
template <int GB, int VB, int NP>
__device__ __forceinline__ void accumulate(float2 (&acc)[GB][NP], const float2 (&v)[VB][NP], const float (*p)[GB], int c0,
                                           int tcnt) {
#pragma unroll
    for (int i = 0; i < VB; i++) {
        if (c0 + i >= tcnt) break; // warp-uniform
        const float* pc = p[c0 + i];
#pragma unroll
        for (int g = 0; g < GB; g++) {
            const float pg = pc[g];
#pragma unroll
            for (int j = 0; j < NP; j++) {
                acc[g][j].x = fmaf(pg, v[i][j].x, acc[g][j].x);
                acc[g][j].y = fmaf(pg, v[i][j].y, acc[g][j].y);
            }
        }
    }
}

// Smem is the block's shared memory. The tile phase (q, p) and the warp
// merge (warps 1..3's m, l, acc) never overlap in time (a barrier between),
// so they share storage: 13.3 KB at GB = 8, head_dim 128; 7.2 KB at head_dim
// 64; small enough that the kernel needs no carveout its neighbours lack.
template <int HD, int GB>
struct Smem {
    static constexpr int HDM = HD > 0 ? HD : HDMAX;
    union {
        struct {
            __align__(16) float q[GB][HDM];         // the group's queries
            __align__(16) float p[WARPS][TILE][GB]; // each warp's tile probabilities
        } t;
        struct {
            __align__(16) float acc[WARPS - 1][GB][HDM]; // warps 1..3's unnormalised output
            float m[WARPS - 1][GB], l[WARPS - 1][GB];    // and their max and sum
        } mg;
    } u;
    float w[GB][MAXS]; // the combine's split weights
    int last;
};

// decode is the whole kernel for one head_dim class (HD = 64 or 128:
// compile-time head_dim and 16-byte K loads; HD = 0: any even head_dim up
// to 128, pair loads), GB >= heads per block, and one KV format.
template <int HD, int GB, int FMT>
__device__ __forceinline__ void decode(Smem<HD, GB>& sm, float* __restrict__ out, const float* __restrict__ q, const uint8_t* __restrict__ kreg,
                                       const uint8_t* __restrict__ vreg, const int* __restrict__ win,
                                       float2* __restrict__ part_ml, float* __restrict__ part_acc, int* __restrict__ counters,
                                       int n_head, int n_head_kv, int hd_arg, long long row_bytes, int n_ctx, int window,
                                       float scale, int nsplit, int nsub, int hps) {
    constexpr int N = HD > 0 ? 8 : 2;        // K elements per load in the score pass
    constexpr int HDM = HD > 0 ? HD : HDMAX; // bound of the per-head arrays
    constexpr int NP = (HDM + 63) / 64;      // V element pairs per lane
    constexpr int VB = VPAIRS / NP;          // V rows per batch: the rows are in L1 (prefetched), so few suffice
    static_assert(TILE % (2 * VB) == 0, "a tile is whole double-buffered batch pairs");
    auto& q_s = sm.u.t.q;
    auto& p_s = sm.u.t.p;

    const int hd = HD > 0 ? HD : hd_arg;
    const int half = hd >> 1;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int bx = blockIdx.x, sp = blockIdx.y;
    const int sub = bx % nsub, tk = bx / nsub;
    const int kvh = tk % n_head_kv, t = tk / n_head_kv;
    const int G = n_head / n_head_kv;
    const int gb = min(hps, G - sub * hps); // heads of this block, 1 .. GB
    const int h0 = kvh * G + sub * hps;
    float* const y = out + ((long long)t * n_head + h0) * hd;

    const int start = win[0];
    const long long cell = (long long)start + t;
    if (start < 0 || cell >= n_ctx) {
        if (sp == 0)
            for (int i = tid; i < gb * hd; i += THREADS) y[i] = __int_as_float(0x7fc00000);
        return;
    }
    const long long first = window > 0 ? max(0LL, cell - window + 1) : 0LL;
    const int n = (int)(cell - first + 1);
    // The run-time split rule (launch_attn.go attnDecodeSplitPlan mirrors
    // it): chunk >= ceil(n / nsplit), so nact <= nsplit = gridDim.y.
    const int chunk = n <= SINGLE ? n : max((n + nsplit - 1) / nsplit, SPLIT);
    const int nact = (n + chunk - 1) / chunk;
    if (sp >= nact) return; // an idle split: nothing to write, nothing to count

    const long long b_lo = first + (long long)sp * chunk;
    const int bcnt = (int)min((long long)chunk, cell + 1 - b_lo);
    const int wchunk = (bcnt + WARPS - 1) / WARPS;
    const int w_lo = warp * wchunk;
    const int wcnt = max(0, min(wchunk, bcnt - w_lo)); // warp 0 always has a cell
    const int off = kvh * hd;                          // element offset of the KV head in a row
    int sb0, sb1;
    span<FMT>(off, hd, sb0, sb1);
    if (lane < min(TILE, wcnt)) prefetch_cell(kreg, vreg, b_lo + w_lo + lane, row_bytes, sb0, sb1);

    for (int i = tid; i < GB * hd; i += THREADS) {
        const int g = i / hd, d = i - g * hd;
        q_s[g][d] = g < gb ? q[((long long)t * n_head + h0 + g) * hd + d] : 0.0f;
    }
    __syncthreads();

    float m[GB], l[GB];
    float2 acc[GB][NP];
#pragma unroll
    for (int g = 0; g < GB; g++) {
        m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
        for (int j = 0; j < NP; j++) acc[g][j] = make_float2(0.0f, 0.0f);
    }
    for (int c0 = 0; c0 < wcnt; c0 += TILE) {
        const int tcnt = min(TILE, wcnt - c0);
        const long long tile = b_lo + w_lo + c0;
        if (lane < wcnt - c0 - TILE) prefetch_cell(kreg, vreg, tile + TILE + lane, row_bytes, sb0, sb1); // the next tile
        float2 va[VB][NP], vb[VB][NP];
        load_v<FMT, VB, NP>(va, vreg, tile, 0, tcnt, row_bytes, off, half, lane);
        load_v<FMT, VB, NP>(vb, vreg, tile, VB, tcnt, row_bytes, off, half, lane);

        float sc[GB];
#pragma unroll
        for (int g = 0; g < GB; g++) sc[g] = 0.0f;
        if (lane < tcnt) {
            const uint8_t* krow = kreg + (tile + lane) * row_bytes;
            if constexpr (N == 8) {
                // 64 bytes of K (16-byte loads) in flight per lane: the rows
                // were prefetched to L1, so more in registers buys nothing
                // and would crowd out the V batches.
                constexpr int KU = FMT == mops::KV_F32 ? 16 : 32;
#pragma unroll 1
                for (int d0 = 0; d0 < HD; d0 += KU)
#pragma unroll
                    for (int d = d0; d < d0 + KU; d += 8) {
                        float x[8];
                        load8<FMT>(krow, off + d, x);
#pragma unroll
                        for (int g = 0; g < GB; g++) {
                            const float4 qa = *reinterpret_cast<const float4*>(&q_s[g][d]);
                            const float4 qb = *reinterpret_cast<const float4*>(&q_s[g][d + 4]);
                            float s = sc[g];
                            s = fmaf(qa.x, x[0], s), s = fmaf(qa.y, x[1], s), s = fmaf(qa.z, x[2], s), s = fmaf(qa.w, x[3], s);
                            s = fmaf(qb.x, x[4], s), s = fmaf(qb.y, x[5], s), s = fmaf(qb.z, x[6], s), s = fmaf(qb.w, x[7], s);
                            sc[g] = s;
                        }
                    }
            } else {
#pragma unroll 4
                for (int d = 0; d < hd; d += 2) {
                    const float2 x = load2<FMT>(krow, off + d);
#pragma unroll
                    for (int g = 0; g < GB; g++) {
                        const float2 qa = *reinterpret_cast<const float2*>(&q_s[g][d]);
                        sc[g] = fmaf(qa.y, x.y, fmaf(qa.x, x.x, sc[g]));
                    }
                }
            }
#pragma unroll
            for (int g = 0; g < GB; g++) sc[g] = __fmul_rn(sc[g], scale);
        } else {
#pragma unroll
            for (int g = 0; g < GB; g++) sc[g] = -INFINITY;
        }
        // Online softmax per head: lane 0 always holds a cell, so the
        // tile max is finite; corr is 0 on the first tile (m = -inf).
#pragma unroll
        for (int g = 0; g < GB; g++) {
            const float mn = fmaxf(m[g], mops::warp_max(sc[g]));
            const float corr = expf(m[g] - mn);
            const float pv = lane < tcnt ? expf(sc[g] - mn) : 0.0f;
            l[g] = fmaf(l[g], corr, pv);
#pragma unroll
            for (int j = 0; j < NP; j++) acc[g][j].x *= corr, acc[g][j].y *= corr;
            m[g] = mn;
            p_s[warp][lane][g] = pv;
        }
        __syncwarp();
        const float(*pw)[GB] = p_s[warp];
        for (int c = 0; c < tcnt; c += 2 * VB) {
            accumulate<GB, VB, NP>(acc, va, pw, c, tcnt);
            if (c + 2 * VB < tcnt) load_v<FMT, VB, NP>(va, vreg, tile, c + 2 * VB, tcnt, row_bytes, off, half, lane);
            accumulate<GB, VB, NP>(acc, vb, pw, c + VB, tcnt);
            if (c + 3 * VB < tcnt) load_v<FMT, VB, NP>(vb, vreg, tile, c + 3 * VB, tcnt, row_bytes, off, half, lane);
        }
        __syncwarp(); // p_s is rewritten by the next tile
    }

    // Merge the warps into warp 0, in warp order: warp w's (m, l, acc)
    // weighted by exp(m_w - M). The merge buffers overlay q and p.
    __syncthreads();
    if (warp > 0) {
        const int w = warp - 1;
#pragma unroll
        for (int g = 0; g < GB; g++) {
            const float lw = mops::warp_sum(l[g]);
            if (lane == 0) sm.u.mg.m[w][g] = m[g], sm.u.mg.l[w][g] = lw;
#pragma unroll
            for (int j = 0; j < NP; j++) {
                const int pr = lane + 32 * j;
                if (pr < half) *reinterpret_cast<float2*>(&sm.u.mg.acc[w][g][2 * pr]) = acc[g][j];
            }
        }
    }
    __syncthreads();
    const long long blk_stride = (long long)nsplit * hps; // partials per block x
    if (warp == 0) {
#pragma unroll
        for (int g = 0; g < GB; g++) {
            const float l0 = mops::warp_sum(l[g]);
            if (g >= gb) continue; // warp-uniform; after the shuffles
            float M = m[g]; // finite: warp 0 always has a cell
#pragma unroll
            for (int w = 0; w < WARPS - 1; w++) M = fmaxf(M, sm.u.mg.m[w][g]);
            const float e0 = expf(m[g] - M);
            float L = __fmul_rn(e0, l0);
            float ew[WARPS - 1];
#pragma unroll
            for (int w = 0; w < WARPS - 1; w++) {
                const float mw = sm.u.mg.m[w][g];
                ew[w] = mw == -INFINITY ? 0.0f : expf(mw - M); // an empty warp weighs 0
                L = fmaf(ew[w], sm.u.mg.l[w][g], L);
            }
            const float inv = __fdiv_rn(1.0f, L);
            const long long pi = (long long)bx * blk_stride + (long long)sp * hps + g;
#pragma unroll
            for (int j = 0; j < NP; j++) {
                const int pr = lane + 32 * j;
                if (pr >= half) continue;
                float2 a = make_float2(__fmul_rn(e0, acc[g][j].x), __fmul_rn(e0, acc[g][j].y));
#pragma unroll
                for (int w = 0; w < WARPS - 1; w++) {
                    const float2 aw = *reinterpret_cast<const float2*>(&sm.u.mg.acc[w][g][2 * pr]);
                    a.x = fmaf(ew[w], aw.x, a.x), a.y = fmaf(ew[w], aw.y, a.y);
                }
                if (nact == 1) {
                    y[g * hd + 2 * pr] = __fmul_rn(a.x, inv); // scalar stores: out may sit at any element offset
                    y[g * hd + 2 * pr + 1] = __fmul_rn(a.y, inv);
                } else {
                    *reinterpret_cast<float2*>(part_acc + pi * hd + 2 * pr) = a;
                }
            }
            if (nact > 1 && lane == 0) part_ml[pi] = make_float2(M, L);
        }
    }
    if (nact == 1) return; // the one active split wrote the output: no fence, no count

    // Count this block; the last of block x's nact active splits combines.
    // The fence (warp 0 wrote the partial) makes it visible before the
    // count; the last block fences after seeing the count and reads around L1.
    if (warp == 0) __threadfence();
    __syncthreads();
    if (tid == 0) {
        const int done = atomicAdd(&counters[bx], 1) == nact - 1;
        if (done) counters[bx] = 0; // every launch leaves the counters at 0 (graph replays)
        sm.last = done;
    }
    __syncthreads();
    if (!sm.last) return;
    __threadfence();

    for (int g = warp; g < gb; g += WARPS) {
        float mv = -INFINITY, lv = 0.0f;
        if (lane < nact) {
            const float2 v = __ldcg(part_ml + (long long)bx * blk_stride + (long long)lane * hps + g);
            mv = v.x, lv = v.y;
        }
        const float M = mops::warp_max(mv);
        const float e = mv == -INFINITY ? 0.0f : expf(mv - M);
        const float L = mops::warp_sum(__fmul_rn(e, lv));
        if (lane < nact) sm.w[g][lane] = __fmul_rn(e, __fdiv_rn(1.0f, L));
    }
    __syncthreads();
    // Items of QW elements (16-byte partial loads when head_dim is a
    // compile-time 64 / 128), the splits summed in split order.
    constexpr int QW = HD > 0 ? 4 : 2;
    const int nq = hd / QW;
    const float* pa = part_acc + (long long)bx * blk_stride * hd;
    for (int i = tid; i < gb * nq; i += THREADS) {
        const int g = i / nq, e = (i - g * nq) * QW;
        float a[QW];
#pragma unroll
        for (int k = 0; k < QW; k++) a[k] = 0.0f;
#pragma unroll
        for (int s0 = 0; s0 < MAXS; s0 += CB) {
            if (s0 >= nact) break;
            float v[CB][QW];
#pragma unroll
            for (int k = 0; k < CB; k++) {
                const float* src = pa + ((long long)(s0 + k) * hps + g) * hd + e;
                if constexpr (QW == 4) {
                    const float4 x = s0 + k < nact ? __ldcg(reinterpret_cast<const float4*>(src)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    v[k][0] = x.x, v[k][1] = x.y, v[k][2] = x.z, v[k][3] = x.w;
                } else {
                    const float2 x = s0 + k < nact ? __ldcg(reinterpret_cast<const float2*>(src)) : make_float2(0.0f, 0.0f);
                    v[k][0] = x.x, v[k][1] = x.y;
                }
            }
#pragma unroll
            for (int k = 0; k < CB; k++) {
                if (s0 + k < nact) {
                    const float w = sm.w[g][s0 + k];
#pragma unroll
                    for (int c = 0; c < QW; c++) a[c] = fmaf(w, v[k][c], a[c]);
                }
            }
        }
#pragma unroll
        for (int c = 0; c < QW; c++) y[g * hd + e + c] = a[c];
    }
}

// run declares the block's shared memory and runs decode.
template <int HD, int GB, int FMT>
__device__ __forceinline__ void run(float* out, const float* q, const uint8_t* kreg, const uint8_t* vreg, const int* win,
                                    float2* part_ml, float* part_acc, int* counters, int n_head, int n_head_kv, int hd,
                                    long long row_bytes, int n_ctx, int window, float scale, int nsplit, int nsub, int hps) {
    __shared__ Smem<HD, GB> sm;
    decode<HD, GB, FMT>(sm, out, q, kreg, vreg, win, part_ml, part_acc, counters, n_head, n_head_kv, hd, row_bytes, n_ctx,
                        window, scale, nsplit, nsub, hps);
}
} // namespace adec

// The kernels: minfer_attn_decode_{hd64,hd128,any}_g{1,2,4,8}_{f32,f16,q8_0}
// (one per format, so each gets its own register allocation). Grid
// (nt * n_head_kv * nsub, nsplit), block adec::THREADS; q and out are [hd,
// n_head, nt]; GB (the _gN suffix) >= hps, the query heads per block.
#define MINFER_ADEC_PARAMS                                                                                             \
    float *out, const float *q, const uint8_t *kreg, const uint8_t *vreg, const int *win, float2 *part_ml,           \
        float *part_acc, int *counters, int n_head, int n_head_kv, int hd, long long row_bytes, int n_ctx, int window, \
        float scale, int nsplit, int nsub, int hps
#define MINFER_ADEC_ARGS                                                                                               \
    out, q, kreg, vreg, win, part_ml, part_acc, counters, n_head, n_head_kv, hd, row_bytes, n_ctx, window, scale, nsplit, \
        nsub, hps

extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd64_g1_f32(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<64, 1, mops::KV_F32>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd64_g1_f16(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<64, 1, mops::KV_F16>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd64_g1_q8_0(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<64, 1, mops::KV_Q8_0>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd64_g2_f32(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<64, 2, mops::KV_F32>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd64_g2_f16(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<64, 2, mops::KV_F16>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd64_g2_q8_0(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<64, 2, mops::KV_Q8_0>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd64_g4_f32(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<64, 4, mops::KV_F32>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd64_g4_f16(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<64, 4, mops::KV_F16>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd64_g4_q8_0(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<64, 4, mops::KV_Q8_0>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd64_g8_f32(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<64, 8, mops::KV_F32>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd64_g8_f16(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<64, 8, mops::KV_F16>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd64_g8_q8_0(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<64, 8, mops::KV_Q8_0>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd128_g1_f32(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<128, 1, mops::KV_F32>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd128_g1_f16(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<128, 1, mops::KV_F16>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd128_g1_q8_0(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<128, 1, mops::KV_Q8_0>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd128_g2_f32(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<128, 2, mops::KV_F32>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd128_g2_f16(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<128, 2, mops::KV_F16>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd128_g2_q8_0(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<128, 2, mops::KV_Q8_0>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd128_g4_f32(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<128, 4, mops::KV_F32>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd128_g4_f16(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<128, 4, mops::KV_F16>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd128_g4_q8_0(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<128, 4, mops::KV_Q8_0>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd128_g8_f32(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<128, 8, mops::KV_F32>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd128_g8_f16(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<128, 8, mops::KV_F16>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_hd128_g8_q8_0(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<128, 8, mops::KV_Q8_0>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_any_g1_f32(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<0, 1, mops::KV_F32>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_any_g1_f16(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<0, 1, mops::KV_F16>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_any_g1_q8_0(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<0, 1, mops::KV_Q8_0>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_any_g2_f32(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<0, 2, mops::KV_F32>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_any_g2_f16(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<0, 2, mops::KV_F16>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_any_g2_q8_0(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<0, 2, mops::KV_Q8_0>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_any_g4_f32(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<0, 4, mops::KV_F32>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_any_g4_f16(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<0, 4, mops::KV_F16>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_any_g4_q8_0(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<0, 4, mops::KV_Q8_0>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_any_g8_f32(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<0, 8, mops::KV_F32>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_any_g8_f16(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<0, 8, mops::KV_F16>(MINFER_ADEC_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec::THREADS, adec::MINBLOCKS) minfer_attn_decode_any_g8_q8_0(MINFER_ADEC_PARAMS) {
    MINFER_KERNEL_ENTRY();
    adec::run<0, 8, mops::KV_Q8_0>(MINFER_ADEC_ARGS);
}

#undef MINFER_ADEC_PARAMS
#undef MINFER_ADEC_ARGS
