// attn_prefill.cu: tiled (FlashAttention-style) causal GQA attention for
// prefill, the same semantics as minfer_attn_f32 (attention.cu): the query
// of token t sits at cell win[0] + t and attends to cells
// [max(0, cell - window + 1), cell] (window 0: from cell 0); query head h
// reads KV head h / G (G = n_head / n_head_kv); score = dot(q, k) * scale;
// out = softmax(scores) . V. A start < 0 or a cell >= n_ctx gives a NaN row.
//
// Why: the plain kernel runs one block per (token, head), so every query
// re-reads its whole KV window from L2. Here one block owns BM query rows
// of ONE KV head, where a row is a (token, head-of-the-group) pair: rows
// are the flattened index R = t * G + g, so the G query heads that share
// the KV head share every K / V tile too. K and V come through shared
// memory one tile of BN = 64 cells at a time (converted to f32 from the
// f32 / f16 / q8_0 layouts), and each tile is used by all BM rows.
//
// Geometry: BM/4 row groups x 8 column groups of threads (2*BM threads).
// Thread (rg, cg) owns rows 4rg .. 4rg+3 and, of each tile, the score
// columns cg + 8j (j < 8); for P.V it owns output columns cg*4 + 32jj + e.
// Online softmax per row (running max and sum in f32, the 8 threads of a
// row group combine through shuffles); P goes through shared memory for
// the P.V product.
//
// Numerics (accumulation-order class against the CPU): dot products in f32
// FMA in d order, exponentials with expf, the V sum in cell order on
// unnormalised probabilities rescaled per tile, normalised at the end.
// Tiles are aligned to absolute multiples of BN (a fully masked tile is an
// exact no-op), so a row's result does not depend on BM or on which block
// holds it: the BM = 32 and BM = 64 variants are bitwise equal.
//
// The KV window is read from device memory (graph replay): the grid depends
// on nt and the heads only, and each block finds its cells at run time.
#include "common.cuh"
// pdl.cuh (MINFER_KERNEL_ENTRY, programmatic dependent launch) is being
// added by the PDL work; until it lands the entry is a no-op here.
#if __has_include("pdl.cuh")
#include "pdl.cuh"
#endif
#ifndef MINFER_KERNEL_ENTRY
#define MINFER_KERNEL_ENTRY() \
    do {                      \
    } while (0)
#endif

