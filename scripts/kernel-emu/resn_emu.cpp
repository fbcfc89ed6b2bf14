// resn_emu.cpp: runs minfer_mmvq[r]_resn_<t> of cuda/kernels/mmvq_resn.cu
// (MINFER_FUSE_RES_NORM_Q8: the residual matvec whose last block writes the
// next norm's Q8_1 row) on the CPU through include/cuda_fp16.h, and checks
// it against the two launches it replaces: its f32 rows bitwise the _res_
// kernel's, its Q8_1 row bitwise minfer_rms_norm_q8_1 (norm.cu) of that row
// in its block of opsRowBlock(n) threads, and the counter back at 0 after
// each of two launches on it. Types: Q4_K and Q5_0 over the GGUF bytes, Q8_0
// and Q6_K over their repacked copies (a qwen2 Q4_K_M model's o / down
// projections); rows n = 896 and 3584 (the 0.5b's and 7B's hidden sizes)
// and 160 and 64 (norm blocks of fewer than the tail's 256 virtual threads),
// the Q8_1 row written over the matvec's own activation (as the backend
// does) and the residual in place; eps 1e-6 and the row's mean square (so
// that the eps shows in the bytes). Run by resn-emu.sh;
// exits 1 on any difference.
//
// --chain: the resn kernel after the fused FFN of MINFER_FUSE_FFN_Q8, as
// an FFNMatMulAdd runs them when both levers are on (cuda/matmul.go
// opFFNMatMulAdd): minfer_mmvq[r]_ffnq_<t> reads the Q8_1 scratch and
// writes the FFN's f32 row and its Q8_1 row into a second buffer, then the
// down projection's resn kernel reads that second buffer and its last
// block writes the next norm's Q8_1 row into the scratch: a Q8_1 input
// apart from the row its tail writes. Two layers on the backend's buffers
// (the scratch, the FFN's row and Q8_1 output with its group counters, the
// resn counter), the second reading what the first's tail wrote, against
// the four launches the pair replaces: _ffn_, minfer_quantize_q8_1, _res_,
// minfer_rms_norm_q8_1. --wire=input: the down projection reads the
// scratch (the wiring without FFN_Q8's buffer); --wire=alias: its tail
// writes into the FFN's Q8_1 row it reads, not the scratch (resn-emu.sh's
// plants input, alias, early).
#include <algorithm>
#include <atomic>
#include <cmath>
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
#include "quantize_act.cu"
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

// weight: n rows of k random values, f16 scales with exponents e0..e0+7
// (gate/up small enough that silu(g) * u and the rows' squares stay
// finite), the repacked copy where t says so.
static uint8_t* weight(const Type& t, int k, int n, int e0) {
    const size_t nb = (size_t)(k / t.bs) * n;
    uint8_t* w = buf(nb * t.bb);
    for (size_t i = 0; i < nb * t.bb; i++) w[i] = rng();
    auto d16 = [&] { return (uint16_t)((rng() & 1) << 15 | (e0 + rng() % 8) << 10 | (rng() % 1024)); };
    for (size_t b = 0; b < nb; b++) {
        uint16_t d = d16();
        memcpy(w + b * t.bb + t.doff, &d, 2);
        if (t.moff >= 0) { uint16_t m = d16(); memcpy(w + b * t.bb + t.moff, &m, 2); }
    }
    if (!t.repacked) return w;
    uint8_t* r = buf(nb * t.bb);
    launch(1, [&] { (t.bs == 32 ? minfer_repack_q8_0 : minfer_repack_q6_k)(r, w, (long long)nb); });
    return r;
}

using FfnK = void (*)(float*, const uint8_t*, const uint8_t*, const uint8_t*, int, int);
using FfnqK = void (*)(float*, const uint8_t*, const uint8_t*, const uint8_t*, int, int, uint8_t*, int*);

struct Chain {
    const Type &up, &down; // gate/up's type, the down projection's
    FfnK ffn;
    FfnqK ffnq;
    ResK res;
    ResnK resn;
    int embd, nff;
    bool bias;
};

enum Wire { kWireOK, kWireInput, kWireAlias };

