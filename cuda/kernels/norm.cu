// norm.cu: row reductions: RMS norm (rms_norm and per-head qk_norm) and the
// row softmax. One block per row. Semantics are engine/cpu's rmsNorm and
// softmax (exec.go): y = f32(x * scale) * w with scale = 1/sqrt(mean(x^2) +
// eps) (the square root in double, rounded once, as the CPU does); softmax of
// x*scale max-subtracted with exp in double rounded to f32, normalised by
// multiplying with 1/sum. The sums are block tree sums (the CPU sums in
// index order: the difference is f32 rounding).
#include "common.cuh"

// One block per row of n values; w == nullptr means no weight.
extern "C" __global__ void minfer_rms_norm_f32(float* out, const float* x, const float* w, int n, float eps) {
    __shared__ float scratch[32];
    const long long row = blockIdx.x;
    const float* xr = x + row * n;
    float* yr = out + row * n;
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = xr[i];
        s = __fadd_rn(s, __fmul_rn(v, v));
    }
    s = mops::block_sum(s, scratch);
    const float mean = __fdiv_rn(s, (float)n);
    const float scale = __fdiv_rn(1.0f, (float)sqrt((double)__fadd_rn(mean, eps)));
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = __fmul_rn(xr[i], scale);
        yr[i] = w ? __fmul_rn(v, w[i]) : v;
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
