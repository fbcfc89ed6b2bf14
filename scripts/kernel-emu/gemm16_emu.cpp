// gemm16_emu.cpp: runs minfer_f32_to_f16 and minfer_gemm16_q8_0r of
// cuda/kernels/gemm16.cu (the f16 prefill matmul of a repacked Q8_0
// weight, MINFER_MMQ_F16) on the CPU through include/cuda_fp16.h and
// include/mma.h, and compares the output with the same products in double
// over the f16-rounded weights (d * q) and activations: full and partial
// tiles of rows and tokens, one to eight 32-deep steps, a bias. The bar is
// 1e-5 of sum |w x| a value (f32 sums in another order); a fragment, offset
// or buffer wrong shows as O(1) of it. Run by gemm16-emu.sh; exits 1 past
// the bar.
#include <functional>
#include <random>
#include <stdio.h>
#include <thread>
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) uint2 { unsigned int x, y; };
inline float2 make_float2(float a, float b) { return float2{a, b}; }
inline __half __float2half(float f) { _Float16 h = (_Float16)f; __half r; memcpy(&r.x, &h, 2); return r; }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
struct alignas(4) __half2 { __half x, y; };
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__float2half(a), __float2half(b)}; }
inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
// f16 arithmetic: the exact f32 result of two f16 operands, rounded once.
inline __half2 __hsub2(__half2 a, __half2 b) {
    return __half2{__float2half(__half2float(a.x) - __half2float(b.x)), __float2half(__half2float(a.y) - __half2float(b.y))};
}
inline __half2 __hmul2(__half2 a, __half2 b) {
    return __half2{__float2half(__half2float(a.x) * __half2float(b.x)), __float2half(__half2float(a.y) * __half2float(b.y))};
}
// __byte_perm: byte i of the result is byte (s >> 4 i) & 7 of {x, y}.
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    const unsigned long long v = (unsigned long long)y << 32 | x;
    unsigned int r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned int)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
#include "mma.h"
#include "gemm16.cu"
#include "emu_launch.h"

static std::mt19937 rng(23);
static float uni() { return (float)((double)rng() / 4294967296.0 * 2 - 1); }

struct Case { int n, k, nt; bool bias; };

static int run(const Case& c) {
    const int kbs = c.k / 32;
    // The repacked copy: quants [n][k], then scales [n][k / 32] f16; 16-byte aligned.
    std::vector<uint4> wbuf(((size_t)c.n * c.k + 2 * (size_t)c.n * kbs + 15) / 16);
    uint8_t* w = reinterpret_cast<uint8_t*>(wbuf.data());
    for (size_t i = 0; i < (size_t)c.n * c.k; i++) w[i] = (uint8_t)rng();
    std::vector<float> d((size_t)c.n * kbs);
    for (size_t i = 0; i < d.size(); i++) {
        const __half h = __float2half(uni() * 0.02f);
        memcpy(w + (size_t)c.n * c.k + 2 * i, &h.x, 2);
        d[i] = __half2float(h);
    }
    std::vector<float> x((size_t)c.nt * c.k), bias(c.n), out((size_t)c.nt * c.n, NAN);
    for (auto& v : x) v = uni() * 4;
    for (auto& v : bias) v = uni();
    std::vector<uint2> xbuf(((size_t)c.nt * c.k + 3) / 4);
    __half* x16 = reinterpret_cast<__half*>(xbuf.data());
    g_ranges.clear();
    g_ranges.push_back({w, wbuf.size() * 16});
    g_ranges.push_back({x16, xbuf.size() * 8});
    g_ranges.push_back({x.data(), x.size() * 4});
    const long long count = (long long)c.nt * c.k;
    launch_xy((int)((count + 1023) / 1024), 1, [&] { minfer_f32_to_f16(x16, x.data(), count); }, 256);
    launch_xy((c.nt + 127) / 128, (c.n + 127) / 128,
              [&] { minfer_gemm16_q8_0r(out.data(), x16, w, c.bias ? bias.data() : nullptr, c.k, c.n, c.nt); }, 256);
    double worst = 0;
    int bad = 0;
    for (int t = 0; t < c.nt; t++)
        for (int j = 0; j < c.n; j++) {
            double s = 0, a = 0;
            for (int i = 0; i < c.k; i++) {
                const float wf = __half2float(__float2half(d[(size_t)j * kbs + i / 32] * (float)(int8_t)w[(size_t)j * c.k + i]));
                const float xf = __half2float(x16[(size_t)t * c.k + i]);
                if (xf != __half2float(__float2half(x[(size_t)t * c.k + i]))) bad++; // the conversion kernel
                s += (double)wf * xf;
                a += fabs((double)wf * xf);
            }
            if (c.bias) s += bias[j];
            const double e = fabs(out[(size_t)t * c.n + j] - s) / (a + 1e-30);
            worst = std::max(worst, std::isnan(e) ? 1e9 : e);
            bad += !(e <= 1e-5);
        }
    printf("n %4d k %4d nt %4d%s: worst |diff| / sum|w x| %.2e %s\n", c.n, c.k, c.nt, c.bias ? " bias" : "", worst, bad ? "OVER" : "ok");
    return bad != 0;
}

int main(int argc, char** argv) {
    const bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int bad = 0;
    bad += run({200, 96, 150, true}); // partial row and token tiles, three steps
    if (!quick) {
        bad += run({128, 256, 128, false}); // whole tiles, eight steps
        bad += run({64, 32, 9, true});      // one step, a row tile of 64, nine tokens
        bad += run({256, 64, 130, false});  // two row tiles, a token tile of 2
    }
    printf("%s\n", bad ? "FAIL" : "ALL WITHIN 1e-5 (f16 GEMM)");
    return bad != 0;
}
