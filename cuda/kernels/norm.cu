// norm.cu: row reductions: RMS norm (rms_norm and per-head qk_norm) and the
// row softmax. One block per row. Semantics are engine/cpu's rmsNorm and
// softmax (exec.go): y = f32(x * scale) * w with scale = 1/sqrt(mean(x^2) +
// eps) (the square root in double, rounded once, as the CPU does); softmax of
// x*scale max-subtracted with exp in double rounded to f32, normalised by
// multiplying with 1/sum. The sums are block tree sums (the CPU sums in
// index order: the difference is f32 rounding).
#include "common.cuh"
#include "q8_1.cuh"

namespace mops {
// rms_scale loads one row with K values of x and w per thread into
// registers (values beyond K * blockDim are read again by the caller) and
// returns the row's scale 1/sqrt(mean(x^2) + eps).
//
// Thread j sums x[j], x[j + B], x[j + 2B], ... (B = blockDim.x) in that order,
// then the block tree sum: the same partial sums and the same reduction as
// the two-loop form it replaced, so the result is bitwise unchanged. Every
// thread issues all its loads of x and w up front (predicated), so a row
// costs one global round trip instead of two dependent ones, and the
// scaling reads registers.
template <int K>
__device__ __forceinline__ float rms_scale(const float* xr, const float* w, int n, float eps, float* scratch, float (&xv)[K],
                                           float (&wv)[K]) {
    const int tid = threadIdx.x, nb = blockDim.x;
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
    return scale;
}

// rms_row normalises one row (rms_scale's loads and scale) into yr.
template <int K>
__device__ __forceinline__ void rms_row(float* yr, const float* xr, const float* w, int n, float eps, float* scratch) {
    const int tid = threadIdx.x, nb = blockDim.x;
    float xv[K], wv[K];
    const float scale = rms_scale<K>(xr, w, n, eps, scratch, xv, wv);
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

// rms_q8_1 normalises one row of n <= K * blockDim values (n % 32 == 0,
// blockDim % 32 == 0) as rms_row does and writes its Q8_1 quantization
// instead: at depth m a warp holds the 32 consecutive values of block
// (m * blockDim + 32 warp) / 32, quantized as minfer_quantize_q8_1 does
// (the same amax, d, id, q and sum: its bytes).
template <int K>
__device__ __forceinline__ void rms_q8_1(uint8_t* dst, const float* xr, const float* w, int n, float eps, float* scratch) {
    const int tid = threadIdx.x, nb = blockDim.x, lane = tid & 31;
    float xv[K], wv[K];
    const float scale = rms_scale<K>(xr, w, n, eps, scratch, xv, wv);
#pragma unroll
    for (int m = 0; m < K; m++) {
        const int i0 = m * nb + (tid & ~31); // the warp's block starts here
        if (i0 >= n) break;                  // warp-uniform
        const float y = __fmul_rn(xv[m], scale);
        minfer_q8_1_warp(dst + (size_t)(i0 / 32) * MINFER_Q8_1_BYTES, w ? __fmul_rn(y, wv[m]) : y, lane);
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

// minfer_rms_norm_q8_1 (MINFER_FUSE_NORM_Q8): one row of n values normalised
// as minfer_rms_norm_f32 does (the same block, opsRowBlock(n), so the same
// sums and values) and written as its Q8_1 quantization (n / 32 blocks of
// 36 bytes at dst, minfer_quantize_q8_1's bytes) instead of as f32: the
// decode row before the q/k/v or gate/up matvecs, one launch instead of
// two. n % 32 == 0 and n <= 16 blockDim (the launcher checks).
extern "C" __global__ void minfer_rms_norm_q8_1(uint8_t* dst, const float* x, const float* w, int n, float eps) {
    __shared__ float scratch[32];
    const int per = (n + blockDim.x - 1) / blockDim.x;
    if (per <= 4) {
        mops::rms_q8_1<4>(dst, x, w, n, eps, scratch);
    } else {
        mops::rms_q8_1<16>(dst, x, w, n, eps, scratch);
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
