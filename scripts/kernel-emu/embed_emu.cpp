// embed_emu.cpp: runs minfer_get_rows_q8_1, minfer_get_rows_host_q8_1 and
// minfer_get_rows_r_q8_1 of cuda/kernels/embed.cu (MINFER_FUSE_RES_NORM_Q8:
// the decode gather that also writes layer 0's attn norm as its Q8_1 row)
// on the CPU through include/cuda_fp16.h, and checks each against the two
// launches it replaces: its f32 row bitwise its plain twin's
// (minfer_get_rows, _host, _r), its Q8_1 row bitwise minfer_rms_norm_q8_1
// (norm.cu) of that row in the same block of opsRowBlock(k) threads. Types:
// every GGUF type the gather decodes and the repacked Q8_0 / Q6_K copy
// (qwen2-0.5b Q4_K_M's tied table, MINFER_ONE_COPY), the host twin on
// Q8_0, Q4_K and Q6_K tables; rows of 896 and 3584 (the 0.5b's and 7B's
// hidden sizes; 1024 for the 256-value blocks; 64 for Q8_0): both register
// depths; with and without a norm weight; eps 1e-6 and 0.5
// (the eps shows in the bytes); a good id, one past the table and a wtype
// without the repacked layout (NaN rows, normed alike). Output buffers
// start with different fill values, so a value one kernel leaves unwritten
// differs. --quick: Q8_0 and Q6_K only, no row of 64 (embed-emu.sh's
// plants). Run by embed-emu.sh; exits 1 on any difference.
#include <algorithm>
#include <functional>
#include <malloc.h>
#include <random>
#include <stdio.h>
#include <string.h>
#include <vector>
inline __half __float2half(float f) { _Float16 h = (_Float16)f; __half r; memcpy(&r.x, &h, 2); return r; }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
#include "embed.cu"
#include "norm.cu"
#include "emu_launch.h"

static std::mt19937 rng(37);
// f16r: a finite normal f16 of either sign, |x| in [2^-7, 2).
static uint16_t f16r() { return (uint16_t)((rng() & 1) << 15 | (8 + rng() % 8) << 10 | (rng() % 1024)); }
static void put16(uint8_t* p, uint16_t v) { memcpy(p, &v, 2); }

struct Type {
    const char* name;
    int code, bs, bb;
    std::vector<int> f16at; // offsets of the f16 scales in a block
    bool repackable;
};
static const std::vector<Type> kTypes = {
    {"F32", MINFER_T_F32, 1, 4, {}, false},         {"F16", MINFER_T_F16, 1, 2, {0}, false},
    {"BF16", MINFER_T_BF16, 1, 2, {}, false},       {"Q4_0", MINFER_T_Q4_0, 32, 18, {0}, false},
    {"Q4_1", MINFER_T_Q4_1, 32, 20, {0, 2}, false}, {"Q5_0", MINFER_T_Q5_0, 32, 22, {0}, false},
    {"Q5_1", MINFER_T_Q5_1, 32, 24, {0, 2}, false}, {"Q8_0", MINFER_T_Q8_0, 32, 34, {0}, true},
    {"Q4_K", MINFER_T_Q4_K, 256, 144, {0, 2}, false}, {"Q5_K", MINFER_T_Q5_K, 256, 176, {0, 2}, false},
    {"Q6_K", MINFER_T_Q6_K, 256, 210, {208}, true},
};

// table: n rows of k values of t, random quants with finite scales (F32 /
// BF16: finite values of either sign).
static uint8_t* table(const Type& t, int k, int n) {
    const size_t nb = (size_t)(k / t.bs) * n, total = nb * t.bb;
    uint8_t* w = guarded(total);
    for (size_t i = 0; i < total; i++) w[i] = rng();
    for (size_t b = 0; b < nb; b++) {
        uint8_t* p = w + b * t.bb;
        if (t.code == MINFER_T_F32) {
            const float v = std::uniform_real_distribution<float>(-3, 3)(rng);
            memcpy(p, &v, 4);
        } else if (t.code == MINFER_T_BF16) {
            const float v = std::uniform_real_distribution<float>(-3, 3)(rng);
            uint32_t u;
            memcpy(&u, &v, 4);
            put16(p, (uint16_t)(u >> 16));
        }
        for (int o : t.f16at) put16(p + o, f16r());
    }
    return w;
}

// repackHost: cuda.RepackHost (mmvq_repack.go) of the nb blocks of src
// (repacked-emu.sh checks it against the device builder).
static uint8_t* repackHost(const Type& t, const uint8_t* src, size_t nb) {
    uint8_t* dst = guarded(nb * t.bb);
    for (size_t i = 0; i < nb; i++) {
        const uint8_t* b = src + i * t.bb;
        if (t.code == MINFER_T_Q8_0) {
            memcpy(dst + 32 * i, b + 2, 32);
            memcpy(dst + 32 * nb + 2 * i, b, 2);
        } else {
            memcpy(dst + 192 * i, b, 192);
            memcpy(dst + 192 * nb + 16 * i, b + 192, 16);
            memcpy(dst + 208 * nb + 2 * i, b + 208, 2);
        }
    }
    return dst;
}

static int opsRowBlock(int n) { return std::max(32, std::min(256, (n + 31) / 32 * 32)); }

