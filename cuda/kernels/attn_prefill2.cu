// attn_prefill2.cu: the v2 tiled prefill attention (lever
// MINFER_FA_PREFILL_V2=1), the semantics of minfer_attn_f32 and of
// attn_prefill.cu: the query of token t sits at cell win[0] + t and attends
// to cells [max(0, cell - window + 1), cell] (window 0: from cell 0); query
// head h reads KV head h / G; score = dot(q, k) * scale; out = softmax . V;
// a start < 0 or a cell >= n_ctx gives a NaN row.
//
// Why a v2: the v1 kernel is latency-bound (2*BM threads, 168 registers,
// about one block and 2-4 warps per SM; each tile is loaded in 8 dependent
// global round trips, K then V). Here:
//   - 8*BM threads per block (128 / 256 / 512), each thread 2 rows x 4
//     score columns and 2 rows x HD/16 output columns: a quarter of v1's
//     per-thread work per tile and about half its registers, so several
//     blocks (and 12-16+ warps) per SM hide each other's latency;
//   - K and V have their own shared buffers and are loaded together, all of
//     a thread's loads in flight at once (1-2 round trips per tile, not 8);
//   - a BM 16 variant (head_dim <= 64) for grids that would leave SMs idle.
// Rows (R = t * G + g: the G query heads of a KV head share every K / V
// tile), online softmax, absolute 64-cell tile alignment (a masked cell is
// an exact no-op) are v1's, so the BM variants of v2 are bitwise equal to
// each other for a row.
//
// Numerics (accumulation-order class): dot products in f32 FMA in d order,
// expf, per-row max / sum over 16 lanes by a fixed xor tree, V sums in cell
// order on unnormalised probabilities rescaled per tile, normalised at the
// end. (The 16-lane tree differs from v1's 8-lane one: v2 and v1 agree to
// rounding, not bitwise.)
//
// The KV window is read from device memory (graph replay): the grid depends
// on nt and the heads only, and each block finds its cells at run time.
#include "common.cuh"
#include "cpasync.cuh"
#include "mma.cuh"
#include "q8_1.cuh"

// PrefillTile is one block's share of a tiled prefill attention: KV head
// kvh and the BM query rows from r0 (row R = t * G + g, nrows in all), the
// heaviest tiles (latest tokens: the most cells) first and KV heads
// innermost, so the long blocks start in the first wave; and the cells
// [lo, hi] its rows can see: the first row's first cell to the last row's
// cell, clipped to the region (cells fit int: the launchers bound
// n_ctx + nt by INT_MAX).
struct PrefillTile {
    int G, kvh, lo, hi;
    long long nrows, r0;
};
// tile_cells: the cells [lo, hi] of the BM rows from r0: prefill_tile's,
// and the decode combine's for a row's tile (both must see one range).
template <int BM>
__device__ __forceinline__ void tile_cells(long long r0, long long nrows, int G, int start, int n_ctx, int window, int& lo,
                                           int& hi) {
    const long long t_lo = r0 / G, t_hi = (min(r0 + BM, nrows) - 1) / G;
    lo = window > 0 ? (int)min(max(0LL, (long long)start + t_lo - window + 1), (long long)n_ctx) : 0;
    hi = (int)min((long long)start + t_hi, (long long)n_ctx - 1);
}
template <int BM>
__device__ __forceinline__ PrefillTile prefill_tile(int nt, int n_head, int n_head_kv, int start, int n_ctx, int window) {
    PrefillTile p;
    p.G = n_head / n_head_kv;
    p.nrows = (long long)nt * p.G;
    const int ntiles = (int)((p.nrows + BM - 1) / BM);
    p.kvh = blockIdx.x % n_head_kv;
    p.r0 = (long long)(ntiles - 1 - (int)(blockIdx.x / n_head_kv)) * BM;
    tile_cells<BM>(p.r0, p.nrows, p.G, start, n_ctx, window, p.lo, p.hi);
    return p;
}

