// attn_decode2.cu: the lean split-K decode attention (the only split-K
// decode attention since session 28 retired its first and grouped forms,
// reports/MINFER_ATTN_DECODE_LEAN; launcher cuda/attn_decode2.go), the
// same semantics as minfer_attn_f32: the query of token t sits at cell
// win[0] + t and attends to cells [max(0, cell - window + 1), cell]
// (window 0: from cell 0); query head h reads KV head h / G; score =
// dot(q, k) * scale; out = softmax(scores) . V. A start < 0 or a cell >=
// n_ctx gives a NaN row.
//
// Why another kernel: attn_decode.cu measured 7.2 us per call at 600 cells
// (0.2% of the copy ceiling, 166 registers, 5.5% occupancy): a latency
// chain of q staging, two block barriers, a four-warp merge through shared
// memory and a combine. This one keeps every warp independent: no shared
// memory, no barrier, q in registers, and K/V loads one pass ahead. Its
// first form issued ~61 warp instructions a cell and query head at ~17%
// occupancy (ncu, session 20): issue-bound. The lean form cut that (q
// pre-scaled, base-2 exponentials, two passes an iteration, the end test
// in the last pass only): tg128 at depth 32128 +7.1% (H100). The grouped
// form (a KV head's query heads as the warps of one block, K / V rows from
// L1) and a cap of 128 splits both lost to it (session 28: lean 188-190
// tok/s, grouped 182-184, first 178-179, 128 splits 181-182).
//
// Geometry. Grid (nt * n_head, nsplit), 32 threads: block x is one (token,
// query head), block y one split of the cells; the block is one warp. Query
// heads of a GQA group are separate blocks (more warps in flight; the group
// re-reads the same K/V rows, from L2). The grid depends on n_ctx and the
// shapes only (nsplit = min(64, ceil(n_ctx / SPLIT)), the launcher's cap;
// the combine takes up to MAXS), never on the KV length: the window is
// read from device memory, so a captured graph replays with fresh cells.
// The run-time split rule over the attended n:
//   n <= SINGLE: one split that writes the output itself (no scratch);
//   else chunks of max(SPLIT, ceil(n / nsplit)) cells, nact active splits.
// Blocks y >= nact exit right after reading the window.
//
// Lanes over the head dimension. A warp is cut into SLOTS slots of LPC
// lanes; a slot scores one cell at a time, each lane holding NE elements of
// q in registers and reading the same NE elements of the cell's K row (one
// 16 / 32-byte load per lane, a slot's row one coalesced read), reduced
// over the slot with log2(LPC) xor shuffles:
//   hd 64:  LPC 8,  4 slots, 8 contiguous elements per lane;
//   hd 128: LPC 16, 2 slots, 8 contiguous elements per lane;
//   any even hd <= 128: LPC 32, 1 slot, element pairs lane and lane + 32.
// A pass takes B cells per slot (B * SLOTS per warp); the K and V rows of
// the next pass are loaded (raw bits, converted at use) while this one is
// computed, and the first PFCELLS cells of the chunk are prefetched to L1
// up front. Each slot keeps its own online softmax (m, l, acc); at the end
// the slots merge through xor shuffles (both partners compute the same
// sums, fixed order).
//
// Combine (nact > 1): "last block done", deterministic. Every active block
// writes its unnormalised (m, l) and acc[hd] to scratch, fences and counts
// itself on counters[block x]; the block that brings the count to nact
// reads the nact partials in split order (weights 2^(m_s - M) / L), writes
// the output and resets the counter to 0 for the next launch (layer, graph
// replay). The result does not depend on which block came last, and each
// (token, head) is computed the same way whatever nt is.
//
// Numerics (accumulation-order class against the CPU): q scaled by
// scale * log2(e) once (one more f32 rounding); per-lane partial dot
// products in f32 FMA, then a fixed shuffle tree; scores and m in log2
// units, every exponential one ex2.approx (~2^-22 relative); sums of
// exponentials and p * v per slot in cell order, merged with rescaling;
// normalised at the end. A KV element reads exactly as kv_elem.
//
// Scratch (cuda/attn_decode2.go): counters int[AttnDecodeMaxNT * n_head]
// (zero between launches), part_ml float2[grid.x][nsplit], part_acc
// float[grid.x][nsplit][hd].
#include "common.cuh"
#include "mma.cuh"
#include "q8_1.cuh"

