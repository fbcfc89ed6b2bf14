// repacked.cuh: the 16-byte-aligned repacked copy of a Q8_0 / Q6_K matrix
// (cuda/mmvq_repack.go RepackHost, the minfer_repack_* kernels): the quants
// of every block, then (Q6_K) the scales, then the f16 d, each array over
// the whole matrix of n rows. Row r's pointers into it and one 16-value
// unit's loads, shared by the decode (mmvq_repack.cu) and 2..8-token
// (mmvq_nt.cu) kernels; the decode and the arithmetic stay each family's.
#pragma once

#include "dequant.cuh"

#define MINFER_MMVQR_Q6_K_QBYTES 192 // ql + qh of a repacked Q6_K super-block

struct MinferRepackedQ8_0 {
    const uint4* q;          // two 16-value units per block, one uint4 each
    const unsigned short* d; // one f16 per block
    static __device__ __forceinline__ MinferRepackedQ8_0 row(const uint8_t* w, int n, int k, int r) {
        const size_t nb = (size_t)(k / MINFER_QK);
        return MinferRepackedQ8_0{reinterpret_cast<const uint4*>(w) + (size_t)r * nb * 2,
                                  reinterpret_cast<const unsigned short*>(w + (size_t)n * nb * 32) + (size_t)r * nb};
    }
};

struct MinferRepackedQ6_K {
    const uint4* q;          // 12 uint4 per super-block: ql (8) then qh (4)
    const int8_t* sc;        // 16 per super-block
    const unsigned short* d; // one f16 per super-block
    // Unit: the bytes of one 16-value unit, as loaded.
    struct Unit {
        uint4 ql, qh;
        int sc;
        unsigned short d;
    };
    static __device__ __forceinline__ MinferRepackedQ6_K row(const uint8_t* w, int n, int k, int r) {
        const size_t nsb = (size_t)(k / MINFER_QKK), all = (size_t)n * nsb, first = (size_t)r * nsb;
        return MinferRepackedQ6_K{reinterpret_cast<const uint4*>(w) + first * (MINFER_MMVQR_Q6_K_QBYTES / 16),
                                  reinterpret_cast<const int8_t*>(w + all * MINFER_MMVQR_Q6_K_QBYTES) + first * 16,
                                  reinterpret_cast<const unsigned short*>(w + all * (MINFER_MMVQR_Q6_K_QBYTES + 16)) + first};
    }
    // Unit u as in MinferMmvqQ6_K (mmvq.cu): super-block u / 16, sub-block
    // sub = 4 hh + quarter, half h; its ql bytes start at 64 hh + 32
    // (quarter & 1) + 16 h, its qh bytes at 128 + 32 hh + 16 h: both
    // multiples of 16, so uint4 indices 4 hh + 2 (quarter & 1) + h and
    // 8 + 2 hh + h of the super-block; its scale is byte 8 hh + 2 quarter + h
    // of the super-block's 16.
    __device__ __forceinline__ Unit unit(int u) const {
        const int sb = u >> 4, r = u & 15, sub = r >> 1, h = r & 1;
        const int hh = sub >> 2, quarter = sub & 3;
        const uint4* b = q + (size_t)sb * (MINFER_MMVQR_Q6_K_QBYTES / 16);
        Unit x;
        x.ql = __ldg(b + 4 * hh + 2 * (quarter & 1) + h);
        x.qh = __ldg(b + 8 + 2 * hh + h);
        x.sc = __ldg(sc + (size_t)sb * 16 + 8 * hh + 2 * quarter + h);
        x.d = __ldg(d + sb);
        return x;
    }
};
