// cuda_fp16.h for clang-check.sh: the half types and the conversions the kernels call, declared only.
#pragma once
struct __half { unsigned short __x; };
struct __half2 { __half x, y; };
__device__ __half __float2half(float);
__device__ __half __float2half_rn(float);
__device__ float __half2float(__half);
__device__ float2 __half22float2(__half2);
__device__ __half2 __floats2half2_rn(float, float);
__device__ __half2 __float22half2_rn(float2);
__device__ __half __ushort_as_half(unsigned short);
__device__ unsigned short __half_as_ushort(__half);
__device__ __half2 __halves2half2(__half, __half);
__device__ __half2 __hmul2(__half2, __half2);
__device__ __half2 __hadd2(__half2, __half2);
__device__ __half2 __hsub2(__half2, __half2);
__device__ __half2 __hfma2(__half2, __half2, __half2);
__device__ __half __hadd(__half, __half);
__device__ __half __hmul(__half, __half);
__device__ float __low2float(__half2);
__device__ float __high2float(__half2);
__device__ __half2 __half2half2(__half);
__device__ __half2 __ldg(const __half2*);
__device__ __half __ldg(const __half*);
