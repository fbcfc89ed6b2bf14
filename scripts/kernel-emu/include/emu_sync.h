// emu_sync.h: __ldcg (an L2 load: a checked read here) and __shfl_sync
// (a warp broadcast through the warp's slots), for the emulators whose
// kernels merge partials across blocks (the tensor-core decode combine in
// fatc_emu.cpp). Included after cuda_fp16.h.
#pragma once
template <class T> inline T __ldcg(const T* p) {
    check_range(p, sizeof(T));
    return *p;
}
inline float __shfl_sync(unsigned int, float v, int src, int = 32) {
    const int lane = threadIdx.x & 31;
    tw->bar->arrive_and_wait();
    tw->slot[lane] = v;
    tw->bar->arrive_and_wait();
    const float r = tw->slot[src];
    tw->bar->arrive_and_wait();
    return r;
}
inline int __shfl_sync(unsigned int m, int v, int src, int w = 32) { return (int)__shfl_sync(m, (float)v, src, w); }
