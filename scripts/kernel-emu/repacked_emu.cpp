// repacked_emu.cpp: runs the kernels that read the repacked Q8_0 / Q6_K
// copy of mmvq_repack.cu on the CPU through include/cuda_fp16.h and
// requires each bitwise equal to its GGUF twin over the same matrix:
//
//   minfer_mmvq_nt_q8_0r / _q6_kr   against minfer_mmvq_nt_q8_0 / _q6_k
//                                   (mmvq_nt.cu), nt = 2, 5, 8 with bias,
//                                   5 without (one shape per type)
//   minfer_get_rows_r               against minfer_get_rows (embed.cu), ids
//                                   in and out of [0, n_rows) (NaN rows);
//                                   a wtype without the layout: NaN rows
//
// The GGUF bytes are random with finite f16 scales; the repacked copy is
// built here as cuda.RepackHost builds it (the reference), and the device
// builder minfer_repack_<t> must give the same bytes. Shapes: Q8_0 rows of
// 28 and 65 blocks (not a multiple of 8) and of 1, Q6_K rows of 1, 4 and
// 10 super-blocks; row counts that leave the last 4-row block partial. The
// repacked copy is 16-byte aligned and its registered range is exactly its
// bytes (every read of the repacked kernels is an __ldg, which aborts on an
// address outside it); buffers end near a PROT_NONE page. Output buffers
// start with different fill values, so an output one kernel leaves
// unwritten differs. Exits 1 on any difference.
#include "emu_mmvq.h" // also the f32 -> f16 built-ins embed.cu's common.cuh names
#include "mmvq.cu"
#include "mmvq_nt.cu"
#include "mmvq_repack.cu"
#include "embed.cu"
#include <random>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#include "emu_launch.h"

static std::mt19937 rng(13);
// f16r: a finite normal f16 of either sign (mmq_emu.cpp's).
static uint16_t f16r() { return (uint16_t)((rng() & 1) << 15 | (8 + rng() % 10) << 10 | (rng() % 1024)); }
static void put16(uint8_t* p, uint16_t v) { memcpy(p, &v, 2); }

struct Type {
    const char* name;
    int code, bs, bb, doff; // MINFER_T_*, values and bytes per block, offset of the f16 d
};
static const Type kQ8_0 = {"Q8_0", MINFER_T_Q8_0, 32, 34, 0};
static const Type kQ6_K = {"Q6_K", MINFER_T_Q6_K, 256, 210, 208};

// gguf: n x k random blocks, each f16 d finite.
static uint8_t* gguf(const Type& t, int k, int n) {
    const size_t nb = (size_t)(k / t.bs) * n, total = nb * t.bb;
    uint8_t* w = guarded(total);
    for (size_t i = 0; i < total; i++) w[i] = rng();
    for (size_t b = 0; b < nb; b++) put16(w + b * t.bb + t.doff, f16r());
    return w;
}

// repackHost: cuda.RepackHost (mmvq_repack.go), byte for byte.
static void repackHost(const Type& t, uint8_t* dst, const uint8_t* src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const uint8_t* b = src + i * t.bb;
        if (t.code == MINFER_T_Q8_0) {
            memcpy(dst + 32 * i, b + 2, 32);
            memcpy(dst + 32 * n + 2 * i, b, 2);
        } else {
            memcpy(dst + 192 * i, b, 192);
            memcpy(dst + 192 * n + 16 * i, b + 192, 16);
            memcpy(dst + 208 * n + 2 * i, b + 208, 2);
        }
    }
}

// repacked: the copy of w (n x k) as RepackHost makes it, checked against
// the device builder minfer_repack_<t> run through the emulated launch.
static uint8_t* repacked(const Type& t, const uint8_t* w, int k, int n, int* bad) {
    const size_t nb = (size_t)(k / t.bs) * n, total = nb * t.bb;
    uint8_t* r = guarded(total);
    repackHost(t, r, w, nb);
    std::vector<uint8_t> dev(total + 16);
    uint8_t* d = (uint8_t*)(((uintptr_t)dev.data() + 15) & ~(uintptr_t)15);
    memset(d, 0xA5, total);
    launch(1, [&] { (t.code == MINFER_T_Q8_0 ? minfer_repack_q8_0 : minfer_repack_q6_k)(d, w, (long long)nb); });
    if (memcmp(d, r, total) != 0) {
        size_t i = 0;
        while (d[i] == r[i]) i++;
        fprintf(stderr, "  %s k=%d n=%d: minfer_repack_%s differs from RepackHost at byte %zu of %zu\n", t.name, k, n,
                t.code == MINFER_T_Q8_0 ? "q8_0" : "q6_k", i, total);
        (*bad)++;
    }
    return r;
}

// act: nt Q8_1 rows of k values (f16 d, f16 s, 32 int8 per block), every
// 7th d zero.
static uint8_t* act(int k, int nt) {
    const size_t nb = (size_t)(k / 32) * nt;
    uint8_t* a = guarded(nb * 36);
    for (size_t i = 0; i < nb * 36; i++) a[i] = rng();
    for (size_t b = 0; b < nb; b++) put16(a + 36 * b, b % 7 == 3 ? 0 : f16r());
    return a;
}

