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

#endif // MINFER_Q8_1_CUH
