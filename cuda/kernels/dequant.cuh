// dequant.cuh: device dequantization of every GGUF weight type minfer reads.
//
// The values are bit-identical to the Go dequantizers in engine/quant
// (q4.go, q5.go, q8.go, plain.go, kquant_q4k.go, kquant_q5k.go,
// kquant_q6k.go): every product and sum that Go rounds separately is
// rounded separately here with the _rn intrinsics, so nvcc cannot contract
// it into an FMA (which would change the low bit).
//
// Alignment: GGUF blocks are 2-byte aligned at best (a Q4_0 block is 18
// bytes), so every multi-byte field of a quantized block is assembled from
// byte loads. F32 rows are read as floats (a row of F32 values is 4-byte
// aligned whenever the tensor base is) and F16 / BF16 rows as 16-bit words.
//
// Three layers:
//   minfer_dq_<t>(row, i)        element i of a row (gathers, tails)
//   minfer_dq(type, row, i)      the same, dispatching on the ggml type id
//   MinferDq<T>::group8(row,g,v) values 8g .. 8g+7 of a row into registers:
//                                every block format keeps eight consecutive
//                                values under one scale in contiguous bytes,
//                                so this is the matmul kernels' unit of work
//   minfer_dq_block32<T> / minfer_dq_block256<T>: a whole 32-value block or
//                                256-value super-block (a loop of group8)
#ifndef MINFER_DEQUANT_CUH
#define MINFER_DEQUANT_CUH

#include <cuda_fp16.h>
#include <stdint.h>

// ggml type ids (engine/quant/types.go).
#define MINFER_T_F32 0
#define MINFER_T_F16 1
#define MINFER_T_Q4_0 2
#define MINFER_T_Q4_1 3
#define MINFER_T_Q5_0 6
#define MINFER_T_Q5_1 7
#define MINFER_T_Q8_0 8
#define MINFER_T_Q4_K 12
#define MINFER_T_Q5_K 13
#define MINFER_T_Q6_K 14
#define MINFER_T_BF16 30

// Block geometry: values per block and bytes per block.
#define MINFER_QK 32
#define MINFER_QKK 256
#define MINFER_Q4_0_BYTES 18
#define MINFER_Q4_1_BYTES 20
#define MINFER_Q5_0_BYTES 22
#define MINFER_Q5_1_BYTES 24
#define MINFER_Q8_0_BYTES 34
#define MINFER_Q4_K_BYTES 144
#define MINFER_Q5_K_BYTES 176
#define MINFER_Q6_K_BYTES 210

// ---------------------------------------------------------------- raw reads

__device__ __forceinline__ uint32_t minfer_ld_u16(const uint8_t* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8);
}

