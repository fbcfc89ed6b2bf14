// embed.cu: the embedding gather (graph.OpGetRows) for every weight type:
// out [k, nt] row t = dequantized row ids[t] of w (n_rows rows of row_bytes
// bytes). The per-type element decoders are dequant.cuh's minfer_dq (the
// same block layouts and arithmetic as engine/quant's dequantizers). ids are
// read from device memory (a captured graph replays with fresh tokens).
#include "common.cuh"
#include "dequant.cuh"

// One block per token. An id outside [0, n_rows) gives a NaN row: the CPU
// refuses it with an error, which a kernel cannot return, and a NaN row
// cannot pass a parity check or go unnoticed in the logits.
__device__ __forceinline__ void minfer_get_rows_body(float* out, const uint8_t* w, int wtype, long long row_bytes,
                                                     int n_rows, const int* ids, int k) {
    const long long t = blockIdx.x;
    const int id = ids[t];
    float* y = out + t * k;
    if (id < 0 || id >= n_rows) {
        for (int i = threadIdx.x; i < k; i += blockDim.x) y[i] = __int_as_float(0x7fc00000);
        return;
    }
    const uint8_t* row = w + (long long)id * row_bytes;
    for (int i = threadIdx.x; i < k; i += blockDim.x) y[i] = minfer_dq(wtype, row, i);
}

extern "C" __global__ void minfer_get_rows(float* out, const uint8_t* w, int wtype, long long row_bytes, int n_rows,
                                           const int* ids, int k) {
    minfer_get_rows_body(out, w, wtype, row_bytes, n_rows, ids, k);
}

// minfer_get_rows_host (MINFER_EMBED_HOST) is minfer_get_rows over a table
// in page-locked host memory mapped into the device: the same code (so
// bitwise the same rows), its own name so the launch census and the
// profilers tell the host-link reads apart.
extern "C" __global__ void minfer_get_rows_host(float* out, const uint8_t* w, int wtype, long long row_bytes,
                                                int n_rows, const int* ids, int k) {
    minfer_get_rows_body(out, w, wtype, row_bytes, n_rows, ids, k);
}
