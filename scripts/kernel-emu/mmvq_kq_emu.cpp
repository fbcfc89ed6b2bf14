// mmvq_kq_emu.cpp: runs the Q4_K and Q5_K decode MMVQ kernels of the mmvq
// unit (cuda/kernels/mmvq.cu, mmvq_nt.cu, mmvq_repack.cu, mmvq_split.cu,
// one translation unit in name order, as the build makes it) on the CPU
// through include/cuda_fp16.h, and compares every output bitwise with an
// independent scalar reference of the same arithmetic (below): each value
// decoded from the GGUF layout as engine/quant's dequantizeQ4K / Q5K index
// it (Q5_K: low nibble of qs[32 (sub / 2) + l] by sub & 1, fifth bit = bit
// sub of qh[l]), exact int32 sums per 16-value unit, the f32 scaling of the
// kernels' unit, lane l summing units l, l + 32, ... then the xor butterfly
// (split: thread t of 128 sums t, t + 128, ..., butterfly per warp, warps
// 0 + 1 + 2 + 3). Forms: plain, _res_ (in place), _qkv_, _ffn_, and the
// split _s_, _res_s_, _qkv_s_. Q4_K (H200-verified) checks the reference;
// Q5_K is the kernel under test. Buffers end at a PROT_NONE page, so a read
// past a weight or activation faults. Exits 1 on any difference.
#include "emu_mmvq.h"
#include "mmvq.cu"
#include "mmvq_nt.cu"
#include "mmvq_repack.cu"
#include "mmvq_split.cu"
#include <functional>
#include <random>
#include <stdio.h>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>
#include "emu_launch.h"

static std::mt19937 rng(7);
static uint16_t f16r() { return (uint16_t)((rng() & 1) << 15 | (6 + rng() % 12) << 10 | (rng() % 1024)); }

struct KQ {
    const char* name;
    int bb;     // block bytes
    int qsOff;  // offset of qs[128]
    int qhOff;  // offset of qh[32], -1 for none (Q4_K)
};
static const KQ kQ4K = {"Q4_K", 144, 16, -1};
static const KQ kQ5K = {"Q5_K", 176, 48, 16};

// weight: n rows of k values, random bytes with finite f16 d (positive
// or negative) and dmin.
static uint8_t* weight(const KQ& t, int k, int n) {
    size_t total = (size_t)(k / 256) * t.bb * n;
    uint8_t* w = guarded(total);
    for (size_t i = 0; i < total; i++) w[i] = rng();
    for (size_t b = 0; b < total / t.bb; b++) {
        uint16_t d = f16r(), m = f16r();
        memcpy(w + b * t.bb, &d, 2);
        memcpy(w + b * t.bb + 2, &m, 2);
    }
    return w;
}

// act: k / 32 Q8_1 blocks (f16 d, f16 s, 32 int8), every 7th with d = 0.
static uint8_t* act(int k) {
    int nb = k / 32;
    size_t total = (size_t)nb * 36;
    total = (total + 15) / 16 * 16;
    uint8_t* a = guarded(total);
    for (size_t i = 0; i < total; i++) a[i] = rng();
    for (int b = 0; b < nb; b++) {
        uint16_t d = b % 7 == 3 ? 0 : f16r();
        memcpy(a + 36 * b, &d, 2);
    }
    return a;
}

// ------------------------------------------------------------ reference

static float h2f(const uint8_t* p) {
    unsigned h = p[0] | (p[1] << 8), s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp((double)m, -24) : ldexp((double)(m | 1024), (int)e - 25);
    return (float)(s ? -v : v); // finite inputs only (f16r)
}
static float fmul(float a, float b) { volatile float r = a * b; return r; }
static float fadd(float a, float b) { volatile float r = a + b; return r; }
static float fsub(float a, float b) { volatile float r = a - b; return r; }