__device__ __forceinline__ uint32_t minfer_ld_u32(const uint8_t* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

// IEEE half -> float is exact (subnormals included), as FP16ToFP32 is.
__device__ __forceinline__ float minfer_h2f(uint32_t h) {
    return __half2float(__ushort_as_half((unsigned short)h));
}

__device__ __forceinline__ float minfer_ld_f16(const uint8_t* p) { return minfer_h2f(minfer_ld_u16(p)); }

__device__ __forceinline__ float minfer_bf2f(uint32_t b) { return __uint_as_float(b << 16); }

// K-quant 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes
// (kScaleMinK4).
__device__ __forceinline__ void minfer_kscale_min(const uint8_t* q, int j, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// --------------------------------------------------------- element accessors

__device__ __forceinline__ float minfer_dq_f32(const uint8_t* row, int i) {
    return reinterpret_cast<const float*>(row)[i];
}

__device__ __forceinline__ float minfer_dq_f16(const uint8_t* row, int i) {
    return minfer_h2f(reinterpret_cast<const unsigned short*>(row)[i]);
}

__device__ __forceinline__ float minfer_dq_bf16(const uint8_t* row, int i) {
    return minfer_bf2f(reinterpret_cast<const unsigned short*>(row)[i]);
}

__device__ __forceinline__ float minfer_dq_q4_0(const uint8_t* row, int i) {
    const uint8_t* b = row + (size_t)(i / MINFER_QK) * MINFER_Q4_0_BYTES;
    const int j = i % MINFER_QK;
    const float d = minfer_ld_f16(b);
    const uint8_t q = b[2 + (j & 15)];
    const int v = (j < 16 ? (q & 15) : (q >> 4)) - 8;
    return __fmul_rn((float)v, d);
}

__device__ __forceinline__ float minfer_dq_q4_1(const uint8_t* row, int i) {
    const uint8_t* b = row + (size_t)(i / MINFER_QK) * MINFER_Q4_1_BYTES;
    const int j = i % MINFER_QK;
    const float d = minfer_ld_f16(b);
    const float m = minfer_ld_f16(b + 2);
    const uint8_t q = b[4 + (j & 15)];
    const int v = j < 16 ? (q & 15) : (q >> 4);
    return __fadd_rn(__fmul_rn((float)v, d), m);
}

__device__ __forceinline__ float minfer_dq_q5_0(const uint8_t* row, int i) {
    const uint8_t* b = row + (size_t)(i / MINFER_QK) * MINFER_Q5_0_BYTES;
    const int j = i % MINFER_QK;
    const float d = minfer_ld_f16(b);
    const uint32_t qh = minfer_ld_u32(b + 2);
    const uint8_t q = b[6 + (j & 15)];
    const int v = ((j < 16 ? (q & 15) : (q >> 4)) | (int)(((qh >> j) & 1) << 4)) - 16;
    return __fmul_rn((float)v, d);
}

__device__ __forceinline__ float minfer_dq_q5_1(const uint8_t* row, int i) {
    const uint8_t* b = row + (size_t)(i / MINFER_QK) * MINFER_Q5_1_BYTES;
    const int j = i % MINFER_QK;
    const float d = minfer_ld_f16(b);
    const float m = minfer_ld_f16(b + 2);
    const uint32_t qh = minfer_ld_u32(b + 4);
    const uint8_t q = b[8 + (j & 15)];
    const int v = (j < 16 ? (q & 15) : (q >> 4)) | (int)(((qh >> j) & 1) << 4);
    return __fadd_rn(__fmul_rn((float)v, d), m);
}

__device__ __forceinline__ float minfer_dq_q8_0(const uint8_t* row, int i) {
    const uint8_t* b = row + (size_t)(i / MINFER_QK) * MINFER_Q8_0_BYTES;
    const int j = i % MINFER_QK;
    return __fmul_rn((float)(int8_t)b[2 + j], minfer_ld_f16(b));
}

__device__ __forceinline__ float minfer_dq_q4_k(const uint8_t* row, int i) {
    const uint8_t* b = row + (size_t)(i / MINFER_QKK) * MINFER_Q4_K_BYTES;
    const int j = i % MINFER_QKK;
    const int c = j / 64, sub = j / 32, l = j % 32;
    int sc, mn;
    minfer_kscale_min(b + 4, sub, &sc, &mn);
    const float d1 = __fmul_rn(minfer_ld_f16(b), (float)sc);
    const float m1 = __fmul_rn(minfer_ld_f16(b + 2), (float)mn);
    const uint8_t q = b[16 + 32 * c + l];
    const int v = (sub & 1) ? (q >> 4) : (q & 15);
    return __fsub_rn(__fmul_rn(d1, (float)v), m1);
}

__device__ __forceinline__ float minfer_dq_q5_k(const uint8_t* row, int i) {
    const uint8_t* b = row + (size_t)(i / MINFER_QKK) * MINFER_Q5_K_BYTES;
    const int j = i % MINFER_QKK;
    const int c = j / 64, sub = j / 32, l = j % 32;
    int sc, mn;
    minfer_kscale_min(b + 4, sub, &sc, &mn);
    const float d1 = __fmul_rn(minfer_ld_f16(b), (float)sc);
    const float m1 = __fmul_rn(minfer_ld_f16(b + 2), (float)mn);
    const uint8_t q = b[48 + 32 * c + l];
    const int h = (b[16 + l] >> sub) & 1;
    const int v = ((sub & 1) ? (q >> 4) : (q & 15)) | (h << 4);
    return __fsub_rn(__fmul_rn(d1, (float)v), m1);
}

__device__ __forceinline__ float minfer_dq_q6_k(const uint8_t* row, int i) {
    const uint8_t* b = row + (size_t)(i / MINFER_QKK) * MINFER_Q6_K_BYTES;
    const int j = i % MINFER_QKK;
    const int h = j / 128, quarter = (j % 128) / 32, l = j % 32;
    const uint8_t ql = b[64 * h + l + 32 * (quarter & 1)];
    const uint8_t qh = b[128 + 32 * h + l];
    const int lo = (quarter < 2) ? (ql & 15) : (ql >> 4);
    const int v = (lo | (((qh >> (2 * quarter)) & 3) << 4)) - 32;
    const int sc = (int8_t)b[192 + 8 * h + l / 16 + 2 * quarter];
    const float ds = __fmul_rn(minfer_ld_f16(b + 208), (float)sc);
    return __fmul_rn(ds, (float)v);
}

// minfer_dq returns element i of a row of the given ggml type (0 for a type
// without a device layout: callers validate the type before launching).
__device__ __forceinline__ float minfer_dq(int type, const uint8_t* row, int i) {
    switch (type) {
    case MINFER_T_F32: return minfer_dq_f32(row, i);
    case MINFER_T_F16: return minfer_dq_f16(row, i);
    case MINFER_T_BF16: return minfer_dq_bf16(row, i);
    case MINFER_T_Q4_0: return minfer_dq_q4_0(row, i);
    case MINFER_T_Q4_1: return minfer_dq_q4_1(row, i);
    case MINFER_T_Q5_0: return minfer_dq_q5_0(row, i);
    case MINFER_T_Q5_1: return minfer_dq_q5_1(row, i);
    case MINFER_T_Q8_0: return minfer_dq_q8_0(row, i);
    case MINFER_T_Q4_K: return minfer_dq_q4_k(row, i);
    case MINFER_T_Q5_K: return minfer_dq_q5_k(row, i);
    case MINFER_T_Q6_K: return minfer_dq_q6_k(row, i);
    default: return 0.0f;
    }
}

// ------------------------------------------------------ 8-value group decode
//
// MinferDq<T>::group8(row, g, v) writes values 8g .. 8g+7 of the row into
// v[0..7]; bs / bb are the block's value count and byte size, so a row of k
// values is k / bs * bb bytes. Every specialization agrees bit for bit with
// minfer_dq_<t>(row, 8g + t).

template <int T> struct MinferDq;

template <> struct MinferDq<MINFER_T_F32> {
    static constexpr int bs = 1, bb = 4;
    static __device__ __forceinline__ void group8(const uint8_t* row, int g, float* v) {
        const float* p = reinterpret_cast<const float*>(row) + 8 * (size_t)g;
#pragma unroll
        for (int t = 0; t < 8; t++) v[t] = p[t];
    }
    static __device__ __forceinline__ float at(const uint8_t* row, int i) { return minfer_dq_f32(row, i); }
};

template <> struct MinferDq<MINFER_T_F16> {
    static constexpr int bs = 1, bb = 2;
    static __device__ __forceinline__ void group8(const uint8_t* row, int g, float* v) {
        const unsigned short* p = reinterpret_cast<const unsigned short*>(row) + 8 * (size_t)g;
#pragma unroll
        for (int t = 0; t < 8; t++) v[t] = minfer_h2f(p[t]);
    }
    static __device__ __forceinline__ float at(const uint8_t* row, int i) { return minfer_dq_f16(row, i); }
};

template <> struct MinferDq<MINFER_T_BF16> {
    static constexpr int bs = 1, bb = 2;
    static __device__ __forceinline__ void group8(const uint8_t* row, int g, float* v) {
        const unsigned short* p = reinterpret_cast<const unsigned short*>(row) + 8 * (size_t)g;
#pragma unroll
        for (int t = 0; t < 8; t++) v[t] = minfer_bf2f(p[t]);
    }
    static __device__ __forceinline__ float at(const uint8_t* row, int i) { return minfer_dq_bf16(row, i); }
};

template <> struct MinferDq<MINFER_T_Q4_0> {
    static constexpr int bs = MINFER_QK, bb = MINFER_Q4_0_BYTES;
    static __device__ __forceinline__ void group8(const uint8_t* row, int g, float* v) {
        const uint8_t* b = row + (size_t)(g / 4) * bb;
        const int s = g % 4; // values 8s .. 8s+7 of the block
        const float d = minfer_ld_f16(b);
        const uint8_t* q = b + 2 + 8 * (s & 1);
        const int shift = (s >> 1) * 4;
#pragma unroll
        for (int t = 0; t < 8; t++) v[t] = __fmul_rn((float)(((q[t] >> shift) & 15) - 8), d);
    }
    static __device__ __forceinline__ float at(const uint8_t* row, int i) { return minfer_dq_q4_0(row, i); }
};

template <> struct MinferDq<MINFER_T_Q4_1> {
    static constexpr int bs = MINFER_QK, bb = MINFER_Q4_1_BYTES;
    static __device__ __forceinline__ void group8(const uint8_t* row, int g, float* v) {
        const uint8_t* b = row + (size_t)(g / 4) * bb;
        const int s = g % 4;
        const float d = minfer_ld_f16(b);
        const float m = minfer_ld_f16(b + 2);
        const uint8_t* q = b + 4 + 8 * (s & 1);
        const int shift = (s >> 1) * 4;
#pragma unroll
        for (int t = 0; t < 8; t++) v[t] = __fadd_rn(__fmul_rn((float)((q[t] >> shift) & 15), d), m);
    }
    static __device__ __forceinline__ float at(const uint8_t* row, int i) { return minfer_dq_q4_1(row, i); }
};

template <> struct MinferDq<MINFER_T_Q5_0> {
    static constexpr int bs = MINFER_QK, bb = MINFER_Q5_0_BYTES;
    static __device__ __forceinline__ void group8(const uint8_t* row, int g, float* v) {
        const uint8_t* b = row + (size_t)(g / 4) * bb;
        const int s = g % 4;
        const float d = minfer_ld_f16(b);
        const uint32_t qh = minfer_ld_u32(b + 2) >> (8 * s); // bits of values 8s ..
        const uint8_t* q = b + 6 + 8 * (s & 1);
        const int shift = (s >> 1) * 4;
#pragma unroll
        for (int t = 0; t < 8; t++) {
            const int x = (((q[t] >> shift) & 15) | (int)(((qh >> t) & 1) << 4)) - 16;
            v[t] = __fmul_rn((float)x, d);
        }
    }
    static __device__ __forceinline__ float at(const uint8_t* row, int i) { return minfer_dq_q5_0(row, i); }
};

template <> struct MinferDq<MINFER_T_Q5_1> {
    static constexpr int bs = MINFER_QK, bb = MINFER_Q5_1_BYTES;
    static __device__ __forceinline__ void group8(const uint8_t* row, int g, float* v) {
        const uint8_t* b = row + (size_t)(g / 4) * bb;
        const int s = g % 4;
        const float d = minfer_ld_f16(b);
        const float m = minfer_ld_f16(b + 2);
        const uint32_t qh = minfer_ld_u32(b + 4) >> (8 * s);
        const uint8_t* q = b + 8 + 8 * (s & 1);
        const int shift = (s >> 1) * 4;
#pragma unroll
        for (int t = 0; t < 8; t++) {
            const int x = ((q[t] >> shift) & 15) | (int)(((qh >> t) & 1) << 4);
            v[t] = __fadd_rn(__fmul_rn((float)x, d), m);
        }
    }
    static __device__ __forceinline__ float at(const uint8_t* row, int i) { return minfer_dq_q5_1(row, i); }
};

template <> struct MinferDq<MINFER_T_Q8_0> {
    static constexpr int bs = MINFER_QK, bb = MINFER_Q8_0_BYTES;
    static __device__ __forceinline__ void group8(const uint8_t* row, int g, float* v) {
        const uint8_t* b = row + (size_t)(g / 4) * bb;
        const int s = g % 4;
        const float d = minfer_ld_f16(b);
        const uint8_t* q = b + 2 + 8 * s;
#pragma unroll
        for (int t = 0; t < 8; t++) v[t] = __fmul_rn((float)(int8_t)q[t], d);
    }
    static __device__ __forceinline__ float at(const uint8_t* row, int i) { return minfer_dq_q8_0(row, i); }
};

template <> struct MinferDq<MINFER_T_Q4_K> {
    static constexpr int bs = MINFER_QKK, bb = MINFER_Q4_K_BYTES;
    static __device__ __forceinline__ void group8(const uint8_t* row, int g, float* v) {
        const uint8_t* b = row + (size_t)(g / 32) * bb;
        const int gs = g % 32;
        const int sub = gs / 4, c = sub / 2, l0 = 8 * (gs % 4);
        int sc, mn;
        minfer_kscale_min(b + 4, sub, &sc, &mn);
        const float d1 = __fmul_rn(minfer_ld_f16(b), (float)sc);
        const float m1 = __fmul_rn(minfer_ld_f16(b + 2), (float)mn);
        const uint8_t* q = b + 16 + 32 * c + l0;
        const int shift = (sub & 1) * 4;
#pragma unroll
        for (int t = 0; t < 8; t++) v[t] = __fsub_rn(__fmul_rn(d1, (float)((q[t] >> shift) & 15)), m1);
    }
    static __device__ __forceinline__ float at(const uint8_t* row, int i) { return minfer_dq_q4_k(row, i); }
};

template <> struct MinferDq<MINFER_T_Q5_K> {
    static constexpr int bs = MINFER_QKK, bb = MINFER_Q5_K_BYTES;
    static __device__ __forceinline__ void group8(const uint8_t* row, int g, float* v) {
        const uint8_t* b = row + (size_t)(g / 32) * bb;
        const int gs = g % 32;
        const int sub = gs / 4, c = sub / 2, l0 = 8 * (gs % 4);
        int sc, mn;
        minfer_kscale_min(b + 4, sub, &sc, &mn);
        const float d1 = __fmul_rn(minfer_ld_f16(b), (float)sc);
        const float m1 = __fmul_rn(minfer_ld_f16(b + 2), (float)mn);
        const uint8_t* q = b + 48 + 32 * c + l0;
        const uint8_t* qh = b + 16 + l0;
        const int shift = (sub & 1) * 4;
#pragma unroll
        for (int t = 0; t < 8; t++) {
            const int x = ((q[t] >> shift) & 15) | (((qh[t] >> sub) & 1) << 4);
            v[t] = __fsub_rn(__fmul_rn(d1, (float)x), m1);
        }
    }
    static __device__ __forceinline__ float at(const uint8_t* row, int i) { return minfer_dq_q5_k(row, i); }
};

template <> struct MinferDq<MINFER_T_Q6_K> {
    static constexpr int bs = MINFER_QKK, bb = MINFER_Q6_K_BYTES;
    static __device__ __forceinline__ void group8(const uint8_t* row, int g, float* v) {
        const uint8_t* b = row + (size_t)(g / 32) * bb;
        const int gs = g % 32;
        const int h = gs / 16, quarter = (gs % 16) / 4, l0 = 8 * (gs % 4);
        const uint8_t* ql = b + 64 * h + 32 * (quarter & 1) + l0;
        const uint8_t* qh = b + 128 + 32 * h + l0;
        const int sc = (int8_t)b[192 + 8 * h + l0 / 16 + 2 * quarter];
        const float ds = __fmul_rn(minfer_ld_f16(b + 208), (float)sc);
        const int lshift = (quarter >> 1) * 4, hshift = 2 * quarter;
#pragma unroll
        for (int t = 0; t < 8; t++) {
            const int x = (((ql[t] >> lshift) & 15) | (((qh[t] >> hshift) & 3) << 4)) - 32;
            v[t] = __fmul_rn(ds, (float)x);
        }
    }
    static __device__ __forceinline__ float at(const uint8_t* row, int i) { return minfer_dq_q6_k(row, i); }
};

// Whole blocks: values [32 blk, 32 blk + 32) and [256 sb, 256 sb + 256) of
// a row (any type; for the plain types a "block" is just 32 / 256 values).
template <int T>
__device__ __forceinline__ void minfer_dq_block32(const uint8_t* row, int blk, float* v) {
#pragma unroll
    for (int s = 0; s < 4; s++) MinferDq<T>::group8(row, 4 * blk + s, v + 8 * s);
}

template <int T>
__device__ __forceinline__ void minfer_dq_block256(const uint8_t* row, int sb, float* v) {
#pragma unroll 4
    for (int s = 0; s < 32; s++) MinferDq<T>::group8(row, 32 * sb + s, v + 8 * s);
}

// Bytes of a row of k values (k a multiple of the block size).
template <int T>
__host__ __device__ __forceinline__ size_t minfer_row_bytes(int k) {
    return (size_t)(k / MinferDq<T>::bs) * MinferDq<T>::bb;
}

#endif // MINFER_DEQUANT_CUH