namespace fap2 {
constexpr int BN = 64; // KV cells per tile
constexpr int RM = 2;  // query rows per thread
constexpr int CG = 16; // threads per row group
constexpr int CN = BN / CG; // score columns per thread: cg + CG*j

// Shared memory floats: Q [BM][HD+4], K [BN][HD+4], V [BN][HD+4],
// P [BN][BM+4] (column-major: cell, row). The +4 pads keep the float4
// reads 16-byte aligned and free of bank conflicts within a quarter warp.
__host__ __device__ constexpr int smem_floats(int hd, int bm) { return (bm + 2 * BN) * (hd + 4) + BN * (bm + 4); }

// load_pair2 reads elements i, i+1 (i even, same q8_0 block) of a KV row.
__device__ __forceinline__ float2 load_pair2(int format, const uint8_t* __restrict__ row, int i) {
    if (format == mops::KV_F32) return __ldg(reinterpret_cast<const float2*>(row) + (i >> 1));
    if (format == mops::KV_F16) {
        const __half2 h = __ldg(reinterpret_cast<const __half2*>(row) + (i >> 1));
        return __half22float2(h);
    }
    const uint8_t* blk = row + (i / mops::Q8_0_LEN) * mops::Q8_0_BYTES;
    const float d = mops::half_bits_to_float(*reinterpret_cast<const uint16_t*>(blk));
    const int o = 2 + (i % mops::Q8_0_LEN);
    return make_float2(__fmul_rn(d, (float)(int8_t)blk[o]), __fmul_rn(d, (float)(int8_t)blk[o + 1]));
}

// load_kv stages cells c0 .. c0+BN-1 (head offset off) of both regions
// into k_s and v_s [BN][HD+4] as f32; cells outside [lo, hi] and columns
// >= hd are zero (no cell at or beyond n_ctx is touched). Each round issues
// 2*LD loads per thread before the first store.
template <int HD, int NT>
__device__ __forceinline__ void load_kv(float* k_s, float* v_s, const uint8_t* __restrict__ kreg,
                                        const uint8_t* __restrict__ vreg, int format, long long row_bytes, int off,
                                        int hd, int c0, int lo, int hi) {
    constexpr int PAIRS = BN * HD / 2;
    constexpr int PER = PAIRS / NT;
    constexpr int LD = PER < 4 ? PER : 4; // 2*LD loads in flight: registers stay low
    static_assert(PAIRS % (NT * LD) == 0, "tile pairs split evenly");
    const int tid = threadIdx.x;
#pragma unroll 1
    for (int base = 0; base < PAIRS; base += NT * LD) {
        float2 kv[LD], vv[LD];
#pragma unroll
        for (int u = 0; u < LD; u++) {
            const int idx = base + u * NT + tid;
            const int j = idx / (HD / 2), d = 2 * (idx % (HD / 2));
            const int c = c0 + j;
            kv[u] = make_float2(0.0f, 0.0f);
            vv[u] = make_float2(0.0f, 0.0f);
            if (d < hd && c >= lo && c <= hi) {
                kv[u] = load_pair2(format, mops::kv_row(kreg, c, row_bytes), off + d);
                vv[u] = load_pair2(format, mops::kv_row(vreg, c, row_bytes), off + d);
            }
        }
#pragma unroll
        for (int u = 0; u < LD; u++) {
            const int idx = base + u * NT + tid;
            const int j = idx / (HD / 2), d = 2 * (idx % (HD / 2));
            *reinterpret_cast<float2*>(k_s + j * (HD + 4) + d) = kv[u];
            *reinterpret_cast<float2*>(v_s + j * (HD + 4) + d) = vv[u];
        }
    }
}

template <int HD, int BM>
__device__ __forceinline__ void attn_prefill2(float* out, const float* __restrict__ q, const uint8_t* __restrict__ kreg,
                                              const uint8_t* __restrict__ vreg, int format, const int* win, int nt,
                                              int n_head, int n_head_kv, int hd, long long row_bytes, int n_ctx,
                                              int window, float scale) {
    constexpr int NT = BM / RM * CG;
    constexpr int QS = HD + 4;  // row stride of Q, K, V in smem
    constexpr int PS = BM + 4;  // row stride of P
    constexpr int DJ = HD / 64; // float4 groups of output columns per thread: cg*4 + 64*jj
    static_assert(HD % 64 == 0 && BM % (2 * RM) == 0, "geometry");
    extern __shared__ float4 fap2_smem4[];
    float* q_s = reinterpret_cast<float*>(fap2_smem4);
    float* k_s = q_s + BM * QS;
    float* v_s = k_s + BN * QS;
    float* p_s = v_s + BN * QS;

    const int tid = threadIdx.x, rg = tid / CG, cg = tid % CG;
    const int start = win[0];
    const PrefillTile pt = prefill_tile<BM>(nt, n_head, n_head_kv, start, n_ctx, window);
    const int G = pt.G, kvh = pt.kvh;
    const long long nrows = pt.nrows, r0 = pt.r0;

    int first[RM], last[RM];
    long long qrow[RM];
    bool live[RM], nan_row[RM];
#pragma unroll
    for (int i = 0; i < RM; i++) {
        const long long R = r0 + rg * RM + i;
        live[i] = R < nrows;
        const long long t = live[i] ? R / G : 0;
        const int h = kvh * G + (int)(live[i] ? R % G : 0);
        qrow[i] = (t * n_head + h) * hd;
        const long long cell64 = (long long)start + t; // no int overflow for a wild start
        nan_row[i] = live[i] && (start < 0 || cell64 >= n_ctx);
        const int cell = (int)min(cell64, (long long)n_ctx);
        first[i] = 1;
        last[i] = 0;
        if (live[i] && !nan_row[i]) {
            last[i] = cell;
            first[i] = window > 0 ? max(0, cell - window + 1) : 0;
        }
    }
    if (start < 0) { // uniform over the block: every row is NaN
#pragma unroll
        for (int i = 0; i < RM; i++)
            if (live[i])
                for (int d = cg; d < hd; d += CG) out[qrow[i] + d] = __int_as_float(0x7fc00000);
        return;
    }

    // The block's cells (prefill_tile); tiles start at multiples of BN.
    const int lo = pt.lo, hi = pt.hi;

    for (int idx = tid; idx < BM * HD; idx += NT) {
        const int r = idx / HD, d = idx % HD;
        const long long R = r0 + r;
        float v = 0.0f;
        if (R < nrows && d < hd) {
            const long long t = R / G;
            const int h = kvh * G + (int)(R % G);
            v = q[(t * n_head + h) * hd + d];
        }
        q_s[r * QS + d] = v;
    }

    float m[RM], l[RM], acc[RM][4 * DJ];
#pragma unroll
    for (int i = 0; i < RM; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int e = 0; e < 4 * DJ; e++) acc[i][e] = 0.0f;
    }

    const int off = kvh * hd;
    const int c_begin = lo - lo % BN;
    for (int c0 = c_begin; c0 <= hi; c0 += BN) {
        __syncthreads(); // the previous tile's readers are done with k_s, v_s, p_s (and Q is staged)
        load_kv<HD, NT>(k_s, v_s, kreg, vreg, format, row_bytes, off, hd, c0, lo, hi);
        __syncthreads();

        // S = Q K^T for rows 2rg+i, columns cg+16j, in d order.
        float s[RM][CN];
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int j = 0; j < CN; j++) s[i][j] = 0.0f;
#pragma unroll 2
        for (int d = 0; d < HD; d += 4) {
            float4 qv[RM], kv[CN];
#pragma unroll
            for (int i = 0; i < RM; i++) qv[i] = *reinterpret_cast<const float4*>(q_s + (rg * RM + i) * QS + d);
#pragma unroll
            for (int j = 0; j < CN; j++) kv[j] = *reinterpret_cast<const float4*>(k_s + (cg + CG * j) * QS + d);
#pragma unroll
            for (int i = 0; i < RM; i++)
#pragma unroll
                for (int j = 0; j < CN; j++) {
                    float a = s[i][j];
                    a = fmaf(qv[i].x, kv[j].x, a);
                    a = fmaf(qv[i].y, kv[j].y, a);
                    a = fmaf(qv[i].z, kv[j].z, a);
                    a = fmaf(qv[i].w, kv[j].w, a);
                    s[i][j] = a;
                }
        }