namespace adec2 {
constexpr int THREADS = 32;   // one warp per block
constexpr int MINBLOCKS = 16; // __launch_bounds__: <= 128 registers
constexpr int MAXS = 128;     // splits the combine takes (NW partials per lane); the launcher caps them at 64
constexpr int NW = MAXS / 32; // partials per lane in the combine
constexpr int SPLIT = 32;     // fewest cells per active split once the range is split
constexpr int SINGLE = 64;    // attended ranges up to this many cells take one split
constexpr int PFCELLS = 64;   // cells of a chunk prefetched to L1 up front
static_assert(MAXS % 32 == 0 && MAXS <= 128 && SINGLE >= SPLIT, "split rule and combine weights");

// Lay is the lane layout of a head_dim class (HD 0: any even head_dim).
template <int HD>
struct Lay {
    static constexpr int LPC = HD == 64 ? 8 : HD == 128 ? 16 : 32; // lanes per cell
    static constexpr int SLOTS = 32 / LPC;
    static constexpr int NE = HD > 0 ? 8 : 4; // elements per lane
    static constexpr int CE = HD == 64 ? 2 : 4; // output elements per lane in the combine
};

// Words of raw bits one lane loads per KV row.
template <int HD, int FMT>
struct Raw {
    static constexpr int NR = HD > 0 ? (FMT == mops::KV_F32 ? 8 : FMT == mops::KV_F16 ? 4 : 3)
                                     : (FMT == mops::KV_F32 ? 4 : 2);
};

// elem is the head element of the lane's x[i] (lis: lane in slot).
template <int HD>
__device__ __forceinline__ int elem(int lis, int i) {
    if constexpr (HD > 0) return lis * 8 + i;
    else return 2 * (lis + 32 * (i >> 1)) + (i & 1);
}

// load_raw reads the lane's elements of a KV head (element offset off) of
// one row as raw bits; pairs beyond the head (HD 0) read as zeros.
template <int HD, int FMT>
__device__ __forceinline__ void load_raw(unsigned int (&r)[Raw<HD, FMT>::NR], const uint8_t* __restrict__ row, int off,
                                         int lis, int half) {
    if constexpr (HD > 0) {
        const int e = off + lis * 8;
        if constexpr (FMT == mops::KV_F32) {
            const uint4* p = reinterpret_cast<const uint4*>(row) + (e >> 2);
            const uint4 a = __ldg(p), b = __ldg(p + 1);
            r[0] = a.x, r[1] = a.y, r[2] = a.z, r[3] = a.w, r[4] = b.x, r[5] = b.y, r[6] = b.z, r[7] = b.w;
        } else if constexpr (FMT == mops::KV_F16) {
            const uint4 a = __ldg(reinterpret_cast<const uint4*>(row + 2 * (long long)e));
            r[0] = a.x, r[1] = a.y, r[2] = a.z, r[3] = a.w;
        } else {
            // q8_0 blocks are 34 bytes: only 2-byte alignment is known.
            const uint8_t* blk = row + (e / mops::Q8_0_LEN) * mops::Q8_0_BYTES;
            const unsigned short* qs = reinterpret_cast<const unsigned short*>(blk + 2 + (e % mops::Q8_0_LEN));
            r[0] = (unsigned int)__ldg(qs) | ((unsigned int)__ldg(qs + 1) << 16);
            r[1] = (unsigned int)__ldg(qs + 2) | ((unsigned int)__ldg(qs + 3) << 16);
            r[2] = __ldg(reinterpret_cast<const unsigned short*>(blk));
        }
    } else {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int pr = lis + 32 * j;
            const int e = off + 2 * pr;
            if constexpr (FMT == mops::KV_F32) {
                float2 x = make_float2(0.0f, 0.0f);
                if (pr < half) x = __ldg(reinterpret_cast<const float2*>(row) + (e >> 1));
                r[2 * j] = __float_as_uint(x.x), r[2 * j + 1] = __float_as_uint(x.y);
            } else if constexpr (FMT == mops::KV_F16) {
                r[j] = pr < half ? __ldg(reinterpret_cast<const unsigned int*>(row) + (e >> 1)) : 0u;
            } else {
                unsigned int w = 0u;
                if (pr < half) {
                    const uint8_t* blk = row + (e / mops::Q8_0_LEN) * mops::Q8_0_BYTES;
                    const unsigned int d = __ldg(reinterpret_cast<const unsigned short*>(blk));
                    const unsigned int qq = __ldg(reinterpret_cast<const unsigned short*>(blk + 2 + (e % mops::Q8_0_LEN)));
                    w = qq | (d << 16);
                }
                r[j] = w;
            }
        }
    }
}

