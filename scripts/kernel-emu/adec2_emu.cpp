// adec2_emu.cpp: runs the lean split-K decode attention of
// cuda/kernels/attn_decode2.cu (minfer_attn_decode2l_*, and with --q8
// minfer_attn_decode2q_*) on the CPU through include/cuda_fp16.h and the
// shims below, one warp per block and the blocks one at a time, and
// compares it with attention in double on the same cache: the launcher's
// cap of 64 splits, lengths of one split to all 64 active, GQA 2 and 7, a
// window; every launch must leave its counters at 0. The inline prefetch
// is dropped (adec2-emu.sh strips it: a hint, no semantics). Exits 1 past
// the bar (1e-3, the device test's).
#include <atomic>
#include <cmath>
#include <functional>
#include <mutex>
#include <random>
#include <stdio.h>
#include <thread>
#include <vector>
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) uint2 { unsigned int x, y; };
inline float2 make_float2(float a, float b) { return float2{a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
inline __half __float2half(float f) { _Float16 h = (_Float16)f; __half r; memcpy(&r.x, &h, 2); return r; }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline size_t __cvta_generic_to_global(const void* p) { return (size_t)p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static std::mutex g_atomic;
inline int atomicAdd(int* p, int v) { std::lock_guard<std::mutex> l(g_atomic); int o = *p; *p += v; return o; }
inline float __shfl_sync(unsigned int, float v, int src, int = 32) {
    int lane = threadIdx.x & 31;
    tw->bar->arrive_and_wait();
    tw->slot[lane] = v;
    tw->bar->arrive_and_wait();
    float r = tw->slot[src & 31];
    tw->bar->arrive_and_wait();
    return r;
}
inline int __shfl_sync(unsigned int m, int v, int src, int w = 32) { return (int)__shfl_sync(m, (float)v, src, w); }
#include "attn_decode2.cu"
#include "quantize_act.cu"
#include "emu_launch.h"

// launch2 runs a (gx, gy) grid of one-warp blocks, one block at a time.
static void launch2(int gx, int gy, std::function<void()> body) { launch_xy(gx, gy, body, 32); }

static std::mt19937 rng(5);
static float uni() { return (float)((double)rng() / 4294967296.0 * 2 - 1); }

struct Cache { int nctx, nkv, hd, f16; std::vector<float> k, v; std::vector<uint8_t> kr, vr; long long rb; };

static Cache make_cache(int nctx, int nkv, int hd, bool f16) {
    Cache c{nctx, nkv, hd, f16};
    const size_t n = (size_t)nctx * nkv * hd;
    c.k.resize(n), c.v.resize(n);
    c.rb = (long long)nkv * hd * (f16 ? 2 : 4);
    c.kr.resize((size_t)nctx * c.rb), c.vr.resize(c.kr.size());
    for (size_t i = 0; i < n; i++) {
        float a = uni(), b = uni();
        if (f16) {
            __half ha = __float2half(a), hb = __float2half(b);
            memcpy(&c.kr[2 * i], &ha.x, 2), memcpy(&c.vr[2 * i], &hb.x, 2);
            a = __half2float(ha), b = __half2float(hb);
        } else {
            memcpy(&c.kr[4 * i], &a, 4), memcpy(&c.vr[4 * i], &b, 4);
        }
        c.k[i] = a, c.v[i] = b;
    }
    return c;
}

// kern is the lean kernel of a head_dim class (64, 128, else any) and KV
// format (0 f32, 1 f16, 2 q8_0).
typedef void (*Kern)(float*, const float*, const uint8_t*, const uint8_t*, const int*, float2*, float*, int*, int, int, int,
                     long long, int, int, float, int);
static Kern kern(int hd, int fmt) {
    static const Kern k[3][3] = {{minfer_attn_decode2l_hd64_f32, minfer_attn_decode2l_hd64_f16, minfer_attn_decode2l_hd64_q8_0},
                                 {minfer_attn_decode2l_hd128_f32, minfer_attn_decode2l_hd128_f16, minfer_attn_decode2l_hd128_q8_0},
                                 {minfer_attn_decode2l_any_f32, minfer_attn_decode2l_any_f16, minfer_attn_decode2l_any_q8_0}};
    return k[hd == 64 ? 0 : hd == 128 ? 1 : 2][fmt];
}

// maxSplits is the launcher's cap (cuda/attn_decode2.go attnDecode2MaxSplits).
constexpr int maxSplits = 64;

// run launches the kernel for one token at cell start over the Go
// geometry's nsplit; it returns the output and checks the counters came
// back to 0.
static std::vector<float> run(const Cache& c, int nh, int start, int window, const std::vector<float>& q, int* bad) {
    const int nsplit = std::min(maxSplits, (c.nctx + 31) / 32);
    std::vector<float> out((size_t)nh * c.hd, -7.0f), acc((size_t)nh * nsplit * c.hd);
    std::vector<float2> ml((size_t)nh * nsplit);
    std::vector<int> counters(nh, 0);
    int win[2] = {start, start + 1};
    g_ranges.clear();
    g_ranges.push_back({c.kr.data(), c.kr.size()});
    g_ranges.push_back({c.vr.data(), c.vr.size()});
    g_ranges.push_back({q.data(), q.size() * 4});
    g_ranges.push_back({win, sizeof win});
    const float scale = 1.0f / sqrtf((float)c.hd);
    launch2(nh, nsplit, [&] {
        kern(c.hd, c.f16 ? 1 : 0)(out.data(), q.data(), c.kr.data(), c.vr.data(), win, ml.data(), acc.data(), counters.data(), nh, c.nkv,
                                  c.hd, c.rb, c.nctx, window, scale, nsplit);
    });
    for (int x : counters) *bad += x != 0;
    return out;
}

// kv_value is element e of cell's row of a region in format fmt, as
// kv_elem reads it (q8_0: the f16 d times the int8, exact in f32).
static double kv_value(const uint8_t* reg, int fmt, long long rb, int cell, int e) {
    const uint8_t* row = reg + (long long)cell * rb;
    if (fmt == 0) {
        float x;
        memcpy(&x, row + 4 * (long long)e, 4);
        return x;
    }
    __half h;
    if (fmt == 1) {
        memcpy(&h.x, row + 2 * (long long)e, 2);
        return __half2float(h);
    }
    const uint8_t* blk = row + (e / 32) * 34;
    memcpy(&h.x, blk, 2);
    return (double)__half2float(h) * (int8_t)blk[2 + e % 32];
}

// --lean (the CI runs it): the lean kernels against attention in double
// over every KV format (f32, f16, q8_0) and head_dim class (64, 128, any:
// 76 or 80 with rows that are not 16-byte multiples), within 1e-4: one
// split of 45 cells (a partial pass that is an iteration's second), 3
// splits of 134 cells (a partial last pass), 13 splits and the combine, a
// window; with --lean-full every format, class, G 1 / 2 / 7 / 8 and range.
static int lean_check(bool full) {
    int bad = 0, runs = 0;
    double worst = 0;
    for (int fmt : {0, 1, 2})
        for (int hd : {64, 128, 0}) {
            const int nkv = hd == 0 ? (fmt == 2 ? 2 : 3) : 2;
            if (hd == 0) hd = fmt == 2 ? 80 : 76; // rows of 170 (q8_0), 912 / 456 bytes: spans start mid-chunk
            const int nctx = 400;
            const long long rb = fmt == 0 ? 4LL * nkv * hd : fmt == 1 ? 2LL * nkv * hd : (long long)nkv * hd / 32 * 34;
            // Rows in one buffer per region; the regions 16-byte aligned (the launcher's check).
            std::vector<uint4> kbuf((nctx * rb + 15) / 16), vbuf(kbuf.size());
            uint8_t *kr = reinterpret_cast<uint8_t*>(kbuf.data()), *vr = reinterpret_cast<uint8_t*>(vbuf.data());
            for (long long i = 0; i < nctx * rb; i++) {
                if (fmt == 2 && i % 34 < 2) { // a q8_0 block's f16 scale: small, positive
                    const __half d = __float2half(0.01f + 0.02f * (float)(rng() % 100) / 100.0f);
                    memcpy(kr + i, reinterpret_cast<const uint8_t*>(&d.x) + i % 34, 1);
                    memcpy(vr + i, reinterpret_cast<const uint8_t*>(&d.x) + i % 34, 1);
                } else if (fmt == 1 && i % 2 == 1) { // an f16 high byte: |x| < 2, no inf / NaN
                    kr[i] = (uint8_t)((rng() & 0x83) | 0x30), vr[i] = (uint8_t)((rng() & 0x83) | 0x30);
                } else if (fmt == 0 && i % 4 == 3) { // an f32 high byte: the same
                    kr[i] = (uint8_t)((rng() & 0x80) | 0x3e), vr[i] = (uint8_t)((rng() & 0x80) | 0x3e);
                } else {
                    kr[i] = (uint8_t)rng(), vr[i] = (uint8_t)rng();
                }
            }
            // (n, window, nsplit): one split (45 cells: a partial pass that is an
            // iteration's second where a pass is 8 cells); 3 splits of 134 cells (more tiles than
            // stages, a partial last one); 13 splits and the combine; a window.
            struct Case { int n, window, nsplit; };
            for (int G : {1, 2, 7, 8})
                for (Case cs : {Case{45, 0, 13}, Case{nctx, 0, 3}, Case{nctx, 0, 13}, Case{380, 150, 13}}) {
                    // Without full (the CI's): one split, 3 splits of 134 cells and (f16 hd 128) the window, on
                    // f32 hd 64 and f16 hd 128 at G 7 (the 7B's), q8_0 and f16 of the any class at G 8 (spans
                    // mid-chunk); full: every format, class, G and range (minutes: every lane emulated).
                    const bool combo = G == (hd == 64 || hd == 128 ? 7 : 8) &&
                                       ((fmt == 0 && hd == 64) || (fmt == 1 && hd == 128) || (fmt == 2 && hd == 80) || (fmt == 1 && hd == 76));
                    const bool ci = combo && (cs.nsplit == 3 || cs.n == 45 || (cs.window > 0 && fmt == 1 && hd == 128));
                    if (!full && !ci) continue;
                    const int n = cs.n, window = cs.window, nsplit = cs.nsplit;
                    const int nh = G * nkv, start = n - 1;
                    std::vector<float> q((size_t)nh * hd);
                    for (auto& x : q) x = uni();
                    int win[2] = {start, start + 1};
                    g_ranges.clear();
                    g_ranges.push_back({kr, (size_t)(nctx * rb)});
                    g_ranges.push_back({vr, (size_t)(nctx * rb)});
                    g_ranges.push_back({q.data(), q.size() * 4});
                    g_ranges.push_back({win, sizeof win});
                    std::vector<float> out((size_t)nh * hd, -7.0f), acc((size_t)nh * nsplit * hd);
                    std::vector<float2> ml((size_t)nh * nsplit);
                    std::vector<int> counters(nh, 0);
                    const float scale = 1.0f / sqrtf((float)hd);
                    launch2(nh, nsplit, [&] {
                        kern(hd, fmt)(out.data(), q.data(), kr, vr, win, ml.data(), acc.data(), counters.data(), nh, nkv, hd, rb, nctx,
                                      window, scale, nsplit);
                    });
                    for (int x : counters) bad += x != 0;
                    runs++;
                    if (getenv("ADEC2_EMU_TRACE")) fprintf(stderr, "fmt %d hd %d G %d n %d\n", fmt, hd, G, n);
                    // Attention in double over the same KV values (kv_elem's).
                    const int first = window > 0 ? std::max(0, start - window + 1) : 0;
                    double diff = 0;
                    for (int h = 0; h < nh; h++) {
                        const int kvh = h / G;
                        std::vector<double> sc(start - first + 1);
                        double mx = -1e300;
                        for (int j = 0; j < (int)sc.size(); j++) {
                            double d = 0;
                            for (int e = 0; e < hd; e++) d += (double)q[(size_t)h * hd + e] * kv_value(kr, fmt, rb, first + j, kvh * hd + e);
                            sc[j] = d / sqrt((double)hd);
                            mx = std::max(mx, sc[j]);
                        }
                        double l = 0;
                        for (auto& x : sc) l += (x = exp(x - mx));
                        for (int e = 0; e < hd; e++) {
                            double y = 0;
                            for (int j = 0; j < (int)sc.size(); j++) y += sc[j] * kv_value(vr, fmt, rb, first + j, kvh * hd + e);
                            const float o = out[(size_t)h * hd + e];
                            const double d = fabs(o - y / l);
                            diff = std::max(diff, std::isnan(d) || o == -7.0f ? 1e9 : d);
                        }
                    }
                    worst = std::max(worst, diff);
                    if (!(diff <= 1e-4)) {
                        fprintf(stderr, "fmt %d hd %d nkv %d G %d n %d window %d nsplit %d: lean differs from attention in double by %g (or NaN / unwritten)\n",
                                fmt, hd, nkv, G, n, window, nsplit, diff);
                        bad++;
                    }
                    if (bad) { // the first failing run is enough (the emulation is slow)
                        printf("FAIL: lean run %d differs or left counters\n", runs);
                        return 1;
                    }
                }
        }
    printf("%d lean runs over f32 / f16 / q8_0, head_dim 64 / 128 / any, worst |diff| %.3g against attention in double\n", runs, worst);
    printf("LEAN WITHIN 1e-4\n");
    return 0;
}

// --q8 (the CI runs it): the lean kernels with the Q8_1 output
// (MINFER_FUSE_ATTN_Q8: minfer_attn_decode2q_*) against the lean kernels
// then minfer_quantize_q8_1 (quantize_act.cu) over their output, the
// launch the fusion removes: the f32 rows and the Q8_1 bytes bitwise, for
// every KV format at head_dim 64 and 128 (G 2 and 7), on one split (the
// single-split writer), 3 and 13 splits (the combine; 13 with out null,
// the fused node's launch, which must leave out alone), a window, and a
// token past n_ctx (NaN rows).
typedef void (*KernQ8)(float*, const float*, const uint8_t*, const uint8_t*, const int*, float2*, float*, int*, int, int, int,
                       long long, int, int, float, int, uint8_t*);
static int q8_check() {
    static const KernQ8 kq[2][3] = {
        {minfer_attn_decode2q_hd64_f32, minfer_attn_decode2q_hd64_f16, minfer_attn_decode2q_hd64_q8_0},
        {minfer_attn_decode2q_hd128_f32, minfer_attn_decode2q_hd128_f16, minfer_attn_decode2q_hd128_q8_0}};
    int runs = 0, bad = 0;
    for (int fmt : {0, 1, 2})
        for (int hd : {64, 128}) {
            const int nkv = 2, nctx = 400, G = hd == 128 ? 7 : 2, nh = G * nkv;
            const long long rb = fmt == 0 ? 4LL * nkv * hd : fmt == 1 ? 2LL * nkv * hd : (long long)nkv * hd / 32 * 34;
            std::vector<uint4> kbuf((nctx * rb + 15) / 16), vbuf(kbuf.size());
            uint8_t *kr = reinterpret_cast<uint8_t*>(kbuf.data()), *vr = reinterpret_cast<uint8_t*>(vbuf.data());
            for (long long i = 0; i < nctx * rb; i++) { // as lean_check: finite values of every format
                if (fmt == 2 && i % 34 < 2) {
                    const __half d = __float2half(0.01f + 0.02f * (float)(rng() % 100) / 100.0f);
                    memcpy(kr + i, reinterpret_cast<const uint8_t*>(&d.x) + i % 34, 1);
                    memcpy(vr + i, reinterpret_cast<const uint8_t*>(&d.x) + i % 34, 1);
                } else if (fmt == 1 && i % 2 == 1) {
                    kr[i] = (uint8_t)((rng() & 0x83) | 0x30), vr[i] = (uint8_t)((rng() & 0x83) | 0x30);
                } else if (fmt == 0 && i % 4 == 3) {
                    kr[i] = (uint8_t)((rng() & 0x80) | 0x3e), vr[i] = (uint8_t)((rng() & 0x80) | 0x3e);
                } else {
                    kr[i] = (uint8_t)rng(), vr[i] = (uint8_t)rng();
                }
            }
            struct Case { int n, window, nsplit, start; };
            for (Case cs : {Case{45, 0, 13, 44}, Case{nctx, 0, 3, nctx - 1}, Case{nctx, 0, 13, nctx - 1}, Case{380, 150, 13, 379},
                            Case{45, 0, 13, nctx}}) {
                if (cs.window > 0 && !(fmt == 1 && hd == 128)) continue;
                if (cs.start >= nctx && !(fmt == 0 && hd == 64)) continue;
                const int nsplit = cs.nsplit, qbytes = nh * hd / 32 * MINFER_Q8_1_BYTES;
                // 13 splits of the whole range: the Q8_1 form with out null (the fused node's launch: q8 alone).
                const bool nullout = cs.nsplit == 13 && cs.window == 0 && cs.start == nctx - 1;
                std::vector<float> q((size_t)nh * hd);
                for (auto& x : q) x = uni();
                int win[2] = {cs.start, cs.start + 1};
                std::vector<float> out[2];
                std::vector<uint32_t> q8[2]; // 4-byte aligned rows, as the Q8_1 scratch
                g_ranges.clear();
                g_ranges.push_back({kr, (size_t)(nctx * rb)});
                g_ranges.push_back({vr, (size_t)(nctx * rb)});
                g_ranges.push_back({q.data(), q.size() * 4});
                g_ranges.push_back({win, sizeof win});
                for (int g = 0; g < 2; g++) {
                    out[g].assign((size_t)nh * hd, -7.0f);
                    q8[g].assign((qbytes + 3) / 4, 0xa5a5a5a5u);
                    std::vector<float> acc((size_t)nh * nsplit * hd);
                    std::vector<float2> ml((size_t)nh * nsplit);
                    std::vector<int> counters(nh, 0);
                    uint8_t* qb = reinterpret_cast<uint8_t*>(q8[g].data());
                    const float scale = 1.0f / sqrtf((float)hd);
                    launch2(nh, nsplit, [&] {
                        if (g == 0)
                            kern(hd, fmt)(out[0].data(), q.data(), kr, vr, win, ml.data(), acc.data(), counters.data(), nh, nkv, hd, rb, nctx,
                                          cs.window, scale, nsplit);
                        else
                            kq[hd == 128][fmt](nullout ? nullptr : out[1].data(), q.data(), kr, vr, win, ml.data(), acc.data(), counters.data(), nh, nkv, hd,
                                               rb, nctx, cs.window, scale, nsplit, qb);
                    });
                    for (int x : counters) bad += x != 0;
                    if (g == 0) { // the unfused launch: the lean output quantized
                        g_ranges.push_back({out[0].data(), out[0].size() * 4});
                        const int n = nh * hd;
                        launch_xy((n / 32 + 3) / 4, 1, [&] { minfer_quantize_q8_1(qb, out[0].data(), n, 1); }, 128);
                    }
                }
                runs++;
                const bool nanrow = cs.start >= nctx;
                bool unwritten = false;
                for (size_t i = 0; i < out[0].size(); i++)
                    unwritten |= nullout ? out[1][i] != -7.0f : out[1][i] == -7.0f || (!nanrow && std::isnan(out[1][i]));
                if (unwritten || (!nullout && memcmp(out[0].data(), out[1].data(), out[0].size() * 4) != 0) ||
                    memcmp(q8[0].data(), q8[1].data(), qbytes) != 0) {
                    int first = -1;
                    for (int i = 0; i < qbytes && first < 0; i++)
                        if (reinterpret_cast<uint8_t*>(q8[0].data())[i] != reinterpret_cast<uint8_t*>(q8[1].data())[i]) first = i;
                    fprintf(stderr, "fmt %d hd %d G %d n %d window %d nsplit %d start %d: the Q8_1 kernel's rows or bytes differ "
                                    "(first differing Q8_1 byte %d of %d; unwritten %d)\n",
                            fmt, hd, G, cs.n, cs.window, nsplit, cs.start, first, qbytes, unwritten);
                    printf("FAIL: q8 run %d differs\n", runs);
                    return 1;
                }
            }
        }
    if (bad) {
        printf("FAIL: %d counters left non-zero\n", bad);
        return 1;
    }
    printf("%d q8 runs over f32 / f16 / q8_0, head_dim 64 / 128: rows and Q8_1 bytes equal the lean kernel then minfer_quantize_q8_1\n", runs);
    printf("Q8 BITWISE\n");
    return 0;
}

// Without a mode: the lean kernels against attention in double at lengths
// of one split to all 64 active (n_ctx 4160), f32 and f16, head_dim 64 and
// 128, GQA 2 and 7, a window. --quick: one case of all 64 active splits
// (3000 cells, head_dim 64, f32, GQA 2; for the planted-defect check and
// CI): the whole list takes minutes on 2 cores (every lane emulated).
int main(int argc, char** argv) {
    const bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (argc > 1 && strncmp(argv[1], "--lean", 6) == 0) return lean_check(strcmp(argv[1], "--lean-full") == 0);
    if (argc > 1 && strcmp(argv[1], "--q8") == 0) return q8_check();
    int bad = 0, cases = 0;
    double worst = 0;
    for (int hd : {64, 128})
        for (bool f16 : {false, true}) {
            const int nctx = 4160, nkv = 2;
            Cache c = make_cache(nctx, nkv, hd, f16);
            // GQA 7 once (head_dim 128, f16: the 7B's shape); windows once per
            // head_dim. Every block is 32 threads: the cases are few.
            for (int G : {2, 7}) {
                if (G == 7 && !(hd == 128 && f16)) continue;
                const int nh = G * nkv;
                for (int window : {0, 3000})
                    for (int n : {1, 65, 2048, 3000, nctx}) {
                        if (window > 0 && (f16 || n < 3000)) continue;
                        if (quick && (hd != 64 || f16 || G != 2 || window > 0 || n != 3000)) continue;
                        const int start = n - 1;
                        std::vector<float> q((size_t)nh * hd);
                        for (auto& x : q) x = uni();
                        const std::vector<float> o = run(c, nh, start, window, q, &bad);
                        const int first = window > 0 ? std::max(0, start - window + 1) : 0;
                        const int natt = start - first + 1;
                        for (int h = 0; h < nh; h++) {
                            const int kvh = h / G;
                            std::vector<double> s(natt);
                            double mx = -1e300;
                            for (int j = 0; j < natt; j++) {
                                double d = 0;
                                for (int e = 0; e < hd; e++) d += (double)q[(size_t)h * hd + e] * c.k[((size_t)(first + j) * nkv + kvh) * hd + e];
                                s[j] = d / sqrt((double)hd);
                                mx = std::max(mx, s[j]);
                            }
                            double l = 0;
                            for (auto& x : s) l += (x = exp(x - mx));
                            for (int e = 0; e < hd; e++) {
                                double y = 0;
                                for (int j = 0; j < natt; j++) y += s[j] * c.v[((size_t)(first + j) * nkv + kvh) * hd + e];
                                y /= l;
                                const double d = fabs(o[(size_t)h * hd + e] - y);
                                worst = std::max(worst, std::isnan(d) ? 1e9 : d);
                                if (!(d <= 1e-3)) {
                                    if (bad < 10)
                                        fprintf(stderr, "hd%d %s G%d window %d n %d head %d elem %d: %g, double %g\n", hd, f16 ? "f16" : "f32", G, window, n,
                                                h, e, o[(size_t)h * hd + e], y);
                                    bad++;
                                }
                            }
                        }
                        cases++;
                    }
            }
        }
    printf("%d cases, worst |diff| %.3g\n", cases, worst);
    if (bad) {
        printf("FAIL: %d bad values or counters\n", bad);
        return 1;
    }
    printf("ALL WITHIN 1e-3\n");
    return 0;
}
