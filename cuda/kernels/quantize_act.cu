// quantize_act.cu: f32 activations -> Q8_1 blocks (the mmvq kernels' input).
//
// A Q8_1 block is 36 bytes: f16 d, f16 s, 32 int8 q (engine/quant q8.go):
//   amax = max |x_i|, d = amax / 127, id = 1 / d (0 when d is 0),
//   q_i  = round-half-away-from-zero(x_i * id) clamped to [-128, 127],
//   s    = f16(d * sum_i q_i)   (d in f32, then one rounding to f16).
// Every step is rounded as the Go reference rounds it (IEEE division and
// product, roundf, round-to-nearest-even f16), so d and qs are byte-identical
// to quant.Quantize(quant.Q8_1, x); so is s (the sum is an exact integer).
//
// One warp per 32-value block, lane i owns value i; MINFER_QACT_BLOCKS
// blocks per CUDA block. x is nt rows of k f32 (k a multiple of 32, so the
// nt rows are nt * k / 32 consecutive blocks); dst gets the Q8_1 blocks in
// the same order (row t starts at t * (k / 32) * 36 bytes). dst must be
// 2-byte aligned (the launcher asks for 4).
#include "dequant.cuh"
#include "q8_1.cuh"

#define MINFER_QACT_BLOCKS 4
#define MINFER_QACT_THREADS (32 * MINFER_QACT_BLOCKS)

// grid (ceil(nblocks / MINFER_QACT_BLOCKS)), block (MINFER_QACT_THREADS), no smem;
// nblocks = nt * k / 32.
extern "C" __global__ void __launch_bounds__(MINFER_QACT_THREADS)
    minfer_quantize_q8_1(uint8_t* dst, const float* x, int k, int nt) {
    const int lane = threadIdx.x & 31;
    const long long nblocks = (long long)nt * (k / MINFER_QK);
    const long long blk = (long long)blockIdx.x * MINFER_QACT_BLOCKS + (threadIdx.x >> 5);
    if (blk >= nblocks) return; // the whole warp leaves together

    minfer_q8_1_warp(dst + (size_t)blk * MINFER_Q8_1_BYTES, x[(size_t)blk * MINFER_QK + lane], lane);
}
