// gemm.cu: prefill matmul (nt >= 9), every weight type, as a tensor-core
// GEMM over dequantized f16 weight tiles (WMMA m16n16k16, f32 accumulate).
//
//   out[t][j] = sum_i W[j][i] * x[t][i] (+ bias[j])
//
// Block tile: MINFER_GEMM_BM tokens x MINFER_GEMM_BN weight rows, k in steps
// of MINFER_GEMM_BK (one 32-value block; a K-quant super-block is 8 steps).
// Per k step the block
//   - dequantizes its BN x BK weight tile (dequant.cuh, exact f32) and rounds
//     it to f16 into shared memory (row-major [row][k] = a col-major B
//     operand);
//   - splits its BM x BK f32 activation tile into hi = f16(x) and
//     lo = f16(x - hi) (two row-major A operands), so x is carried to about
//     22 bits and the only rounding left is the f16 weight
//     (tolerance class "f16-weight-tile": |err| <= 2^-11 * sum_i |w_i x_i|);
//   - runs acc += Xhi * W16 and acc += Xlo * W16 per 16-wide k slice.
// Eight warps in a 2 (tokens) x 4 (rows) grid each own a 32 x 32 output
// tile (2 x 2 fragments). The accumulators go through a shared f32 staging
// tile so the global store is bounds-checked and coalesced along n.
// Edges: rows >= n, tokens >= nt and k positions >= k load as zeros, so any
// n, nt and (for plain types) any k work.
//
// Dynamic shared memory is MINFER_GEMM_SMEM_BYTES (> 48 KiB): the launcher
// opts each kernel in once (Kernels.PrepareMatmul) before any capture window
// can open, and the kernel traps if launched with less.
//
// Kernel names: minfer_gemm_<type>.
#include <mma.h>

#include "dequant.cuh"

#define MINFER_GEMM_BM 64
#define MINFER_GEMM_BN 128
#define MINFER_GEMM_BK 32
#define MINFER_GEMM_PAD 8   // halves of padding per operand row (bank spread; keeps 32-byte alignment)
#define MINFER_GEMM_CPAD 4  // floats of padding per staging row
#define MINFER_GEMM_THREADS 256
#define MINFER_GEMM_LDK (MINFER_GEMM_BK + MINFER_GEMM_PAD)
#define MINFER_GEMM_LDC (MINFER_GEMM_BN + MINFER_GEMM_CPAD)

// Byte layout of the dynamic shared memory; cuda/launch_matmul.go carries
// the same formula (gemmSmemBytes) and a test pins it to these constants.
#define MINFER_GEMM_W_BYTES (MINFER_GEMM_BN * MINFER_GEMM_LDK * 2)
#define MINFER_GEMM_X_BYTES (MINFER_GEMM_BM * MINFER_GEMM_LDK * 2)
#define MINFER_GEMM_C_BYTES (MINFER_GEMM_BM * MINFER_GEMM_LDC * 4)
#define MINFER_GEMM_SMEM_BYTES (MINFER_GEMM_W_BYTES + 2 * MINFER_GEMM_X_BYTES + MINFER_GEMM_C_BYTES)

extern __shared__ __align__(128) unsigned char minfer_gemm_smem[];

__device__ __forceinline__ uint32_t minfer_gemm_dyn_smem() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
    return r;
}

