// kvput.cuh: the one KV element-store idiom (kv.StoreRow), shared by
// minfer_kv_store and the fused minfer_qkv_rope_store so both write
// byte-identical cells: f32 as is, f16 round-to-nearest-even, q8_0 by the
// reference block quantizer, one full warp per 32-value block.
#ifndef MINFER_KVPUT_CUH
#define MINFER_KVPUT_CUH

#include "common.cuh"

namespace mops {

// kv_put stores value v as element i of a KV row. q8_0: the 32 lanes of a
// full warp must call it together with the 32 consecutive elements of one
// block (i % 32 == lane), so row_len % 32 == 0 and whole warps take part.
__device__ __forceinline__ void kv_put(int format, uint8_t* row, int i, float v) {
    if (format == KV_F32) {
        reinterpret_cast<float*>(row)[i] = v;
    } else if (format == KV_F16) {
        reinterpret_cast<uint16_t*>(row)[i] = float_to_half_bits(v);
    } else {
        q8_0_store_warp(row + (i / Q8_0_LEN) * Q8_0_BYTES, v, i % Q8_0_LEN);
    }
}

} // namespace mops

#endif // MINFER_KVPUT_CUH
