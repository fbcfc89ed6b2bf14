// mmvqw_emu.cpp: runs minfer_mmvqw_<t> and minfer_mmvq_<t> (+ _res_, _qkv_,
// _ffn_) of cuda/kernels/mmvq.cu on the CPU through include/cuda_fp16.h
// and compares their outputs bitwise, on random Q8_0 / Q6_K matrices whose
// rows start at every lead (k = 896, 1792 ...) and whose last 16-byte word
// is partial. Run by mmvqw-emu.sh; exits 1 on a difference.
#include "mmvq.cu"
#include <thread>
#include <random>
#include <functional>
#include <stdio.h>
#include "emu_launch.h"
static std::mt19937 rng(7);
static uint16_t f16r() { return (uint16_t)((rng() & 1) << 15 | (6 + rng() % 10) << 10 | (rng() % 1024)); }
// a matrix in its own 16-byte aligned allocation of exactly total bytes (range-checked)
static uint8_t* weight(int qk, int bb, int doff, int k, int n) {
    size_t total = (size_t)(k / qk) * bb * n;
    uint8_t* w = (uint8_t*)aligned_alloc(256, (total + 255) / 256 * 256);
    for (size_t i = 0; i < total; i++) w[i] = rng();
    for (size_t b = 0; b < total / bb; b++) { uint16_t d = f16r(); memcpy(w + b * bb + doff, &d, 2); }
    g_ranges.push_back({w, total});
    return w;
}
static uint8_t* act(int k) {
    int nb = k / 32;
    uint8_t* a = (uint8_t*)aligned_alloc(256, (nb * 36 + 255) / 256 * 256);
    for (int b = 0; b < nb; b++) { uint16_t d = f16r(); memcpy(a + 36 * b, &d, 2); memcpy(a + 36 * b + 2, &d, 2); for (int i = 0; i < 32; i++) a[36 * b + 4 + i] = rng(); }
    g_ranges.push_back({a, (size_t)nb * 36});
    return a;
}
static int cmp(const char* what, const std::vector<float>& x, const std::vector<float>& y) {
    int bad = 0;
    for (size_t i = 0; i < x.size(); i++) if (memcmp(&x[i], &y[i], 4)) { if (bad < 3) fprintf(stderr, "%s: out[%zu] %g vs %g\n", what, i, x[i], y[i]); bad++; }
    printf("%-40s %s (%zu outputs)\n", what, bad ? "DIFFER" : "bitwise", x.size());
    return bad;
}
typedef void (*Plain)(float*, const uint8_t*, const uint8_t*, const float*, int, int);
typedef void (*Res)(float*, const uint8_t*, const uint8_t*, const float*, int, int, const float*);
typedef void (*Qkv)(float*, const uint8_t*, const uint8_t*, const uint8_t*, const uint8_t*, const float*, const float*, const float*, int, int, int, int);
typedef void (*Ffn)(float*, const uint8_t*, const uint8_t*, const uint8_t*, int, int);
static int run(const char* t, int qk, int bb, int doff, Plain p0, Plain p1, Res r0, Res r1, Qkv q0, Qkv q1, Ffn f0, Ffn f1, int k, int n) {
    char what[128]; int bad = 0;
    uint8_t* w = weight(qk, bb, doff, k, n);
    uint8_t* a = act(k);
    std::vector<float> bias(n), res(n);
    for (auto& v : bias) v = (float)(rng() % 1000) / 500 - 1;
    for (auto& v : res) v = (float)(rng() % 1000) / 50 - 10;
    std::vector<float> o0(n, NAN), o1(n, NAN);
    int grid = (n + 3) / 4;
    launch(grid, [&] { p0(o0.data(), a, w, bias.data(), k, n); });
    launch(grid, [&] { p1(o1.data(), a, w, bias.data(), k, n); });
    snprintf(what, sizeof what, "%s k=%d n=%d plain", t, k, n); bad += cmp(what, o1, o0);
    std::vector<float> s0 = res, s1 = res; // in place
    launch(grid, [&] { r0(s0.data(), a, w, nullptr, k, n, s0.data()); });
    launch(grid, [&] { r1(s1.data(), a, w, nullptr, k, n, s1.data()); });
    snprintf(what, sizeof what, "%s k=%d n=%d res", t, k, n); bad += cmp(what, s1, s0);
    int nk = 5, nv = 3;
    uint8_t* wk = weight(qk, bb, doff, k, nk); uint8_t* wv = weight(qk, bb, doff, k, nv);
    std::vector<float> bk(nk, 0.25f), bv(nv, -0.5f);
    std::vector<float> q0o(n + nk + nv, NAN), q1o(n + nk + nv, NAN);
    int g2 = (n + nk + nv + 3) / 4;
    launch(g2, [&] { q0(q0o.data(), a, w, wk, wv, bias.data(), bk.data(), bv.data(), k, n, nk, nv); });
    launch(g2, [&] { q1(q1o.data(), a, w, wk, wv, bias.data(), bk.data(), bv.data(), k, n, nk, nv); });
    snprintf(what, sizeof what, "%s k=%d n=%d qkv", t, k, n); bad += cmp(what, q1o, q0o);
    uint8_t* wu = weight(qk, bb, doff, k, n);
    std::vector<float> f0o(n, NAN), f1o(n, NAN);
    launch(grid, [&] { f0(f0o.data(), a, w, wu, k, n); });
    launch(grid, [&] { f1(f1o.data(), a, w, wu, k, n); });
    snprintf(what, sizeof what, "%s k=%d n=%d ffn", t, k, n); bad += cmp(what, f1o, f0o);
    // sanity: result not all NaN / the reference is finite-ish
    int nan = 0; for (float v : o0) nan += std::isnan(v);
    if (nan == n) { printf("all NaN\n"); bad++; }
    return bad;
}
int main() {
    int bad = 0;
    for (int k : {896, 3584, 18944, 64 * 32 + 32, 8 * 32})
        for (int n : {1, 7})
            bad += run("Q8_0", 32, 34, 0, minfer_mmvq_q8_0, minfer_mmvqw_q8_0, minfer_mmvq_res_q8_0, minfer_mmvqw_res_q8_0,
                       minfer_mmvq_qkv_q8_0, minfer_mmvqw_qkv_q8_0, minfer_mmvq_ffn_q8_0, minfer_mmvqw_ffn_q8_0, k, n);
    for (int k : {256, 1792, 18944, 9 * 256})
        for (int n : {1, 7})
            bad += run("Q6_K", 256, 210, 208, minfer_mmvq_q6_k, minfer_mmvqw_q6_k, minfer_mmvq_res_q6_k, minfer_mmvqw_res_q6_k,
                       minfer_mmvq_qkv_q6_k, minfer_mmvqw_qkv_q6_k, minfer_mmvq_ffn_q6_k, minfer_mmvqw_ffn_q6_k, k, n);
    printf("%s\n", bad ? "FAIL" : "ALL BITWISE");
    return bad != 0;
}