        // Mask, scale, online softmax; P to shared memory.
#pragma unroll
        for (int i = 0; i < RM; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < CN; j++) {
                const int c = c0 + cg + CG * j;
                const bool ok = c >= first[i] && c <= last[i];
                s[i][j] = ok ? __fmul_rn(s[i][j], scale) : -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
#pragma unroll
            for (int o = 1; o < CG; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float mn = fmaxf(m[i], mx);
            // mn == -inf: no cell of this row yet (p = 0, nothing to rescale).
            const float corr = mn == -INFINITY ? 1.0f : expf(m[i] - mn);
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < CN; j++) {
                const float p = mn == -INFINITY ? 0.0f : expf(s[i][j] - mn);
                s[i][j] = p;
                sum += p;
            }
#pragma unroll
            for (int o = 1; o < CG; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            m[i] = mn;
            l[i] = fmaf(l[i], corr, sum);
#pragma unroll
            for (int e = 0; e < 4 * DJ; e++) acc[i][e] *= corr;
        }
#pragma unroll
        for (int j = 0; j < CN; j++)
            *reinterpret_cast<float2*>(p_s + (cg + CG * j) * PS + rg * RM) = make_float2(s[0][j], s[1][j]);
        __syncthreads(); // P is staged

        // O += P V in cell order.
#pragma unroll 4
        for (int j = 0; j < BN; j++) {
            const float2 p = *reinterpret_cast<const float2*>(p_s + j * PS + rg * RM);
#pragma unroll
            for (int jj = 0; jj < DJ; jj++) {
                const float4 v = *reinterpret_cast<const float4*>(v_s + j * QS + cg * 4 + 64 * jj);
                acc[0][4 * jj + 0] = fmaf(p.x, v.x, acc[0][4 * jj + 0]);
                acc[0][4 * jj + 1] = fmaf(p.x, v.y, acc[0][4 * jj + 1]);
                acc[0][4 * jj + 2] = fmaf(p.x, v.z, acc[0][4 * jj + 2]);
                acc[0][4 * jj + 3] = fmaf(p.x, v.w, acc[0][4 * jj + 3]);
                acc[1][4 * jj + 0] = fmaf(p.y, v.x, acc[1][4 * jj + 0]);
                acc[1][4 * jj + 1] = fmaf(p.y, v.y, acc[1][4 * jj + 1]);
                acc[1][4 * jj + 2] = fmaf(p.y, v.z, acc[1][4 * jj + 2]);
                acc[1][4 * jj + 3] = fmaf(p.y, v.w, acc[1][4 * jj + 3]);
            }
        }
    }

#pragma unroll
    for (int i = 0; i < RM; i++) {
        if (!live[i]) continue;
        float* y = out + qrow[i];
        const float inv = __fdiv_rn(1.0f, l[i]);
#pragma unroll
        for (int jj = 0; jj < DJ; jj++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int d = cg * 4 + 64 * jj + e;
                if (d < hd) y[d] = nan_row[i] ? __int_as_float(0x7fc00000) : __fmul_rn(acc[i][4 * jj + e], inv);
            }
    }
}
} // namespace fap2

// Grid (ceil(nt * G / BM) * n_head_kv), block 8*BM threads, dynamic shared
// memory fap2::smem_floats(HD, BM) * 4 bytes. q and out are [hd, n_head, nt];
// hd even, at most HD (the hd64 variants take hd <= 64). The tensor-core
// kernels below take the same parameters.
#define MINFER_PREFILL_ATTN_PARAMS                                                                                     \
    float *out, const float *q, const uint8_t *kreg, const uint8_t *vreg, int format, const int *win, int nt,         \
        int n_head, int n_head_kv, int hd, long long row_bytes, int n_ctx, int window, float scale
#define MINFER_PREFILL_ATTN_ARGS out, q, kreg, vreg, format, win, nt, n_head, n_head_kv, hd, row_bytes, n_ctx, window, scale

// The second __launch_bounds__ argument (blocks per SM) caps the registers
// at what the variant's shared memory lets reside anyway.
extern "C" __global__ void __launch_bounds__(128, 5) minfer_attn_prefill2_hd64_bm16(MINFER_PREFILL_ATTN_PARAMS) {
    fap2::attn_prefill2<64, 16>(MINFER_PREFILL_ATTN_ARGS);
}
extern "C" __global__ void __launch_bounds__(256, 2) minfer_attn_prefill2_hd64_bm32(MINFER_PREFILL_ATTN_PARAMS) {
    fap2::attn_prefill2<64, 32>(MINFER_PREFILL_ATTN_ARGS);
}
extern "C" __global__ void __launch_bounds__(512, 1) minfer_attn_prefill2_hd64_bm64(MINFER_PREFILL_ATTN_PARAMS) {
    fap2::attn_prefill2<64, 64>(MINFER_PREFILL_ATTN_ARGS);
}
extern "C" __global__ void __launch_bounds__(256, 2) minfer_attn_prefill2_hd128_bm32(MINFER_PREFILL_ATTN_PARAMS) {
    fap2::attn_prefill2<128, 32>(MINFER_PREFILL_ATTN_ARGS);
}
extern "C" __global__ void __launch_bounds__(512, 1) minfer_attn_prefill2_hd128_bm64(MINFER_PREFILL_ATTN_PARAMS) {
    fap2::attn_prefill2<128, 64>(MINFER_PREFILL_ATTN_ARGS);
}

