// mmv.cu: decode and small-batch matmul (nt = 1..8 tokens), f32 activations,
// every weight type.
//
//   out[t][j] = sum_i W[j][i] * x[t][i] (+ bias[j])
//
// W is n rows of k values in their GGUF block format (row j starts at
// j * rowBytes(k)); x is nt rows of k f32; out is nt rows of n f32.
//
// One warp per output row, MINFER_MMV_ROWS rows per block. Lane l walks the
// row's 8-value groups l, l + 32, l + 64, ... (adjacent lanes read adjacent
// bytes), dequantizes each group into registers (dequant.cuh, bit-identical
// to the CPU dequantizer), and FMAs it against the nt activation rows, so
// each weight row is read once for all nt tokens. The per-lane partial sums
// are reduced with a butterfly. Plain types (F32/F16/BF16) may have k not a
// multiple of 8: the tail is read element-wise.
//
// Kernel names: minfer_mmv_<type> (one per weight type, so the launch census
// names the path); nt is a runtime argument in 1..8 that selects a body
// specialized on nt (the accumulators stay in registers).
#include "dequant.cuh"

#define MINFER_MMV_ROWS 4
#define MINFER_MMV_THREADS (32 * MINFER_MMV_ROWS)
#define MINFER_MMV_MAX_NT 8

template <int T, int NT>
__device__ __forceinline__ void minfer_mmv_body(float* __restrict__ out, const float* __restrict__ x,
                                                const uint8_t* __restrict__ w, const float* __restrict__ bias,
                                                int k, int n) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * MINFER_MMV_ROWS + (threadIdx.x >> 5);
    if (row >= n) return; // the whole warp leaves together
    const uint8_t* wr = w + (size_t)row * minfer_row_bytes<T>(k);

    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;

    const int ng = k / 8;
    for (int g = lane; g < ng; g += 32) {
        float v[8];
        MinferDq<T>::group8(wr, g, v);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float* xt = x + (size_t)t * k + 8 * (size_t)g;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[t] = __fmaf_rn(v[e], xt[e], acc[t]);
        }
    }
    // Tail: only plain types can have k % 8 != 0 (block types are validated
    // to whole blocks by the launcher).
    for (int i = 8 * ng + lane; i < k; i += 32) {
        const float wv = MinferDq<T>::at(wr, i);
#pragma unroll
        for (int t = 0; t < NT; t++) acc[t] = __fmaf_rn(wv, x[(size_t)t * k + i], acc[t]);
    }

#pragma unroll
    for (int t = 0; t < NT; t++) {
        float s = acc[t];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        acc[t] = s;
    }
    // Lane t writes token t (every lane holds every reduced sum).
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (lane == t) {
            float r = acc[t];
            if (bias != nullptr) r += bias[row];
            out[(size_t)t * n + row] = r;
        }
    }
}

template <int T>
__device__ __forceinline__ void minfer_mmv_dispatch(float* out, const float* x, const uint8_t* w,
                                                    const float* bias, int k, int n, int nt) {
    switch (nt) {
    case 1: minfer_mmv_body<T, 1>(out, x, w, bias, k, n); break;
    case 2: minfer_mmv_body<T, 2>(out, x, w, bias, k, n); break;
    case 3: minfer_mmv_body<T, 3>(out, x, w, bias, k, n); break;
    case 4: minfer_mmv_body<T, 4>(out, x, w, bias, k, n); break;
    case 5: minfer_mmv_body<T, 5>(out, x, w, bias, k, n); break;
    case 6: minfer_mmv_body<T, 6>(out, x, w, bias, k, n); break;
    case 7: minfer_mmv_body<T, 7>(out, x, w, bias, k, n); break;
    case 8: minfer_mmv_body<T, 8>(out, x, w, bias, k, n); break;
    default: __trap(); // the launcher validates 1 <= nt <= 8
    }
}

// grid (ceil(n / MINFER_MMV_ROWS)), block (MINFER_MMV_THREADS), no smem.
#define MINFER_MMV_KERNEL(name, T)                                                                       \
    extern "C" __global__ void __launch_bounds__(MINFER_MMV_THREADS)                                     \
        minfer_mmv_##name(float* out, const float* x, const uint8_t* w, const float* bias, int k, int n, \
                          int nt) {                                                                      \
        minfer_mmv_dispatch<T>(out, x, w, bias, k, n, nt);                                               \
    }

MINFER_MMV_KERNEL(f32, MINFER_T_F32)
MINFER_MMV_KERNEL(f16, MINFER_T_F16)
MINFER_MMV_KERNEL(bf16, MINFER_T_BF16)
MINFER_MMV_KERNEL(q4_0, MINFER_T_Q4_0)
MINFER_MMV_KERNEL(q4_1, MINFER_T_Q4_1)
MINFER_MMV_KERNEL(q5_0, MINFER_T_Q5_0)
MINFER_MMV_KERNEL(q5_1, MINFER_T_Q5_1)
MINFER_MMV_KERNEL(q8_0, MINFER_T_Q8_0)
MINFER_MMV_KERNEL(q4_k, MINFER_T_Q4_K)
MINFER_MMV_KERNEL(q5_k, MINFER_T_Q5_K)
MINFER_MMV_KERNEL(q6_k, MINFER_T_Q6_K)

#undef MINFER_MMV_KERNEL
