// rope.cuh: the rotary-embedding arithmetic shared by minfer_rope_f32 and
// the fused minfer_qkv_rope_store, so the two are bitwise equal by
// construction. engine/cpu ropeTable / rope (exec.go): pair i < n_rot/2
// rotates by angle pos * theta^(-2i/n_rot), computed in double (pow,
// sincos) and rounded once to f32; y_a = f32(x_a*c) - f32(x_b*s), y_b =
// f32(x_a*s) + f32(x_b*c) with every operation rounded (no contraction).
#ifndef MINFER_ROPE_CUH
#define MINFER_ROPE_CUH

namespace mops {

// rope_angle: cos and sin of pair i at position p, rounded once to f32.
// The product p * freq is an explicit rounded multiply so that no context
// can contract it into the argument reduction of sincos.
__device__ __forceinline__ void rope_angle(double p, int i, int n_rot, float theta, float* c, float* s) {
    const double freq = pow((double)theta, (-2.0 * (double)i) / (double)n_rot);
    double sd, cd;
    sincos(__dmul_rn(p, freq), &sd, &cd);
    *c = (float)cd;
    *s = (float)sd;
}

// rope_dims: the two dims of pair i (neox: i, i + half; else 2i, 2i+1).
__device__ __forceinline__ void rope_dims(int i, int half, int neox, int* a, int* b) {
    *a = neox ? i : 2 * i;
    *b = neox ? i + half : 2 * i + 1;
}

// rope_rotate: (x0, x1) rotated by (c, s).
__device__ __forceinline__ void rope_rotate(float x0, float x1, float c, float s, float* y0, float* y1) {
    *y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    *y1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

} // namespace mops

#endif // MINFER_ROPE_CUH