// ---------------------------------------------------------------------------
// minfer_attn_prefill_tc_hd{64,128} (lever MINFER_FA_PREFILL_TC, on by
// default): the same contract as minfer_attn_prefill2_*, with Q K^T and P V
// on the tensor cores (mma.sync m16n8k16, f16 inputs, f32 accumulation).
// Why: over a filled KV cache the FMA kernel above is flop-bound (7B pp512
// at depth 32128: 6.6 TFLOP per chunk against the ~67 TFLOP/s of FP32 FMA;
// reports/perf/NOTE.md, issue 20).
//
// Block: 64 rows (the t*G+g order above, so the G query heads of a token
// share each K / V tile) x one KV head, 4 warps, each warp 16 rows. The
// rows' state stays in registers, as flash-attention 2 keeps it: Q as
// m16n8k16 A fragments (loaded once), S = Q K^T as C fragments, the online
// softmax on them (a row's 4 lanes reduce by two xor shuffles), P converted
// to A fragments in place (the C layout of two 8-column tiles is the A
// layout of one 16-deep step), and O as C fragments. Shared memory holds
// two tiles of K and V as [cell][d] f16 rows: an aligned f16 cache's next
// tile is copied as stored with cp.async (16 bytes, no register) while
// this one is read; f32 and q8_0 are converted in place (rounded, or
// dequantized then rounded). ldmatrix.x4 gives K's B fragments for two
// 16-deep steps, ldmatrix.x4.trans V's for two 8-column tiles of O. A warp
// whose rows see no cell of a tile skips its products.
//
// The instruction count a tile is the cost over a filled cache (ncu,
// session 20: ~12 instructions an mma), so the softmax works in powers of 2
// (ex2.approx, the scale folded in), a tile every row of a warp sees whole
// skips the mask, P's row sums are one more mma against ones, and an
// in-range tile's copies come from fixed offsets: ~460 warp instructions a
// 64-cell tile where the first form issued ~1,536 (pp512 at depth 32128
// x1.29 on the H100, reports/MINFER_FA_PREFILL_LEAN).
// Numerics (f16-attention-tile class): Q, K, V and P rounded to f16,
// products summed in f32 in the tensor core's order, l summed from the
// f16-rounded P that P V uses; not bitwise v2.
namespace fatc {
constexpr int BM = 64, BN = 64, NT = 128;
// BN_NARROW: the narrow decode form's tile (MINFER_ATTN_DECODE_TC_NARROW,
// minfer_attn_decode_tc32_*): half the shared memory of BN's, so twice the
// one-warp blocks an SM, each with half the serial work a tile.
constexpr int BN_NARROW = 32;

// Geo<HD, BNT>: the shared memory of BNT-cell tiles (BN but for the narrow
// decode form).
template <int HD, int BNT = BN> struct Geo {
    static constexpr int KLD = HD + 8; // halves per K and V row (and per staged Q row)
    static constexpr int TILE = BNT * KLD; // halves of one K or V tile
    // Two buffers of K then V (Q staged in the first K first): one tile is
    // read while the next arrives. The pad keeps a warp's 32-bit K loads on
    // 32 distinct banks and ldmatrix's 8 rows on distinct 16-byte bank
    // groups (a row is 16 bytes past a multiple of 128).
    static constexpr int BYTES = 2 * 2 * TILE * 2;
};

// h2u packs two floats as f16 (lo in the low half), the fragment word.
__device__ __forceinline__ uint32_t h2u(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t ld32(const __half* p) { return *reinterpret_cast<const uint32_t*>(p); }


// stage_f16 issues the copies of tile c0 of an f16 cache (16-byte aligned,
// hd == HD) into k and v, 16 bytes each as stored; cells outside [lo, hi]
// are zero-filled (their source is cell lo's, never read). BNT cells a tile.
template <int HD, int THR, int BNT = BN>
__device__ __forceinline__ void stage_f16(__half* k, __half* v, const uint8_t* __restrict__ kreg,
                                          const uint8_t* __restrict__ vreg, long long row_bytes, int off, int c0,
                                          int lo, int hi) {
    for (int idx = threadIdx.x; idx < BNT * HD / 8; idx += THR) {
        const int j = idx / (HD / 8), d = 8 * (idx % (HD / 8));
        const int c = c0 + j;
        const bool in = c >= lo && c <= hi;
        const long long src = 2LL * (off + d);
        minfer_cp_async16(k + j * Geo<HD>::KLD + d, mops::kv_row(kreg, in ? c : lo, row_bytes) + src, in ? 16 : 0);
        minfer_cp_async16(v + j * Geo<HD>::KLD + d, mops::kv_row(vreg, in ? c : lo, row_bytes) + src, in ? 16 : 0);
    }
}

// stage_f16_in issues the copies of a tile every cell of which is in
// range (the inner tiles): kp / vp are this thread's first
// sources (cell c0 + tid / CPR, column 8 (tid % CPR) of the KV head), each
// next copy step bytes on; no per-copy index, range or row arithmetic.
template <int HD, int THR, int BNT = BN>
__device__ __forceinline__ void stage_f16_in(__half* k, __half* v, const uint8_t* kp, const uint8_t* vp, long long step) {
    constexpr int CPR = HD / 8, RPI = THR / CPR; // 16-byte chunks a row; rows a pass of the block
    static_assert(BNT % RPI == 0, "a tile's rows split evenly over the passes");
    const int o = (threadIdx.x / CPR) * Geo<HD>::KLD + 8 * (threadIdx.x % CPR);
#pragma unroll
    for (int i = 0; i < BNT / RPI; i++) {
        minfer_cp_async16(k + o + i * RPI * Geo<HD>::KLD, kp + i * step, 16);
        minfer_cp_async16(v + o + i * RPI * Geo<HD>::KLD, vp + i * step, 16);
    }
}

// stage_pairs stores tile c0 of any cache into k and v as f16, a pair of
// values at a time (f32 rounded, q8_0 dequantized then rounded); cells
// outside [lo, hi] and columns past hd are zero. BNT cells a tile.
template <int HD, int THR, int BNT = BN>
__device__ __forceinline__ void stage_pairs(__half* k, __half* v, const uint8_t* __restrict__ kreg,
                                            const uint8_t* __restrict__ vreg, int format, long long row_bytes, int off,
                                            int hd, int c0, int lo, int hi) {
    for (int idx = threadIdx.x; idx < BNT * HD / 2; idx += THR) {
        const int j = idx / (HD / 2), d = 2 * (idx % (HD / 2));
        const int c = c0 + j;
        float2 kf = make_float2(0.0f, 0.0f), vf = make_float2(0.0f, 0.0f);
        if (d < hd && c >= lo && c <= hi) {
            kf = fap2::load_pair2(format, mops::kv_row(kreg, c, row_bytes), off + d);
            vf = fap2::load_pair2(format, mops::kv_row(vreg, c, row_bytes), off + d);
        }
        *reinterpret_cast<__half2*>(k + j * Geo<HD>::KLD + d) = __floats2half2_rn(kf.x, kf.y);
        *reinterpret_cast<__half2*>(v + j * Geo<HD>::KLD + d) = __floats2half2_rn(vf.x, vf.y);
    }
}

// Row R's cells: [first, last] (first > last: none; a NaN row is marked).
__device__ __forceinline__ void row_cells(long long R, long long nrows, int G, int start, int n_ctx, int window,
                                          int& first, int& last, bool& nan_row) {
    first = 1;
    last = 0;
    nan_row = false;
    if (R >= nrows) return;
    const long long cell64 = (long long)start + R / G;
    if (start < 0 || cell64 >= n_ctx) {
        nan_row = true;
        return;
    }
    last = (int)cell64;
    first = window > 0 ? max(0, last - window + 1) : 0;
}

// span_tiles: the BNT-cell tiles of a block's cells [lo, hi], from lo's
// tile on (0: none).
template <int BNT = BN>
__device__ __forceinline__ int span_tiles(int lo, int hi) {
    const int c_begin = lo - lo % BNT;
    return hi >= c_begin ? (hi - c_begin) / BNT + 1 : 0;
}

// The decode form's run-time splits (the grid's nsplit is fixed when a
// graph is captured): the first `used` splits take `per` tiles each, the
// rest exit at once and write no partial. DEC_MIN_TILES: at a short range
// one tile a split left almost every block (396 for 7B) staging Q for
// nothing and writing an empty partial the combine then read (tg128 at
// depth 0 -10%); at depth 32128 per is 6 anyway. DEC_MIN_CELLS: that
// floor in cells, the same for either tile width (2 tiles of 64, 4 of 32).
constexpr int DEC_MIN_CELLS = 128;
template <int BNT = BN>
__device__ __forceinline__ void dec_split_plan(int ntiles, int nsplit, int& per, int& used) {
    constexpr int DEC_MIN_TILES = DEC_MIN_CELLS / BNT;
    per = max((ntiles + nsplit - 1) / nsplit, DEC_MIN_TILES);
    used = (ntiles + per - 1) / per;
}

// ROWS: the rows of a block, a warp each 16 (BM for prefill; 16, one warp,
// for the decode kernels). BNT: the cells a K / V tile (BN; BN_NARROW for
// the narrow decode form), which every tile bound, step and loop below
// takes (the prefill instantiations' BN makes their code what it was).
template <int HD, int ROWS = BM, int BNT = BN>
__device__ __forceinline__ void attn_prefill_tc(float* out, const float* __restrict__ q, const uint8_t* __restrict__ kreg,
                                                const uint8_t* __restrict__ vreg, int format, const int* win, int nt,
                                                int n_head, int n_head_kv, int hd, long long row_bytes, int n_ctx,
                                                int window, float scale, float* __restrict__ part, int nsplit) {
    using Gm = Geo<HD, BNT>;
    constexpr int KS = HD / 16; // 16-deep steps of Q K^T
    constexpr int ON = HD / 8;  // 8-column tiles of O
    constexpr int SN = BNT / 8; // 8-cell tiles of S
    static_assert(BNT % 16 == 0 && (BNT == BN || ROWS == 16), "16-deep P V steps; the narrow tile is the decode form's");
    static_assert(ROWS <= 4 * BNT, "Q is staged in the tile buffers");
    extern __shared__ float4 fatc_smem4[];
    __half* smem = reinterpret_cast<__half*>(fatc_smem4); // K0 V0 K1 V1

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, tq = lane & 3; // fragment row group and column pair
    const int start = win[0];
    constexpr int THR = 2 * ROWS; // a warp a 16 rows
    const PrefillTile pt = prefill_tile<ROWS>(nt, n_head, n_head_kv, start, n_ctx, window);
    const int G = pt.G, kvh = pt.kvh;
    const long long nrows = pt.nrows, r0 = pt.r0;
    const int lo = pt.lo, hi = start < 0 ? -1 : pt.hi;
    int dec_per = 0; // the decode form's tiles a split (dec_split_plan)
    if constexpr (ROWS == 16) {
        if (nsplit > 1) {
            int used;
            dec_split_plan<BNT>(span_tiles<BNT>(lo, hi), nsplit, dec_per, used);
            if ((int)blockIdx.y >= used) return; // block-uniform: no Q, no partial (the combine reads the first used)
        }
    }

    // Q (rows r0.., zero past nrows and hd) staged in K's place, then held
    // as A fragments: a[kk] covers d 16kk..16kk+15 of rows g and g+8. The
    // decode form (one warp, 16 rows) loads its pairs all in flight at once:
    // one lane's 64 single loads in turn would cost it several L2 round
    // trips before its first tile, of the ~5 tiles it has at depth.
    if constexpr (ROWS == 16) {
        constexpr int PR = HD / 2, PER = ROWS * PR / THR; // pairs a row; a lane's pairs
        float2 v[PER];
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int idx = i * THR + tid, r = idx / PR, d = 2 * (idx % PR);
            const long long R = r0 + r;
            v[i] = make_float2(0.0f, 0.0f);
            if (R < nrows && d < hd) v[i] = *reinterpret_cast<const float2*>(q + ((R / G) * n_head + kvh * G + (int)(R % G)) * hd + d);
        }
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int idx = i * THR + tid, r = idx / PR, d = 2 * (idx % PR);
            *reinterpret_cast<__half2*>(smem + r * Gm::KLD + d) = __floats2half2_rn(v[i].x, v[i].y);
        }
    } else {
        for (int idx = tid; idx < ROWS * HD; idx += THR) {
            const int r = idx / HD, d = idx % HD;
            const long long R = r0 + r;
            float v = 0.0f;
            if (R < nrows && d < hd) v = q[((R / G) * n_head + kvh * G + (int)(R % G)) * hd + d];
            smem[r * Gm::KLD + d] = __float2half(v);
        }
    }
    __syncthreads();
    uint32_t qa[KS][4];
    {
        const __half* qr = smem + (warp * 16 + g) * Gm::KLD + 2 * tq;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            qa[kk][0] = ld32(qr + 16 * kk);
            qa[kk][1] = ld32(qr + 8 * Gm::KLD + 16 * kk);
            qa[kk][2] = ld32(qr + 16 * kk + 8);
            qa[kk][3] = ld32(qr + 8 * Gm::KLD + 16 * kk + 8);
        }
    }

    // This lane's two rows: warp*16 + g (index 0) and + 8 (index 1).
    int first[2], last[2];
    bool nan_row[2];
