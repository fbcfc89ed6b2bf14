// vector_types.h: the CUDA vector types (char2 .. double4, make_*) for clang-check.sh, which parses
// the kernels without a CUDA toolkit; generated once, layouts as CUDA aligns them.
#pragma once
struct __attribute__((aligned(1))) char1 { signed char x; };
__host__ __device__ static inline char1 make_char1(signed char x) { char1 r = {x}; return r; }
struct __attribute__((aligned(2))) char2 { signed char x, y; };
__host__ __device__ static inline char2 make_char2(signed char x, signed char y) { char2 r = {x, y}; return r; }
struct __attribute__((aligned(1))) char3 { signed char x, y, z; };
__host__ __device__ static inline char3 make_char3(signed char x, signed char y, signed char z) { char3 r = {x, y, z}; return r; }
struct __attribute__((aligned(4))) char4 { signed char x, y, z, w; };
__host__ __device__ static inline char4 make_char4(signed char x, signed char y, signed char z, signed char w) { char4 r = {x, y, z, w}; return r; }
struct __attribute__((aligned(1))) uchar1 { unsigned char x; };
__host__ __device__ static inline uchar1 make_uchar1(unsigned char x) { uchar1 r = {x}; return r; }
struct __attribute__((aligned(2))) uchar2 { unsigned char x, y; };
__host__ __device__ static inline uchar2 make_uchar2(unsigned char x, unsigned char y) { uchar2 r = {x, y}; return r; }
struct __attribute__((aligned(1))) uchar3 { unsigned char x, y, z; };
__host__ __device__ static inline uchar3 make_uchar3(unsigned char x, unsigned char y, unsigned char z) { uchar3 r = {x, y, z}; return r; }
struct __attribute__((aligned(4))) uchar4 { unsigned char x, y, z, w; };
__host__ __device__ static inline uchar4 make_uchar4(unsigned char x, unsigned char y, unsigned char z, unsigned char w) { uchar4 r = {x, y, z, w}; return r; }
struct __attribute__((aligned(2))) short1 { short x; };
__host__ __device__ static inline short1 make_short1(short x) { short1 r = {x}; return r; }
struct __attribute__((aligned(4))) short2 { short x, y; };
__host__ __device__ static inline short2 make_short2(short x, short y) { short2 r = {x, y}; return r; }
struct __attribute__((aligned(2))) short3 { short x, y, z; };
__host__ __device__ static inline short3 make_short3(short x, short y, short z) { short3 r = {x, y, z}; return r; }
struct __attribute__((aligned(8))) short4 { short x, y, z, w; };
__host__ __device__ static inline short4 make_short4(short x, short y, short z, short w) { short4 r = {x, y, z, w}; return r; }
struct __attribute__((aligned(2))) ushort1 { unsigned short x; };
__host__ __device__ static inline ushort1 make_ushort1(unsigned short x) { ushort1 r = {x}; return r; }
struct __attribute__((aligned(4))) ushort2 { unsigned short x, y; };
__host__ __device__ static inline ushort2 make_ushort2(unsigned short x, unsigned short y) { ushort2 r = {x, y}; return r; }
struct __attribute__((aligned(2))) ushort3 { unsigned short x, y, z; };
__host__ __device__ static inline ushort3 make_ushort3(unsigned short x, unsigned short y, unsigned short z) { ushort3 r = {x, y, z}; return r; }
struct __attribute__((aligned(8))) ushort4 { unsigned short x, y, z, w; };
__host__ __device__ static inline ushort4 make_ushort4(unsigned short x, unsigned short y, unsigned short z, unsigned short w) { ushort4 r = {x, y, z, w}; return r; }
struct __attribute__((aligned(4))) int1 { int x; };
__host__ __device__ static inline int1 make_int1(int x) { int1 r = {x}; return r; }
struct __attribute__((aligned(8))) int2 { int x, y; };
__host__ __device__ static inline int2 make_int2(int x, int y) { int2 r = {x, y}; return r; }
struct __attribute__((aligned(4))) int3 { int x, y, z; };
__host__ __device__ static inline int3 make_int3(int x, int y, int z) { int3 r = {x, y, z}; return r; }
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
__host__ __device__ static inline int4 make_int4(int x, int y, int z, int w) { int4 r = {x, y, z, w}; return r; }
struct __attribute__((aligned(4))) uint1 { unsigned int x; };
__host__ __device__ static inline uint1 make_uint1(unsigned int x) { uint1 r = {x}; return r; }
struct __attribute__((aligned(8))) uint2 { unsigned int x, y; };
__host__ __device__ static inline uint2 make_uint2(unsigned int x, unsigned int y) { uint2 r = {x, y}; return r; }
struct __attribute__((aligned(4))) uint3 { unsigned int x, y, z; };
__host__ __device__ static inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { uint3 r = {x, y, z}; return r; }
struct __attribute__((aligned(16))) uint4 { unsigned int x, y, z, w; };
__host__ __device__ static inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { uint4 r = {x, y, z, w}; return r; }
struct __attribute__((aligned(8))) long1 { long x; };
__host__ __device__ static inline long1 make_long1(long x) { long1 r = {x}; return r; }
struct __attribute__((aligned(16))) long2 { long x, y; };
__host__ __device__ static inline long2 make_long2(long x, long y) { long2 r = {x, y}; return r; }
struct __attribute__((aligned(8))) long3 { long x, y, z; };
__host__ __device__ static inline long3 make_long3(long x, long y, long z) { long3 r = {x, y, z}; return r; }
struct __attribute__((aligned(16))) long4 { long x, y, z, w; };
__host__ __device__ static inline long4 make_long4(long x, long y, long z, long w) { long4 r = {x, y, z, w}; return r; }
struct __attribute__((aligned(8))) ulong1 { unsigned long x; };
__host__ __device__ static inline ulong1 make_ulong1(unsigned long x) { ulong1 r = {x}; return r; }
struct __attribute__((aligned(16))) ulong2 { unsigned long x, y; };
__host__ __device__ static inline ulong2 make_ulong2(unsigned long x, unsigned long y) { ulong2 r = {x, y}; return r; }
struct __attribute__((aligned(8))) ulong3 { unsigned long x, y, z; };
__host__ __device__ static inline ulong3 make_ulong3(unsigned long x, unsigned long y, unsigned long z) { ulong3 r = {x, y, z}; return r; }
struct __attribute__((aligned(16))) ulong4 { unsigned long x, y, z, w; };
__host__ __device__ static inline ulong4 make_ulong4(unsigned long x, unsigned long y, unsigned long z, unsigned long w) { ulong4 r = {x, y, z, w}; return r; }
struct __attribute__((aligned(8))) longlong1 { long long x; };
__host__ __device__ static inline longlong1 make_longlong1(long long x) { longlong1 r = {x}; return r; }
struct __attribute__((aligned(16))) longlong2 { long long x, y; };
__host__ __device__ static inline longlong2 make_longlong2(long long x, long long y) { longlong2 r = {x, y}; return r; }
struct __attribute__((aligned(8))) longlong3 { long long x, y, z; };
__host__ __device__ static inline longlong3 make_longlong3(long long x, long long y, long long z) { longlong3 r = {x, y, z}; return r; }
struct __attribute__((aligned(16))) longlong4 { long long x, y, z, w; };
__host__ __device__ static inline longlong4 make_longlong4(long long x, long long y, long long z, long long w) { longlong4 r = {x, y, z, w}; return r; }
struct __attribute__((aligned(8))) ulonglong1 { unsigned long long x; };
__host__ __device__ static inline ulonglong1 make_ulonglong1(unsigned long long x) { ulonglong1 r = {x}; return r; }
struct __attribute__((aligned(16))) ulonglong2 { unsigned long long x, y; };
__host__ __device__ static inline ulonglong2 make_ulonglong2(unsigned long long x, unsigned long long y) { ulonglong2 r = {x, y}; return r; }
struct __attribute__((aligned(8))) ulonglong3 { unsigned long long x, y, z; };
__host__ __device__ static inline ulonglong3 make_ulonglong3(unsigned long long x, unsigned long long y, unsigned long long z) { ulonglong3 r = {x, y, z}; return r; }
struct __attribute__((aligned(16))) ulonglong4 { unsigned long long x, y, z, w; };
__host__ __device__ static inline ulonglong4 make_ulonglong4(unsigned long long x, unsigned long long y, unsigned long long z, unsigned long long w) { ulonglong4 r = {x, y, z, w}; return r; }
struct __attribute__((aligned(4))) float1 { float x; };
__host__ __device__ static inline float1 make_float1(float x) { float1 r = {x}; return r; }
struct __attribute__((aligned(8))) float2 { float x, y; };
__host__ __device__ static inline float2 make_float2(float x, float y) { float2 r = {x, y}; return r; }
struct __attribute__((aligned(4))) float3 { float x, y, z; };
__host__ __device__ static inline float3 make_float3(float x, float y, float z) { float3 r = {x, y, z}; return r; }
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
__host__ __device__ static inline float4 make_float4(float x, float y, float z, float w) { float4 r = {x, y, z, w}; return r; }
struct __attribute__((aligned(8))) double1 { double x; };
__host__ __device__ static inline double1 make_double1(double x) { double1 r = {x}; return r; }
struct __attribute__((aligned(16))) double2 { double x, y; };
__host__ __device__ static inline double2 make_double2(double x, double y) { double2 r = {x, y}; return r; }
struct __attribute__((aligned(8))) double3 { double x, y, z; };
__host__ __device__ static inline double3 make_double3(double x, double y, double z) { double3 r = {x, y, z}; return r; }
struct __attribute__((aligned(16))) double4 { double x, y, z, w; };
__host__ __device__ static inline double4 make_double4(double x, double y, double z, double w) { double4 r = {x, y, z, w}; return r; }
struct dim3 { unsigned int x, y, z; };