// check runs one gather and its reference pair over row id and compares.
static int check(const char* what, int k, const std::function<void(float*, uint8_t*)>& fused,
                 const std::function<void(float*)>& gather, const float* nw, float eps) {
    const int threads = opsRowBlock(k);
    const size_t qb = (size_t)k / 32 * 36;
    std::vector<float> yWant(k, -7.0f), yGot(k, -9.0f);
    std::vector<uint8_t> qWant(qb, 0x5A), qGot(qb, 0xA5);
    launch_xy(1, 1, [&] { gather(yWant.data()); }, threads);
    launch_xy(1, 1, [&] { minfer_rms_norm_q8_1(qWant.data(), yWant.data(), nw, k, eps); }, threads);
    launch_xy(1, 1, [&] { fused(yGot.data(), qGot.data()); }, threads);
    int fd = 0, qd = 0;
    for (int i = 0; i < k; i++) fd += memcmp(&yGot[i], &yWant[i], 4) != 0;
    for (size_t i = 0; i < qb; i++) qd += qGot[i] != qWant[i];
    const bool nan = std::isnan(yWant[0]);
    printf("%-44s %d of %d f32, %d of %zu Q8_1 bytes differ%s %s\n", what, fd, k, qd, qb, nan ? " (NaN row)" : "",
           fd || qd ? "DIFFER" : "ok");
    return fd != 0 || qd != 0;
}

int main(int argc, char** argv) {
    const bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    // Each launch allocates and frees its fibers' stacks (64 MiB at 256
    // threads): returned to the system and faulted in again each time,
    // they took half the run; kept in the heap they do not.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    int bad = 0;
    char what[160];
    const int nRows = 5;
    // (id, weight, eps): a good id without a weight and eps 1e-6, with one
    // and eps 0.5 (the eps shows), one past the table (a NaN row).
    const struct {
        int id;
        bool weight;
        float eps;
    } cases[] = {{3, false, 1e-6f}, {3, true, 0.5f}, {nRows, true, 1e-6f}};
    for (const Type& t : kTypes) {
        if (quick && !t.repackable) continue;
        // 64 (a one-warp block) for Q8_0 alone: the launches cost the time
        std::vector<int> ks = t.bs == 256 ? std::vector<int>{1024, 3584} : std::vector<int>{896, 3584};
        if (!quick && t.code == MINFER_T_Q8_0) ks.insert(ks.begin(), 64);
        // the host twin runs the same body: the real host tables' types
        const bool host = t.code == MINFER_T_Q8_0 || t.code == MINFER_T_Q4_K || t.code == MINFER_T_Q6_K;
        for (int k : ks) {
            uint8_t* w = table(t, k, nRows);
            const size_t nb = (size_t)(k / t.bs) * nRows;
            uint8_t* r = t.repackable ? repackHost(t, w, nb) : nullptr;
            const long long rowBytes = (long long)(k / t.bs) * t.bb;
            float* nwp = (float*)guarded(4 * (size_t)k);
            for (int i = 0; i < k; i++) nwp[i] = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng);
            int* ids = (int*)guarded(4);
            for (const auto& c : cases) {
                *ids = c.id;
                const float* nw = c.weight ? nwp : nullptr;
                const float eps = c.eps;
                snprintf(what, sizeof what, "%s k=%d id=%d weight=%d eps=%g", t.name, k, c.id, c.weight, eps);
                bad += check(what, k, [&](float* y, uint8_t* q) { minfer_get_rows_q8_1(y, q, w, t.code, rowBytes, nRows, ids, k, nw, eps); },
                             [&](float* y) { minfer_get_rows(y, w, t.code, rowBytes, nRows, ids, k); }, nw, eps);
                if (host && c.weight && c.id == 3) {
                    snprintf(what, sizeof what, "%s host k=%d id=%d weight=1 eps=%g", t.name, k, c.id, eps);
                    bad += check(
                        what, k, [&](float* y, uint8_t* q) { minfer_get_rows_host_q8_1(y, q, w, t.code, rowBytes, nRows, ids, k, nw, eps); },
                        [&](float* y) { minfer_get_rows_host(y, w, t.code, rowBytes, nRows, ids, k); }, nw, eps);
                }
                if (r) {
                    snprintf(what, sizeof what, "%s repacked k=%d id=%d weight=%d eps=%g", t.name, k, c.id, c.weight, eps);
                    bad += check(what, k, [&](float* y, uint8_t* q) { minfer_get_rows_r_q8_1(y, q, r, t.code, nRows, ids, k, nw, eps); },
                                 [&](float* y) { minfer_get_rows_r(y, r, t.code, nRows, ids, k); }, nw, eps);
                }
            }
        }
    }
    if (!quick) {
        // a repacked table read as a type without the layout (Q4_0): NaN rows
        const Type& t = kTypes[7]; // Q8_0
        uint8_t* w = table(t, 896, nRows);
        uint8_t* r = repackHost(t, w, (size_t)(896 / 32) * nRows);
        int* ids = (int*)guarded(4);
        *ids = 1;
        bad += check("repacked Q8_0 read as Q4_0 k=896 (NaN row)", 896,
                     [&](float* y, uint8_t* q) { minfer_get_rows_r_q8_1(y, q, r, MINFER_T_Q4_0, nRows, ids, 896, nullptr, 1e-6f); },
                     [&](float* y) { minfer_get_rows_r(y, r, MINFER_T_Q4_0, nRows, ids, 896); }, nullptr, 1e-6f);
    }
    printf("%s\n", bad ? "FAIL" : "EMBED Q8_1 BITWISE");
    return bad != 0;
}