#pragma unroll
    for (int i = 0; i < 2; i++) row_cells(r0 + warp * 16 + g + 8 * i, nrows, G, start, n_ctx, window, first[i], last[i], nan_row[i]);
    // The warp's cells: what any of its 16 rows sees (rows are in t order),
    // and [wlo, whi], what every one of them with cells sees. A row with none
    // (past nrows, or a NaN row) is never written: what it sums is moot.
    int wfirst = 0x7fffffff, wlast = -1, wlo = 0, whi = 0x7fffffff;
    for (int i = 0; i < 16; i++) {
        int f, l;
        bool nr;
        row_cells(r0 + warp * 16 + i, nrows, G, start, n_ctx, window, f, l, nr);
        if (f <= l) {
            wfirst = min(wfirst, f);
            wlast = max(wlast, l);
            wlo = max(wlo, f);
            whi = min(whi, l);
        }
    }

    // m in units of log2 (scores times scale / ln 2), and l summed by the
    // tensor cores as one more column tile of P V against ones (lacc: every
    // column of a row holds its sum), from the f16 P that P V reads.
    float m[2] = {-INFINITY, -INFINITY};
    float o[ON][4], lacc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < ON; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    const float sl2 = scale * 1.4426950408889634f; // scale * log2(e)

    const int off = kvh * hd;
    const int c_begin = lo - lo % BNT;
    // Split blockIdx.y of nsplit takes its share of the block's tiles, in
    // order (decode: dec_split_plan's per); the cells stay [lo, hi] (masks
    // and staging are unchanged).
    int c_first = c_begin, c_last = hi;
    if (nsplit > 1) {
        const int ntiles = hi >= c_begin ? (hi - c_begin) / BNT + 1 : 0;
        const int per = ROWS == 16 ? dec_per : (ntiles + nsplit - 1) / nsplit;
        const int t0 = min(ntiles, (int)blockIdx.y * per), t1 = min(ntiles, t0 + per);
        c_first = c_begin + t0 * BNT;
        c_last = min(hi, c_begin + t1 * BNT - 1);
    }
    const bool f16x8 = format == mops::KV_F16 && hd == HD &&
                       ((reinterpret_cast<unsigned long long>(kreg) | reinterpret_cast<unsigned long long>(vreg)) & 15) == 0;
    // A tile whose cells are all in [lo, hi] is copied from this thread's
    // fixed offset in its first row (stage_f16_in).
    constexpr int CPR = HD / 8;
    const long long step = (long long)(THR / CPR) * row_bytes;
    const long long toff = (long long)(tid / CPR) * row_bytes + 2LL * (off + 8 * (tid % CPR));
    auto stage = [&](__half* kd, int c) {
        if (c >= lo && c + BNT - 1 <= hi)
            stage_f16_in<HD, THR, BNT>(kd, kd + Gm::TILE, kreg + (long long)c * row_bytes + toff, vreg + (long long)c * row_bytes + toff, step);
        else
            stage_f16<HD, THR, BNT>(kd, kd + Gm::TILE, kreg, vreg, row_bytes, off, c, lo, hi);
    };
    __syncthreads(); // every warp holds its Q fragments: the buffers are free
    if (f16x8 && c_first <= c_last) stage(smem, c_first);
    if (f16x8) minfer_cp_async_commit();
    for (int c0 = c_first, it = 0; c0 <= c_last; c0 += BNT, it++) {
        __half* kb = smem + (it & 1) * 2 * Gm::TILE;
        __half* vb = kb + Gm::TILE;
        if (f16x8) {
            // The next tile's copies go to the other buffer, which every warp
            // finished reading before the barrier that ended the last tile.
            if (c0 + BNT <= c_last) stage(smem + ((it + 1) & 1) * 2 * Gm::TILE, c0 + BNT);
            minfer_cp_async_commit();
            minfer_cp_async_wait<1>(); // this tile's copies (all but the newest group) have landed
        } else {
            stage_pairs<HD, THR, BNT>(kb, vb, kreg, vreg, format, row_bytes, off, hd, c0, lo, hi);
        }
        __syncthreads(); // the tile is visible to every warp
        const bool sees = !(wlast < c0 || wfirst > c0 + BNT - 1); // any row of this warp sees the tile
        if (sees) {
            // S = Q K^T: s[j] is the 16 x 8 tile of cells c0 + 8j.., rows g, g+8.
            float s[SN][4];
#pragma unroll
            for (int j = 0; j < SN; j++) {
                s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
                // One ldmatrix.x4 gives the B fragments of two 16-deep
                // steps: lane L names cell 8j + L % 8 at d 16kk + 8 (L / 8).
                const __half* kl = kb + (8 * j + (lane & 7)) * Gm::KLD + 8 * (lane >> 3);
#pragma unroll
                for (int kk = 0; kk < KS; kk += 2) {
                    uint32_t r[4];
                    ldsm_x4(r, kl + 16 * kk);
                    const uint32_t bk0[2] = {r[0], r[1]}, bk1[2] = {r[2], r[3]};
                    mma_16816(s[j], qa[kk], bk0);
                    mma_16816(s[j], qa[kk + 1], bk1);
                }
            }

            // Mask and the online softmax of both rows; P rounded to f16. A tile
            // every row of the warp sees whole skips the mask; the scale folds
            // into 2^(s sl2 - m) (max of s, then scaled: sl2 > 0).
            const bool full = wlo <= c0 && c0 + BNT - 1 <= whi;
#pragma unroll
            for (int i = 0; i < 2; i++) {
                float mx = -INFINITY;
                if (full) {
#pragma unroll
                    for (int j = 0; j < SN; j++) mx = fmaxf(mx, fmaxf(s[j][2 * i], s[j][2 * i + 1]));
                } else {
#pragma unroll
                    for (int j = 0; j < SN; j++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int c = c0 + 8 * j + 2 * tq + e;
                            float& x = s[j][2 * i + e];
                            x = c >= first[i] && c <= last[i] ? x : -INFINITY;
                            mx = fmaxf(mx, x);
                        }
                }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float mn = fmaxf(m[i], __fmul_rn(mx, sl2));
                const float corr = mn == -INFINITY ? 1.0f : ex2(m[i] - mn); // m = -inf: 0
                const float nm = mn == -INFINITY ? 0.0f : -mn;               // none seen yet: every p is 0
#pragma unroll
                for (int j = 0; j < SN; j++)
#pragma unroll
                    for (int e = 0; e < 2; e++) s[j][2 * i + e] = ex2(fmaf(s[j][2 * i + e], sl2, nm));
                m[i] = mn;
                lacc[2 * i] *= corr;
#pragma unroll
                for (int n = 0; n < ON; n++) {
                    o[n][2 * i] *= corr;
                    o[n][2 * i + 1] *= corr;
                }
            }
            // O += P V: the 16-deep step kk of cells is S tiles 2kk and 2kk+1.
#pragma unroll
            for (int kk = 0; kk < BNT / 16; kk++) {
                const uint32_t pa[4] = {h2u(s[2 * kk][0], s[2 * kk][1]), h2u(s[2 * kk][2], s[2 * kk][3]),
                                        h2u(s[2 * kk + 1][0], s[2 * kk + 1][1]), h2u(s[2 * kk + 1][2], s[2 * kk + 1][3])};
                constexpr uint32_t ONES = 0x3C003C00u; // two f16 1.0: B = ones, so C += row sums of P
                const uint32_t b1s[2] = {ONES, ONES};
                mma_16816(lacc, pa, b1s);
                // Lane L names cell 16kk + L % 16 at columns 8 (n + L / 16).
                const __half* vr = vb + (16 * kk + (lane & 15)) * Gm::KLD + 8 * (lane >> 4);
#pragma unroll
                for (int n = 0; n < ON; n += 2) {
                    uint32_t b4[4];
                    ldsm_x4_trans(b4, vr + 8 * n);
                    const uint32_t b0[2] = {b4[0], b4[1]}, b1[2] = {b4[2], b4[3]};
                    mma_16816(o[n], pa, b0);
                    mma_16816(o[n + 1], pa, b1);
                }
            }
        }
        __syncthreads(); // every warp is done with this tile's buffer
    }

    const float l[2] = {lacc[0], lacc[2]};
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const long long R = r0 + warp * 16 + g + 8 * i;
        if (R >= nrows) continue;
        if (nsplit > 1) { // this split's share: O unnormalised, then m and l (combine_tc merges)
            float* rec = part + ((long long)(blockIdx.y * n_head_kv + kvh) * nrows + R) * (HD + 2);
#pragma unroll
            for (int n = 0; n < ON; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) rec[8 * n + 2 * tq + e] = o[n][2 * i + e];
            if (tq == 0) {
                rec[HD] = m[i] * 0.6931471805599453f; // natural log units: combine_tc weighs by e^(m - M)
                rec[HD + 1] = l[i];
            }
            continue;
        }
        float* y = out + ((R / G) * n_head + kvh * G + (int)(R % G)) * hd;
        const float inv = __fdiv_rn(1.0f, l[i]);
