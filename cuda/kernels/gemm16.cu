// gemm16.cu: prefill matmul (nt >= 9) of a Q8_0 weight in its repacked
// copy (MINFER_ONE_COPY: quants [n][k] int8, 16-byte aligned, then the
// scales [n][k / 32] f16) on the tensor cores in f16 (issue 20; the only
// Q8_0 prefill over that copy since its lever, MINFER_MMQ_F16, retired):
//
//   out[t][j] = sum_i W[j][i] * x[t][i] (+ bias[j]),  W[j][i] = d[j][i/32] * q[j][i]
//
// Why: MMQ (mmq.cu) multiplies int8 by int8, but every 32-value block has
// its own weight and activation scale, so each m16n8k32 of 4,096 MACs costs
// a warp ~16-20 instructions of fragment loads and f32 folds: at 151 int8
// TOPS it is issue- and latency-bound (reports/perf/NOTE.md, session 21).
// Here the weight tile is dequantized once into shared memory as f16, the
// activations come in as f16 (x16: [nt][k], minfer_f32_to_f16), and the
// products accumulate in f32 in the tensor cores with no fold: a warp's 32
// m16n8k16 a 32-deep step need 12 ldmatrix.x4 and no other instruction.
//
// Block tile: BM = 128 tokens x BN = 128 weight rows, BK = 32 (one Q8_0
// block a row), 8 warps as 2 (tokens) x 4 (rows), each warp 64 x 32:
// 4 x 4 C fragments of m16n8 (64 f32 a lane). Shared memory, static:
//   xs[2][BM][LDK] f16: the activation tile of this step and the next
//     (cp.async, 16 bytes as stored);
//   wr[2][BN][WRS] int8: the raw quants of this step and the next
//     (cp.async; rows of 48 bytes so the dequantizing 8-byte reads of 16
//     lanes fall on distinct banks);
//   ws[BN][LDK] f16: this step's dequantized weight tile;
// LDK = BK + 8 halves: a row is 80 bytes, so ldmatrix's 8 rows fall on
// distinct 16-byte bank groups. A step: wait for its copies, barrier,
// issue the next step's copies, dequantize wr into ws (each thread two
// 8-quant chunks: q ^ 0x80 placed under the f16 exponent of 1024, minus
// 1152, times the row's scale: exact but for the one rounding of d * q to
// f16), barrier, then the mma. A quarter warp dequantizes one chunk column
// of 8 consecutive rows, so its 16-byte stores hit 8 distinct bank groups
// (ncu, session 22: the first mapping, two lanes a row, stored with an
// 11.7-way conflict).
//
// One launch runs up to three matmuls of the same input (fused q/k/v, the
// FFN's gate and up): their weight tiles follow each other in grid.y, so
// the k / v projections' few tiles share a wave with q's. When the grid
// would not fill the SMs (ksplit 2: 7B's q, o and down projections at
// pp512 are 112 blocks on the H100's 132 SMs, one block an SM, 12% warp
// occupancy in ncu), each tile's k range is split in two halves whose
// blocks add their sums into the zeroed output with atomicAdd: two
// addends onto zero commute exactly, so the result does not depend on
// which block adds first; the bias comes with the first half.
//
// Numerics (the f16-weight-tile class, gemm.cu's): each weight is d * q
// rounded to f16 once; each activation is x rounded to f16 once; sums in
// f32 in the tensor core's order (with ksplit 2, two such halves added).
// Edges: rows >= n and tokens >= nt are zero-filled by the copies and never
// stored; k is a multiple of 32 (256 for the K-quants).
//
// The K-quant forms (lever MINFER_MMQ_F16_KQ: minfer_gemm16_q4_k over the
// GGUF bytes, minfer_gemm16_q6_kr over the repacked copy) run the same tile
// and MMA; only the staged raw bytes and the dequantization differ (Deq
// below). A 32-deep step is one Q4_K sub-block (its 32 quant bytes, half of
// each used, and the row's 16-byte header of d, dmin and the packed scales)
// or one Q6_K quarter (32 ql and 32 qh bytes, one int8 scale a 16 values,
// d a super-block). Each weight is the exact f32 dequantization dequant.cuh
// computes (d sc q - dmin m, d sc (q - 32)), rounded to f16 once: the same
// f16-weight-tile numerics as the Q8_0 form. A row past n dequantizes its
// zero-filled quants against row n - 1's scales: its sums are never stored.
#include "common.cuh"
#include "cpasync.cuh"
#include "dequant.cuh"
#include "mma.cuh"

