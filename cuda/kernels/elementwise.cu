// elementwise.cu: f32 element-wise ops (add, mul with row broadcast, silu,
// swiglu, scale, copy, byte copy, permute). Semantics are engine/cpu's
// (exec.go): silu(x) = x / (1 + exp(-x)) with the exponential taken in
// double precision and rounded once to f32, as the CPU does.
#include "common.cuh"

namespace mops {

__device__ __forceinline__ float silu_ref(float x) {
    const float e = (float)exp(-(double)x);
    return __fdiv_rn(x, __fadd_rn(1.0f, e));
}

} // namespace mops

// out[i] = a[i] + b[i % nb]: nb == n is the plain add, nb == row length
// broadcasts one row of b over the rows of a (bias add).
extern "C" __global__ void minfer_add_f32(float* out, const float* a, const float* b, long long n, long long nb) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        out[i] = __fadd_rn(a[i], b[nb == n ? i : i % nb]);
    }
}

// out[i] = a[i] * b[i % nb].
extern "C" __global__ void minfer_mul_f32(float* out, const float* a, const float* b, long long n, long long nb) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        out[i] = __fmul_rn(a[i], b[nb == n ? i : i % nb]);
    }
}

extern "C" __global__ void minfer_silu_f32(float* out, const float* x, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        out[i] = mops::silu_ref(x[i]);
    }
}

// out[i] = silu(gate[i]) * up[i].
extern "C" __global__ void minfer_swiglu_f32(float* out, const float* gate, const float* up, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        out[i] = __fmul_rn(mops::silu_ref(gate[i]), up[i]);
    }
}

extern "C" __global__ void minfer_scale_f32(float* out, const float* x, float f, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        out[i] = __fmul_rn(x[i], f);
    }
}

extern "C" __global__ void minfer_copy_f32(float* dst, const float* src, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        dst[i] = src[i];
    }
}

// minfer_copy_bytes copies n bytes (non-overlapping), 4 at a time when both
// pointers and n are 4-byte aligned.
extern "C" __global__ void minfer_copy_bytes(uint8_t* dst, const uint8_t* src, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | (uintptr_t)n) & 3) == 0) {
        uint32_t* d4 = reinterpret_cast<uint32_t*>(dst);
        const uint32_t* s4 = reinterpret_cast<const uint32_t*>(src);
        for (long long i = first; i < n / 4; i += stride) d4[i] = s4[i];
        return;
    }
    for (long long i = first; i < n; i += stride) dst[i] = src[i];
}

// minfer_permute_f32 copies x into out with axes permuted (graph.OpPermute):
// out has dims (d0, d1, d2, d3), ne0 innermost, and out axis i advances the
// input by s_i elements (the input stride of axis perm[i]).
extern "C" __global__ void minfer_permute_f32(float* out, const float* x, int d0, int d1, int d2, int d3,
                                              long long s0, long long s1, long long s2, long long s3) {
    const long long n = (long long)d0 * d1 * d2 * d3;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long r = i;
        const long long i0 = r % d0; r /= d0;
        const long long i1 = r % d1; r /= d1;
        const long long i2 = r % d2; r /= d2;
        const long long i3 = r;
        out[i] = x[i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3];
    }
}
