// mma.h (emulation): nvcuda::wmma for the g++ kernel emulation, 16x16x16
// only, and mma_16816, the mma.sync.m16n8k16 (f16 in, f32 accumulate) that
// attn_prefill2.cu issues as inline PTX, with the PTX ISA's fragment
// layouts (so a kernel that puts an element in the wrong register fails
// here as on the GPU). Every lane of the emulated warp holds a whole fragment (the
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

// The kernels define their own mma_16816 (inline PTX) unless this is set.
#define MINFER_KERNEL_EMU 1

// mma_16816: d += a b for the calling warp. Lane L (g = L / 4, t = L % 4)
// holds A (16 x 16, row-major) elements [g][2t, 2t+1] in a[0], [g+8][..]
// in a[1], [g][2t+8, 2t+9] in a[2], [g+8][2t+8, 2t+9] in a[3]; B (16 x 8,
// k x n) elements [2t, 2t+1][g] in b[0] and [2t+8, 2t+9][g] in b[1]; C and
// D [g][2t, 2t+1] in d[0..1] and [g+8][2t, 2t+1] in d[2..3]; each 32-bit
// word two f16, the lower index in the low half. Sums in f32 in k order.
inline float mma_half(uint32_t w, int hi) { return __half2float(__ushort_as_half((unsigned short)(hi ? w >> 16 : w & 0xffff))); }
// mma_gather publishes the calling lane's A and B fragment words to its
// warp and returns the slots every lane's words are in, [lane][a0..a3,
// b0, b1] (valid until the caller's next __syncwarp).
inline uint32_t (*mma_gather(const uint32_t a[4], const uint32_t b[2]))[6] {
    const int lane = threadIdx.x & 31;
    uint32_t (*m)[6] = tw->mma;
    __syncwarp();
    for (int i = 0; i < 4; i++) m[lane][i] = a[i];
    for (int i = 0; i < 2; i++) m[lane][4 + i] = b[i];
    __syncwarp();
    return m;
}
inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    uint32_t (*m)[6] = mma_gather(a, b);
    float A[16][16], B[16][8];
    for (int L = 0; L < 32; L++) {
        const int lg = L >> 2, lt = L & 3;
        for (int e = 0; e < 2; e++) {
            A[lg][2 * lt + e] = mma_half(m[L][0], e);
            A[lg + 8][2 * lt + e] = mma_half(m[L][1], e);
            A[lg][2 * lt + 8 + e] = mma_half(m[L][2], e);
            A[lg + 8][2 * lt + 8 + e] = mma_half(m[L][3], e);
            B[2 * lt + e][lg] = mma_half(m[L][4], e);
            B[2 * lt + 8 + e][lg] = mma_half(m[L][5], e);
        }
    }
    __syncwarp(); // every lane has read the slots before any writes the next
    for (int i = 0; i < 4; i++) {
        const int r = g + 8 * (i >> 1), c = 2 * t + (i & 1);
        float s = d[i];
        for (int k = 0; k < 16; k++) s += A[r][k] * B[k][c];
        d[i] = s;
    }
}

// ldsm_x4_emu: ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 for the
// calling warp. Lane L names (row) row L % 8 of matrix L / 8, 8 f16 from
// there; lane L (g = L / 4, t = L % 4) gets in r[i] elements [g][2t] and
// [g][2t + 1] of matrix i (row, column), or with trans [2t][g] and
// [2t + 1][g], the lower index in the low half.
inline void ldsm_x4_emu(uint32_t (&r)[4], const __half* row, bool trans) {
    static_assert(sizeof(const __half*) == 8, "a lane's row pointer fills two slot words");
    const int lane = threadIdx.x & 31;
    uint32_t (*m)[6] = tw->mma;
    __syncwarp();
    memcpy(&m[lane][0], &row, sizeof row);
    __syncwarp();
    unsigned short e[4][8][8]; // [matrix][row][column]
    for (int L = 0; L < 32; L++) {
        const __half* p;
        memcpy(&p, &m[L][0], sizeof p);
        for (int c = 0; c < 8; c++) e[L / 8][L % 8][c] = p[c].x;
    }
    __syncwarp();
    const int t = lane & 3, g = lane >> 2;
    for (int i = 0; i < 4; i++)
        r[i] = trans ? (uint32_t)e[i][2 * t][g] | (uint32_t)e[i][2 * t + 1][g] << 16
                     : (uint32_t)e[i][g][2 * t] | (uint32_t)e[i][g][2 * t + 1] << 16;
}
inline void ldsm_x4_trans(uint32_t (&r)[4], const __half* row) { ldsm_x4_emu(r, row, true); }
inline void ldsm_x4(uint32_t (&r)[4], const __half* row) { ldsm_x4_emu(r, row, false); }

