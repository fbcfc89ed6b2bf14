// vector_types.h: the CUDA vector types (char1 .. double4, make_*) for
// clang-check.sh, which parses the kernels without a CUDA toolkit; aligned
// as CUDA aligns them (the size of 2 and 4 elements, capped at 16 bytes).
#pragma once
#define CC_ALIGN(n) __attribute__((aligned((n) > 16 ? 16 : (n))))
#define CC_VEC(N, T)                                                                                                   \
    struct CC_ALIGN(sizeof(T)) N##1 { T x; };                                                                          \
    struct CC_ALIGN(2 * sizeof(T)) N##2 { T x, y; };                                                                   \
    struct CC_ALIGN(sizeof(T)) N##3 { T x, y, z; };                                                                    \
    struct CC_ALIGN(4 * sizeof(T)) N##4 { T x, y, z, w; };                                                             \
    __host__ __device__ static inline N##1 make_##N##1(T x) { return N##1{x}; }                                       \
    __host__ __device__ static inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }                               \
    __host__ __device__ static inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }                      \
    __host__ __device__ static inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
CC_VEC(char, signed char)
CC_VEC(uchar, unsigned char)
CC_VEC(short, short)
CC_VEC(ushort, unsigned short)
CC_VEC(int, int)
CC_VEC(uint, unsigned int)
CC_VEC(long, long)
CC_VEC(ulong, unsigned long)
CC_VEC(longlong, long long)
CC_VEC(ulonglong, unsigned long long)
CC_VEC(float, float)
CC_VEC(double, double)
#undef CC_VEC
#undef CC_ALIGN
struct dim3 { unsigned int x, y, z; };