namespace g16 {
constexpr int BM = 128, BN = 128, BK = 32, NT = 256;
constexpr int LDK = BK + 8; // halves a staged row
constexpr int WRS = BK + 16; // bytes a raw Q8_0 / Q4_K row
constexpr int SEGS = 3;      // matmuls a launch

// The weight layouts: the kernel's template argument.
enum Wt { Q8_0R, Q4_K, Q6_KR };
// RowBytes is a staged raw row: 32 quant bytes padded to 48 (the
// dequantizing reads of 8 rows fall on distinct banks), or Q6_K's 64
// unpadded (a 16-byte chunk c of row r stored at c ^ swz(r) instead: 48 KB
// of static shared memory holds no pad).
template <int T> constexpr int RowBytes = T == Q6_KR ? 64 : WRS;
__device__ __forceinline__ int swz(int r) { return (r >> 1) & 3; }

template <int T> struct Smem {
    __half xs[2][BM][LDK];
    __half ws[BN][LDK];
    alignas(16) uint8_t wr[2][BN][RowBytes<T>];
};

// Seg is one matmul of a launch: out[t][j] (n values a token), its
// repacked weight and bias (or null).
struct Seg {
    float* out;
    const uint8_t* w;
    const float* bias;
    int n;
};

// Work is a block's share of a launch: its matmul, the first weight row of
// its tile and its 32-deep steps.
struct Work {
    Seg sg;
    int n0, kb0, kb1;
};

// pick finds the block's work: grid.y runs ksplit blocks a weight tile, the
// tiles of matmul 0, then 1, then 2; false: nothing to do (a split with no
// step: never launched so, ksplit <= k / 32).
__device__ __forceinline__ bool pick(Work& wk, int k, int ksplit, float* out0, const uint8_t* w0, const float* bias0, int n0,
                                     float* out1, const uint8_t* w1, const float* bias1, int n1, float* out2,
                                     const uint8_t* w2, const float* bias2, int n2) {
    const int yt = blockIdx.y / ksplit, sp = blockIdx.y % ksplit;
    const int t0 = (n0 + BN - 1) / BN, t1 = (n1 + BN - 1) / BN;
    wk.sg = Seg{out0, w0, bias0, n0};
    int tile = yt;
    if (yt >= t0 + t1) wk.sg = Seg{out2, w2, bias2, n2}, tile = yt - t0 - t1;
    else if (yt >= t0) wk.sg = Seg{out1, w1, bias1, n1}, tile = yt - t0;
    const int kbs = k / BK, half = (kbs + 1) / 2;
    wk.kb0 = ksplit == 2 && sp == 1 ? half : 0, wk.kb1 = ksplit == 2 && sp == 0 ? half : kbs;
    if (sp == 1) wk.sg.bias = nullptr;
    wk.n0 = tile * BN;
    return wk.kb0 < wk.kb1;
}

// put writes (or with add, adds into the zeroed output) one result of
// token tok, weight row row.
__device__ __forceinline__ void put(const Seg& sg, int tok, int row, float v, bool add) {
    v += sg.bias != nullptr ? sg.bias[row] : 0.0f;
    if (add) atomicAdd(sg.out + (size_t)tok * sg.n + row, v);
    else sg.out[(size_t)tok * sg.n + row] = v;
}

// stage issues the copies of step kb (k = 32 kb ..): the activation tile
// (BM rows of 64 bytes: 4 chunks each) and the raw quant bytes (BN rows of
// RowBytes: see Smem); rows past nt or n copy nothing (zero-filled).
template <int T>
__device__ __forceinline__ void stage(Smem<T>& sm, int buf, const __half* __restrict__ x16, const uint8_t* __restrict__ wq,
                                      int k, int n, int nt, int m0, int n0, int kb) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < BM * 4 / NT; i++) {
        const int c = tid + i * NT, r = c >> 2, q = c & 3;
        const int tok = m0 + r;
        const __half* src = x16 + (size_t)min(tok, nt - 1) * k + BK * kb + 8 * q;
        minfer_cp_async16(&sm.xs[buf][r][8 * q], src, tok < nt ? 16 : 0);
    }
    if constexpr (T == Q6_KR) {
        // Quarter j of super-block sb: ql bytes 64 hh + 32 (j & 1) and qh
        // bytes 128 + 32 hh of the super-block's 192 (hh = j / 4); chunks
        // 0, 1 ql, 2, 3 qh.
        const int sb = kb >> 3, j = kb & 7, hh = j >> 2;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int c = tid + i * NT, r = c >> 2, q = c & 3;
            const int row = n0 + r;
            const uint8_t* blk = wq + ((size_t)min(row, n - 1) * (k / 256) + sb) * 192;
            const uint8_t* src = q < 2 ? blk + 64 * hh + 32 * (j & 1) + 16 * q : blk + 128 + 32 * hh + 16 * (q - 2);
            minfer_cp_async16(&sm.wr[buf][r][16 * (q ^ swz(r))], src, row < n ? 16 : 0);
        }
    } else {
        const int r = tid >> 1, q = tid & 1; // BN * 2 == NT chunks
        const int row = n0 + r;
        const size_t rw = min(row, n - 1);
        // Q4_K: sub-block j's values are the low (j even) or high nibbles
        // of quant bytes 32 (j / 2) .. of the 144-byte super-block (at 16).
        const uint8_t* src = T == Q8_0R ? wq + rw * k + BK * kb + 16 * q
                                        : wq + (rw * (k / 256) + (kb >> 3)) * 144 + 16 + 32 * ((kb & 7) >> 1) + 16 * q;
        minfer_cp_async16(&sm.wr[buf][r][16 * q], src, row < n ? 16 : 0);
    }
}

