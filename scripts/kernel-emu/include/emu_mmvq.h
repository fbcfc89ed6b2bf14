// emu_mmvq.h: the CUDA built-ins the mmvq unit's headers name beyond
// cuda_fp16.h's, for the emulators that include the mmvq unit (included
// before mmvq.cu): the f32 -> f16 bits of common.cuh (kvput.cuh's KV
// stores, embed.cu) and rope.cuh's rounded double multiply.
#pragma once
#include <string.h>
inline __half __float2half_rn(float f) { // RNE through g++'s _Float16
    _Float16 h = (_Float16)f;
    __half r;
    memcpy(&r.x, &h, 2);
    return r;
}
inline unsigned short __half_as_ushort(__half h) { return h.x; }
// rope.cuh's rounded double multiply (mmvq_xqkv.cu's rope/store forms).
inline double __dmul_rn(double a, double b) { volatile double r = a * b; return r; }