__device__ __forceinline__ float h2f(unsigned int bits) {
    return mops::half_bits_to_float((uint16_t)(bits & 0xffffu));
}

// cvt turns raw bits into the lane's NE f32 elements (kv_elem's values).
template <int HD, int FMT>
__device__ __forceinline__ void cvt(const unsigned int (&r)[Raw<HD, FMT>::NR], float (&x)[Lay<HD>::NE]) {
    if constexpr (FMT == mops::KV_F32) {
#pragma unroll
        for (int i = 0; i < Lay<HD>::NE; i++) x[i] = __uint_as_float(r[i]);
    } else if constexpr (FMT == mops::KV_F16) {
#pragma unroll
        for (int i = 0; i < Lay<HD>::NE / 2; i++) x[2 * i] = h2f(r[i]), x[2 * i + 1] = h2f(r[i] >> 16);
    } else if constexpr (HD > 0) {
        const float d = h2f(r[2]);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const unsigned int qq = r[i >> 1] >> (16 * (i & 1));
            x[2 * i] = __fmul_rn(d, (float)(int8_t)(qq & 0xffu));
            x[2 * i + 1] = __fmul_rn(d, (float)(int8_t)((qq >> 8) & 0xffu));
        }
    } else {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const float d = h2f(r[j] >> 16);
            x[2 * j] = __fmul_rn(d, (float)(int8_t)(r[j] & 0xffu));
            x[2 * j + 1] = __fmul_rn(d, (float)(int8_t)((r[j] >> 8) & 0xffu));
        }
    }
}

// prefetch_span asks L1 for the 128-byte lines of bytes [b0, b1) of a row
// (a hint: the loads that follow are the same either way).
__device__ __forceinline__ void prefetch_span(const uint8_t* row, int b0, int b1) {
    const size_t a0 = __cvta_generic_to_global(row);
    for (size_t a = (a0 + b0) & ~(size_t)127; a < a0 + b1; a += 128) asm volatile("prefetch.global.L1 [%0];" ::"l"(a));
}

