// mma.h (emulation): nvcuda::wmma for the g++ kernel emulation, 16x16x16
// only. Every lane of the emulated warp holds a whole fragment (the
// hardware's element-to-lane mapping is opaque to WMMA code, so a kernel
// cannot tell); a product is summed in f32 in k order, where the tensor
// core's order is its own: results agree to f32 rounding, not bitwise. A
// store writes every 32nd element per lane, so no two lanes write one word.
#pragma once
#include "cuda_fp16.h"
namespace nvcuda {
namespace wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulation has 16x16x16 only");
    float v[256]; // [row][col] of the fragment's matrix (A: m x k, B: k x n, C: m x n)
};
template <class Use, class T, class L> inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const __half* p, unsigned ld) {
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.v[r * 16 + c] = __half2float(std::is_same<L, col_major>::value ? p[c * ld + r] : p[r * ld + c]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ld, layout_t l) {
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.v[r * 16 + c] = l == mem_col_major ? p[c * ld + r] : p[r * ld + c];
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ld, layout_t l) {
    for (int i = threadIdx.x & 31; i < 256; i += 32) {
        const int r = i / 16, c = i % 16;
        (l == mem_col_major ? p[c * ld + r] : p[r * ld + c]) = f.v[i];
    }
    __syncwarp();
}
template <class Use, class T, class L> inline void fill_fragment(fragment<Use, 16, 16, 16, T, L>& f, float x) {
    for (float& e : f.v) e = x;
}
template <class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, __half, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, __half, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
    float t[256];
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            float s = c.v[r * 16 + n];
            for (int k = 0; k < 16; k++) s += a.v[r * 16 + k] * b.v[k * 16 + n];
            t[r * 16 + n] = s;
        }
    memcpy(d.v, t, sizeof t);
}
} // namespace wmma
} // namespace nvcuda