// deq4 turns the 4 int8 quants of w into 4 f16 of d * q (two words, the
// lower index in the low half): 0x6400 | (q ^ 0x80) is the f16 1024 + 128 +
// q, exact; minus 1152 is q, exact; times d rounds once.
__device__ __forceinline__ void deq4(uint32_t w, __half2 d2, uint32_t& lo, uint32_t& hi) {
    const uint32_t u = w ^ 0x80808080u;
    const __half2 bias = __floats2half2_rn(1152.0f, 1152.0f);
    uint32_t a = __byte_perm(u, 0x64646464u, 0x4140), b = __byte_perm(u, 0x64646464u, 0x4342);
    __half2 ha = __hmul2(__hsub2(*reinterpret_cast<__half2*>(&a), bias), d2);
    __half2 hb = __hmul2(__hsub2(*reinterpret_cast<__half2*>(&b), bias), d2);
    lo = *reinterpret_cast<uint32_t*>(&ha);
    hi = *reinterpret_cast<uint32_t*>(&hb);
}

// f32of is byte i of v (0..255) as a float, exactly: the byte under the
// exponent of 2^23, minus 2^23 (bias: minus that and more, still exact).
__device__ __forceinline__ float f32of(uint32_t v, int i, float bias) {
    return __int_as_float((int)__byte_perm(v, 0x4B00u, 0x5440u | (unsigned)i)) - bias;
}

// pack8 rounds the 8 values of f to f16, a pair a word (lower index low).
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
    uint4 o;
    uint32_t* w = &o.x;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const __half2 h = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
        w[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
    return o;
}

// Deq<T> is a dequantizing thread's view of its two rows r[0], r[1] (rows
// dr and dr + 64 of the tile, clamped to n - 1): load(kb) reads their
// scales for step kb before the step's barrier, chunk turns the 8 staged
// quant bytes of row h at column 8 dq into 8 f16 weights.
template <int T> struct Deq;

template <> struct Deq<Q8_0R> {
    const __half* d; // [n][k / 32]
    size_t r[2];
    int kbs;
    __half dh[2];
    __device__ __forceinline__ Deq(const uint8_t* w, int k, int n, int r0, int r1, int)
        : d(reinterpret_cast<const __half*>(w + (size_t)n * k)), r{(size_t)r0, (size_t)r1}, kbs(k / BK) {}
    __device__ __forceinline__ void load(int kb, bool) {
        dh[0] = d[r[0] * kbs + kb];
        dh[1] = d[r[1] * kbs + kb];
    }
    __device__ __forceinline__ uint4 chunk(const uint8_t* row, int, int h, int dq, int) const {
        const uint2 q = *reinterpret_cast<const uint2*>(row + 8 * dq);
        const __half2 d2 = __halves2half2(dh[h], dh[h]);
        uint4 o;
        deq4(q.x, d2, o.x, o.y);
        deq4(q.y, d2, o.z, o.w);
        return o;
    }
};

