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

// ------------------------------------------------- repacked Q8_0 and Q6_K
//
// minfer_get_rows_r is minfer_get_rows over a table held only as the
// repacked copy of mmvq_repack.cu (minfer_repack_<t>; cuda.RepackHost is
// its host reference). With N = n_rows * (k / bs) blocks of the whole
// table, block i = id * (k / bs) + b of row id:
//
//   Q8_0: its 32 quants at 32 i, its f16 d at 32 N + 2 i
//   Q6_K: its ql (128 bytes) then qh (64) at 192 i, its 16 int8 scales at
//         192 N + 16 i, its f16 d at 208 N + 2 i
//
// so the rows' addresses need n_rows, the row count the copy was built
// with. Each value is minfer_dq_q8_0 / minfer_dq_q6_k's (dequant.cuh): the
// same bytes, read from their repacked places, and the same arithmetic, so
// the rows are bitwise minfer_get_rows' over the GGUF bytes. One block per
// token, its threads striding over the k values, as minfer_get_rows; an id
// outside [0, n_rows) gives a NaN row, as there.

// The f16 d of block g, whose array starts at byte dOff (even) of w.
__device__ __forceinline__ float minfer_dqr_d(const uint8_t* w, size_t dOff, size_t g) {
    return minfer_h2f(__ldg(reinterpret_cast<const unsigned short*>(w + dOff) + g));
}

// Value j (0..31) of Q8_0 block g of nblocks: minfer_dq_q8_0's arithmetic.
__device__ __forceinline__ float minfer_dqr_q8_0(const uint8_t* w, size_t nblocks, size_t g, int j) {
    const float d = minfer_dqr_d(w, 32 * nblocks, g);
    return __fmul_rn((float)(int8_t)__ldg(w + 32 * g + j), d);
}

// Value j (0..255) of Q6_K super-block g of nblocks: minfer_dq_q6_k's
// arithmetic.
__device__ __forceinline__ float minfer_dqr_q6_k(const uint8_t* w, size_t nblocks, size_t g, int j) {
    const uint8_t* b = w + 192 * g;
    const int h = j / 128, quarter = (j % 128) / 32, l = j % 32;
    const uint8_t ql = __ldg(b + 64 * h + l + 32 * (quarter & 1));
    const uint8_t qh = __ldg(b + 128 + 32 * h + l);
    const int lo = (quarter < 2) ? (ql & 15) : (ql >> 4);
    const int v = (lo | (((qh >> (2 * quarter)) & 3) << 4)) - 32;
    const int sc = (int8_t)__ldg(w + 192 * nblocks + 16 * g + 8 * h + l / 16 + 2 * quarter);
    const float ds = __fmul_rn(minfer_dqr_d(w, 208 * nblocks, g), (float)sc);
    return __fmul_rn(ds, (float)v);
}

// w: the repacked copy of the whole n_rows x k table, 2-byte aligned (its
// f16 d are read as such; the copy is 16-byte aligned anyway); wtype
// MINFER_T_Q8_0 or MINFER_T_Q6_K, k a multiple of its block size. Any
// other wtype gives NaN rows, not a __trap (as a bad id does: the launcher
// validates the type, a NaN row cannot go unnoticed, and a trap would end
// the context). Grid (nt), any block size (opsRowBlock(k), as
// minfer_get_rows).
extern "C" __global__ void minfer_get_rows_r(float* out, const uint8_t* w, int wtype, int n_rows, const int* ids,
                                             int k) {
    const long long t = blockIdx.x;
    const int id = ids[t];
    float* y = out + t * k;
    const bool q8 = wtype == MINFER_T_Q8_0;
    if (id < 0 || id >= n_rows || (!q8 && wtype != MINFER_T_Q6_K)) {
        for (int i = threadIdx.x; i < k; i += blockDim.x) y[i] = __int_as_float(0x7fc00000);
        return;
    }
    if (q8) {
        const size_t nb = (size_t)(k / MINFER_QK), first = (size_t)id * nb;
        const size_t all = (size_t)n_rows * nb;
        for (int i = threadIdx.x; i < k; i += blockDim.x)
            y[i] = minfer_dqr_q8_0(w, all, first + i / MINFER_QK, i % MINFER_QK);
    } else {
        const size_t nb = (size_t)(k / MINFER_QKK), first = (size_t)id * nb;
        const size_t all = (size_t)n_rows * nb;
        for (int i = threadIdx.x; i < k; i += blockDim.x)
            y[i] = minfer_dqr_q6_k(w, all, first + i / MINFER_QKK, i % MINFER_QKK);
    }
}
