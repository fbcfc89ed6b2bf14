// cuda_fp16.h (emulation): just enough of CUDA for g++ to compile and run
// cuda/kernels/mmvq.cu on the CPU, each CUDA thread a fiber (emu_launch.h:
// the block's threads take turns on one OS thread, each running until it
// waits at a barrier) and a barrier per warp for __syncwarp and the
// shuffles. For checking kernel
// logic (layouts, orders, bounds) on a machine without a GPU; nothing here
// says anything about speed. __ldg checks its address against the ranges
// the driver registers (g_ranges) and aborts outside them.
#pragma once
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>
#include <algorithm>
#define __device__
#define __global__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
struct int2 { int x, y; };
struct dim3 { unsigned int x, y, z; };
extern thread_local dim3 threadIdx, blockIdx, blockDim;
// gridDim is fixed (grid-stride loops of kernels not run here still
// compile); blockDim is the launch's (emu_launch.h, 128 by default).
static const dim3 gridDim = {1, 1, 1};
[[noreturn]] inline void __trap() { abort(); }
struct __half { unsigned short x; };
inline uint4 make_uint4(unsigned int a, unsigned int b, unsigned int c, unsigned int d) { return uint4{a, b, c, d}; }
inline int4 make_int4(int a, int b, int c, int d) { return int4{a, b, c, d}; }
inline int2 make_int2(int a, int b) { return int2{a, b}; }
inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
inline __half __ushort_as_half(unsigned short h) { return __half{h}; }
inline float __half2float(__half hh) {
    unsigned h = hh.x; unsigned s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m | 1024), (int)e - 25);
    return s ? -v : v;
}
inline unsigned int __vsub4(unsigned int a, unsigned int b) {
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= ((((a >> (8 * i)) & 255) - ((b >> (8 * i)) & 255)) & 255) << (8 * i);
    return r;
}
// EmuBarrier: n fibers meet; a fiber that is not the last to arrive yields
// (emu_launch.h) until the last one does. Deterministic: the block's
// fibers run in thread order, each until its next barrier.
void emu_yield();
struct EmuBarrier {
    int n, count = 0;
    unsigned phase = 0;
    explicit EmuBarrier(int n) : n(n) {}
    void arrive_and_wait();
};
// warp emulation: 32 threads per warp barrier; shuffle through slots
struct WarpCtx { EmuBarrier* bar; float slot[32]; uint32_t mma[32][6]; }; // mma: mma_16816's fragments (mma.h)
extern thread_local WarpCtx* tw;
inline void __syncwarp(unsigned int = 0xffffffffu) { tw->bar->arrive_and_wait(); }
// block barrier (__syncthreads): one per emulated block, set by the launcher
extern thread_local EmuBarrier* tblock;
// emu_lane_start, when set, runs as each fiber starts (state a real CUDA
// thread would start without, e.g. mma.h's cp.async queue).
extern void (*emu_lane_start)(int lane_in_block);
inline void __syncthreads() { tblock->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned int, float v, int off, int = 32) {
    int lane = threadIdx.x & 31;
    tw->bar->arrive_and_wait();
    tw->slot[lane] = v;
    tw->bar->arrive_and_wait();
    float r = tw->slot[lane ^ off];
    tw->bar->arrive_and_wait();
    return r;
}
#include <vector>
#include <utility>
#include <stdio.h>
#include <stdlib.h>
extern std::vector<std::pair<const void*, size_t>> g_ranges;
inline void check_range(const void* p, size_t n) {
    for (auto& r : g_ranges) if ((const char*)p >= (const char*)r.first && (const char*)p + n <= (const char*)r.first + r.second) return;
    fprintf(stderr, "out of range load %p (%zu)\n", p, n); abort();
}
template <class T> inline T __ldg(const T* p) { check_range(p, sizeof(T)); return *p; }
using std::min; using std::max;
inline float __uint_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
inline float __int2float_rn(int i) { volatile float r = (float)i; return r; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline unsigned int __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
