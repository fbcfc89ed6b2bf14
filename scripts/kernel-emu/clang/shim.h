// shim.h: what the CUDA toolkit's headers give a kernel file, for a syntax check with clang and no
// toolkit (clang-check.sh): the qualifiers, the vector types, clang's own CUDA device headers, and
// declarations (no bodies: nothing is code-generated) of the intrinsics the kernels call.
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __CUDACC__ 1
#define __align__(n) __attribute__((aligned(n)))
typedef unsigned int cuuint32_t;
typedef unsigned long long cuuint64_t;
#define CUDA_VERSION 11050
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include "vector_types.h"
#include <__clang_cuda_builtin_vars.h>
#include <__clang_cuda_libdevice_declares.h>
#include <__clang_cuda_device_functions.h>
#include <__clang_cuda_math.h>
#include <__clang_cuda_intrinsics.h>

__device__ size_t __cvta_generic_to_global(const void*);
__device__ size_t __cvta_generic_to_shared(const void*);
template <class T> __device__ T __ldcg(const T*);
template <class T> __device__ T __ldca(const T*);
template <class T> __device__ T __ldcs(const T*);
template <class T> __device__ T __ldlu(const T*);
template <class T> __device__ void __stcg(T*, T);
template <class T> __device__ void __stcs(T*, T);
__device__ int atomicAdd(int*, int);
__device__ unsigned int atomicAdd(unsigned int*, unsigned int);
__device__ unsigned long long atomicAdd(unsigned long long*, unsigned long long);
__device__ float atomicAdd(float*, float);
__device__ int atomicMax(int*, int);
__device__ unsigned int atomicMax(unsigned int*, unsigned int);
__device__ int atomicCAS(int*, int, int);
__device__ unsigned int atomicCAS(unsigned int*, unsigned int, unsigned int);
__device__ int __dp4a(int, int, int);
__device__ unsigned int __dp4a(unsigned int, unsigned int, unsigned int);
__device__ int __dp2a_lo(int, int, int);
__device__ int __vsubss4(int, int);
__device__ unsigned int __vcmpeq4(unsigned int, unsigned int);
__device__ void __threadfence();
__device__ void __nanosleep(unsigned int);
