// q8_1.cuh: the Q8_1 activation arithmetic shared by minfer_quantize_q8_1
// (quantize_act.cu) and minfer_quantize_q8_1_x4 (quantize_act_x4.cu): one
// definition, so both give the same bytes.
//   d = amax / 127 (IEEE), id = 1 / d (0 when d is 0),
//   q = round-half-away-from-zero(x * id) clamped to [-128, 127].
#ifndef MINFER_Q8_1_CUH
#define MINFER_Q8_1_CUH

// A block of 32 values: f16 d, f16 s, 32 int8 q.
#define MINFER_Q8_1_BYTES 36

__device__ __forceinline__ int minfer_qact_round(float v) {
    if (!(v > -128.5f)) return -128; // also NaN, as blockRoundAway
    if (v >= 127.5f) return 127;
    return (int)roundf(v); // half away from zero
}

// minfer_q8_1_scale returns d and sets *id for a block whose max |x| is amax.
__device__ __forceinline__ float minfer_q8_1_scale(float amax, float* id) {
    const float d = __fdiv_rn(amax, 127.0f);
    *id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    return d;
}

__device__ __forceinline__ int minfer_q8_1_quant(float v, float id) { return minfer_qact_round(__fmul_rn(v, id)); }

// The f16 bits of d and of s = d * sum q (d in f32, one rounding to f16).
__device__ __forceinline__ unsigned short minfer_q8_1_dbits(float d) { return __half_as_ushort(__float2half_rn(d)); }
__device__ __forceinline__ unsigned short minfer_q8_1_sbits(int sum, float d) {
    return __half_as_ushort(__float2half_rn(__fmul_rn((float)sum, d)));
}

// minfer_q8_1_warp writes at b the Q8_1 block of the 32 values a warp
// holds, lane l value l (every lane takes part in the shuffles; lane 0
// writes d and s). max |x| and the sum of q are exact, so the order of the
// xor trees does not matter.
__device__ __forceinline__ void minfer_q8_1_warp(uint8_t* b, float v, int lane) {
    float amax = fabsf(v);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    float id;
    const float d = minfer_q8_1_scale(amax, &id);
    const int q = minfer_q8_1_quant(v, id);
    int sum = q;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    b[4 + lane] = (uint8_t)(int8_t)q;
    if (lane == 0) {
        unsigned short* h = reinterpret_cast<unsigned short*>(b);
        h[0] = minfer_q8_1_dbits(d);
        h[1] = minfer_q8_1_sbits(sum, d);
    }
}

#endif // MINFER_Q8_1_CUH