// chain runs two layers of the composed FFNMatMulAdd (FFN_Q8's _ffnq_,
// then RES_NORM_Q8's resn over the FFN's Q8_1 row) and of the four
// launches it replaces, each layer's FFN reading the Q8_1 row the layer
// before wrote (layer 0: the norm kernel's row of a random residual, as
// the o-projection's tail writes it), and compares every buffer bitwise.
static int chain(const Chain& c, Wire wire) {
    const int embd = c.embd, nff = c.nff, L = 2;
    const int vb = std::max(32, std::min(256, (embd + 31) / 32 * 32)); // opsRowBlock(embd)
    const float eps = 1e-6f;
    const size_t rowq = (size_t)embd / 32 * 36, ffq = (size_t)nff / 32 * 36;
    std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
    std::vector<const uint8_t *> wg(L), wu(L), wd(L);
    std::vector<float*> bias(L, nullptr), nw(L + 1);
    for (int l = 0; l < L; l++) {
        wg[l] = weight(c.up, embd, nff, 4), wu[l] = weight(c.up, embd, nff, 4), wd[l] = weight(c.down, nff, embd, 4);
        if (c.bias) {
            bias[l] = (float*)buf(4 * embd);
            for (int i = 0; i < embd; i++) bias[l][i] = uni(rng);
        }
    }
    for (int l = 0; l <= L; l++) {
        nw[l] = (float*)buf(4 * embd);
        for (int i = 0; i < embd; i++) nw[l][i] = 1.0f + 0.1f * uni(rng);
    }
    float* x0 = (float*)buf(4 * embd);
    for (int i = 0; i < embd; i++) x0[i] = 50.0f * uni(rng);

    // The backend's buffers: the Q8_1 scratch, sized for the widest k (the
    // FFN reads it, the resn tail writes it); the FFN's f32 row (ffnUp);
    // its Q8_1 output and group counters (ensureFFNQ8); the resn counter.
    uint8_t* act = buf(std::max(rowq, ffq));
    float* row = (float*)buf(4 * (size_t)nff);
    uint8_t* fq8 = buf(ffq);
    int* groups = (int*)buf(4 * (size_t)nff / 32);
    int* counter = (int*)buf(4);
    // The separate launches' buffers.
    uint8_t* ract = buf(rowq);
    float* rrow = (float*)buf(4 * (size_t)nff);
    uint8_t* rfq8 = buf(ffq);
    launch_xy(1, 1, [&] { minfer_rms_norm_q8_1(ract, x0, nw[0], embd, eps); }, vb);
    memcpy(act, ract, rowq);

    const float *x = x0, *rx = x0;
    for (int l = 0; l < L; l++) {
        float* out = (float*)buf(4 * embd);
        float* rout = (float*)buf(4 * embd);
        // reference: _ffn_, quantize, _res_, norm (the next layer's Q8_1 row)
        launch((nff + 3) / 4, [&] { c.ffn(rrow, ract, wg[l], wu[l], embd, nff); });
        launch_xy((nff / 32 + 3) / 4, 1, [&] { minfer_quantize_q8_1(rfq8, rrow, nff, 1); }, 128);
        launch((embd + 3) / 4, [&] { c.res(rout, rfq8, wd[l], bias[l], nff, embd, rx); });
        launch_xy(1, 1, [&] { minfer_rms_norm_q8_1(ract, rout, nw[l + 1], embd, eps); }, vb);
        // composed, over stale outputs: the FFN's Q8_1 row from the scratch
        // into fq8, then the down projection from fq8, its tail into the
        // scratch (the wiring planted where wire says)
        for (int i = 0; i < nff; i++) row[i] = NAN;
        for (int i = 0; i < embd; i++) out[i] = NAN;
        memset(fq8, 0xAB, ffq);
        launch(nff / 4, [&] { c.ffnq(row, act, wg[l], wu[l], embd, nff, fq8, groups); });
        const uint8_t* in = wire == kWireInput ? act : fq8;
        uint8_t* tail = wire == kWireAlias ? fq8 : act;
        if (wire == kWireOK && (tail == in || (tail < in + ffq && in < tail + rowq))) {
            printf("chain: the tail's row overlaps the input it reads\n");
            return 1;
        }
        launch((embd + 3) / 4, [&] { c.resn(out, in, wd[l], bias[l], nff, embd, x, nw[l + 1], eps, vb, tail, counter); });
        int dr = 0, dq = 0, dout = 0, dn = 0, cnt = *counter != 0;
        for (int i = 0; i < nff; i++) dr += memcmp(&row[i], &rrow[i], 4) != 0;
        if (wire != kWireAlias) // alias: fq8 holds the tail's row now
            for (size_t i = 0; i < ffq; i++) dq += fq8[i] != rfq8[i];
        for (int i = 0; i < embd; i++) dout += memcmp(&out[i], &rout[i], 4) != 0;
        for (size_t i = 0; i < rowq; i++) dn += act[i] != ract[i];
        for (int g = 0; g < nff / 32; g++) cnt += groups[g] != 0;
        int inf = 0; // the reference's own rows: a non-finite one would make the comparison weak
        float amax = 0;
        for (int i = 0; i < nff; i++) inf += !std::isfinite(rrow[i]);
        for (int i = 0; i < embd; i++) inf += !std::isfinite(rout[i]), amax = std::max(amax, std::fabs(rout[i]));
        const bool ok = dr + dq + dout + dn + cnt + inf == 0;
        printf("chain %s%s gate/up, %s%s down, n_embd %d n_ff %d%s layer %d: %d of %d FFN f32, %d FFN Q8_1 bytes, %d of %d f32 rows, "
               "%d next-norm Q8_1 bytes differ, %d counters not 0 (max |row| %g, %d values not finite) %s\n",
               c.up.repacked ? "repacked " : "", c.up.name, c.down.repacked ? "repacked " : "", c.down.name, embd, nff,
               c.bias ? " bias" : "", l, dr, nff, dq, dout, embd, dn, cnt, amax, inf, ok ? "ok" : "DIFFER");
        fflush(stdout);
        if (!ok) return 1;
        x = out, rx = rout;
    }
    return 0;
}