// ex2: ex2.approx.ftz.f32 (the device's is within ~2^-22 of 2^x).
inline float ex2(float x) { return exp2f(x); }

// cp.async for the calling thread (cpasync.cuh), asynchronous as on the
// GPU: a copy's src_bytes (0..16, from a 16-byte aligned source; the rest
// zeros) are read at issue and land in shared memory only at a
// minfer_cp_async_wait that completes its group, so a kernel that reads a
// buffer before its copies' wait (and barrier) reads stale data here too.
struct CpAsyncCopy {
    void* dst;
    unsigned char bytes[16];
    int group;
};
// Per CUDA thread of the block (threads are fibers of one OS thread), empty
// as each thread starts.
inline std::vector<CpAsyncCopy> cp_pending_lane[1024];
inline int cp_open_group_lane[1024];
#define cp_pending (cp_pending_lane[threadIdx.x])
#define cp_open_group (cp_open_group_lane[threadIdx.x])
inline const bool cp_lane_hook = [] {
    emu_lane_start = [](int t) { cp_pending_lane[t].clear(), cp_open_group_lane[t] = 0; };
    return true;
}();
inline void minfer_cp_async16(void* dst, const void* src, int src_bytes) {
    if (src_bytes < 0 || src_bytes > 16 || ((uintptr_t)src & 15) != 0 || ((uintptr_t)dst & 15) != 0) abort();
    CpAsyncCopy c{dst, {}, cp_open_group};
    if (src_bytes > 0) {
        check_range(src, (size_t)src_bytes);
        memcpy(c.bytes, src, (size_t)src_bytes);
    }
    cp_pending.push_back(c);
}
inline void minfer_cp_async_commit() { cp_open_group++; }
template <int N> inline void minfer_cp_async_wait() {
    std::vector<CpAsyncCopy> keep;
    for (auto& c : cp_pending) {
        if (c.group < cp_open_group - N) memcpy(c.dst, c.bytes, 16);
        else keep.push_back(c);
    }
    cp_pending.swap(keep);
}

// The int8 MMAs of mmq.cu (mma.sync m16n8k32 and m16n8k16, .s8.s8.s32,
// row.col, zero accumulator) for the calling warp, with the PTX ISA's
// fragment layouts: lane L (g = L / 4, t = L % 4) holds A (16 x K, row-major)
// bytes [g][4t..4t+3] in a0, [g+8][..] in a1 and, for K = 32, [g][16+4t..]
// in a2, [g+8][16+4t..] in a3; B (K x 8) bytes [4t..4t+3][g] in b0 and,
// for K = 32, [16+4t..][g] in b1; C [g][2t, 2t+1] in c0, c1 and
// [g+8][2t, 2t+1] in c2, c3. Exact int32 sums.
inline void mma_s8_emu(int c[4], const uint32_t a[4], const uint32_t b[2], int kdim) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    uint32_t (*m)[6] = mma_gather(a, b);
    int8_t A[16][32] = {}, B[32][8] = {};
    for (int L = 0; L < 32; L++) {
        const int lg = L >> 2, lt = L & 3;
        for (int e = 0; e < 4; e++) {
            A[lg][4 * lt + e] = (int8_t)(m[L][0] >> (8 * e));
            A[lg + 8][4 * lt + e] = (int8_t)(m[L][1] >> (8 * e));
            B[4 * lt + e][lg] = (int8_t)(m[L][4] >> (8 * e));
            if (kdim == 32) {
                A[lg][16 + 4 * lt + e] = (int8_t)(m[L][2] >> (8 * e));
                A[lg + 8][16 + 4 * lt + e] = (int8_t)(m[L][3] >> (8 * e));
                B[16 + 4 * lt + e][lg] = (int8_t)(m[L][5] >> (8 * e));
            }
        }
    }
    __syncwarp();
    for (int i = 0; i < 4; i++) {
        const int r = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        int s = 0;
        for (int k = 0; k < kdim; k++) s += (int)A[r][k] * (int)B[k][col];
        c[i] = s;
    }
}
inline void minfer_mmq_mma_k32(int c[4], const int a[4], int b0, int b1) {
    const uint32_t av[4] = {(uint32_t)a[0], (uint32_t)a[1], (uint32_t)a[2], (uint32_t)a[3]}, bv[2] = {(uint32_t)b0, (uint32_t)b1};
    mma_s8_emu(c, av, bv, 32);
}
inline void minfer_mmq_mma_k16(int c[4], int a0, int a1, int b0) {
    const uint32_t av[4] = {(uint32_t)a0, (uint32_t)a1, 0, 0}, bv[2] = {(uint32_t)b0, 0};
    mma_s8_emu(c, av, bv, 16);
}
