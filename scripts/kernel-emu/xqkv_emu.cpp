// xqkv_emu.cpp: runs the mixed-type decode q/k/v kernels of mmvq_xqkv.cu
// (MINFER_MMVQ_QKV_MIXED) on the CPU through include/cuda_fp16.h and
// requires each output bitwise equal to what the three separate launches it
// replaces write into the same buffer: minfer_mmvq_<qk> over q (with a
// bias) and k (without), then minfer_mmvqr_<v> over v's repacked copy (or
// minfer_mmvq_<v> over its GGUF bytes), with a bias.
//
// Shapes: the real pairs at their models' shapes (qwen2-0.5b Q4_K_M: Q5_0
// q/k with a repacked Q8_0 v, k 896, 896 / 128 / 128 rows; qwen2-7b Q4_K_M:
// Q4_K q/k with a repacked Q6_K v, k 3584, 3584 / 512 / 512), then every
// pair of the table at k 512, 64 / 28 / 30 rows (v's last block of 4 rows
// partial, v's rows not k's: the repacked layout's scales follow all of a
// matrix's quants, so a v row located with k's count reads other bytes). The GGUF bytes are random with finite f16 scales; the
// repacked copy is cuda.RepackHost's layout. Weights and the Q8_1 row end
// near a PROT_NONE page and are the only ranges registered (every read of
// a repacked row is an __ldg, which aborts outside them). The outputs
// start as two different NaN fills, so a row either side leaves unwritten
// differs. --quick: the 0.5b pair and the small shapes only (the plants'
// runs). Exits 1 on any difference.
#include "emu_mmvq.h"
#include "mmvq.cu"
#include "mmvq_repack.cu"
#include "mmvq_xqkv.cu"
#include <random>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#include "emu_launch.h"

static std::mt19937 rng(29);

// Kernel signatures: the plain decode matvec and the q/k/v forms.
typedef void (*MatVec)(float*, const uint8_t*, const uint8_t*, const float*, int, int);
typedef void (*QKV)(float*, const uint8_t*, const uint8_t*, const uint8_t*, const uint8_t*, const float*, const float*,
                    const float*, int, int, int, int);

struct Type {
    const char* name;
    int bs, bb;      // values and bytes per block
    int f16[2];      // offsets of its f16 fields (-1: none)
    MatVec gguf;     // minfer_mmvq_<t>
    MatVec repacked; // minfer_mmvqr_<t>, or null
};
static const Type kQ5_0 = {"Q5_0", 32, 22, {0, -1}, minfer_mmvq_q5_0, nullptr};
static const Type kQ5_1 = {"Q5_1", 32, 24, {0, 2}, minfer_mmvq_q5_1, nullptr};
static const Type kQ8_0 = {"Q8_0", 32, 34, {0, -1}, minfer_mmvq_q8_0, minfer_mmvqr_q8_0};
static const Type kQ4_K = {"Q4_K", 256, 144, {0, 2}, minfer_mmvq_q4_k, nullptr};
static const Type kQ5_K = {"Q5_K", 256, 176, {0, 2}, minfer_mmvq_q5_k, nullptr};
static const Type kQ6_K = {"Q6_K", 256, 210, {208, -1}, minfer_mmvq_q6_k, minfer_mmvqr_q6_k};

#include "emu_blocks.h"

static int grid(int rows) { return (rows + MINFER_MMVQ_ROWS - 1) / MINFER_MMVQ_ROWS; }