// Q4_K (GGUF bytes): the 16-byte super-block header (d, dmin, 12 bytes of
// 6-bit scales and mins) of both rows, read at a super-block's first step.
template <> struct Deq<Q4_K> {
    const uint8_t* w;
    size_t r[2];
    int nsb;
    uint4 hd[2];
    float ds[2], dm[2];
    __device__ __forceinline__ Deq(const uint8_t* w_, int k, int, int r0, int r1, int)
        : w(w_), r{(size_t)r0, (size_t)r1}, nsb(k / 256) {}
    __device__ __forceinline__ void load(int kb, bool first) {
        const int sb = kb >> 3, j = kb & 7, b = 8 * (j & 3);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (first || j == 0) hd[h] = __ldg(reinterpret_cast<const uint4*>(w + (r[h] * nsb + sb) * 144));
            // minfer_kscale_min over the scale bytes s[0..11] = words y, z, w.
            const uint32_t A = (hd[h].y >> b) & 0xff, B = (hd[h].z >> b) & 0xff, C = (hd[h].w >> b) & 0xff;
            const int sc = j < 4 ? A & 63 : (C & 0xF) | ((A >> 6) << 4);
            const int mn = j < 4 ? B & 63 : (C >> 4) | ((B >> 6) << 4);
            ds[h] = __fmul_rn(minfer_h2f(hd[h].x & 0xffff), (float)sc);
            dm[h] = __fmul_rn(minfer_h2f(hd[h].x >> 16), (float)mn);
        }
    }
    __device__ __forceinline__ uint4 chunk(const uint8_t* row, int, int h, int dq, int kb) const {
        const uint2 q = *reinterpret_cast<const uint2*>(row + 8 * dq);
        const int sh = 4 * (kb & 1);
        const uint32_t a = (q.x >> sh) & 0x0F0F0F0Fu, b = (q.y >> sh) & 0x0F0F0F0Fu;
        float f[8];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            // d sc q exact in f32 (11 + 6 + 4 bits), one rounding: dequant.cuh's.
            f[i] = __fsub_rn(__fmul_rn(ds[h], f32of(a, i, 8388608.0f)), dm[h]);
            f[4 + i] = __fsub_rn(__fmul_rn(ds[h], f32of(b, i, 8388608.0f)), dm[h]);
        }
        return pack8(f);
    }
};

// Q6_K (the repacked copy: quants, then int8 scales [n][k / 16], then f16 d
// [n][k / 256]): quarter j = kb % 8 of super-block kb / 8, one scale a 16
// values. A thread's chunks (columns 8 dq ..) lie in one 16 of the step, e,
// so it keeps only that scale a row (both, indexed by the thread's dq, put
// them in local memory).
template <> struct Deq<Q6_KR> {
    const int8_t* sc;
    const __half* d;
    size_t r[2];
    int nsb, e;
    float ds[2]; // [row]
    __device__ __forceinline__ Deq(const uint8_t* w, int k, int n, int r0, int r1, int dq)
        : sc(reinterpret_cast<const int8_t*>(w + (size_t)n * (k / 256) * 192)),
          d(reinterpret_cast<const __half*>(w + (size_t)n * (k / 256) * 208)), r{(size_t)r0, (size_t)r1}, nsb(k / 256),
          e(dq >> 1) {}
    __device__ __forceinline__ void load(int kb, bool) {
        const int sb = kb >> 3, j = kb & 7, hh = j >> 2, qtr = j & 3;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const size_t b = r[h] * nsb + sb;
            ds[h] = __fmul_rn(__half2float(d[b]), (float)sc[b * 16 + 8 * hh + 2 * qtr + e]);
        }
    }
    __device__ __forceinline__ uint4 chunk(const uint8_t* row, int srow, int h, int dq, int kb) const {
        // Values 8 dq .. of the quarter: ql bytes in chunk dq / 2, qh bytes
        // in chunk 2 + dq / 2 (stored at chunk ^ swz); quarters 2, 3 take
        // the high nibbles, quarter qtr the qh bits 2 qtr.
        const int qtr = kb & 3, o = 8 * (dq & 1), sw = swz(srow);
        const uint2 l = *reinterpret_cast<const uint2*>(row + 16 * ((dq >> 1) ^ sw) + o);
        const uint2 hq = *reinterpret_cast<const uint2*>(row + 16 * ((2 + (dq >> 1)) ^ sw) + o);
        const int ls = qtr >= 2 ? 4 : 0, hs = 2 * qtr;
        const uint32_t v0 = ((l.x >> ls) & 0x0F0F0F0Fu) | (((hq.x >> hs) & 0x03030303u) << 4);
        const uint32_t v1 = ((l.y >> ls) & 0x0F0F0F0Fu) | (((hq.y >> hs) & 0x03030303u) << 4);
        const float s = ds[h];
        float f[8];
#pragma unroll
        for (int i = 0; i < 4; i++) { // d sc (q - 32): exact in f32 (24 bits), one rounding
            f[i] = __fmul_rn(s, f32of(v0, i, 8388640.0f));
            f[4 + i] = __fmul_rn(s, f32of(v1, i, 8388640.0f));
        }
        return pack8(f);
    }
};