#pragma unroll
        for (int n = 0; n < ON; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int d = 8 * n + 2 * tq + e;
                if (d < hd) y[d] = nan_row[i] ? __int_as_float(0x7fc00000) : __fmul_rn(o[n][2 * i + e], inv);
            }
    }
}
} // namespace fatc

namespace fatc {
// combine_tc merges the nsplit partial rows of the split kernels, one warp
// a row (row w = kvh * nrows + R, the tc kernel's order): out = sum_s
// e^(m_s - M) O_s / sum_s e^(m_s - M) l_s, M the largest m_s (a split that
// saw none of the row's cells has m = -inf and weighs 0), the splits summed
// in order; a NaN row as the kernel marks it.
__device__ __forceinline__ void combine_tc(float* out, const float* __restrict__ part, const int* win, int nt, int n_head,
                                           int n_head_kv, int hd, int n_ctx, int window, int nsplit, int ld) {
    const int G = n_head / n_head_kv, lane = threadIdx.x & 31;
    const long long nrows = (long long)nt * G;
    const long long w = (long long)blockIdx.x * (NT / 32) + (threadIdx.x >> 5);
    if (w >= nrows * n_head_kv) return;
    const int kvh = (int)(w / nrows);
    const long long R = w % nrows;
    int first, last;
    bool nan_row;
    row_cells(R, nrows, G, win[0], n_ctx, window, first, last, nan_row);
    float* y = out + ((R / G) * n_head + kvh * G + (int)(R % G)) * hd;
    const long long stride = (long long)n_head_kv * nrows * ld; // one split to the next
    const float* rec = part + w * ld;
    float M = -INFINITY;
    for (int sp = 0; sp < nsplit; sp++) M = fmaxf(M, rec[sp * stride + ld - 2]);
    float L = 0.0f;
    for (int sp = 0; sp < nsplit; sp++) {
        const float ms = rec[sp * stride + ld - 2];
        if (ms != -INFINITY) L = fmaf(rec[sp * stride + ld - 1], expf(ms - M), L);
    }
    const float inv = __fdiv_rn(1.0f, L);
    for (int d = lane; d < hd; d += 32) {
        float acc = 0.0f;
        for (int sp = 0; sp < nsplit; sp++) {
            const float ms = rec[sp * stride + ld - 2];
            if (ms != -INFINITY) acc = fmaf(rec[sp * stride + d], expf(ms - M), acc);
        }
        y[d] = nan_row ? __int_as_float(0x7fc00000) : __fmul_rn(acc, inv);
    }
}
} // namespace fatc

