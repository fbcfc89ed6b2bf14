// norm.cu: row reductions: RMS norm (rms_norm and per-head qk_norm) and the
// row softmax. One block per row. Semantics are engine/cpu's rmsNorm and
// softmax (exec.go): y = f32(x * scale) * w with scale = 1/sqrt(mean(x^2) +
// eps) (the square root in double, rounded once, as the CPU does); softmax of
// x*scale max-subtracted with exp in double rounded to f32, normalised by
// multiplying with 1/sum. The sums are block tree sums (the CPU sums in
// index order: the difference is f32 rounding).
#include "common.cuh"
#include "pdl.cuh"
#include "q8_1.cuh"

namespace mops {
// rms_row normalises one row with K values of x and w per thread kept in
// registers between the sum and the scaling (rows up to K * blockDim in one
// pass over memory; values beyond are read again, as before).
//
// Thread j sums x[j], x[j + B], x[j + 2B], ... (B = blockDim.x) in that order,
// then the block tree sum: the same partial sums and the same reduction as
// the two-loop form it replaces, so the result is bitwise unchanged. What
// changed is the memory schedule: every thread issues all its loads of x and
// w up front (predicated), so a row costs one global round trip instead of
// two dependent ones (x for the sum, then x again and w for the scaling),
// and the scaling reads registers.
//
// Q8 (minfer_rms_norm_q8_1) also writes the Q8_1 blocks of the output row to
// qr. With blockDim a multiple of 32 and n a multiple of 32, the values a
// warp scales in one step (i = tid + m * B, or one pass of the tail loop) are
// one whole 32-aligned Q8_1 block, lane j holding value j, and the bounds
// test is warp-uniform: the warp quantizes the f32 values it just stored,
// from registers (minfer_q8_1_warp_block, the bytes of minfer_quantize_q8_1).
template <int K, bool Q8>
__device__ __forceinline__ void rms_row(float* yr, const float* xr, const float* w, int n, float eps, float* scratch,
                                        uint8_t* qr) {
    const int tid = threadIdx.x, nb = blockDim.x, lane = tid & 31;
    float xv[K], wv[K];
#pragma unroll
    for (int m = 0; m < K; m++) {
        const int i = tid + m * nb;
        xv[m] = i < n ? xr[i] : 0.0f;
        wv[m] = (w != nullptr && i < n) ? w[i] : 1.0f;
    }
    float s = 0.0f;
#pragma unroll
    for (int m = 0; m < K; m++) {
        if (tid + m * nb < n) s = __fadd_rn(s, __fmul_rn(xv[m], xv[m]));
    }
    for (int i = tid + K * nb; i < n; i += nb) {
        const float v = xr[i];
        s = __fadd_rn(s, __fmul_rn(v, v));
    }
    s = block_sum(s, scratch);
    const float mean = __fdiv_rn(s, (float)n);
    const float scale = __fdiv_rn(1.0f, (float)sqrt((double)__fadd_rn(mean, eps)));
#pragma unroll
    for (int m = 0; m < K; m++) {
        const int i = tid + m * nb;
        float y = 0.0f;
        if (i < n) {
            const float v = __fmul_rn(xv[m], scale);
            y = w ? __fmul_rn(v, wv[m]) : v;
            yr[i] = y;
        }
        if constexpr (Q8) {
            if (i - lane < n) minfer_q8_1_warp_block(qr + (size_t)(i >> 5) * 36, y, lane);
        }
    }
    for (int i = tid + K * nb; i < n; i += nb) {
        const float v = __fmul_rn(xr[i], scale);
        const float y = w ? __fmul_rn(v, w[i]) : v;
        yr[i] = y;
        if constexpr (Q8) minfer_q8_1_warp_block(qr + (size_t)(i >> 5) * 36, y, lane);
    }
}
} // namespace mops

// One block per row of n values (block = launch_ops.go opsRowBlock(n));
// w == nullptr means no weight. The register depth is picked per launch by
// the (block-uniform) values per thread: 4 covers rows up to 1024 at 256
// threads (qwen2-0.5b's 896, every qk_norm head row), 16 up to 4096.
extern "C" __global__ void minfer_rms_norm_f32(float* out, const float* x, const float* w, int n, float eps) {
    MINFER_KERNEL_ENTRY();
    __shared__ float scratch[32];
    const long long row = blockIdx.x;
    const float* xr = x + row * n;
    float* yr = out + row * n;
    const int per = (n + blockDim.x - 1) / blockDim.x;
    if (per <= 4) {
        mops::rms_row<4, false>(yr, xr, w, n, eps, scratch, nullptr);
    } else {
        mops::rms_row<16, false>(yr, xr, w, n, eps, scratch, nullptr);
    }
}

// minfer_rms_norm_q8_1 is minfer_rms_norm_f32 (same geometry, same
// reduction, bitwise the same out) that also writes each output row's Q8_1
// blocks to q: row r's n / 32 blocks of 36 bytes at r * (n / 32) * 36, the
// bytes minfer_quantize_q8_1 gives for that out row. The decode rms_norm
// feeding MMVQ matmuls (lever MINFER_NORM_Q8) so they need no quantize
// launch. n must be a multiple of 32 and blockDim a multiple of 32 (the
// launcher, RmsNormQ8_1, refuses other shapes); q 2-byte aligned.
extern "C" __global__ void minfer_rms_norm_q8_1(float* out, uint8_t* q, const float* x, const float* w, int n, float eps) {
    MINFER_KERNEL_ENTRY();
    __shared__ float scratch[32];
    const long long row = blockIdx.x;
    const float* xr = x + row * n;
    float* yr = out + row * n;
    uint8_t* qr = q + row * (long long)(n / 32) * 36;
    const int per = (n + blockDim.x - 1) / blockDim.x;
    if (per <= 4) {
        mops::rms_row<4, true>(yr, xr, w, n, eps, scratch, qr);
    } else {
        mops::rms_row<16, true>(yr, xr, w, n, eps, scratch, qr);
    }
}

// One block per row of n values: out = softmax(x * scale).
extern "C" __global__ void minfer_softmax_f32(float* out, const float* x, int n, float scale) {
    MINFER_KERNEL_ENTRY();
    __shared__ float scratch[32];
    const long long row = blockIdx.x;
    const float* xr = x + row * n;
    float* yr = out + row * n;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, __fmul_rn(xr[i], scale));
    mx = mops::block_max(mx, scratch);
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float e = (float)exp((double)__fsub_rn(__fmul_rn(xr[i], scale), mx));
        yr[i] = e;
        s = __fadd_rn(s, e);
    }
    s = mops::block_sum(s, scratch);
    const float inv = __fdiv_rn(1.0f, s);
    for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = __fmul_rn(yr[i], inv);
}
