// norm.cu: row reductions: RMS norm (rms_norm and per-head qk_norm) and the
// row softmax. One block per row. Semantics are engine/cpu's rmsNorm and
// softmax (exec.go): y = f32(x * scale) * w with scale = 1/sqrt(mean(x^2) +
// eps) (the square root in double, rounded once, as the CPU does); softmax of
// x*scale max-subtracted with exp in double rounded to f32, normalised by
// multiplying with 1/sum. The sums are block tree sums (the CPU sums in
// index order: the difference is f32 rounding).
#include "common.cuh"

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
template <int K>
__device__ __forceinline__ void rms_row(float* yr, const float* xr, const float* w, int n, float eps, float* scratch) {
    const int tid = threadIdx.x, nb = blockDim.x;
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
        if (i < n) {
            const float v = __fmul_rn(xv[m], scale);
            yr[i] = w ? __fmul_rn(v, wv[m]) : v;
        }
    }
    for (int i = tid + K * nb; i < n; i += nb) {
        const float v = __fmul_rn(xr[i], scale);
        yr[i] = w ? __fmul_rn(v, w[i]) : v;
    }
}
} // namespace mops

// One block per row of n values (block = launch_ops.go opsRowBlock(n));
// w == nullptr means no weight. The register depth is picked per launch by
// the (block-uniform) values per thread: 4 covers rows up to 1024 at 256
// threads (qwen2-0.5b's 896, every qk_norm head row), 16 up to 4096.
extern "C" __global__ void minfer_rms_norm_f32(float* out, const float* x, const float* w, int n, float eps) {
    __shared__ float scratch[32];
    const long long row = blockIdx.x;
    const float* xr = x + row * n;
    float* yr = out + row * n;
    const int per = (n + blockDim.x - 1) / blockDim.x;
    if (per <= 4) {
        mops::rms_row<4>(yr, xr, w, n, eps, scratch);
    } else {
        mops::rms_row<16>(yr, xr, w, n, eps, scratch);
    }
}

// One block per row of n values: out = softmax(x * scale).
extern "C" __global__ void minfer_softmax_f32(float* out, const float* x, int n, float scale) {
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
