// rope.cu: rotary position embedding of x [hd, nh, nt] at positions pos (i32
// device array of nt, read inside the kernel so a captured graph replays
// with fresh positions). engine/cpu's ropeTable / rope (exec.go): pair i <
// n_rot/2 rotates by angle pos * theta^(-2i/n_rot), computed in double
// (pow, sincos) and rounded once to f32; neox pairs (i, i + n_rot/2),
// interleaved pairs (2i, 2i+1); y_a = f32(x_a*c) - f32(x_b*s), y_b =
// f32(x_a*s) + f32(x_b*c) without contraction, so the kernel is bitwise the
// CPU's whenever the double sin/cos round to the same f32. Dimensions at or
// beyond n_rot are copied (n_rot == hd is the CPU's op). out may alias x.
#include "common.cuh"

// One block per token; dynamic smem: n_rot floats (cos, sin per pair).
extern "C" __global__ void minfer_rope_f32(float* out, const float* x, const int* pos, int nh, int hd, int n_rot,
                                           float theta, int neox) {
    extern __shared__ float rope_cs[];
    const int t = blockIdx.x;
    const int half = n_rot / 2;
    const double p = (double)pos[t];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const double freq = pow((double)theta, (-2.0 * (double)i) / (double)n_rot);
        double s, c;
        sincos(p * freq, &s, &c);
        rope_cs[2 * i] = (float)c;
        rope_cs[2 * i + 1] = (float)s;
    }
    __syncthreads();
    const long long base = (long long)t * nh * hd;
    const int pairs = nh * half;
    for (int j = threadIdx.x; j < pairs; j += blockDim.x) {
        const int h = j / half, i = j % half;
        const long long o = base + (long long)h * hd;
        const int a = neox ? i : 2 * i;
        const int b = neox ? i + half : 2 * i + 1;
        const float c = rope_cs[2 * i], s = rope_cs[2 * i + 1];
        const float x0 = x[o + a], x1 = x[o + b];
        out[o + a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        out[o + b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
    if (n_rot < hd && out != x) {
        const int rest = hd - n_rot;
        for (int j = threadIdx.x; j < nh * rest; j += blockDim.x) {
            const long long o = base + (long long)(j / rest) * hd + n_rot + j % rest;
            out[o] = x[o];
        }
    }
}