namespace fap {
constexpr int BN = 64; // KV cells per tile
constexpr int RM = 4;  // query rows per thread
constexpr int CG = 8;  // threads per row group (score columns cg + 8j)
constexpr int CN = BN / CG;
constexpr int LD_CHUNK = 8; // tile loads in flight per thread

// Shared memory floats: Q [BM][HD+4], one K-or-V tile [BN][HD+4] (K, then V
// in the same buffer), P [BN][BM+4]. The +4 pads keep the float4 reads of
// the micro-tiles free of bank conflicts and 16-byte aligned.
__host__ __device__ constexpr int smem_floats(int hd, int bm) { return (bm + BN) * (hd + 4) + BN * (bm + 4); }

// load_pair reads elements i, i+1 (i even, same q8_0 block) of a KV row.
__device__ __forceinline__ float2 load_pair(int format, const uint8_t* __restrict__ row, int i) {
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

// load_tile stages cells c0 .. c0+BN-1 (head offset off) of region into
// dst [BN][HD+4] as f32; cells outside [lo, hi] and columns >= hd are zero
// (so padding and cells no row may read contribute nothing, and no cell at
// or beyond n_ctx is touched).
template <int HD, int NT>
__device__ __forceinline__ void load_tile(float* dst, const uint8_t* __restrict__ region, int format, long long row_bytes,
                                          int off, int hd, long long c0, long long lo, long long hi) {
    constexpr int PAIRS = BN * HD / 2;
    static_assert(PAIRS % (NT * LD_CHUNK) == 0, "tile pairs split evenly");
    const int tid = threadIdx.x;
#pragma unroll 1
    for (int base = 0; base < PAIRS; base += NT * LD_CHUNK) {
        float2 v[LD_CHUNK];
#pragma unroll
        for (int u = 0; u < LD_CHUNK; u++) {
            const int idx = base + u * NT + tid;
            const int j = idx / (HD / 2), d = 2 * (idx % (HD / 2));
            const long long c = c0 + j;
            v[u] = make_float2(0.0f, 0.0f);
            if (d < hd && c >= lo && c <= hi) v[u] = load_pair(format, mops::kv_row(region, c, row_bytes), off + d);
        }
#pragma unroll
        for (int u = 0; u < LD_CHUNK; u++) {
            const int idx = base + u * NT + tid;
            const int j = idx / (HD / 2), d = 2 * (idx % (HD / 2));
            *reinterpret_cast<float2*>(dst + j * (HD + 4) + d) = v[u];
        }
    }
}

template <int HD, int BM>
__device__ __forceinline__ void attn_prefill(float* out, const float* __restrict__ q, const uint8_t* __restrict__ kreg,
                                             const uint8_t* __restrict__ vreg, int format, const int* win, int nt,
                                             int n_head, int n_head_kv, int hd, long long row_bytes, int n_ctx,
                                             int window, float scale) {
    constexpr int NT = BM / RM * CG;
    constexpr int QS = HD + 4; // row stride of Q and K/V in smem
    constexpr int PS = BM + 4; // row stride of P
    constexpr int DJ = HD / 32; // float4 groups of output columns per thread
    extern __shared__ float4 fap_smem4[];
    float* q_s = reinterpret_cast<float*>(fap_smem4);
    float* kv_s = q_s + BM * QS;
    float* p_s = kv_s + BN * QS;

    const int tid = threadIdx.x, rg = tid / CG, cg = tid % CG;
    const int G = n_head / n_head_kv;
    const long long nrows = (long long)nt * G;
    const int ntiles = (int)((nrows + BM - 1) / BM);
    // Heaviest row tiles (latest tokens: the most cells) first, KV heads
    // innermost, so the long blocks start in the first wave.
    const int kvh = blockIdx.x % n_head_kv;
    const int rt = ntiles - 1 - blockIdx.x / n_head_kv;
    const long long r0 = (long long)rt * BM;
    const int start = win[0];

    // This thread's rows: token, query head, cell and attended range
    // [first, last] (empty for padding rows and NaN rows).
    long long first[RM], last[RM];
    bool live[RM], nan_row[RM];
    long long qrow[RM]; // element offset of the row in q / out
#pragma unroll
    for (int i = 0; i < RM; i++) {
        const long long R = r0 + rg * RM + i;
        live[i] = R < nrows;
        const long long t = live[i] ? R / G : 0;
        const int h = kvh * G + (int)(live[i] ? R % G : 0);
        qrow[i] = (t * n_head + h) * hd;
        const long long cell = (long long)start + t;
        nan_row[i] = live[i] && (start < 0 || cell >= n_ctx);
        first[i] = 1;
        last[i] = 0;
        if (live[i] && !nan_row[i]) {
            last[i] = cell;
            first[i] = window > 0 ? max(0LL, cell - window + 1) : 0;
        }
    }
    if (start < 0) { // uniform over the block: every row is NaN
#pragma unroll
        for (int i = 0; i < RM; i++)
            if (live[i])
                for (int d = cg; d < hd; d += CG) out[qrow[i] + d] = __int_as_float(0x7fc00000);
        return;
    }

    // The block's cells: from the first row's first cell to the last row's
    // cell, clipped to the region; tiles start at multiples of BN.
    const long long t_lo = r0 / G, t_hi = (min(r0 + BM, nrows) - 1) / G;
    const long long lo = window > 0 ? max(0LL, (long long)start + t_lo - window + 1) : 0;
    const long long hi = min((long long)start + t_hi, (long long)n_ctx - 1);

    // Q rows, zero-padded to HD columns (padding rows zero too).
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
    const long long c_begin = lo - lo % BN;
    for (long long c0 = c_begin; c0 <= hi; c0 += BN) {
        __syncthreads(); // the previous tile's P.V is done with kv_s and p_s (and Q is staged)
        load_tile<HD, NT>(kv_s, kreg, format, row_bytes, off, hd, c0, lo, hi);
        __syncthreads();

        // S = Q K^T for rows 4rg+i, columns cg+8j, in d order.
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
            for (int j = 0; j < CN; j++) kv[j] = *reinterpret_cast<const float4*>(kv_s + (cg + CG * j) * QS + d);
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

        // Mask, scale, online softmax; P to shared memory (column-major).
#pragma unroll
        for (int i = 0; i < RM; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < CN; j++) {
                const long long c = c0 + cg + CG * j;
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
            *reinterpret_cast<float4*>(p_s + (cg + CG * j) * PS + rg * RM) = make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
        __syncthreads(); // every thread is done with K
        load_tile<HD, NT>(kv_s, vreg, format, row_bytes, off, hd, c0, lo, hi);
        __syncthreads(); // V and P are staged

        // O += P V in cell order.
#pragma unroll 4
        for (int j = 0; j < BN; j++) {
            const float4 p = *reinterpret_cast<const float4*>(p_s + j * PS + rg * RM);
            const float pr[RM] = {p.x, p.y, p.z, p.w};
#pragma unroll
            for (int jj = 0; jj < DJ; jj++) {
                const float4 v = *reinterpret_cast<const float4*>(kv_s + j * QS + cg * 4 + 32 * jj);
#pragma unroll
                for (int i = 0; i < RM; i++) {
                    acc[i][4 * jj + 0] = fmaf(pr[i], v.x, acc[i][4 * jj + 0]);
                    acc[i][4 * jj + 1] = fmaf(pr[i], v.y, acc[i][4 * jj + 1]);
                    acc[i][4 * jj + 2] = fmaf(pr[i], v.z, acc[i][4 * jj + 2]);
                    acc[i][4 * jj + 3] = fmaf(pr[i], v.w, acc[i][4 * jj + 3]);
                }
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
                const int d = cg * 4 + 32 * jj + e;
                if (d < hd) y[d] = nan_row[i] ? __int_as_float(0x7fc00000) : __fmul_rn(acc[i][4 * jj + e], inv);
            }
    }
}
} // namespace fap

// Grid (ceil(nt * G / BM) * n_head_kv), block 2*BM threads, dynamic shared
// memory fap::smem_floats(HD, BM) * 4 bytes. q and out are [hd, n_head, nt];
// hd even, at most HD (the hd64 variants take hd <= 64).
#define MINFER_FAP_PARAMS                                                                                              \
    float *out, const float *q, const uint8_t *kreg, const uint8_t *vreg, int format, const int *win, int nt,         \
        int n_head, int n_head_kv, int hd, long long row_bytes, int n_ctx, int window, float scale
#define MINFER_FAP_ARGS out, q, kreg, vreg, format, win, nt, n_head, n_head_kv, hd, row_bytes, n_ctx, window, scale

extern "C" __global__ void __launch_bounds__(64) minfer_attn_prefill_hd64_bm32(MINFER_FAP_PARAMS) {
    MINFER_KERNEL_ENTRY();
    fap::attn_prefill<64, 32>(MINFER_FAP_ARGS);
}
extern "C" __global__ void __launch_bounds__(128) minfer_attn_prefill_hd64_bm64(MINFER_FAP_PARAMS) {
    MINFER_KERNEL_ENTRY();
    fap::attn_prefill<64, 64>(MINFER_FAP_ARGS);
}
extern "C" __global__ void __launch_bounds__(64) minfer_attn_prefill_hd128_bm32(MINFER_FAP_PARAMS) {
    MINFER_KERNEL_ENTRY();
    fap::attn_prefill<128, 32>(MINFER_FAP_ARGS);
}
extern "C" __global__ void __launch_bounds__(128) minfer_attn_prefill_hd128_bm64(MINFER_FAP_PARAMS) {
    MINFER_KERNEL_ENTRY();
    fap::attn_prefill<128, 64>(MINFER_FAP_ARGS);
}
#undef MINFER_FAP_PARAMS
#undef MINFER_FAP_ARGS
