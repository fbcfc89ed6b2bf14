// common.cuh: device helpers shared by the op kernels (elementwise, norm,
// rope, embed, kv, attention): warp/block reductions, f16 bits <-> f32, the
// one KV element-load idiom and the q8_0 block quantizer of the KV store.
//
// Everything lives in namespace mops so that the one translation unit of
// scripts/build-kernels.sh cannot collide with helpers of other families.
#ifndef MINFER_COMMON_CUH
#define MINFER_COMMON_CUH

#include <cuda_fp16.h>
#include <stdint.h>

namespace mops {

// KV storage formats: the same codes as engine/kv.Format.
enum : int { KV_F32 = 0, KV_F16 = 1, KV_Q8_0 = 2 };

// Bytes of one q8_0 block (f16 d + 32 int8) and its value count.
constexpr int Q8_0_BYTES = 34;
constexpr int Q8_0_LEN = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// block_sum reduces v over the whole block (blockDim.x a multiple of 32, at
// most 1024); every thread gets the result. scratch holds 32 floats. The
// block synchronizes, so every thread must call it.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nw ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

// block_max as block_sum, with -inf as the identity.
__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nw ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

// f16 bits -> f32 (exact).
__device__ __forceinline__ float half_bits_to_float(uint16_t h) {
    return __half2float(__ushort_as_half(h));
}

// f32 -> f16 bits, round to nearest even (quant.FP32ToFP16).
__device__ __forceinline__ uint16_t float_to_half_bits(float f) {
    return __half_as_ushort(__float2half_rn(f));
}

// Byte address of one KV cell: the one kv-row addressing idiom.
__device__ __forceinline__ const uint8_t* kv_row(const uint8_t* region, long long cell, long long row_bytes) {
    return region + cell * row_bytes;
}
__device__ __forceinline__ uint8_t* kv_row(uint8_t* region, long long cell, long long row_bytes) {
    return region + cell * row_bytes;
}

// kv_elem reads element i of a KV row as f32 (kv.LoadRow): f32, f16 or a
// q8_0 value d * q.
__device__ __forceinline__ float kv_elem(int format, const uint8_t* row, int i) {
    if (format == KV_F32) return reinterpret_cast<const float*>(row)[i];
    if (format == KV_F16) return half_bits_to_float(reinterpret_cast<const uint16_t*>(row)[i]);
    const uint8_t* blk = row + (i / Q8_0_LEN) * Q8_0_BYTES;
    const float d = half_bits_to_float(*reinterpret_cast<const uint16_t*>(blk));
    return __fmul_rn(d, (float)(int8_t)blk[2 + (i % Q8_0_LEN)]);
}

// round_away is quant.blockRoundAway: roundf (half away from zero) clamped
// to int8, NaN -> -128.
__device__ __forceinline__ int round_away_i8(float v) {
    if (!(v > -128.5f)) return -128;
    if (v >= 127.5f) return 127;
    int t = (int)v;
    const float f = __fsub_rn(v, (float)t);
    if (f >= 0.5f) t++;
    else if (f <= -0.5f) t--;
    return t;
}

// q8_0_store_warp quantizes one block of 32 values, one per lane of a full
// warp (value x of this lane), into blk: quantize_row_q8_0_ref step for step
// (amax fold MAX(amax, |x|), d = amax/127, id = 1/d or 0, q = roundf(x*id)).
__device__ __forceinline__ void q8_0_store_warp(uint8_t* blk, float x, int lane) {
    float a = fabsf(x);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float b = __shfl_xor_sync(0xffffffffu, a, o);
        a = (a > b) ? a : b; // the order-free part of the fold; NaN aside
    }
    const float d = __fdiv_rn(a, 127.0f);
    const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    if (lane == 0) *reinterpret_cast<uint16_t*>(blk) = float_to_half_bits(d);
    blk[2 + lane] = (uint8_t)(int8_t)round_away_i8(__fmul_rn(x, id));
}

} // namespace mops

#endif // MINFER_COMMON_CUH
