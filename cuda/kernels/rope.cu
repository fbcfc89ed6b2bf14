// rope.cu: rotary position embedding of x [hd, nh, nt] at positions pos (i32
// device array of nt, read inside the kernel so a captured graph replays
// with fresh positions). engine/cpu's ropeTable / rope (exec.go): pair i <
// n_rot/2 rotates by angle pos * theta^(-2i/n_rot), computed in double
// (pow, sincos) and rounded once to f32; neox pairs (i, i + n_rot/2),
// interleaved pairs (2i, 2i+1); y_a = f32(x_a*c) - f32(x_b*s), y_b =
// f32(x_a*s) + f32(x_b*c) without contraction (rope.cuh), so the kernel is
// bitwise the CPU's whenever the double sin/cos round to the same f32.
// Dimensions at or beyond n_rot are copied (n_rot == hd is the CPU's op).
// out may alias x.
//
// Geometry (launch_ops.go Rope): grid (nt, ceil(nh / hpb)), block hpb *
// n_rot/2 threads (at most 256): thread j of a block rotates pair j % half
// of head j / half, so every thread computes its own angle once (no shared
// table, no barrier) and issues its two loads before the double-precision
// angle, which hides the load latency behind it. With more pairs than
// threads (half > 256) a thread loops and recomputes only when its pair
// index changes.
#include "common.cuh"
#include "rope.cuh"

extern "C" __global__ void minfer_rope_f32(float* out, const float* x, const int* pos, int nh, int hd, int n_rot,
                                           float theta, int neox, int hpb) {
    const int t = blockIdx.x;
    const int h0 = blockIdx.y * hpb;
    const int nhb = min(nh - h0, hpb);
    if (nhb <= 0) return;
    const int half = n_rot / 2;
    const double p = (double)pos[t];
    const long long base = ((long long)t * nh + h0) * hd;
    int ci = -1;
    float c = 0.0f, s = 0.0f;
    for (int j = threadIdx.x; j < nhb * half; j += blockDim.x) {
        const int i = j % half;
        const long long o = base + (long long)(j / half) * hd;
        int a, b;
        mops::rope_dims(i, half, neox, &a, &b);
        const float x0 = x[o + a], x1 = x[o + b]; // in flight during the angle
        if (i != ci) {
            mops::rope_angle(p, i, n_rot, theta, &c, &s);
            ci = i;
        }
        float y0, y1;
        mops::rope_rotate(x0, x1, c, s, &y0, &y1);
        out[o + a] = y0;
        out[o + b] = y1;
    }
    if (n_rot < hd && out != x) {
        const int rest = hd - n_rot;
        for (int j = threadIdx.x; j < nhb * rest; j += blockDim.x) {
            const long long o = base + (long long)(j / rest) * hd + n_rot + j % rest;
            out[o] = x[o];
        }
    }
}
