// emu_mmvq.h: the CUDA built-ins cuda/kernels/mmvq.cu names beyond
// cuda_fp16.h's, for the emulators that include the mmvq unit (included
// before mmvq.cu): the f16 bits of q8_1.cuh, and the synchronisation of
// the fused FFN's Q8_1 tail (minfer_mmvq_q8_group: a fence, an atomic
// count, an L2 load, a warp broadcast). Every fiber runs on one OS thread
// (emu_launch.h), so the atomic is a plain read-modify-write and memory is
// sequentially consistent: the fence does nothing here.
#pragma once
#include <string.h>
#include "emu_sync.h"
inline __half __float2half_rn(float f) { // RNE through g++'s _Float16
    _Float16 h = (_Float16)f;
    __half r;
    memcpy(&r.x, &h, 2);
    return r;
}
inline unsigned short __half_as_ushort(__half h) { return h.x; }
// rope.cuh's rounded double multiply (mmvq_xqkv.cu's rope/store forms).
inline double __dmul_rn(double a, double b) { volatile double r = a * b; return r; }
inline void __threadfence() {}
// emu_atomic_seen, when set, sees each atomicAdd's address and old value
// (ffnq_emu.cpp counts which block of a group completes it).
inline void (*emu_atomic_seen)(const int* p, int old) = nullptr;
inline int atomicAdd(int* p, int v) {
    check_range(p, sizeof(int));
    const int o = *p;
    *p += v;
    if (emu_atomic_seen) emu_atomic_seen(p, o);
    return o;
}