int main(int argc, char** argv) {
    const Type q4k = {"Q4_K", 256, 144, 0, 2, false}, q50 = {"Q5_0", 32, 22, 0, -1, false};
    const Type q80r = {"Q8_0", 32, 34, 0, -1, true}, q6kr = {"Q6_K", 256, 210, 208, -1, true};
    bool chainOnly = false;
    Wire wire = kWireOK;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--chain") == 0) chainOnly = true;
        else if (strcmp(argv[i], "--wire=input") == 0) wire = kWireInput;
        else if (strcmp(argv[i], "--wire=alias") == 0) wire = kWireAlias;
        else { fprintf(stderr, "usage: resn_emu [--chain [--wire=input|alias]]\n"); return 2; }
    }
    if (chainOnly) {
        // qwen2-0.5b Q4_K_M's kinds (Q5_0 gate/up, Q4_K down) and Q8_0's
        // (repacked Q8_0 gate/up, repacked Q6_K down: the _M mixes'), at
        // smaller shapes (the emulator's time goes with the rows)
        const Chain cs[] = {
            {q50, q4k, minfer_mmvq_ffn_q5_0, minfer_mmvq_ffnq_q5_0, minfer_mmvq_res_q4_k, minfer_mmvq_resn_q4_k, 256, 1024, false},
            {q80r, q6kr, minfer_mmvqr_ffn_q8_0, minfer_mmvqr_ffnq_q8_0, minfer_mmvqr_res_q6_k, minfer_mmvqr_resn_q6_k, 384, 512, true},
        };
        int bad = 0;
        for (const Chain& c : cs)
            if (!bad) bad += chain(c, wire);
        printf("%s\n", bad ? "FAIL" : "CHAIN BITWISE");
        return bad != 0;
    }
    int bad = 0;
    // 160 and 64: norm blocks of 160 and 64 threads, where the tail's second
    // virtual thread (t + 128) exists in one warp or in none
    for (int n : {896, 3584, 160, 64}) {
        const bool ip = n != 3584;
        // stop at the first difference: a plant is caught in the first cases
        if (!bad) bad += check(q4k, minfer_mmvq_res_q4_k, minfer_mmvq_resn_q4_k, 512, n, 1e-6f, ip);
        if (!bad) bad += check(q6kr, minfer_mmvqr_res_q6_k, minfer_mmvqr_resn_q6_k, 512, n, -1.0f, !ip);
        if (!bad) bad += check(q50, minfer_mmvq_res_q5_0, minfer_mmvq_resn_q5_0, 512, n, -1.0f, ip);
        if (!bad) bad += check(q80r, minfer_mmvqr_res_q8_0, minfer_mmvqr_resn_q8_0, 512, n, 1e-6f, !ip);
    }
    printf("%s\n", bad ? "FAIL" : "RESN BITWISE");
    return bad != 0;
}
