// quantize_act_x4.cu: minfer_quantize_q8_1_x4, the same f32 -> Q8_1 bytes
// as minfer_quantize_q8_1 (quantize_act.cu) with a quarter of the
// instructions per value (lever MINFER_QUANTIZE_X4).
//
// Why: at prefill the one-block-per-warp kernel spends ~60 warp
// instructions (two 5-step shuffle trees, two IEEE divisions per lane) on
// every 32 values; on qwen2-0.5b pp512 its 96 launches averaged ~9.6 us
// against ~1-3 us of memory time (H200 nsys, 2026-11-29): issue-bound.
//
// Here one warp quantizes 4 consecutive Q8_1 blocks (128 values): lane l
// loads values 4l..4l+3 as one float4, so the 8 lanes of group g = l / 8
// hold block g. max |x| and sum q are reduced over the group with 3 xor
// shuffles (offsets 4, 2, 1 stay inside an aligned 8-lane group). Both are
// exact (a max; an integer sum), d and id are computed from the same amax
// with minfer_q8_1_scale, q with minfer_q8_1_quant, so every byte equals
// minfer_quantize_q8_1's. Each lane writes its 4 quants as one 32-bit word:
// a block's quants start at byte 36 b + 4, 4-byte aligned when dst is.
//
// x must be 16-byte aligned (the launcher checks; rows of k % 32 == 0
// floats keep every block 128-byte aligned from there). Blocks past the
// end (nblocks not a multiple of 4) are read as zeros and not written;
// every lane takes part in every shuffle.
//
// grid (ceil(nblocks / (4 * MINFER_QACTX4_WARPS))), block (32 * MINFER_QACTX4_WARPS).
#include "dequant.cuh"
#include "q8_1.cuh"

#define MINFER_QACTX4_WARPS 4
#define MINFER_QACTX4_PER_WARP 4

extern "C" __global__ void __launch_bounds__(32 * MINFER_QACTX4_WARPS)
    minfer_quantize_q8_1_x4(uint8_t* dst, const float* x, int k, int nt) {
    const int lane = threadIdx.x & 31;
    const int grp = lane >> 3; // block of the warp this lane works on
    const long long nblocks = (long long)nt * (k / 32);
    const long long warp = (long long)blockIdx.x * MINFER_QACTX4_WARPS + (threadIdx.x >> 5);
    const long long first = warp * MINFER_QACTX4_PER_WARP;
    if (first >= nblocks) return; // the whole warp leaves together
    const long long blk = first + grp;
    const bool live = blk < nblocks;

    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (live) v = reinterpret_cast<const float4*>(x)[first * 8 + lane];
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int off = 4; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    float id;
    const float d = minfer_q8_1_scale(amax, &id);
    const int q0 = minfer_q8_1_quant(v.x, id), q1 = minfer_q8_1_quant(v.y, id);
    const int q2 = minfer_q8_1_quant(v.z, id), q3 = minfer_q8_1_quant(v.w, id);
    int sum = q0 + q1 + q2 + q3;
#pragma unroll
    for (int off = 4; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (!live) return;

    uint8_t* b = dst + (size_t)blk * 36;
    const unsigned int word = (unsigned int)(uint8_t)(int8_t)q0 | ((unsigned int)(uint8_t)(int8_t)q1 << 8) |
                              ((unsigned int)(uint8_t)(int8_t)q2 << 16) | ((unsigned int)(uint8_t)(int8_t)q3 << 24);
    reinterpret_cast<unsigned int*>(b + 4)[lane & 7] = word;
    if ((lane & 7) == 0) {
        unsigned short* h = reinterpret_cast<unsigned short*>(b);
        h[0] = minfer_q8_1_dbits(d);
        h[1] = minfer_q8_1_sbits(sum, d);
    }
}
