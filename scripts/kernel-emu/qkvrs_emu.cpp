// qkvrs_emu.cpp: runs the decode q/k/v matvec kernels with the rope/store
// folded in (mmvq_xqkv.cu, MINFER_FUSE_QKV_ROPE) on the CPU through
// include/cuda_fp16.h and requires each launch's q' and both KV regions
// bitwise equal to what the two launches it replaces write: the bias-less
// q/k/v matvec (minfer_mmvq_qkv_<t>, minfer_mmvqr_qkv_<t> or
// minfer_mmvq_xqkv_<qk>_<v>[r], as the graph runs it once the rope/store
// took the biases) into a raw row, then minfer_qkv_rope_store over it with
// the biases, at the same position and KV window.
//
// Cases: qwen2-0.5b Q4_K_M's two forms at its shape (Q5_0 one-type and the
// Q5_0 / repacked Q8_0 pair: k 896, 14 / 2 heads of 64), qwen2-7b's Q4_K
// pair at head_dim 128 (k 3584, 28 / 4 heads), then every kernel at a small
// shape (k 256, head_dim 64 and 128), f32 and f16 caches, positions 0, 1
// and large, with and without biases, and the KV window's start outside
// [0, n_ctx) (-1 and n_ctx: nothing may be written). The regions have two
// slack cells past n_ctx and start from the same stale bytes; q' starts as
// two different NaN fills. --quick: the small shapes only. Exits 1 on any
// difference.
#include "emu_mmvq.h"
static float emu_qrs_smem[16384]; // minfer_qkv_rope_store's dynamic shared K row
#include "mmvq.cu"
#include "mmvq_repack.cu"
#include "mmvq_xqkv.cu"
#include "qkv_rope_store.cu"
#include <random>
#include <stdio.h>
#include <vector>
#include "emu_launch.h"

static std::mt19937 rng(33);

typedef void (*QKV)(float*, const uint8_t*, const uint8_t*, const uint8_t*, const uint8_t*, const float*, const float*,
                    const float*, int, int, int, int);
typedef void (*QKVRS)(const uint8_t*, const uint8_t*, const uint8_t*, const uint8_t*, const float*, const float*,
                      const float*, int, int, int, int, float*, const int*, const int*, uint8_t*, uint8_t*, int,
                      long long, int, int, float);

#include "emu_types.h"

#include "emu_blocks.h"

static int blocks(int rows) { return (rows + MINFER_MMVQ_ROWS - 1) / MINFER_MMVQ_ROWS; }

struct Case {
    int nh, nkv, hd, format, pos, start, nctx;
    bool bias;
};