namespace fatc {
// The decode combine (MINFER_ATTN_DECODE_TC): the decode kernels split a KV
// head's cells over ~100 blocks, so a row has ~100 partials, and
// combine_tc's one warp walking them in turn (three passes, a load's
// latency each split) cost ~60 us a layer at 7B (session 21's FAIL). Here a
// block of DC_WARPS warps takes one row and reads only the splits its
// range activated (dec_split_plan): every warp loads the splits' (m, l) at
// once (lane s % 32, DC_MAXS / 32 a lane) and computes the same weights;
// warp w sums splits w, w + DC_WARPS, ... with DC_U of them in flight; the
// warps' sums add in warp order through shared memory. The
// same partials and formula as combine_tc (e-units m, expf weights),
// another order of the sums (the f16-attention-tile class either way).
// With q8 the row's Q8_1 blocks are written too (MINFER_FUSE_ATTN_Q8, hd 64
// / 128: warp w quantizes blocks w, w + DC_WARPS, ..., minfer_q8_1_warp on
// the values written as f32), and out may be null.
// BNT, MAXS: the kernels' tile width, which the plan takes, and the most
// splits the lanes hold: BN and DC_MAXS for minfer_attn_decode_tc_*,
// BN_NARROW and DC_MAXS_NARROW for the narrow form's (twice the blocks an
// SM, so twice the splits: 198 for the 7B on 132 SMs).
constexpr int DC_WARPS = 4, DC_MAXS = 128, DC_U = 8;
constexpr int DC_MAXS_NARROW = 256;
__shared__ float dc_sum[DC_WARPS][128];

template <int BNT, int MAXS>
__device__ __forceinline__ void combine_dec(float* out, uint8_t* q8, const float* __restrict__ part, const int* win, int nt,
                                            int n_head, int n_head_kv, int hd, int n_ctx, int window, int nsplit, int ld) {
    constexpr int NJ = MAXS / 32;
    static_assert(MAXS % 32 == 0, "a lane holds MAXS / 32 splits");
    const int G = n_head / n_head_kv, lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    const long long nrows = (long long)nt * G;
    const long long w = blockIdx.x; // row w = kvh * nrows + R, the kernels' order
    if (w >= nrows * n_head_kv) return; // block-uniform
    const int kvh = (int)(w / nrows);
    const long long R = w % nrows;
    int first, last;
    bool nan_row;
    row_cells(R, nrows, G, win[0], n_ctx, window, first, last, nan_row);
    // The splits the kernel ran for R's 16-row tile (its lo, hi as the
    // kernel takes them: none for start < 0); the others wrote nothing.
    int lo, hi, per, used;
    tile_cells<16>(R / 16 * 16, nrows, G, win[0], n_ctx, window, lo, hi);
    dec_split_plan<BNT>(span_tiles<BNT>(lo, win[0] < 0 ? -1 : hi), nsplit, per, used);
    const long long yrow = (R / G) * n_head + kvh * G + (int)(R % G);
    const long long stride = (long long)n_head_kv * nrows * ld; // one split to the next
    const float* rec = part + w * ld;
    float ms[NJ], ls[NJ], M = -INFINITY;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int s = lane + 32 * j;
        ms[j] = -INFINITY, ls[j] = 0.0f;
        if (s < used) ms[j] = __ldcg(rec + s * stride + ld - 2), ls[j] = __ldcg(rec + s * stride + ld - 1);
        M = fmaxf(M, ms[j]);
    }
    M = mops::warp_max(M);
    float wt[NJ], wl = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        wt[j] = ms[j] == -INFINITY ? 0.0f : expf(ms[j] - M); // a split that saw no cell of the row weighs 0
        wl = __fadd_rn(wl, __fmul_rn(wt[j], ls[j]));
    }
    const float inv = __fdiv_rn(1.0f, mops::warp_sum(wl));
    // Element pairs p = lane + 32 i of the row (hd <= 128: i < 2).
    const int np = hd >> 1;
    float2 a[2] = {make_float2(0.0f, 0.0f), make_float2(0.0f, 0.0f)};
    for (int s0 = wp; s0 < used; s0 += DC_WARPS * DC_U) {
        float ws[DC_U];
        float2 v[DC_U][2];
#pragma unroll
        for (int u = 0; u < DC_U; u++) {
            const int s = s0 + DC_WARPS * u; // warp-uniform
            float x = wt[NJ - 1];
#pragma unroll
            for (int j = NJ - 2; j >= 0; j--) x = (s >> 5) == j ? wt[j] : x;
            ws[u] = s < used ? __shfl_sync(0xffffffffu, x, s & 31) : 0.0f;
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int pr = lane + 32 * i;
                v[u][i] = ws[u] != 0.0f && pr < np ? __ldcg(reinterpret_cast<const float2*>(rec + s * stride) + pr) : make_float2(0.0f, 0.0f);
            }
        }
#pragma unroll
        for (int u = 0; u < DC_U; u++)