// run compares the mixed kernel x over (qk, v) against the three separate
// launches at k with nq / nk / nv rows (q and v with a bias, k without).
static int run(const char* name, QKV x, const Type& qk, const Type& v, bool vr, int k, int nq, int nk, int nv) {
    uint8_t *wq = gguf(qk, k, nq), *wk = gguf(qk, k, nk), *wv = gguf(v, k, nv);
    if (vr) wv = repacked(v, wv, k, nv);
    uint8_t* a = act(k);
    const std::vector<float> bq = biasOf(nq), bv = biasOf(nv);
    const int total = nq + nk + nv;
    std::vector<float> sep(total, __int_as_float(0x7fc00001)), mixed(total, __int_as_float(0x7fc00002));
    launch(grid(nq), [&] { qk.gguf(sep.data(), a, wq, bq.data(), k, nq); });
    launch(grid(nk), [&] { qk.gguf(sep.data() + nq, a, wk, nullptr, k, nk); });
    launch(grid(nv), [&] { (vr ? v.repacked : v.gguf)(sep.data() + nq + nk, a, wv, bv.data(), k, nv); });
    launch(grid(total), [&] { x(mixed.data(), a, wq, wk, wv, bq.data(), nullptr, bv.data(), k, nq, nk, nv); });
    int bad = 0, nan = 0;
    for (int i = 0; i < total; i++) {
        nan += std::isnan(sep[i]);
        if (memcmp(&sep[i], &mixed[i], 4) != 0) {
            if (bad < 3) {
                const char* m = i < nq ? "q" : i < nq + nk ? "k" : "v";
                fprintf(stderr, "  %s: out[%d] (%s) mixed %.9g (%#08x), separate %.9g (%#08x)\n", name, i, m, mixed[i],
                        __float_as_uint(mixed[i]), sep[i], __float_as_uint(sep[i]));
            }
            bad++;
        }
    }
    printf("%-28s %s + %s%s k=%-4d rows %d/%d/%d: %s%s\n", name, qk.name, v.name, vr ? " (repacked)" : "", k, nq, nk, nv,
           bad ? "DIFFER" : "bitwise", nan ? " (NaN in the separate launches' output: a row unwritten)" : "");
    return bad != 0 || nan != 0;
}

int main(int argc, char** argv) {
    const bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int bad = 0;
    // The real pairs at their models' shapes.
    bad += run("minfer_mmvq_xqkv_q5_0_q8_0r", minfer_mmvq_xqkv_q5_0_q8_0r, kQ5_0, kQ8_0, true, 896, 896, 128, 128);
    if (!quick) bad += run("minfer_mmvq_xqkv_q4_k_q6_kr", minfer_mmvq_xqkv_q4_k_q6_kr, kQ4_K, kQ6_K, true, 3584, 3584, 512, 512);
    // Every pair of the table, small, with v's rows not k's (more, so that
    // a v row placed by k's count stays inside v's bytes and differs).
    struct Pair {
        const char* name;
        QKV x;
        const Type &qk, &v;
        bool vr;
    };
    const Pair pairs[] = {
        {"minfer_mmvq_xqkv_q5_0_q8_0r", minfer_mmvq_xqkv_q5_0_q8_0r, kQ5_0, kQ8_0, true},
        {"minfer_mmvq_xqkv_q5_0_q8_0", minfer_mmvq_xqkv_q5_0_q8_0, kQ5_0, kQ8_0, false},
        {"minfer_mmvq_xqkv_q4_k_q6_kr", minfer_mmvq_xqkv_q4_k_q6_kr, kQ4_K, kQ6_K, true},
        {"minfer_mmvq_xqkv_q4_k_q6_k", minfer_mmvq_xqkv_q4_k_q6_k, kQ4_K, kQ6_K, false},
        {"minfer_mmvq_xqkv_q5_1_q8_0r", minfer_mmvq_xqkv_q5_1_q8_0r, kQ5_1, kQ8_0, true},
        {"minfer_mmvq_xqkv_q5_1_q8_0", minfer_mmvq_xqkv_q5_1_q8_0, kQ5_1, kQ8_0, false},
        {"minfer_mmvq_xqkv_q5_k_q6_kr", minfer_mmvq_xqkv_q5_k_q6_kr, kQ5_K, kQ6_K, true},
        {"minfer_mmvq_xqkv_q5_k_q6_k", minfer_mmvq_xqkv_q5_k_q6_k, kQ5_K, kQ6_K, false},
        {"minfer_mmvq_xqkv_q5_0_q5_1", minfer_mmvq_xqkv_q5_0_q5_1, kQ5_0, kQ5_1, false},
        {"minfer_mmvq_xqkv_q4_k_q5_k", minfer_mmvq_xqkv_q4_k_q5_k, kQ4_K, kQ5_K, false},
    };
    for (const Pair& p : pairs) bad += run(p.name, p.x, p.qk, p.v, p.vr, 512, 64, 28, 30);
    printf("%s\n", bad ? "FAIL" : "ALL BITWISE");
    return bad != 0;
}
