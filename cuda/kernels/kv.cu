// kv.cu: the KV cache store and load (engine/kv StoreRow / LoadRow, cpu
// kvStore / kvLoad). A region is one layer's K or V: n_ctx cells of
// row_bytes bytes (f32: 4*row_len, f16: 2*row_len, q8_0: row_len/32 blocks of
// 34 bytes, packed). The KV window {start, kv_len} (i32[2], the graph's
// InputKVWindow) is read from device memory inside the kernels, so a
// captured graph replays with the current step's cells.
#include "common.cuh"
#include "kvput.cuh"

// minfer_kv_store writes nt rows of src [row_len, nt] into cells
// win[0] .. win[0]+nt-1. Grid (nt, ceil(row_len/blockDim)); blockDim a
// multiple of 32 (q8_0: one warp per 32-value block; row_len % 32 == 0).
// Rows whose cell falls outside [0, n_ctx) are not written (the launcher
// cannot see the window; the CPU would refuse it).
extern "C" __global__ void minfer_kv_store(uint8_t* region, int format, const float* src, const int* win, int row_len,
                                           long long row_bytes, int n_ctx) {
    const int t = blockIdx.x;
    const long long cell = (long long)win[0] + t;
    if (cell < 0 || cell >= n_ctx) return;
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= row_len) return; // q8_0: row_len % 32 == 0, so whole warps leave together
    const float v = src[(long long)t * row_len + i];
    mops::kv_put(format, mops::kv_row(region, cell, row_bytes), i, v);
}

// minfer_kv_load expands cells [0, win[1]) of a region to f32 out [row_len,
// n_ctx]; rows at or beyond win[1] are left as they were. Grid (n_ctx,
// ceil(row_len/blockDim)).
extern "C" __global__ void minfer_kv_load(float* out, const uint8_t* region, int format, const int* win, int row_len,
                                          long long row_bytes, int n_ctx) {
    const long long cell = blockIdx.x;
    const int kv_len = win[1];
    if (cell >= kv_len || cell >= n_ctx) return;
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= row_len) return;
    out[cell * row_len + i] = mops::kv_elem(format, mops::kv_row(region, cell, row_bytes), i);
}