// q8_1_lanes writes the Q8_1 blocks of a head's output row (MINFER_FUSE_ATTN_Q8)
// from NV contiguous values a lane: 32 / NV lanes a block, lane li holding
// elements (li % (32 / NV)) * NV .. + NV - 1 of block li / (32 / NV). Every
// lane of the warp takes part (the shuffles stay inside aligned groups of
// 32 / NV lanes); only lanes with write set store. The arithmetic is
// minfer_q8_1_warp's (q8_1.cuh), and max |x| (NaN-ignoring, as its tree)
// and the sum of q are exact, so the bytes are bitwise those of a separate
// quantization of the f32 row.
template <int NV>
__device__ __forceinline__ void q8_1_lanes(uint8_t* __restrict__ row, const float (&v)[NV], int li, bool write) {
    constexpr int LPB = 32 / NV;
    static_assert(NV * LPB == 32 && (LPB & (LPB - 1)) == 0, "a Q8_1 block is whole lanes");
    float amax = fabsf(v[0]);
#pragma unroll
    for (int i = 1; i < NV; i++) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
    for (int off = 1; off < LPB; off <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    float id;
    const float d = minfer_q8_1_scale(amax, &id);
    int q[NV], sum = 0;
#pragma unroll
    for (int i = 0; i < NV; i++) q[i] = minfer_q8_1_quant(v[i], id), sum += q[i];
#pragma unroll
    for (int off = 1; off < LPB; off <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (write) {
        uint8_t* b = row + (li / LPB) * MINFER_Q8_1_BYTES;
#pragma unroll
        for (int i = 0; i < NV; i++) b[4 + (li % LPB) * NV + i] = (uint8_t)(int8_t)q[i];
        if (li % LPB == 0) {
            unsigned short* h = reinterpret_cast<unsigned short*>(b);
            h[0] = minfer_q8_1_dbits(d);
            h[1] = minfer_q8_1_sbits(sum, d);
        }
    }
}

// decode is the whole kernel for one head_dim class and KV format. q is
// scaled by scale * log2(e) once, so a score needs no multiply and every
// exponential is one ex2 (m, the partials' m included, in log2 units); two
// passes an iteration alternate their K / V registers instead of copying
// the next pass into this one's; and the per-cell end test runs in the
// last pass only.
//
// With Q8 (MINFER_FUSE_ATTN_Q8: minfer_attn_decode2q_*, head_dim 64 / 128)
// the writer of a row also writes its Q8_1 blocks at q8 (row bx's at q8 +
// bx * hd / 32 blocks: the o-projection's activation row), so the matvec
// after it needs no quantization launch; with out null it writes q8 alone.
template <int HD, int FMT, bool Q8 = false>
__device__ __forceinline__ void decode(float* __restrict__ out, const float* __restrict__ q, const uint8_t* __restrict__ kreg,
                                       const uint8_t* __restrict__ vreg, const int* __restrict__ win,
                                       float2* __restrict__ part_ml, float* __restrict__ part_acc, int* __restrict__ counters,
                                       int n_head, int n_head_kv, int hd_arg, long long row_bytes, int n_ctx, int window,
                                       float scale, int nsplit, uint8_t* __restrict__ q8 = nullptr) {
    static_assert(!Q8 || HD > 0, "the Q8_1 output: head_dim 64 / 128");
    using L = Lay<HD>;
    constexpr int NE = L::NE, LPC = L::LPC, SLOTS = L::SLOTS, CE = L::CE;
    constexpr int NR = Raw<HD, FMT>::NR;
    // Rows per slot per pass: about 32 words of raw K + V per lane, twice
    // (this pass and the next in flight).
    constexpr int B = (HD > 0 && FMT == mops::KV_F32) ? 2 : 4;
    constexpr int CPP = B * SLOTS; // cells per pass
    constexpr int CB = CE == 2 ? 32 : 16; // partial loads in flight per lane in the combine
    static_assert(32 % CB == 0, "a combine batch lies within one group of 32 partials");

    const int hd = HD > 0 ? HD : hd_arg;
    const int half = hd >> 1;
    const int lane = threadIdx.x & 31;
    const int lis = lane % LPC, slot = lane / LPC;
    const int sp = blockIdx.y;
    const int bx = blockIdx.x; // the (token, query head) row of q, out and the partials
    const int kvh = bx % n_head / (n_head / n_head_kv);
    const int t = bx / n_head;
    float* const y = out + (long long)bx * hd; // q and out are [hd, n_head, nt]: row bx
    uint8_t* const yq = Q8 ? q8 + (long long)bx * (HD / 32) * MINFER_Q8_1_BYTES : nullptr;
    const bool wy = !Q8 || out != nullptr; // the Q8_1 form may write q8 alone

    // q does not depend on the window: its loads go out with win's.
    float qv[NE];
    {
        const float* qr = q + (long long)bx * hd;
#pragma unroll
        for (int i = 0; i < NE; i++) {
            const int e = elem<HD>(lis, i);
            qv[i] = e < hd ? __ldg(qr + e) : 0.0f;
        }
        const float sl2 = __fmul_rn(scale, 1.4426950408889634f);
#pragma unroll
        for (int i = 0; i < NE; i++) qv[i] = __fmul_rn(qv[i], sl2);
    }
    const int start = __ldg(win);
    const long long cell = (long long)start + t;
    if (start < 0 || cell >= n_ctx) {
        if (sp == 0) {
            for (int i = lane; i < hd && wy; i += THREADS) y[i] = __int_as_float(0x7fc00000);
            if constexpr (Q8) {
                float nan[CE];
#pragma unroll
                for (int c = 0; c < CE; c++) nan[c] = __int_as_float(0x7fc00000);
                q8_1_lanes<CE>(yq, nan, lane, true);
            }
        }
        return;
    }
    const long long first = window > 0 ? max(0LL, cell - window + 1) : 0LL;
    const int n = (int)(cell - first + 1);
    // The run-time split rule (attn_decode2.go attnDecode2SplitPlan mirrors
    // it): chunk >= ceil(n / nsplit), so nact <= nsplit = gridDim.y.
    const int chunk = n <= SINGLE ? n : max((n + nsplit - 1) / nsplit, SPLIT);
    const int nact = (n + chunk - 1) / chunk;
    if (sp >= nact) return; // an idle split: nothing to write, nothing to count

    const long long c_lo = first + (long long)sp * chunk;
    const int cnt = (int)min((long long)chunk, cell + 1 - c_lo);
    const int off = kvh * hd; // element offset of the KV head in a row
    int b0, b1;               // its byte span in a row (q8_0: whole blocks)
    if constexpr (FMT == mops::KV_F32) {
        b0 = 4 * off, b1 = 4 * (off + hd);
    } else if constexpr (FMT == mops::KV_F16) {
        b0 = 2 * off, b1 = 2 * (off + hd);
    } else {
        b0 = off / mops::Q8_0_LEN * mops::Q8_0_BYTES;
        b1 = (off + hd + mops::Q8_0_LEN - 1) / mops::Q8_0_LEN * mops::Q8_0_BYTES;
    }
    for (int c = lane; c < min(cnt, PFCELLS); c += THREADS) {
        prefetch_span(kreg + (c_lo + c) * row_bytes, b0, b1);
        prefetch_span(vreg + (c_lo + c) * row_bytes, b0, b1);
    }

    // load_pass fills the raw K and V of pass cells pb .. pb + CPP - 1
    // (this slot's B of them); cells past the chunk read as zeros.
    auto load_pass = [&](int pb, unsigned int (&kr)[B][NR], unsigned int (&vr)[B][NR]) {
#pragma unroll
        for (int b = 0; b < B; b++) {
            const int c = pb + b * SLOTS + slot;
            if (c < cnt) {
                load_raw<HD, FMT>(kr[b], kreg + (c_lo + c) * row_bytes, off, lis, half);
                load_raw<HD, FMT>(vr[b], vreg + (c_lo + c) * row_bytes, off, lis, half);
            } else {
#pragma unroll
                for (int w = 0; w < NR; w++) kr[b][w] = 0u, vr[b][w] = 0u;
            }
        }
    };

    float m = -INFINITY, l = 0.0f, acc[NE];
#pragma unroll
    for (int i = 0; i < NE; i++) acc[i] = 0.0f;
    // step folds pass pb (its raw K / V in kr, vr) into the slot's online
    // softmax; tail: the pass may run past the chunk's end (each cell is
    // tested only there). tail is a constant at every call and folds once
    // inlined: a generic lambda carrying it as a type crashed NVRTC 13.0
    // (SIGSEGV compiling this unit, session 22).
    auto step = [&](int pb, const unsigned int (&kr)[B][NR], const unsigned int (&vr)[B][NR], bool tail) {
        float s[B];
#pragma unroll
        for (int b = 0; b < B; b++) {
            float x[NE];
            cvt<HD, FMT>(kr[b], x);
            float d = 0.0f;
#pragma unroll
            for (int i = 0; i < NE; i++) d = fmaf(qv[i], x[i], d);
#pragma unroll
            for (int o = LPC / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
            s[b] = !tail || pb + b * SLOTS + slot < cnt ? d : -INFINITY;
        }
        float mx = m;
#pragma unroll
        for (int b = 0; b < B; b++) mx = fmaxf(mx, s[b]);
        if (mx != -INFINITY) { // slot-uniform: a slot past the chunk's end has nothing yet
            const float corr = ex2(m - mx); // m = -inf: 0
            l = __fmul_rn(l, corr);
#pragma unroll
            for (int i = 0; i < NE; i++) acc[i] = __fmul_rn(acc[i], corr);
#pragma unroll
            for (int b = 0; b < B; b++) {
                const float p = ex2(s[b] - mx); // a cell past the end: 0
                l = __fadd_rn(l, p);
                float v[NE];
                cvt<HD, FMT>(vr[b], v);
#pragma unroll
                for (int i = 0; i < NE; i++) acc[i] = fmaf(p, v[i], acc[i]);
            }
            m = mx;
        }
    };
    unsigned int kr[B][NR], vr[B][NR];
    load_pass(0, kr, vr);
    // Two passes an iteration, the next one's loads in the other registers
    // while this one is computed.
    unsigned int kn[B][NR], vn[B][NR];
    for (int pb = 0; pb < cnt; pb += 2 * CPP) { // warp-uniform trip count
        if (pb + CPP >= cnt) {
            step(pb, kr, vr, true);
            break;
        }
        load_pass(pb + CPP, kn, vn);
        step(pb, kr, vr, false);
        if (pb + 2 * CPP < cnt) load_pass(pb + 2 * CPP, kr, vr);
        if (pb + 2 * CPP >= cnt) step(pb + CPP, kn, vn, true);
        else step(pb + CPP, kn, vn, false);
    }

    // Merge the slots (slot 0 always has a cell, so M is finite). Partners
    // compute the same products and add them commutatively.
#pragma unroll
    for (int o = LPC; o < 32; o <<= 1) {
        const float mo = __shfl_xor_sync(0xffffffffu, m, o);
        const float lo = __shfl_xor_sync(0xffffffffu, l, o);
        const float M = fmaxf(m, mo);
        const float ea = m == -INFINITY ? 0.0f : ex2(m - M);
        const float eb = mo == -INFINITY ? 0.0f : ex2(mo - M);
        l = __fadd_rn(__fmul_rn(ea, l), __fmul_rn(eb, lo));
#pragma unroll
        for (int i = 0; i < NE; i++) {
            const float ao = __shfl_xor_sync(0xffffffffu, acc[i], o);
            acc[i] = __fadd_rn(__fmul_rn(ea, acc[i]), __fmul_rn(eb, ao));
        }
        m = M;
    }

    if (nact == 1) {
        if (slot == 0 && wy) {
            const float inv = __fdiv_rn(1.0f, l);
#pragma unroll
            for (int i = 0; i < NE; i++) {
                const int e = elem<HD>(lis, i);
                if (e < hd) y[e] = __fmul_rn(acc[i], inv); // scalar stores: out may sit at any element offset
            }
        }
        if constexpr (Q8) { // every slot holds the merged row: all lanes quantize, slot 0 writes
            const float inv = __fdiv_rn(1.0f, l);
            float v[NE];
#pragma unroll
            for (int i = 0; i < NE; i++) v[i] = __fmul_rn(acc[i], inv);
            q8_1_lanes<NE>(yq, v, lis, slot == 0);
        }
        return;
    }

    // Write the partial, count this block; the last of the nact combines.
    const long long pbase = (long long)bx * nsplit; // partials of block x
    if (slot == 0) {
        float* pa = part_acc + (pbase + sp) * hd;
        if constexpr (HD > 0) {
            *reinterpret_cast<float4*>(pa + lis * 8) = make_float4(acc[0], acc[1], acc[2], acc[3]);
            *reinterpret_cast<float4*>(pa + lis * 8 + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
        } else {
#pragma unroll
            for (int j = 0; j < 2; j++)
                if (lis + 32 * j < half) *reinterpret_cast<float2*>(pa + 2 * (lis + 32 * j)) = make_float2(acc[2 * j], acc[2 * j + 1]);
        }
        if (lane == 0) part_ml[pbase + sp] = make_float2(m, l);
    }
    __threadfence();
    int last = 0;
    if (lane == 0) {
        last = atomicAdd(&counters[bx], 1) == nact - 1;
        if (last) counters[bx] = 0; // every launch leaves the counters at 0 (graph replays)
    }
    if (!__shfl_sync(0xffffffffu, last, 0)) return;
    __threadfence();

    // The combine: lane c holds elements elc(c) of the output; partials in
    // split order, CB of them in flight per lane.
    auto elc = [&](int c) { return HD > 0 ? lane * CE + c : 2 * (lane + 32 * (c >> 1)) + (c & 1); };
    float v[CB][CE];
    auto load_batch = [&](int s0) {
#pragma unroll
        for (int k = 0; k < CB; k++) {
            const int s = s0 + k;
            const float* src = part_acc + (pbase + s) * hd;
            if constexpr (CE == 2) {
                const float2 x = s < nact ? __ldcg(reinterpret_cast<const float2*>(src) + lane) : make_float2(0.0f, 0.0f);
                v[k][0] = x.x, v[k][1] = x.y;
            } else if constexpr (HD > 0) {
                const float4 x = s < nact ? __ldcg(reinterpret_cast<const float4*>(src) + lane) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                v[k][0] = x.x, v[k][1] = x.y, v[k][2] = x.z, v[k][3] = x.w;
            } else {
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int pr = lane + 32 * j;
                    const float2 x = (s < nact && pr < half) ? __ldcg(reinterpret_cast<const float2*>(src) + pr) : make_float2(0.0f, 0.0f);
                    v[k][2 * j] = x.x, v[k][2 * j + 1] = x.y;
                }
            }
        }
    };
    load_batch(0); // in flight with the (m, l) loads
    // Lane l holds partials l, l + 32, ... (NW of them; past nact: weight 0).
    float ms[NW], ls[NW];
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < NW; j++) {
        const int s = lane + 32 * j;
        ms[j] = -INFINITY, ls[j] = 0.0f;
        if (s < nact) {
            const float2 x = __ldcg(part_ml + pbase + s);
            ms[j] = x.x, ls[j] = x.y;
        }
        mx = fmaxf(mx, ms[j]);
    }
    const float M = mops::warp_max(mx);
    float w[NW];
#pragma unroll
    for (int j = 0; j < NW; j++) w[j] = ms[j] == -INFINITY ? 0.0f : ex2(ms[j] - M);
    // Per lane in j order, then the warp: with nact <= 64 (w[2], w[3] zero)
    // the sum is the two-partial form's.
    float wl = __fmul_rn(w[0], ls[0]);
#pragma unroll
    for (int j = 1; j < NW; j++) wl = __fadd_rn(wl, __fmul_rn(w[j], ls[j]));
    const float Lsum = mops::warp_sum(wl);
    const float inv = __fdiv_rn(1.0f, Lsum);
#pragma unroll
    for (int j = 0; j < NW; j++) w[j] = __fmul_rn(w[j], inv);
    float a[CE];
#pragma unroll
    for (int c = 0; c < CE; c++) a[c] = 0.0f;
    for (int s0 = 0;;) {
        // CB divides 32, so the batch's partials share s / 32: their weights
        // sit in w[s0 / 32] of lane s % 32 (selected, not indexed).
        float wb = w[NW - 1];
#pragma unroll
        for (int j = NW - 2; j >= 0; j--) wb = (s0 >> 5) == j ? w[j] : wb;
#pragma unroll
        for (int k = 0; k < CB; k++) {
            const int s = s0 + k;
            if (s < nact) { // warp-uniform
                const float ws = __shfl_sync(0xffffffffu, wb, s & 31);
#pragma unroll
                for (int c = 0; c < CE; c++) a[c] = fmaf(ws, v[k][c], a[c]);
            }
        }
        s0 += CB;
        if (s0 >= nact) break;
        load_batch(s0);
    }
#pragma unroll
    for (int c = 0; c < CE; c++) {
        const int e = elc(c);
        if (e < hd && wy) y[e] = a[c];
    }
    if constexpr (Q8) q8_1_lanes<CE>(yq, a, lane, true); // lane holds elements lane * CE ..
}
} // namespace adec2

// The kernels: minfer_attn_decode2l_{hd64,hd128,any}_{f32,f16,q8_0}
// (the "l" names the lean form, kept since reports and liveness rules name
// it). Grid (nt * n_head, nsplit), block adec2::THREADS; q and out are
// [hd, n_head, nt].
#define MINFER_ADEC2_PARAMS                                                                                            \
    float *out, const float *q, const uint8_t *kreg, const uint8_t *vreg, const int *win, float2 *part_ml,           \
        float *part_acc, int *counters, int n_head, int n_head_kv, int hd, long long row_bytes, int n_ctx, int window, \
        float scale, int nsplit
#define MINFER_ADEC2_ARGS \
    out, q, kreg, vreg, win, part_ml, part_acc, counters, n_head, n_head_kv, hd, row_bytes, n_ctx, window, scale, nsplit

extern "C" __global__ void __launch_bounds__(adec2::THREADS, adec2::MINBLOCKS) minfer_attn_decode2l_hd64_f32(MINFER_ADEC2_PARAMS) {
    adec2::decode<64, mops::KV_F32>(MINFER_ADEC2_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec2::THREADS, adec2::MINBLOCKS) minfer_attn_decode2l_hd64_f16(MINFER_ADEC2_PARAMS) {
    adec2::decode<64, mops::KV_F16>(MINFER_ADEC2_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec2::THREADS, adec2::MINBLOCKS) minfer_attn_decode2l_hd64_q8_0(MINFER_ADEC2_PARAMS) {
    adec2::decode<64, mops::KV_Q8_0>(MINFER_ADEC2_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec2::THREADS, adec2::MINBLOCKS) minfer_attn_decode2l_hd128_f32(MINFER_ADEC2_PARAMS) {
    adec2::decode<128, mops::KV_F32>(MINFER_ADEC2_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec2::THREADS, adec2::MINBLOCKS) minfer_attn_decode2l_hd128_f16(MINFER_ADEC2_PARAMS) {
    adec2::decode<128, mops::KV_F16>(MINFER_ADEC2_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec2::THREADS, adec2::MINBLOCKS) minfer_attn_decode2l_hd128_q8_0(MINFER_ADEC2_PARAMS) {
    adec2::decode<128, mops::KV_Q8_0>(MINFER_ADEC2_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec2::THREADS, adec2::MINBLOCKS) minfer_attn_decode2l_any_f32(MINFER_ADEC2_PARAMS) {
    adec2::decode<0, mops::KV_F32>(MINFER_ADEC2_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec2::THREADS, adec2::MINBLOCKS) minfer_attn_decode2l_any_f16(MINFER_ADEC2_PARAMS) {
    adec2::decode<0, mops::KV_F16>(MINFER_ADEC2_ARGS);
}
extern "C" __global__ void __launch_bounds__(adec2::THREADS, adec2::MINBLOCKS) minfer_attn_decode2l_any_q8_0(MINFER_ADEC2_PARAMS) {
    adec2::decode<0, mops::KV_Q8_0>(MINFER_ADEC2_ARGS);
}

// The kernels with the Q8_1 output (MINFER_FUSE_ATTN_Q8): the lean
// kernels' grid, block and scratch, one argument more (q8).
extern "C" __global__ void __launch_bounds__(adec2::THREADS, adec2::MINBLOCKS) minfer_attn_decode2q_hd64_f32(MINFER_ADEC2_PARAMS, uint8_t* q8) {
    adec2::decode<64, mops::KV_F32, true>(MINFER_ADEC2_ARGS, q8);
}
extern "C" __global__ void __launch_bounds__(adec2::THREADS, adec2::MINBLOCKS) minfer_attn_decode2q_hd64_f16(MINFER_ADEC2_PARAMS, uint8_t* q8) {
    adec2::decode<64, mops::KV_F16, true>(MINFER_ADEC2_ARGS, q8);
}
extern "C" __global__ void __launch_bounds__(adec2::THREADS, adec2::MINBLOCKS) minfer_attn_decode2q_hd64_q8_0(MINFER_ADEC2_PARAMS, uint8_t* q8) {
    adec2::decode<64, mops::KV_Q8_0, true>(MINFER_ADEC2_ARGS, q8);
}
extern "C" __global__ void __launch_bounds__(adec2::THREADS, adec2::MINBLOCKS) minfer_attn_decode2q_hd128_f32(MINFER_ADEC2_PARAMS, uint8_t* q8) {
    adec2::decode<128, mops::KV_F32, true>(MINFER_ADEC2_ARGS, q8);
}
extern "C" __global__ void __launch_bounds__(adec2::THREADS, adec2::MINBLOCKS) minfer_attn_decode2q_hd128_f16(MINFER_ADEC2_PARAMS, uint8_t* q8) {
    adec2::decode<128, mops::KV_F16, true>(MINFER_ADEC2_ARGS, q8);
}
extern "C" __global__ void __launch_bounds__(adec2::THREADS, adec2::MINBLOCKS) minfer_attn_decode2q_hd128_q8_0(MINFER_ADEC2_PARAMS, uint8_t* q8) {
    adec2::decode<128, mops::KV_Q8_0, true>(MINFER_ADEC2_ARGS, q8);
}

#undef MINFER_ADEC2_PARAMS
#undef MINFER_ADEC2_ARGS