#pragma unroll
            for (int i = 0; i < 2; i++) a[i].x = fmaf(ws[u], v[u][i].x, a[i].x), a[i].y = fmaf(ws[u], v[u][i].y, a[i].y);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int pr = lane + 32 * i;
        if (pr < np) dc_sum[wp][2 * pr] = a[i].x, dc_sum[wp][2 * pr + 1] = a[i].y;
    }
    __syncthreads();
    auto value = [&](int d) {
        float x = dc_sum[0][d];
#pragma unroll
        for (int k = 1; k < DC_WARPS; k++) x = __fadd_rn(x, dc_sum[k][d]);
        return nan_row ? __int_as_float(0x7fc00000) : __fmul_rn(x, inv);
    };
    if (out != nullptr)
        for (int d = threadIdx.x; d < hd; d += DC_WARPS * 32) out[yrow * hd + d] = value(d);
    if (q8 != nullptr) {
        uint8_t* yq = q8 + yrow * (hd / 32) * MINFER_Q8_1_BYTES;
        for (int b = wp; b < hd / 32; b += DC_WARPS) minfer_q8_1_warp(yq + b * MINFER_Q8_1_BYTES, value(32 * b + lane), lane);
    }
}
} // namespace fatc

// Grid (ceil(nt * G / 64) * n_head_kv, nsplit), block 128 threads, dynamic
// shared memory fatc::Geo<HD>::BYTES; the arguments of
// minfer_attn_prefill2_* (MINFER_PREFILL_ATTN_PARAMS, defined above), then
// part and nsplit: with nsplit > 1 each split writes its partial rows to
// part ([nsplit][n_head_kv][nt * G][HD + 2] floats) and
// minfer_attn_prefill_tc_combine writes out.
extern "C" __global__ void __launch_bounds__(128, 2)
    minfer_attn_prefill_tc_hd64(MINFER_PREFILL_ATTN_PARAMS, float* part, int nsplit) {
    fatc::attn_prefill_tc<64>(MINFER_PREFILL_ATTN_ARGS, part, nsplit);
}
extern "C" __global__ void __launch_bounds__(128, 2)
    minfer_attn_prefill_tc_hd128(MINFER_PREFILL_ATTN_PARAMS, float* part, int nsplit) {
    fatc::attn_prefill_tc<128>(MINFER_PREFILL_ATTN_ARGS, part, nsplit);
}
// Grid ceil(nt * G * n_head_kv / 4), block 128 threads (a warp a row), no
// shared memory; ld = HD + 2 of the split kernel's variant.
extern "C" __global__ void __launch_bounds__(128) minfer_attn_prefill_tc_combine(
    float* out, const float* part, const int* win, int nt, int n_head, int n_head_kv, int hd, int n_ctx, int window,
    int nsplit, int ld) {
    fatc::combine_tc(out, part, win, nt, n_head, n_head_kv, hd, n_ctx, window, nsplit, ld);
}

// minfer_attn_decode_tc_hd{64,128} (MINFER_ATTN_DECODE_TC): the kernels'
// body for decode (nt <= 8) with a block of one warp and 16 rows, the G
// query heads of a KV head for nt tokens (nt * G <= 16 a block, padded:
// the tensor cores have room to spare in decode, the K / V bytes are the
// cost), so one K / V tile staged in shared memory serves a KV head's whole
// group. Grid (ceil(nt * G / 16) * n_head_kv, nsplit), block 32 threads,
// shared memory fatc::Geo<HD>::BYTES; the partials of the prefill kernels,
// merged by minfer_attn_decode_tc_combine. Of the nsplit splits, those the
// filled range activates run (fatc::dec_split_plan), the rest exit.
extern "C" __global__ void __launch_bounds__(32)
    minfer_attn_decode_tc_hd64(MINFER_PREFILL_ATTN_PARAMS, float* part, int nsplit) {
    fatc::attn_prefill_tc<64, 16>(MINFER_PREFILL_ATTN_ARGS, part, nsplit);
}
extern "C" __global__ void __launch_bounds__(32)
    minfer_attn_decode_tc_hd128(MINFER_PREFILL_ATTN_PARAMS, float* part, int nsplit) {
    fatc::attn_prefill_tc<128, 16>(MINFER_PREFILL_ATTN_ARGS, part, nsplit);
}
// Grid nt * G * n_head_kv (a block a row), block fatc::DC_WARPS * 32
// threads, no dynamic shared memory; nsplit <= fatc::DC_MAXS, hd <= 128
// (64 or 128 with q8), ld = HD + 2 of the split kernel's variant; out, q8:
// either may be null.
extern "C" __global__ void __launch_bounds__(fatc::DC_WARPS * 32) minfer_attn_decode_tc_combine(
    float* out, uint8_t* q8, const float* part, const int* win, int nt, int n_head, int n_head_kv, int hd, int n_ctx,
    int window, int nsplit, int ld) {
    fatc::combine_dec<fatc::BN, fatc::DC_MAXS>(out, q8, part, win, nt, n_head, n_head_kv, hd, n_ctx, window, nsplit, ld);
}

// minfer_attn_decode_tc32_hd{64,128} (MINFER_ATTN_DECODE_TC_NARROW): the
// decode kernels over 32-cell tiles (fatc::BN_NARROW). Why: at depth 32128
// the 64-cell form holds 3 one-warp blocks an SM (69.6 KB of shared memory
// each) and is latency-bound (ncu, H100: 5.8% of issue slots busy, no
// eligible warp 90% of cycles, 53% of DRAM peak); half the tile is half
// the shared memory (34.8 KB at head_dim 128: 6 blocks an SM) and half a
// warp's serial work a tile, so the grid's splits double. The same
// arguments and partials as minfer_attn_decode_tc_*; shared memory
// fatc::Geo<HD, fatc::BN_NARROW>::BYTES; the fewest cells an active split
// takes stay fatc::DEC_MIN_CELLS (4 tiles). Merged by
// minfer_attn_decode_tc32_combine: the same combine over the narrow plan,
// nsplit <= fatc::DC_MAXS_NARROW.
extern "C" __global__ void __launch_bounds__(32)
    minfer_attn_decode_tc32_hd64(MINFER_PREFILL_ATTN_PARAMS, float* part, int nsplit) {
    fatc::attn_prefill_tc<64, 16, fatc::BN_NARROW>(MINFER_PREFILL_ATTN_ARGS, part, nsplit);
}
extern "C" __global__ void __launch_bounds__(32)
    minfer_attn_decode_tc32_hd128(MINFER_PREFILL_ATTN_PARAMS, float* part, int nsplit) {
    fatc::attn_prefill_tc<128, 16, fatc::BN_NARROW>(MINFER_PREFILL_ATTN_ARGS, part, nsplit);
}
extern "C" __global__ void __launch_bounds__(fatc::DC_WARPS * 32) minfer_attn_decode_tc32_combine(
    float* out, uint8_t* q8, const float* part, const int* win, int nt, int n_head, int n_head_kv, int hd, int n_ctx,
    int window, int nsplit, int ld) {
    fatc::combine_dec<fatc::BN_NARROW, fatc::DC_MAXS_NARROW>(out, q8, part, win, nt, n_head, n_head_kv, hd, n_ctx, window, nsplit, ld);
}
#undef MINFER_PREFILL_ATTN_PARAMS
#undef MINFER_PREFILL_ATTN_ARGS