template <int T>
__device__ __forceinline__ void minfer_gemm_body(float* __restrict__ out, const float* __restrict__ x,
                                                 const uint8_t* __restrict__ w, const float* __restrict__ bias,
                                                 int k, int n, int nt) {
    using namespace nvcuda;
    if (minfer_gemm_dyn_smem() < MINFER_GEMM_SMEM_BYTES) __trap();

    __half* Ws = reinterpret_cast<__half*>(minfer_gemm_smem);
    __half* Xh = reinterpret_cast<__half*>(minfer_gemm_smem + MINFER_GEMM_W_BYTES);
    __half* Xl = reinterpret_cast<__half*>(minfer_gemm_smem + MINFER_GEMM_W_BYTES + MINFER_GEMM_X_BYTES);
    float* Cs = reinterpret_cast<float*>(minfer_gemm_smem + MINFER_GEMM_W_BYTES + 2 * MINFER_GEMM_X_BYTES);

    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int wm = warp / 4; // 0..1: token half
    const int wn = warp % 4; // 0..3: row quarter
    const int n0 = blockIdx.x * MINFER_GEMM_BN;
    const int m0 = blockIdx.y * MINFER_GEMM_BM;
    const size_t rowBytes = minfer_row_bytes<T>(k);

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < k; k0 += MINFER_GEMM_BK) {
        // Weight tile: BN rows x 4 groups of 8; adjacent threads take
        // adjacent groups of one row.
#pragma unroll
        for (int r = 0; r < (MINFER_GEMM_BN * MINFER_GEMM_BK / 8) / MINFER_GEMM_THREADS; r++) {
            const int job = tid + r * MINFER_GEMM_THREADS;
            const int lr = job / (MINFER_GEMM_BK / 8);
            const int gq = job % (MINFER_GEMM_BK / 8);
            const int row = n0 + lr;
            const int kc = k0 + 8 * gq;
            float v[8];
            if (row < n && kc + 8 <= k) {
                MinferDq<T>::group8(w + (size_t)row * rowBytes, kc / 8, v);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    v[e] = (row < n && kc + e < k) ? MinferDq<T>::at(w + (size_t)row * rowBytes, kc + e) : 0.0f;
            }
            __half* dst = Ws + lr * MINFER_GEMM_LDK + 8 * gq;
#pragma unroll
            for (int e = 0; e < 8; e++) dst[e] = __float2half_rn(v[e]);
        }
        // Activation tile: BM tokens x 4 groups of 8, split hi / lo.
#pragma unroll
        for (int r = 0; r < (MINFER_GEMM_BM * MINFER_GEMM_BK / 8) / MINFER_GEMM_THREADS; r++) {
            const int job = tid + r * MINFER_GEMM_THREADS;
            const int lt = job / (MINFER_GEMM_BK / 8);
            const int gq = job % (MINFER_GEMM_BK / 8);
            const int tok = m0 + lt;
            const int kc = k0 + 8 * gq;
            const float* xs = x + (size_t)tok * k + kc;
            __half* dh = Xh + lt * MINFER_GEMM_LDK + 8 * gq;
            __half* dl = Xl + lt * MINFER_GEMM_LDK + 8 * gq;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float xv = (tok < nt && kc + e < k) ? xs[e] : 0.0f;
                const __half h = __float2half_rn(xv);
                dh[e] = h;
                dl[e] = __float2half_rn(__fsub_rn(xv, __half2float(h)));
            }
        }
        __syncthreads();

#pragma unroll
        for (int kk = 0; kk < MINFER_GEMM_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> ah[2], al[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int off = (32 * wm + 16 * i) * MINFER_GEMM_LDK + kk;
                wmma::load_matrix_sync(ah[i], Xh + off, MINFER_GEMM_LDK);
                wmma::load_matrix_sync(al[i], Xl + off, MINFER_GEMM_LDK);
            }
#pragma unroll
            for (int j = 0; j < 2; j++)
                wmma::load_matrix_sync(b[j], Ws + (32 * wn + 16 * j) * MINFER_GEMM_LDK + kk, MINFER_GEMM_LDK);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    wmma::mma_sync(acc[i][j], ah[i], b[j], acc[i][j]);
                    wmma::mma_sync(acc[i][j], al[i], b[j], acc[i][j]);
                }
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(Cs + (32 * wm + 16 * i) * MINFER_GEMM_LDC + 32 * wn + 16 * j, acc[i][j],
                                    MINFER_GEMM_LDC, wmma::mem_row_major);
    __syncthreads();

    for (int idx = tid; idx < MINFER_GEMM_BM * MINFER_GEMM_BN; idx += MINFER_GEMM_THREADS) {
        const int lt = idx / MINFER_GEMM_BN;
        const int lc = idx % MINFER_GEMM_BN;
        const int tok = m0 + lt;
        const int row = n0 + lc;
        if (tok < nt && row < n) {
            float r = Cs[lt * MINFER_GEMM_LDC + lc];
            if (bias != nullptr) r += bias[row];
            out[(size_t)tok * n + row] = r;
        }
    }
}

// grid (ceil(n / BN), ceil(nt / BM)), block (MINFER_GEMM_THREADS),
// dynamic smem MINFER_GEMM_SMEM_BYTES.
#define MINFER_GEMM_KERNEL(name, T)                                                                       \
    extern "C" __global__ void __launch_bounds__(MINFER_GEMM_THREADS)                                     \
        minfer_gemm_##name(float* out, const float* x, const uint8_t* w, const float* bias, int k, int n, \
                           int nt) {                                                                      \
        minfer_gemm_body<T>(out, x, w, bias, k, n, nt);                                                   \
    }

MINFER_GEMM_KERNEL(f32, MINFER_T_F32)
MINFER_GEMM_KERNEL(f16, MINFER_T_F16)
MINFER_GEMM_KERNEL(bf16, MINFER_T_BF16)
MINFER_GEMM_KERNEL(q4_0, MINFER_T_Q4_0)
MINFER_GEMM_KERNEL(q4_1, MINFER_T_Q4_1)
MINFER_GEMM_KERNEL(q5_0, MINFER_T_Q5_0)
MINFER_GEMM_KERNEL(q5_1, MINFER_T_Q5_1)
MINFER_GEMM_KERNEL(q8_0, MINFER_T_Q8_0)
MINFER_GEMM_KERNEL(q4_k, MINFER_T_Q4_K)
MINFER_GEMM_KERNEL(q5_k, MINFER_T_Q5_K)
MINFER_GEMM_KERNEL(q6_k, MINFER_T_Q6_K)

#undef MINFER_GEMM_KERNEL