// scaleMin: ggml's get_scale_min_k4 (engine/quant kScaleMinUnpack).
static void scaleMin(const uint8_t* q, int j, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// value j (0..255) of a super-block, as dequantizeQ4K / dequantizeQ5K.
static int refValue(const KQ& t, const uint8_t* b, int j) {
    const int sub = j / 32, l = j % 32;
    const uint8_t q = b[t.qsOff + 32 * (sub / 2) + l];
    int v = (sub & 1) ? (q >> 4) : (q & 15);
    if (t.qhOff >= 0) v |= ((b[t.qhOff + l] >> sub) & 1) << 4;
    return v;
}

static float refUnit(const KQ& t, const uint8_t* row, const uint8_t* a, int u) {
    const int sb = u / 16, sub = (u % 16) / 2, h = u % 2;
    const uint8_t* b = row + (size_t)sb * t.bb;
    const uint8_t* ab = a + (size_t)(8 * sb + sub) * 36;
    int sumi = 0, suma = 0;
    for (int i = 0; i < 16; i++) {
        const int aq = (int8_t)ab[4 + 16 * h + i];
        sumi += refValue(t, b, 32 * sub + 16 * h + i) * aq;
        suma += aq;
    }
    int sc, mn;
    scaleMin(b + 4, sub, &sc, &mn);
    const float dsc = fmul(h2f(b), (float)sc), dmn = fmul(h2f(b + 2), (float)mn);
    return fmul(h2f(ab), fsub(fmul(dsc, (float)sumi), fmul(dmn, (float)suma)));
}

static void butterfly(float* acc) { // acc[32]: every lane's value after xor 16, 8, 4, 2, 1
    for (int off = 16; off > 0; off >>= 1) {
        float nx[32];
        for (int l = 0; l < 32; l++) nx[l] = fadd(acc[l], acc[l ^ off]);
        memcpy(acc, nx, sizeof nx);
    }
}

// refDot: one row's dot in the one-warp order (threads = 32) or the split
// order (threads = 128: 4 warps, then warp 0 + 1 + 2 + 3).
static float refDot(const KQ& t, const uint8_t* row, const uint8_t* a, int k, int threads) {
    std::vector<float> acc(threads, 0.0f);
    for (int u = 0; u < k / 16; u++) acc[u % threads] = fadd(acc[u % threads], refUnit(t, row, a, u));
    for (int w = 0; w < threads / 32; w++) butterfly(&acc[32 * w]);
    float s = acc[0];
    for (int w = 1; w < threads / 32; w++) s = fadd(s, acc[32 * w]);
    return s;
}

// silu as engine/cpu computes it: x / (1 + exp(-x)), the exponential in
// double rounded once to f32.
static float silu(float x) {
    const float e = (float)exp(-(double)x);
    volatile float r = x / fadd(1.0f, e);
    return r;
}

// ------------------------------------------------------------ compare

static int cmp(const char* what, const std::vector<float>& got, const std::vector<float>& want) {
    int bad = 0, nan = 0;
    for (size_t i = 0; i < got.size(); i++) {
        nan += std::isnan(want[i]);
        if (memcmp(&got[i], &want[i], 4)) {
            if (bad < 3) fprintf(stderr, "  %s: out[%zu] kernel %.9g ref %.9g\n", what, i, got[i], want[i]);
            bad++;
        }
    }
    if (nan) { fprintf(stderr, "  %s: %d NaN references\n", what, nan); bad++; }
    printf("%-44s %s (%zu outputs)\n", what, bad ? "DIFFER" : "bitwise", got.size());
    return bad != 0;
}

typedef void (*Plain)(float*, const uint8_t*, const uint8_t*, const float*, int, int);
typedef void (*Res)(float*, const uint8_t*, const uint8_t*, const float*, int, int, const float*);
typedef void (*Qkv)(float*, const uint8_t*, const uint8_t*, const uint8_t*, const uint8_t*, const float*, const float*,
                    const float*, int, int, int, int);
typedef void (*Ffn)(float*, const uint8_t*, const uint8_t*, const uint8_t*, int, int);
struct Kern {
    Plain plain, splain;
    Res res, sres;
    Qkv qkv, sqkv;
    Ffn ffn;
};

static int run(const KQ& t, const Kern& kn, int k, int n) {
    char what[128];
    int bad = 0;
    const size_t rb = (size_t)(k / 256) * t.bb;
    uint8_t* w = weight(t, k, n);
    uint8_t* a = act(k);
    std::vector<float> bias(n), res(n);
    for (auto& v : bias) v = (float)(rng() % 1000) / 500 - 1;
    for (auto& v : res) v = (float)(rng() % 1000) / 50 - 10;
    std::vector<float> dot(n), sdot(n);
    for (int j = 0; j < n; j++) dot[j] = refDot(t, w + j * rb, a, k, 32), sdot[j] = refDot(t, w + j * rb, a, k, 128);
    const int grid = (n + 3) / 4;

    // plain (with bias) and split plain
    std::vector<float> o(n, NAN), want(n);
    launch(grid, [&] { kn.plain(o.data(), a, w, bias.data(), k, n); });
    for (int j = 0; j < n; j++) want[j] = fadd(dot[j], bias[j]);
    snprintf(what, sizeof what, "%s k=%d n=%d plain+bias", t.name, k, n), bad += cmp(what, o, want);
    std::fill(o.begin(), o.end(), NAN);
    launch(n, [&] { kn.splain(o.data(), a, w, nullptr, k, n); });
    snprintf(what, sizeof what, "%s k=%d n=%d split", t.name, k, n), bad += cmp(what, o, sdot);

    // res in place, one-warp and split
    std::vector<float> s = res;
    launch(grid, [&] { kn.res(s.data(), a, w, nullptr, k, n, s.data()); });
    for (int j = 0; j < n; j++) want[j] = fadd(res[j], dot[j]);
    snprintf(what, sizeof what, "%s k=%d n=%d res (in place)", t.name, k, n), bad += cmp(what, s, want);
    s = res;
    launch(n, [&] { kn.sres(s.data(), a, w, bias.data(), k, n, s.data()); });
    for (int j = 0; j < n; j++) want[j] = fadd(res[j], fadd(sdot[j], bias[j]));
    snprintf(what, sizeof what, "%s k=%d n=%d split res+bias (in place)", t.name, k, n), bad += cmp(what, s, want);

    // qkv: q = w (bias), k = wk (no bias), v = wv (bias)
    const int nk = 5, nv = 3, tot = n + nk + nv;
    uint8_t* wk = weight(t, k, nk);
    uint8_t* wv = weight(t, k, nv);
    std::vector<float> bv(nv);
    for (auto& v : bv) v = (float)(rng() % 1000) / 500 - 1;
    std::vector<float> qo(tot, NAN), qs(tot, NAN), qw(tot), qws(tot);
    for (int j = 0; j < tot; j++) {
        const uint8_t* r = j < n ? w + j * rb : j < n + nk ? wk + (j - n) * rb : wv + (j - n - nk) * rb;
        const float* b = j < n ? &bias[j] : j < n + nk ? nullptr : &bv[j - n - nk];
        qw[j] = refDot(t, r, a, k, 32), qws[j] = refDot(t, r, a, k, 128);
        if (b) qw[j] = fadd(qw[j], *b), qws[j] = fadd(qws[j], *b);
    }
    launch((tot + 3) / 4, [&] { kn.qkv(qo.data(), a, w, wk, wv, bias.data(), nullptr, bv.data(), k, n, nk, nv); });
    snprintf(what, sizeof what, "%s k=%d n=%d qkv", t.name, k, n), bad += cmp(what, qo, qw);
    launch(tot, [&] { kn.sqkv(qs.data(), a, w, wk, wv, bias.data(), nullptr, bv.data(), k, n, nk, nv); });
    snprintf(what, sizeof what, "%s k=%d n=%d split qkv", t.name, k, n), bad += cmp(what, qs, qws);

    // ffn: silu(g) * u, g = w
    uint8_t* wu = weight(t, k, n);
    std::vector<float> fo(n, NAN);
    launch(grid, [&] { kn.ffn(fo.data(), a, w, wu, k, n); });
    for (int j = 0; j < n; j++) {
        const float g = dot[j], u = refDot(t, wu + j * rb, a, k, 32);
        want[j] = fmul(silu(g), u);
    }
    snprintf(what, sizeof what, "%s k=%d n=%d ffn", t.name, k, n), bad += cmp(what, fo, want);
    return bad;
}

int main() {
    const Kern q4k = {minfer_mmvq_q4_k, minfer_mmvq_s_q4_k, minfer_mmvq_res_q4_k, minfer_mmvq_res_s_q4_k,
                      minfer_mmvq_qkv_q4_k, minfer_mmvq_qkv_s_q4_k, minfer_mmvq_ffn_q4_k};
    const Kern q5k = {minfer_mmvq_q5_k, minfer_mmvq_s_q5_k, minfer_mmvq_res_q5_k, minfer_mmvq_res_s_q5_k,
                      minfer_mmvq_qkv_q5_k, minfer_mmvq_qkv_s_q5_k, minfer_mmvq_ffn_q5_k};
    int bad = 0;
    // k: one super-block (16 units: lanes 16..31 idle), 1792 (112 units:
    // uneven lanes), 4864 (qwen2-0.5b FFN), 9 x 256 (split: 144 units).
    for (int k : {256, 1792, 4864, 9 * 256})
        for (int n : {1, 7}) {
            bad += run(kQ4K, q4k, k, n);
            bad += run(kQ5K, q5k, k, n);
        }
    printf("%s\n", bad ? "FAIL" : "ALL BITWISE");
    return bad != 0;
}
