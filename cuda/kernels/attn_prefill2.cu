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
#include <mma.h>

#include "common.cuh"

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
template <int BM>
__device__ __forceinline__ PrefillTile prefill_tile(int nt, int n_head, int n_head_kv, int start, int n_ctx, int window) {
    PrefillTile p;
    p.G = n_head / n_head_kv;
    p.nrows = (long long)nt * p.G;
    const int ntiles = (int)((p.nrows + BM - 1) / BM);
    p.kvh = blockIdx.x % n_head_kv;
    p.r0 = (long long)(ntiles - 1 - (int)(blockIdx.x / n_head_kv)) * BM;
    const long long t_lo = p.r0 / p.G, t_hi = (min(p.r0 + BM, p.nrows) - 1) / p.G;
    p.lo = window > 0 ? (int)min(max(0LL, (long long)start + t_lo - window + 1), (long long)n_ctx) : 0;
    p.hi = (int)min((long long)start + t_hi, (long long)n_ctx - 1);
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
// minfer_attn_prefill_tc_hd{64,128} (lever MINFER_FA_PREFILL_TC, opt-in):
// the same contract as minfer_attn_prefill2_*, with Q K^T and P V on the
// tensor cores (WMMA m16n16k16, f16 inputs, f32 accumulation). Why: over a
// filled KV cache the FMA kernel above is flop-bound (7B pp512 at depth
// 32128: 6.6 TFLOP per chunk against the ~67 TFLOP/s of FP32 FMA;
// reports/perf/NOTE.md, issue 20).
//
// Block: 64 rows (the t*G+g order above, so the G query heads of a token
// share each K / V tile) x one KV head, 4 warps, each warp 16 rows. Per
// 64-cell tile: K and V staged as f16 (an f16 cache is copied as stored,
// f32 rounded, q8_0 dequantized then rounded), S = Q K^T into shared memory
// (f32), the online softmax of v2 on S (two lanes per row, scale, mask,
// max, exp, sum of the f16-rounded P that P V uses), O (f32, shared) scaled
// by the correction and O += P V. Numerics (f16-attention-tile class): Q,
// K, V and P rounded to f16, products summed in f32 in the tensor core's
// order; not bitwise v2.
namespace fatc {
using namespace nvcuda;
constexpr int BM = 64, BN = 64, NT = 128;

template <int HD> struct Geo {
    static constexpr int QLD = HD + 8; // halves per row of Q, K, V
    static constexpr int SLD = BN + 4; // floats per row of S
    static constexpr int PLD = BN + 8; // halves per row of P
    static constexpr int OLD = HD + 4; // floats per row of O
    // Byte offsets; each a multiple of 32 (WMMA's pointer alignment).
    static constexpr int K_OFF = BM * QLD * 2;
    static constexpr int V_OFF = K_OFF + BN * QLD * 2;
    static constexpr int S_OFF = V_OFF + BN * QLD * 2;
    static constexpr int P_OFF = S_OFF + BM * SLD * 4;
    static constexpr int O_OFF = P_OFF + BM * PLD * 2;
    static constexpr int M_OFF = O_OFF + BM * OLD * 4;
    static constexpr int BYTES = M_OFF + 2 * BM * 4;
    static_assert(K_OFF % 32 == 0 && S_OFF % 32 == 0 && P_OFF % 32 == 0 && O_OFF % 32 == 0, "WMMA alignment");
};

// acc += A B for one warp's 16 rows: A row-major 16 x (16 KSTEPS) at a
// (lda halves a row), B (16 KSTEPS) x 16 in layout LB at b (ldb), its k-th
// 16-deep slice bstep halves on (Q K^T reads K as col-major K^T: 16; P V
// reads V row-major: 16 rows of ldb).
template <typename LB, int KSTEPS>
__device__ __forceinline__ void mma_rows(wmma::fragment<wmma::accumulator, 16, 16, 16, float>& acc, const __half* a, int lda,
                                         const __half* b, int ldb, int bstep) {
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, LB> fb;
        wmma::load_matrix_sync(fa, a + kk * 16, lda);
        wmma::load_matrix_sync(fb, b + kk * bstep, ldb);
        wmma::mma_sync(acc, fa, fb, acc);
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

template <int HD>
__device__ __forceinline__ void attn_prefill_tc(float* out, const float* __restrict__ q, const uint8_t* __restrict__ kreg,
                                                const uint8_t* __restrict__ vreg, int format, const int* win, int nt,
                                                int n_head, int n_head_kv, int hd, long long row_bytes, int n_ctx,
                                                int window, float scale) {
    using Gm = Geo<HD>;
    extern __shared__ float4 fatc_smem4[];
    uint8_t* base = reinterpret_cast<uint8_t*>(fatc_smem4);
    __half* q_s = reinterpret_cast<__half*>(base);
    __half* k_s = reinterpret_cast<__half*>(base + Gm::K_OFF);
    __half* v_s = reinterpret_cast<__half*>(base + Gm::V_OFF);
    float* s_s = reinterpret_cast<float*>(base + Gm::S_OFF);
    __half* p_s = reinterpret_cast<__half*>(base + Gm::P_OFF);
    float* o_s = reinterpret_cast<float*>(base + Gm::O_OFF);
    float* m_s = reinterpret_cast<float*>(base + Gm::M_OFF);
    float* l_s = m_s + BM;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int start = win[0];
    const PrefillTile pt = prefill_tile<BM>(nt, n_head, n_head_kv, start, n_ctx, window);
    const int G = pt.G, kvh = pt.kvh;
    const long long nrows = pt.nrows, r0 = pt.r0;
    const int lo = pt.lo, hi = start < 0 ? -1 : pt.hi;

    for (int idx = tid; idx < BM * HD; idx += NT) {
        const int r = idx / HD, d = idx % HD;
        const long long R = r0 + r;
        float v = 0.0f;
        if (R < nrows && d < hd) v = q[((R / G) * n_head + kvh * G + (int)(R % G)) * hd + d];
        q_s[r * Gm::QLD + d] = __float2half(v);
        o_s[r * Gm::OLD + d] = 0.0f;
    }
    if (tid < BM) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.0f;
    }

    // The softmax lanes: row rr of the warp's 16, cells half*32 .. +31.
    const int rr = lane >> 1, half = lane & 1, r = warp * 16 + rr;
    int first, last;
    bool nan_row;
    row_cells(r0 + r, nrows, G, start, n_ctx, window, first, last, nan_row);

    const int off = kvh * hd;
    const int c_begin = lo - lo % BN;
    for (int c0 = c_begin; c0 <= hi; c0 += BN) {
        __syncthreads(); // every warp is done with the previous K and V tiles (and Q is staged)
        for (int idx = tid; idx < BN * HD / 2; idx += NT) {
            const int j = idx / (HD / 2), d = 2 * (idx % (HD / 2));
            const int c = c0 + j;
            float2 kf = make_float2(0.0f, 0.0f), vf = make_float2(0.0f, 0.0f);
            if (d < hd && c >= lo && c <= hi) {
                kf = fap2::load_pair2(format, mops::kv_row(kreg, c, row_bytes), off + d);
                vf = fap2::load_pair2(format, mops::kv_row(vreg, c, row_bytes), off + d);
            }
            *reinterpret_cast<__half2*>(k_s + j * Gm::QLD + d) = __floats2half2_rn(kf.x, kf.y);
            *reinterpret_cast<__half2*>(v_s + j * Gm::QLD + d) = __floats2half2_rn(vf.x, vf.y);
        }
        __syncthreads();

        // S = Q K^T for the warp's 16 rows (K stored [cell][d]: column-major K^T).
#pragma unroll
        for (int j = 0; j < BN / 16; j++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            mma_rows<wmma::col_major, HD / 16>(acc, q_s + warp * 16 * Gm::QLD, Gm::QLD, k_s + j * 16 * Gm::QLD, Gm::QLD, 16);
            wmma::store_matrix_sync(s_s + warp * 16 * Gm::SLD + j * 16, acc, Gm::SLD, wmma::mem_row_major);
        }
        __syncwarp();

        // Online softmax of row r over this tile's cells; P to shared memory.
        float mx = -INFINITY;
#pragma unroll 8
        for (int cc = 0; cc < 32; cc++) {
            const int ci = half * 32 + cc, c = c0 + ci;
            if (c >= first && c <= last) mx = fmaxf(mx, __fmul_rn(s_s[r * Gm::SLD + ci], scale));
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float m_old = m_s[r];
        const float mn = fmaxf(m_old, mx);
        const float corr = mn == -INFINITY ? 1.0f : expf(m_old - mn);
        float sum = 0.0f;
#pragma unroll 8
        for (int cc = 0; cc < 32; cc++) {
            const int ci = half * 32 + cc, c = c0 + ci;
            float pv = 0.0f;
            if (c >= first && c <= last && mn != -INFINITY) pv = expf(__fmul_rn(s_s[r * Gm::SLD + ci], scale) - mn);
            const __half ph = __float2half(pv);
            p_s[r * Gm::PLD + ci] = ph;
            sum += __half2float(ph);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        for (int d = half * (HD / 2); d < (half + 1) * (HD / 2); d++) o_s[r * Gm::OLD + d] *= corr;
        __syncwarp(); // both lanes of the row read m_old before it changes
        if (half == 0) {
            m_s[r] = mn;
            l_s[r] = fmaf(l_s[r], corr, sum);
        }
        __syncwarp();

        // O += P V for the warp's rows (V stored [cell][d]: row-major).
#pragma unroll
        for (int n = 0; n < HD / 16; n++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> o;
            wmma::load_matrix_sync(o, o_s + warp * 16 * Gm::OLD + n * 16, Gm::OLD, wmma::mem_row_major);
            mma_rows<wmma::row_major, BN / 16>(o, p_s + warp * 16 * Gm::PLD, Gm::PLD, v_s + n * 16, Gm::QLD, 16 * Gm::QLD);
            wmma::store_matrix_sync(o_s + warp * 16 * Gm::OLD + n * 16, o, Gm::OLD, wmma::mem_row_major);
        }
    }
    __syncthreads();

    for (int idx = tid; idx < BM * HD; idx += NT) {
        const int rw = idx / HD, d = idx % HD;
        const long long R = r0 + rw;
        if (R >= nrows || d >= hd) continue;
        int f, la;
        bool nr;
        row_cells(R, nrows, G, start, n_ctx, window, f, la, nr);
        float* y = out + ((R / G) * n_head + kvh * G + (int)(R % G)) * hd;
        y[d] = nr ? __int_as_float(0x7fc00000) : __fmul_rn(o_s[rw * Gm::OLD + d], __fdiv_rn(1.0f, l_s[rw]));
    }
}
} // namespace fatc

// Grid (ceil(nt * G / 64) * n_head_kv), block 128 threads, dynamic shared
// memory fatc::Geo<HD>::BYTES; the arguments of minfer_attn_prefill2_*
// (MINFER_PREFILL_ATTN_PARAMS, defined above).
extern "C" __global__ void __launch_bounds__(128, 2) minfer_attn_prefill_tc_hd64(MINFER_PREFILL_ATTN_PARAMS) {
    fatc::attn_prefill_tc<64>(MINFER_PREFILL_ATTN_ARGS);
}
extern "C" __global__ void __launch_bounds__(128, 2) minfer_attn_prefill_tc_hd128(MINFER_PREFILL_ATTN_PARAMS) {
    fatc::attn_prefill_tc<128>(MINFER_PREFILL_ATTN_ARGS);
}
#undef MINFER_PREFILL_ATTN_PARAMS
#undef MINFER_PREFILL_ATTN_ARGS
