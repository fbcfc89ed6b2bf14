// resn_emu.cpp: runs minfer_mmvq[r]_resn_<t> of cuda/kernels/mmvq_resn.cu
// (MINFER_FUSE_RES_NORM_Q8: the residual matvec whose last block writes the
// next norm's Q8_1 row) on the CPU through include/cuda_fp16.h, and checks
// it against the two launches it replaces: its f32 rows bitwise the _res_
// kernel's, its Q8_1 row bitwise minfer_rms_norm_q8_1 (norm.cu) of that row
// in its block of opsRowBlock(n) threads, and the counter back at 0 after
// each of two launches on it. Types: Q4_K and Q5_0 over the GGUF bytes, Q8_0
// and Q6_K over their repacked copies (a qwen2 Q4_K_M model's o / down
// projections); rows n = 896 and 3584 (the 0.5b's and 7B's hidden sizes),
// the Q8_1 row written over the matvec's own activation (as the backend
// does) and the residual in place; eps 1e-6 and the row's mean square (so
// that the eps shows in the bytes). Run by resn-emu.sh;
// exits 1 on any difference.
#include <atomic>
#include <functional>
#include <mutex>
#include <random>
#include <stdio.h>
#include <string.h>
#include <thread>
#include <vector>
#include "emu_mmvq.h"
inline __half __float2half(float f) { return __float2half_rn(f); }
#include "mmvq.cu"
#include "mmvq_nt.cu"
#include "mmvq_repack.cu"
#include "mmvq_resn.cu"
#include "norm.cu"
#include "emu_launch.h"

static std::mt19937 rng(31);
static uint16_t f16r() { return (uint16_t)((rng() & 1) << 15 | (8 + rng() % 8) << 10 | (rng() % 1024)); }

// buf: n bytes, 16-byte aligned, registered for __ldg's range check.
static uint8_t* buf(size_t n) {
    uint8_t* p = (uint8_t*)aligned_alloc(16, (n + 15) / 16 * 16);
    memset(p, 0, (n + 15) / 16 * 16);
    g_ranges.push_back({p, (n + 15) / 16 * 16});
    return p;
}

struct Type {
    const char* name;
    int bs, bb, doff, moff; // values and bytes per block, offsets of the f16 d and dmin (-1: none)
    bool repacked;
};

using ResK = void (*)(float*, const uint8_t*, const uint8_t*, const float*, int, int, const float*);
using ResnK = void (*)(float*, const uint8_t*, const uint8_t*, const float*, int, int, const float*, const float*, float, int,
                       uint8_t*, int*);

static int check(const Type& t, ResK res, ResnK resn, int k, int n, float eps, bool inplace) {
    const size_t nb = (size_t)(k / t.bs) * n;
    uint8_t* w = buf(nb * t.bb);
    for (size_t i = 0; i < nb * t.bb; i++) w[i] = rng();
    for (size_t b = 0; b < nb; b++) {
        uint16_t d = f16r();
        memcpy(w + b * t.bb + t.doff, &d, 2);
        if (t.moff >= 0) { uint16_t m = f16r(); memcpy(w + b * t.bb + t.moff, &m, 2); }
    }
    if (t.repacked) {
        uint8_t* r = buf(nb * t.bb);
        launch(1, [&] { (t.bs == 32 ? minfer_repack_q8_0 : minfer_repack_q6_k)(r, w, (long long)nb); });
        w = r;
    }
    // the activation: k / 32 Q8_1 blocks
    const size_t qb = (size_t)(k / 32) * 36;
    uint8_t* a = buf(qb);
    for (size_t i = 0; i < qb; i++) a[i] = rng();
    for (int b = 0; b < k / 32; b++) { uint16_t d = f16r(); memcpy(a + 36 * b, &d, 2); }
    std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
    float* resid = (float*)buf(4 * n);
    float* bias = (float*)buf(4 * n);
    float* nw = (float*)buf(4 * n);
    for (int i = 0; i < n; i++) resid[i] = 50.0f * uni(rng), bias[i] = uni(rng), nw[i] = 1.0f + 0.1f * uni(rng);
    // reference: the _res_ kernel, then minfer_rms_norm_q8_1 of its row
    float* want = (float*)buf(4 * n);
    uint8_t* wantq = buf((size_t)n / 32 * 36);
    const int rows = 4, grid = (n + rows - 1) / rows;
    const int vb = std::max(32, std::min(256, (n + 31) / 32 * 32)); // opsRowBlock(n)
    launch(grid, [&] { res(want, a, w, bias, k, n, resid); });
    if (eps < 0) { // the row's mean square: the eps shows in every block's d
        double ms = 0;
        for (int i = 0; i < n; i++) ms += (double)want[i] * want[i];
        eps = (float)(ms / n);
    }
    launch_xy(1, 1, [&] { minfer_rms_norm_q8_1(wantq, want, nw, n, eps); }, vb);
    // the fused kernel, twice on one counter: q8 over a copy of its own
    // activation (inplace) or a separate row; the residual in place or not
    int bad = 0;
    int* counter = (int*)buf(4);
    for (int rep = 0; rep < 2; rep++) {
        uint8_t* a2 = buf(std::max(qb, (size_t)n / 32 * 36)); // the scratch holds either row
        memcpy(a2, a, qb);
        uint8_t* q8 = inplace ? a2 : buf((size_t)n / 32 * 36);
        float* got = (float*)buf(4 * n);
        const float* r = resid;
        if (inplace) memcpy(got, resid, 4 * (size_t)n), r = got;
        launch(grid, [&] { resn(got, a2, w, bias, k, n, r, nw, eps, vb, q8, counter); });
        int df = 0, dq = 0;
        for (int i = 0; i < n; i++) df += memcmp(&got[i], &want[i], 4) != 0;
        for (size_t i = 0; i < (size_t)n / 32 * 36; i++) dq += q8[i] != wantq[i];
        const bool ok = df == 0 && dq == 0 && *counter == 0;
        printf("%s%s k=%d n=%d eps %g %s launch %d: %d f32 rows and %d Q8_1 bytes differ, counter %d %s\n", t.repacked ? "repacked " : "",
               t.name, k, n, eps, inplace ? "in place" : "apart", rep, df, dq, *counter, ok ? "ok" : "DIFFER");
        bad += !ok;
    }
    return bad;
}

int main() {
    const Type q4k = {"Q4_K", 256, 144, 0, 2, false}, q50 = {"Q5_0", 32, 22, 0, -1, false};
    const Type q80r = {"Q8_0", 32, 34, 0, -1, true}, q6kr = {"Q6_K", 256, 210, 208, -1, true};
    int bad = 0;
    for (int n : {896, 3584}) {
        const bool ip = n == 896;
        // stop at the first difference: a plant is caught in the first cases
        if (!bad) bad += check(q4k, minfer_mmvq_res_q4_k, minfer_mmvq_resn_q4_k, 512, n, 1e-6f, ip);
        if (!bad) bad += check(q6kr, minfer_mmvqr_res_q6_k, minfer_mmvqr_resn_q6_k, 512, n, -1.0f, !ip);
        if (!bad) bad += check(q50, minfer_mmvq_res_q5_0, minfer_mmvq_resn_q5_0, 512, n, -1.0f, ip);
        if (!bad) bad += check(q80r, minfer_mmvqr_res_q8_0, minfer_mmvqr_resn_q8_0, 512, n, 1e-6f, !ip);
    }
    printf("%s\n", bad ? "FAIL" : "RESN BITWISE");
    return bad != 0;
}