// cmp requires got and want bitwise equal; nanRow(i) says which outputs
// must be NaN (in both), every other must be finite in want.
template <class F>
static int cmp(const char* what, const std::vector<float>& got, const std::vector<float>& want, F nanRow) {
    int bad = 0;
    for (size_t i = 0; i < got.size(); i++) {
        const bool wantNaN = nanRow(i);
        if (memcmp(&got[i], &want[i], 4) != 0 || std::isnan(want[i]) != wantNaN) {
            if (bad < 3)
                fprintf(stderr, "  %s: out[%zu] repacked %.9g gguf %.9g%s\n", what, i, got[i], want[i],
                        wantNaN ? " (want NaN)" : "");
            bad++;
        }
    }
    printf("%-46s %s (%zu outputs)\n", what, bad ? "DIFFER" : "bitwise", got.size());
    return bad != 0;
}

typedef void (*NT)(float*, const uint8_t*, const uint8_t*, const float*, int, int, int);

static int runNT(const Type& t, NT gk, NT rk, int k, int n, bool first) {
    int bad = 0;
    char what[128];
    uint8_t* w = gguf(t, k, n);
    uint8_t* r = repacked(t, w, k, n, &bad);
    std::vector<float> bias(n);
    for (auto& v : bias) v = (float)(rng() % 2001) / 1000.0f - 1.0f;
    for (int nt : {2, 5, 8}) {
        uint8_t* a = act(k, nt);
        for (int withBias : {0, 1}) {
            if (!withBias && (nt != 5 || !first)) continue; // no bias: once per type
            const float* b = withBias ? bias.data() : nullptr;
            std::vector<float> og((size_t)nt * n, -7.0f), orp((size_t)nt * n, -9.0f);
            launch((n + MINFER_MMVQNT_ROWS - 1) / MINFER_MMVQNT_ROWS, [&] { gk(og.data(), a, w, b, k, n, nt); });
            launch((n + MINFER_MMVQNT_ROWS - 1) / MINFER_MMVQNT_ROWS, [&] { rk(orp.data(), a, r, b, k, n, nt); });
            snprintf(what, sizeof what, "mmvq_nt %s k=%d n=%d nt=%d%s", t.name, k, n, nt, withBias ? " +bias" : "");
            bad += cmp(what, orp, og, [](size_t) { return false; });
        }
    }
    return bad;
}

static int runRows(const Type& t, int k, int nRows) {
    int bad = 0;
    char what[128];
    uint8_t* w = gguf(t, k, nRows);
    uint8_t* r = repacked(t, w, k, nRows, &bad);
    // ids: every row, the last twice, then -1 and nRows (NaN rows), in a
    // shuffled order.
    std::vector<int> ids;
    for (int i = 0; i < nRows; i++) ids.push_back(i);
    ids.push_back(nRows - 1);
    ids.push_back(-1);
    ids.push_back(nRows);
    std::shuffle(ids.begin(), ids.end(), rng);
    const int nt = (int)ids.size();
    auto bad_id = [&](size_t i) { const int id = ids[i / k]; return id < 0 || id >= nRows; };
    std::vector<float> og((size_t)nt * k, -7.0f), orp((size_t)nt * k, -9.0f);
    const long long rowBytes = (long long)(k / t.bs) * t.bb;
    launch(nt, [&] { minfer_get_rows(og.data(), w, t.code, rowBytes, nRows, ids.data(), k); });
    launch(nt, [&] { minfer_get_rows_r(orp.data(), r, t.code, nRows, ids.data(), k); });
    snprintf(what, sizeof what, "get_rows %s k=%d n_rows=%d ids=%d", t.name, k, nRows, nt);
    bad += cmp(what, orp, og, bad_id);
    if (t.code == MINFER_T_Q8_0) {
        // a type without a repacked layout (Q4_0), two good ids: NaN rows
        const int two[2] = {0, nRows - 1};
        std::vector<float> on((size_t)2 * k, -9.0f), nan((size_t)2 * k, __int_as_float(0x7fc00000));
        launch(2, [&] { minfer_get_rows_r(on.data(), r, MINFER_T_Q4_0, nRows, two, k); });
        snprintf(what, sizeof what, "get_rows_r Q4_0 (no layout) k=%d: NaN rows", k);
        bad += cmp(what, on, nan, [](size_t) { return true; });
    }
    return bad;
}

int main(int argc, char** argv) {
    const bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int bad = 0;
    // Q8_0: 28 blocks (56 units: lanes 24..31 one unit), 65 (130: a third
    // pass for lanes 0 and 1), 1 (2 units: lanes 2..31 idle).
    bad += runNT(kQ8_0, minfer_mmvq_nt_q8_0, minfer_mmvq_nt_q8_0r, 896, 7, true);
    if (!quick) {
        bad += runNT(kQ8_0, minfer_mmvq_nt_q8_0, minfer_mmvq_nt_q8_0r, 65 * 32, 6, false);
        bad += runNT(kQ8_0, minfer_mmvq_nt_q8_0, minfer_mmvq_nt_q8_0r, 32, 5, false);
    }
    // Q6_K: 4 super-blocks (64 units), 10 (160: a lone fifth unit), 1.
    bad += runNT(kQ6_K, minfer_mmvq_nt_q6_k, minfer_mmvq_nt_q6_kr, 1024, 7, true);
    if (!quick) {
        bad += runNT(kQ6_K, minfer_mmvq_nt_q6_k, minfer_mmvq_nt_q6_kr, 2560, 5, false);
        bad += runNT(kQ6_K, minfer_mmvq_nt_q6_k, minfer_mmvq_nt_q6_kr, 256, 3, false);
    }
    bad += runRows(kQ8_0, 896, 5);
    bad += runRows(kQ6_K, 2560, 3);
    printf("%s\n", bad ? "FAIL" : "ALL BITWISE");
    return bad != 0;
}