// gemm computes the tile (tokens m0 .., rows n0 ..) of one matmul over the
// 32-deep steps kb0 .. kb1 - 1; add: atomicAdd into the zeroed output (a
// split k range) instead of storing. The weight scales of step kb load at
// its top (loading them a step ahead into a second Deq was no faster:
// reports/MINFER_MMQ_F16_AHEAD).
template <int T>
__device__ __forceinline__ void gemm(const Seg& sg, const __half* __restrict__ x16, int k, int nt, int m0, int n0, int kb0,
                                     int kb1, bool add) {
    __shared__ Smem<T> sm;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, tq = lane & 3;
    const int wm = warp & 1, wn = warp >> 1; // tokens 64 wm .., rows 32 wn ..
    const int n = sg.n;
    const uint8_t* wq = sg.w;

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

    // The dequantizing thread's two chunks: 8 quants at column 8 dq of rows
    // dr and dr + 64 (chunk c = tid: row (c & 7) + 8 (c >> 5), column c >> 3
    // & 3; chunk tid + 256 is 64 rows on).
    const int dr = (tid & 7) + 8 * (tid >> 5), dq = (tid >> 3) & 3;
    Deq<T> dz(wq, k, n, min(n0 + dr, n - 1), min(n0 + dr + 64, n - 1), dq);
    stage<T>(sm, kb0 & 1, x16, wq, k, n, nt, m0, n0, kb0);
    minfer_cp_async_commit();
    for (int kb = kb0; kb < kb1; kb++) {
        const int buf = kb & 1;
        dz.load(kb, kb == kb0); // a row past n: its quants are zero
        minfer_cp_async_wait<0>();
        __syncthreads(); // this step's copies are visible; every warp is done with ws and buffer buf ^ 1
        if (kb + 1 < kb1) stage<T>(sm, buf ^ 1, x16, wq, k, n, nt, m0, n0, kb + 1);
        minfer_cp_async_commit();
#pragma unroll
        for (int h = 0; h < 2; h++)
            *reinterpret_cast<uint4*>(&sm.ws[dr + 64 * h][8 * dq]) = dz.chunk(sm.wr[buf][dr + 64 * h], dr + 64 * h, h, dq, kb);
        __syncthreads(); // ws holds this step's weights
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            // A (tokens x k): ldmatrix.x4 of rows 16 i + L % 16, columns
            // 16 kk + 8 (L / 16): a[0..3] of m16n8k16.
            uint32_t a[4][4];
#pragma unroll
            for (int i = 0; i < 4; i++) ldsm_x4(a[i], &sm.xs[buf][64 * wm + 16 * i + (lane & 15)][16 * kk + 8 * (lane >> 4)]);
            // B (k x rows, col-major = ws rows): one ldmatrix.x4 gives two
            // 8-row tiles' b[0], b[1]: lane L names row 8 (2 jj + L / 16) +
            // L % 8 at column 16 kk + 8 ((L / 8) % 2).
#pragma unroll
            for (int jj = 0; jj < 2; jj++) {
                uint32_t r[4];
                ldsm_x4(r, &sm.ws[32 * wn + 16 * jj + 8 * (lane >> 4) + (lane & 7)][16 * kk + 8 * ((lane >> 3) & 1)]);
                const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    mma_16816(acc[i][2 * jj], a[i], b0);
                    mma_16816(acc[i][2 * jj + 1], a[i], b1);
                }
            }
        }
    }

    // C fragment: acc[i][j][0..1] token 16 i + g, rows 8 j + 2 tq (+1);
    // [2..3] token + 8.
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int tok = m0 + 64 * wm + 16 * i + g + 8 * h;
            if (tok >= nt) continue;
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int row = n0 + 32 * wn + 8 * j + 2 * tq + e;
                    if (row < n) put(sg, tok, row, acc[i][j][2 * h + e], add);
                }
        }
}

} // namespace g16

