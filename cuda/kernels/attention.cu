// attention.cu: causal GQA attention over one layer's KV regions, engine/cpu
// attn (attn.go): the query of token t sits at cell win[0] + t and attends
// to cells [max(0, cell - window + 1), cell] (window 0: from cell 0); head h
// reads KV head h / (n_head / n_head_kv); score = f32 dot(q, k) * scale;
// softmax max-subtracted in f32; out = sum p * v in cell order.
//
// The KV window {start, kv_len} (i32[2]) is read from device memory, never
// passed as a scalar, so a captured decode graph replays with fresh cells.
//
// Correct first: one block of 128 threads per (token, head) pair (decode and
// prefill share it), K scores a tile of 64 cells at a time (one warp per
// cell), online softmax (running max and sum, f32; the exponentials in
// double rounded to f32 as the CPU does), V accumulated by thread d of the
// head row in cell order. The CPU normalises p before the V sum and uses one
// global max; the online form differs by f32 rounding only.
#include "common.cuh"

namespace mops {
constexpr int ATTN_THREADS = 128; // >= max head_dim
constexpr int ATTN_TILE = 64;
} // namespace mops

// Grid (nt * n_head); block ATTN_THREADS. q and out are [hd, n_head, nt].
// Cells beyond n_ctx or a negative start give a NaN output row (the launcher
// cannot see the window; the CPU would refuse it).
extern "C" __global__ void __launch_bounds__(mops::ATTN_THREADS)
minfer_attn_f32(float* out, const float* q, const uint8_t* kreg, const uint8_t* vreg, int format, const int* win,
                int n_head, int n_head_kv, int hd, long long row_bytes, int n_ctx, int window, float scale) {
    __shared__ float q_s[mops::ATTN_THREADS];
    __shared__ float p_s[mops::ATTN_TILE];
    const int task = blockIdx.x;
    const int t = task / n_head, h = task % n_head;
    const int kvh = h / (n_head / n_head_kv);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int nwarps = blockDim.x >> 5;
    float* y = out + (long long)task * hd;

    const int start = win[0];
    const long long cell = (long long)start + t;
    if (start < 0 || cell >= n_ctx) {
        if (tid < hd) y[tid] = __int_as_float(0x7fc00000);
        return;
    }
    long long first = 0;
    if (window > 0) first = max(0LL, cell - window + 1);

    if (tid < hd) q_s[tid] = q[(long long)task * hd + tid];
    __syncthreads();

    const int off = kvh * hd; // element offset of this KV head in a row
    float m = -INFINITY, l = 0.0f, acc = 0.0f;
    for (long long k0 = first; k0 <= cell; k0 += mops::ATTN_TILE) {
        const int cnt = (int)min((long long)mops::ATTN_TILE, cell + 1 - k0);
        // scores: one warp per cell
        for (int j = warp; j < cnt; j += nwarps) {
            const uint8_t* krow = mops::kv_row(kreg, k0 + j, row_bytes);
            float s = 0.0f;
            for (int d = lane; d < hd; d += 32) s = __fadd_rn(s, __fmul_rn(q_s[d], mops::kv_elem(format, krow, off + d)));
            s = mops::warp_sum(s);
            if (lane == 0) p_s[j] = __fmul_rn(s, scale);
        }
        __syncthreads();
        float tmax = m;
        for (int j = 0; j < cnt; j++) tmax = fmaxf(tmax, p_s[j]);
        const float corr = (m == -INFINITY) ? 0.0f : (float)exp((double)__fsub_rn(m, tmax));
        m = tmax;
        __syncthreads(); // every thread has read the raw scores
        if (tid < cnt) p_s[tid] = (float)exp((double)__fsub_rn(p_s[tid], m));
        __syncthreads();
        float lt = 0.0f;
        for (int j = 0; j < cnt; j++) lt = __fadd_rn(lt, p_s[j]);
        l = __fadd_rn(__fmul_rn(l, corr), lt);
        if (tid < hd) {
            acc = __fmul_rn(acc, corr);
            for (int j = 0; j < cnt; j++) {
                const uint8_t* vrow = mops::kv_row(vreg, k0 + j, row_bytes);
                acc = __fadd_rn(acc, __fmul_rn(p_s[j], mops::kv_elem(format, vrow, off + tid)));
            }
        }
        __syncthreads(); // p_s is rewritten by the next tile
    }
    if (tid < hd) y[tid] = __fmul_rn(acc, __fdiv_rn(1.0f, l));
}
