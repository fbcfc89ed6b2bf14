// gemm16.cu: prefill matmul (nt >= 9) of a Q8_0 weight in its repacked
// copy (MINFER_ONE_COPY: quants [n][k] int8, 16-byte aligned, then the
// scales [n][k / 32] f16) on the tensor cores in f16 (lever
// MINFER_MMQ_F16, issue 20):
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
//   wr[2][BN][BK] int8: the raw quants of this step and the next
//     (cp.async);
//   ws[BN][LDK] f16: this step's dequantized weight tile;
// LDK = BK + 8 halves: a row is 80 bytes, so ldmatrix's 8 rows fall on
// distinct 16-byte bank groups. A step: wait for its copies, barrier,
// issue the next step's copies, dequantize wr into ws (each thread 16
// quants of one row: q ^ 0x80 placed under the f16 exponent of 1024, minus
// 1152, times the row's scale: exact but for the one rounding of d * q to
// f16), barrier, then the mma.
//
// Numerics (the f16-weight-tile class, gemm.cu's): each weight is d * q
// rounded to f16 once; each activation is x rounded to f16 once; sums in
// f32 in the tensor core's order. Edges: rows >= n and tokens >= nt are
// zero-filled by the copies and never stored; k is a multiple of 32.
#include "common.cuh"
#include "cpasync.cuh"
#include "mma.cuh"

namespace g16 {
constexpr int BM = 128, BN = 128, BK = 32, NT = 256;
constexpr int LDK = BK + 8; // halves a staged row

struct Smem {
    __half xs[2][BM][LDK];
    __half ws[BN][LDK];
    alignas(16) uint8_t wr[2][BN][BK];
};

// stage issues the copies of step kb (k = 32 kb ..): the activation tile
// (BM rows of 64 bytes: 4 chunks each) and the raw quants (BN rows of 32
// bytes: 2 chunks each); rows past nt or n copy nothing (zero-filled).
__device__ __forceinline__ void stage(Smem& sm, int buf, const __half* __restrict__ x16, const uint8_t* __restrict__ wq,
                                      int k, int n, int nt, int m0, int n0, int kb) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < BM * 4 / NT; i++) {
        const int c = tid + i * NT, r = c >> 2, q = c & 3;
        const int tok = m0 + r;
        const __half* src = x16 + (size_t)min(tok, nt - 1) * k + BK * kb + 8 * q;
        minfer_cp_async16(&sm.xs[buf][r][8 * q], src, tok < nt ? 16 : 0);
    }
    {
        const int r = tid >> 1, q = tid & 1; // BN * 2 == NT chunks
        const int row = n0 + r;
        const uint8_t* src = wq + (size_t)min(row, n - 1) * k + BK * kb + 16 * q;
        minfer_cp_async16(&sm.wr[buf][r][16 * q], src, row < n ? 16 : 0);
    }
}

// deq2 turns the 4 int8 quants of w into 4 f16 of d * q (two words, the
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

__device__ __forceinline__ void gemm(float* __restrict__ out, const __half* __restrict__ x16, const uint8_t* __restrict__ w,
                                     const float* __restrict__ bias, int k, int n, int nt) {
    __shared__ Smem sm;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, tq = lane & 3;
    const int wm = warp & 1, wn = warp >> 1; // tokens 64 wm .., rows 32 wn ..
    // Token tiles first: the few token tiles of one weight tile run together
    // and read its quants from L2, not DRAM, once each.
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int kbs = k / BK;
    const uint8_t* wq = w;
    const __half* wsc = reinterpret_cast<const __half*>(w + (size_t)n * k); // [n][k / 32]

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

    // The dequantizing thread's row and half of it (16 quants).
    const int dr = tid >> 1, dq = tid & 1;
    const int drow = min(n0 + dr, n - 1);
    stage(sm, 0, x16, wq, k, n, nt, m0, n0, 0);
    minfer_cp_async_commit();
    for (int kb = 0; kb < kbs; kb++) {
        const int buf = kb & 1;
        const __half d = wsc[(size_t)drow * kbs + kb]; // a row past n: its quants are zero
        minfer_cp_async_wait<0>();
        __syncthreads(); // this step's copies are visible; every warp is done with ws and buffer buf ^ 1
        if (kb + 1 < kbs) stage(sm, buf ^ 1, x16, wq, k, n, nt, m0, n0, kb + 1);
        minfer_cp_async_commit();
        {
            const uint4 q = *reinterpret_cast<const uint4*>(&sm.wr[buf][dr][16 * dq]);
            const __half2 d2 = __halves2half2(d, d);
            uint4 o0, o1;
            deq4(q.x, d2, o0.x, o0.y);
            deq4(q.y, d2, o0.z, o0.w);
            deq4(q.z, d2, o1.x, o1.y);
            deq4(q.w, d2, o1.z, o1.w);
            uint4* dst = reinterpret_cast<uint4*>(&sm.ws[dr][16 * dq]);
            dst[0] = o0;
            dst[1] = o1;
        }
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
                    if (row < n) out[(size_t)tok * n + row] = acc[i][j][2 * h + e] + (bias != nullptr ? bias[row] : 0.0f);
                }
        }
}
} // namespace g16

// minfer_gemm16_q8_0r: grid (ceil(nt / 128), ceil(n / 128)), block 256,
// static shared memory (g16::Smem, 39 KB). x16: [nt][k] f16 (16-byte
// aligned rows: k % 8 == 0); w: the repacked Q8_0 copy of an n x k matrix
// (k % 32 == 0); bias: n floats or null.
extern "C" __global__ void __launch_bounds__(g16::NT, 2)
    minfer_gemm16_q8_0r(float* out, const __half* x16, const uint8_t* w, const float* bias, int k, int n, int nt) {
    g16::gemm(out, x16, w, bias, k, n, nt);
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