// The kernels' parameters and their forwarding (each kernel one line).
#define MINFER_GEMM16_PARAMS                                                                                            \
    const __half *x16, int k, int nt, int ksplit, float *out0, const uint8_t *w0, const float *bias0, int n0,           \
        float *out1, const uint8_t *w1, const float *bias1, int n1, float *out2, const uint8_t *w2, const float *bias2, \
        int n2
#define MINFER_GEMM16_ARGS x16, k, nt, ksplit, out0, w0, bias0, n0, out1, w1, bias1, n1, out2, w2, bias2, n2

namespace g16 {
// entry is a kernel's body: the block's work, then the tile of layout T.
template <int T> __device__ __forceinline__ void entry(MINFER_GEMM16_PARAMS) {
    Work wk;
    if (!pick(wk, k, ksplit, out0, w0, bias0, n0, out1, w1, bias1, n1, out2, w2, bias2, n2)) return;
    gemm<T>(wk.sg, x16, k, nt, blockIdx.x * BM, wk.n0, wk.kb0, wk.kb1, ksplit == 2);
}
} // namespace g16

// minfer_gemm16_q8_0r: grid (ceil(nt / 128), ksplit x the weight tiles
// of the matmuls: ceil(n0 / 128) + ceil(n1 / 128) + ceil(n2 / 128)),
// block 256, static shared memory (g16::Smem, 42 KB). x16: [nt][k] f16
// (16-byte aligned rows: k % 8 == 0); matmul i: out_i [nt][n_i], w_i the
// repacked Q8_0 copy of an n_i x k matrix (k % 32 == 0), bias_i n_i floats
// or null; n_i = 0: no such matmul. ksplit (1 or 2, <= k / 32): 2 adds
// each half of k into out_i, which must hold zeros.
extern "C" __global__ void __launch_bounds__(g16::NT, 2) minfer_gemm16_q8_0r(MINFER_GEMM16_PARAMS) {
    g16::entry<g16::Q8_0R>(MINFER_GEMM16_ARGS);
}

// minfer_gemm16_q4_k, minfer_gemm16_q6_kr (MINFER_MMQ_F16_KQ):
// minfer_gemm16_q8_0r's grid, block and arguments (k % 256 == 0), w_i the
// GGUF bytes of a Q4_K matrix or the repacked copy of a Q6_K one; static
// shared memory 42 KB and 46 KB.
extern "C" __global__ void __launch_bounds__(g16::NT, 2) minfer_gemm16_q4_k(MINFER_GEMM16_PARAMS) {
    g16::entry<g16::Q4_K>(MINFER_GEMM16_ARGS);
}
extern "C" __global__ void __launch_bounds__(g16::NT, 2) minfer_gemm16_q6_kr(MINFER_GEMM16_PARAMS) {
    g16::entry<g16::Q6_KR>(MINFER_GEMM16_ARGS);
}

// minfer_f32_to_f16: y[i] = x[i] rounded to f16, i < count; grid
// ceil(count / 1024), block 256, 4 values a thread (count % 4 == 0,
// 16-byte aligned x, 8-byte aligned y).
extern "C" __global__ void __launch_bounds__(256) minfer_f32_to_f16(__half* y, const float* x, long long count) {
    const long long i = 4 * ((long long)blockIdx.x * 256 + threadIdx.x);
    if (i >= count) return;
    const float4 v = *reinterpret_cast<const float4*>(x + i);
    const __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
    uint2 o;
    o.x = *reinterpret_cast<const uint32_t*>(&a);
    o.y = *reinterpret_cast<const uint32_t*>(&b);
    *reinterpret_cast<uint2*>(y + i) = o;
}