// run compares the fused kernel f against the matvec m then
// minfer_qkv_rope_store: q/k of type qk (repacked when qkr), v of type v
// (repacked when vr), k values a row.
static int run(const char* name, QKVRS f, QKV m, const Type& qk, bool qkr, const Type& v, bool vr, int k, const Case& c) {
    const int nq = c.nh * c.hd, nk = c.nkv * c.hd, nv = nk, total = nq + nk + nv;
    uint8_t *wq = gguf(qk, k, nq), *wk = gguf(qk, k, nk), *wv = gguf(v, k, nv);
    if (qkr) wq = repacked(qk, wq, k, nq), wk = repacked(qk, wk, k, nk);
    if (vr) wv = repacked(v, wv, k, nv);
    uint8_t* a = act(k);
    std::vector<float> bq = biasOf(nq), bk = biasOf(nk), bv = biasOf(nv);
    const float *pbq = c.bias ? bq.data() : nullptr, *pbk = c.bias ? bk.data() : nullptr, *pbv = c.bias ? bv.data() : nullptr;
    const int esz = c.format == mops::KV_F32 ? 4 : 2;
    const long long rowBytes = (long long)nk * esz;
    const size_t regBytes = (size_t)(c.nctx + 2) * rowBytes; // two slack cells past n_ctx
    std::vector<uint8_t> kref(regBytes), vref(regBytes);
    for (size_t i = 0; i < regBytes; i++) kref[i] = (uint8_t)(0xA5 ^ i), vref[i] = (uint8_t)(0x3C ^ i);
    std::vector<uint8_t> kfus = kref, vfus = vref, kstale = kref, vstale = vref;
    const int pos[1] = {c.pos}, win[2] = {c.start, c.start + 1};
    const float theta = 1000000.0f;

    // The two launches the fusion replaces.
    std::vector<float> raw(total, __int_as_float(0x7fc00003)), qref(nq, __int_as_float(0x7fc00001));
    launch(blocks(total), [&] { m(raw.data(), a, wq, wk, wv, nullptr, nullptr, nullptr, k, nq, nk, nv); });
    const int qhpb = std::max(1, std::min(c.nh, 256 / (c.hd / 2)));
    const int groups = (c.nh + qhpb - 1) / qhpb;
    launch_xy(1, 2 + groups, [&] {
        minfer_qkv_rope_store(qref.data(), raw.data(), raw.data() + nq, raw.data() + nq + nk, pbq, pbk, pbv, pos, win,
                              kref.data(), vref.data(), c.format, rowBytes, c.nctx, c.nh, c.nkv, c.hd, c.hd, theta, 1, qhpb);
    }, 256);
    // The fused launch.
    std::vector<float> qfus(nq, __int_as_float(0x7fc00002));
    launch(nq / 4 + nk / 4 + blocks(nv), [&] {
        f(a, wq, wk, wv, pbq, pbk, pbv, k, nq, nk, nv, qfus.data(), pos, win, kfus.data(), vfus.data(), c.format, rowBytes,
          c.nctx, c.hd, theta);
    });

    int bad = 0;
    for (int i = 0; i < nq; i++) {
        if (memcmp(&qref[i], &qfus[i], 4) != 0) {
            if (bad < 3) fprintf(stderr, "  %s: q'[%d] fused %.9g (%#08x), separate %.9g (%#08x)\n", name, i, qfus[i],
                                 __float_as_uint(qfus[i]), qref[i], __float_as_uint(qref[i]));
            bad++;
        }
    }
    for (int side = 0; side < 2; side++) {
        const std::vector<uint8_t>&r = side ? vref : kref, &u = side ? vfus : kfus;
        for (size_t i = 0; i < regBytes; i++) {
            if (r[i] != u[i]) {
                if (bad < 3) fprintf(stderr, "  %s: %c region byte %zu (cell %lld) fused %#04x, separate %#04x\n", name,
                                     side ? 'V' : 'K', i, (long long)(i / rowBytes), u[i], r[i]);
                bad++;
            }
        }
    }
    // A cell outside [0, n_ctx): the reference itself stored nothing.
    const bool outside = c.start < 0 || c.start >= c.nctx;
    const bool untouched = kref == kstale && vref == vstale;
    if (outside != untouched) {
        fprintf(stderr, "  %s: the separate launches %s the regions with the window at %d of %d cells\n", name,
                untouched ? "left" : "changed", c.start, c.nctx);
        bad++;
    }
    printf("%-30s %s%s + %s%s k=%-4d heads %d/%d of %d %s pos %d cell %d/%d%s: %s\n", name, qk.name, qkr ? "r" : "", v.name,
           vr ? "r" : "", k, c.nh, c.nkv, c.hd, c.format == mops::KV_F32 ? "f32" : "f16", c.pos, c.start, c.nctx,
           c.bias ? "" : " no bias", bad ? "DIFFER" : "bitwise");
    return bad != 0;
}

int main(int argc, char** argv) {
    const bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int bad = 0;
    const int F32 = mops::KV_F32, F16 = mops::KV_F16;
    if (!quick) {
        // The real forms at their models' shapes.
        bad += run("minfer_mmvq_qkvrs_q5_0", minfer_mmvq_qkvrs_q5_0, minfer_mmvq_qkv_q5_0, kQ5_0, false, kQ5_0, false, 896,
                   {14, 2, 64, F16, 37, 5, 16, true});
        bad += run("minfer_mmvq_xqkvrs_q5_0_q8_0r", minfer_mmvq_xqkvrs_q5_0_q8_0r, minfer_mmvq_xqkv_q5_0_q8_0r, kQ5_0, false,
                   kQ8_0, true, 896, {14, 2, 64, F32, 1000, 15, 16, true});
        bad += run("minfer_mmvq_xqkvrs_q4_k_q6_kr", minfer_mmvq_xqkvrs_q4_k_q6_kr, minfer_mmvq_xqkv_q4_k_q6_kr, kQ4_K, false,
                   kQ6_K, true, 3584, {28, 4, 128, F16, 4093, 3, 8, true});
        bad += run("minfer_mmvqr_qkvrs_q8_0", minfer_mmvqr_qkvrs_q8_0, minfer_mmvqr_qkv_q8_0, kQ8_0, true, kQ8_0, true, 896,
                   {14, 2, 64, F16, 511, 0, 16, true});
    }
    // Every kernel, small: k 256, head_dim 64 and 128, both formats, the
    // window inside and outside the regions.
    struct K {
        const char* name;
        QKVRS f;
        QKV m;
        const Type &qk;
        bool qkr;
        const Type &v;
        bool vr;
    };
    const K ks[] = {
        {"minfer_mmvq_qkvrs_q8_0", minfer_mmvq_qkvrs_q8_0, minfer_mmvq_qkv_q8_0, kQ8_0, false, kQ8_0, false},
        {"minfer_mmvq_qkvrs_q4_0", minfer_mmvq_qkvrs_q4_0, minfer_mmvq_qkv_q4_0, kQ4_0, false, kQ4_0, false},
        {"minfer_mmvq_qkvrs_q4_1", minfer_mmvq_qkvrs_q4_1, minfer_mmvq_qkv_q4_1, kQ4_1, false, kQ4_1, false},
        {"minfer_mmvq_qkvrs_q5_0", minfer_mmvq_qkvrs_q5_0, minfer_mmvq_qkv_q5_0, kQ5_0, false, kQ5_0, false},
        {"minfer_mmvq_qkvrs_q5_1", minfer_mmvq_qkvrs_q5_1, minfer_mmvq_qkv_q5_1, kQ5_1, false, kQ5_1, false},
        {"minfer_mmvq_qkvrs_q4_k", minfer_mmvq_qkvrs_q4_k, minfer_mmvq_qkv_q4_k, kQ4_K, false, kQ4_K, false},
        {"minfer_mmvq_qkvrs_q5_k", minfer_mmvq_qkvrs_q5_k, minfer_mmvq_qkv_q5_k, kQ5_K, false, kQ5_K, false},
        {"minfer_mmvq_qkvrs_q6_k", minfer_mmvq_qkvrs_q6_k, minfer_mmvq_qkv_q6_k, kQ6_K, false, kQ6_K, false},
        {"minfer_mmvqr_qkvrs_q8_0", minfer_mmvqr_qkvrs_q8_0, minfer_mmvqr_qkv_q8_0, kQ8_0, true, kQ8_0, true},
        {"minfer_mmvqr_qkvrs_q6_k", minfer_mmvqr_qkvrs_q6_k, minfer_mmvqr_qkv_q6_k, kQ6_K, true, kQ6_K, true},
        {"minfer_mmvq_xqkvrs_q5_0_q8_0r", minfer_mmvq_xqkvrs_q5_0_q8_0r, minfer_mmvq_xqkv_q5_0_q8_0r, kQ5_0, false, kQ8_0, true},
        {"minfer_mmvq_xqkvrs_q5_0_q8_0", minfer_mmvq_xqkvrs_q5_0_q8_0, minfer_mmvq_xqkv_q5_0_q8_0, kQ5_0, false, kQ8_0, false},
        {"minfer_mmvq_xqkvrs_q4_k_q6_kr", minfer_mmvq_xqkvrs_q4_k_q6_kr, minfer_mmvq_xqkv_q4_k_q6_kr, kQ4_K, false, kQ6_K, true},
        {"minfer_mmvq_xqkvrs_q4_k_q6_k", minfer_mmvq_xqkvrs_q4_k_q6_k, minfer_mmvq_xqkv_q4_k_q6_k, kQ4_K, false, kQ6_K, false},
        {"minfer_mmvq_xqkvrs_q5_1_q8_0r", minfer_mmvq_xqkvrs_q5_1_q8_0r, minfer_mmvq_xqkv_q5_1_q8_0r, kQ5_1, false, kQ8_0, true},
        {"minfer_mmvq_xqkvrs_q5_1_q8_0", minfer_mmvq_xqkvrs_q5_1_q8_0, minfer_mmvq_xqkv_q5_1_q8_0, kQ5_1, false, kQ8_0, false},
        {"minfer_mmvq_xqkvrs_q5_k_q6_kr", minfer_mmvq_xqkvrs_q5_k_q6_kr, minfer_mmvq_xqkv_q5_k_q6_kr, kQ5_K, false, kQ6_K, true},
        {"minfer_mmvq_xqkvrs_q5_k_q6_k", minfer_mmvq_xqkvrs_q5_k_q6_k, minfer_mmvq_xqkv_q5_k_q6_k, kQ5_K, false, kQ6_K, false},
        {"minfer_mmvq_xqkvrs_q5_0_q5_1", minfer_mmvq_xqkvrs_q5_0_q5_1, minfer_mmvq_xqkv_q5_0_q5_1, kQ5_0, false, kQ5_1, false},
        {"minfer_mmvq_xqkvrs_q4_k_q5_k", minfer_mmvq_xqkvrs_q4_k_q5_k, minfer_mmvq_xqkv_q4_k_q5_k, kQ4_K, false, kQ5_K, false},
    };
    const Case small[] = {
        {2, 1, 64, F16, 7, 2, 4, true},      // hd 64, f16, a position that is not 0
        {1, 1, 128, F32, 0, 3, 4, true},     // hd 128, f32, position 0, the last cell
        {2, 2, 64, F32, 123457, 0, 4, false}, // no biases, a large position
        {2, 1, 64, F16, 5, 4, 4, true},      // the window at n_ctx: nothing stored
        {1, 1, 128, F16, 9, -1, 4, true},    // the window before cell 0: nothing stored
    };
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
        const K& x = ks[i];
        // Every kernel at the first two cases; the 0.5b forms and the
        // repacked Q8_0 at all of them.
        const bool all = strstr(x.name, "q5_0_q8_0r") || strcmp(x.name, "minfer_mmvq_qkvrs_q5_0") == 0 ||
                         strcmp(x.name, "minfer_mmvqr_qkvrs_q8_0") == 0;
        for (size_t j = 0; j < (all ? sizeof(small) / sizeof(small[0]) : 2); j++)
            bad += run(x.name, x.f, x.m, x.qk, x.qkr, x.v, x.vr, 256, small[j]);
    }
    printf("%s\n", bad ? "FAIL" : "ALL BITWISE");
    return bad != 0;
}
