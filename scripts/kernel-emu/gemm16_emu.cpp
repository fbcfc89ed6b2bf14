// gemm16_emu.cpp: runs minfer_f32_to_f16 and minfer_gemm16_q8_0r of
// cuda/kernels/gemm16.cu (the f16 prefill matmul of a repacked Q8_0
// weight's one copy) on the CPU through include/cuda_fp16.h and
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
// Blocks run one at a time here, and a block's lanes add to distinct
// outputs: a plain add is the atomic one.
inline float atomicAdd(float* p, float v) {
    const float o = *p;
    *p = o + v;
    return o;
}
#include "mma.h"
#include "gemm16.cu"
#include "emu_launch.h"

static std::mt19937 rng(23);
static float uni() { return (float)((double)rng() / 4294967296.0 * 2 - 1); }

// A case: up to three matmuls of one input (rows n[i], 0: none), one
// launch; ksplit 2 zeroes the outputs and splits k as the backend does.
struct Case { int n[3], k, nt; bool bias; int ksplit; };

// The weight layouts (g16::Wt): the repacked Q8_0 copy, Q4_K's GGUF bytes,
// the repacked Q6_K copy.
static const char* wtName[] = {"q8_0r", "q4_k ", "q6_kr"};

// kquant fills the n x k matrix of type wt (1: Q4_K, 2: Q6_K) in the layout
// its kernel reads into wbuf and its f32 weights (dequant.cuh's
// minfer_dq_*, from the GGUF bytes) into wf.
static void kquant(int wt, int n, int k, std::vector<uint4>& wbuf, std::vector<float>& wf) {
    const int nsb = k / 256, bytes = wt == 1 ? MINFER_Q4_K_BYTES : MINFER_Q6_K_BYTES;
    std::vector<uint8_t> gguf((size_t)n * nsb * bytes);
    for (auto& b : gguf) b = (uint8_t)rng();
    for (size_t b = 0; b < (size_t)n * nsb; b++) { // sane f16 scales: d (and Q4_K's dmin)
        uint8_t* blk = gguf.data() + b * bytes;
        const __half d = __float2half(uni() * 0.02f), dm = __float2half(uni() * 0.01f);
        memcpy(wt == 1 ? blk : blk + 208, &d.x, 2);
        if (wt == 1) memcpy(blk + 2, &dm.x, 2);
    }
    wf.resize((size_t)n * k);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < k; i++) {
            const uint8_t* row = gguf.data() + (size_t)j * nsb * bytes;
            wf[(size_t)j * k + i] = wt == 1 ? minfer_dq_q4_k(row, i) : minfer_dq_q6_k(row, i);
        }
    wbuf.assign((gguf.size() + 15) / 16, uint4{});
    uint8_t* w = reinterpret_cast<uint8_t*>(wbuf.data());
    if (wt == 1) {
        memcpy(w, gguf.data(), gguf.size());
        return;
    }
    // The repacked Q6_K copy (cuda/mmvq_repack.go): ql + qh of every
    // super-block, then their 16 scales, then their d.
    const size_t all = (size_t)n * nsb;
    for (size_t b = 0; b < all; b++) {
        const uint8_t* blk = gguf.data() + b * bytes;
        memcpy(w + b * 192, blk, 192);
        memcpy(w + all * 192 + b * 16, blk + 192, 16);
        memcpy(w + all * 208 + b * 2, blk + 208, 2);
    }
}

// run: one case of weight type wt (0 Q8_0, 1 Q4_K, 2 Q6_K) on the data
// seed draws.
static int run(const Case& c, int wt, unsigned seed) {
    rng.seed(seed);
    const int kbs = c.k / 32;
    struct Mat {
        std::vector<uint4> wbuf;
        std::vector<float> d, wf, bias, out;
    } m[3];
    std::vector<float> x((size_t)c.nt * c.k);
    for (auto& v : x) v = uni() * 4;
    std::vector<uint2> xbuf(((size_t)c.nt * c.k + 3) / 4);
    __half* x16 = reinterpret_cast<__half*>(xbuf.data());
    g_ranges.clear();
    g_ranges.push_back({x16, xbuf.size() * 8});
    g_ranges.push_back({x.data(), x.size() * 4});
    for (int s = 0; s < 3; s++) {
        const int n = c.n[s];
        if (n == 0) continue;
        if (wt == 0) {
            // The repacked copy: quants [n][k], then scales [n][k / 32] f16; 16-byte aligned.
            m[s].wbuf.resize(((size_t)n * c.k + 2 * (size_t)n * kbs + 15) / 16);
            uint8_t* w = reinterpret_cast<uint8_t*>(m[s].wbuf.data());
            for (size_t i = 0; i < (size_t)n * c.k; i++) w[i] = (uint8_t)rng();
            m[s].wf.resize((size_t)n * c.k);
            for (size_t i = 0; i < (size_t)n * kbs; i++) {
                const __half h = __float2half(uni() * 0.02f);
                memcpy(w + (size_t)n * c.k + 2 * i, &h.x, 2);
                for (int e = 0; e < 32; e++) m[s].wf[32 * i + e] = __half2float(h) * (float)(int8_t)w[32 * i + e];
            }
        } else {
            kquant(wt, n, c.k, m[s].wbuf, m[s].wf);
        }
        uint8_t* w = reinterpret_cast<uint8_t*>(m[s].wbuf.data());
        m[s].bias.resize(n);
        for (auto& v : m[s].bias) v = uni();
        m[s].out.assign((size_t)c.nt * n, c.ksplit == 2 ? 0.0f : NAN);
        g_ranges.push_back({w, m[s].wbuf.size() * 16});
    }
    const long long count = (long long)c.nt * c.k;
    launch_xy((int)((count + 1023) / 1024), 1, [&] { minfer_f32_to_f16(x16, x.data(), count); }, 256);
    auto W = [&](int s) { return m[s].wbuf.empty() ? nullptr : reinterpret_cast<const uint8_t*>(m[s].wbuf.data()); };
    auto B = [&](int s) { return c.bias && c.n[s] ? m[s].bias.data() : nullptr; };
    auto O = [&](int s) { return c.n[s] ? m[s].out.data() : nullptr; };
    const int tiles = (c.n[0] + 127) / 128 + (c.n[1] + 127) / 128 + (c.n[2] + 127) / 128;
    auto kern = wt == 1 ? minfer_gemm16_q4_k : wt == 2 ? minfer_gemm16_q6_kr : minfer_gemm16_q8_0r;
    launch_xy((c.nt + 127) / 128, tiles * c.ksplit,
              [&] {
                  kern(x16, c.k, c.nt, c.ksplit, O(0), W(0), B(0), c.n[0], O(1), W(1), B(1), c.n[1], O(2), W(2), B(2), c.n[2]);
              },
              256);
    double worst = 0;
    int bad = 0;
    for (int s = 0; s < 3; s++) {
        const int n = c.n[s];
        for (int t = 0; t < c.nt; t++)
            for (int j = 0; j < n; j++) {
                double sum = 0, a = 0;
                for (int i = 0; i < c.k; i++) {
                    const float wf = __half2float(__float2half(m[s].wf[(size_t)j * c.k + i]));
                    const float xf = __half2float(x16[(size_t)t * c.k + i]);
                    if (xf != __half2float(__float2half(x[(size_t)t * c.k + i]))) bad++; // the conversion kernel
                    sum += (double)wf * xf;
                    a += fabs((double)wf * xf);
                }
                if (c.bias) sum += m[s].bias[j];
                const double e = fabs(m[s].out[(size_t)t * n + j] - sum) / (a + 1e-30);
                worst = std::max(worst, std::isnan(e) ? 1e9 : e);
                bad += !(e <= 1e-5);
            }
    }
    printf("%s n %4d+%4d+%4d k %4d nt %4d ksplit %d%s: worst |diff| / sum|w x| %.2e %s\n", wtName[wt], c.n[0], c.n[1],
           c.n[2], c.k, c.nt, c.ksplit, c.bias ? " bias" : "", worst, bad ? "OVER" : "ok");
    return bad != 0;
}

int main(int argc, char** argv) {
    // --quick: the first case only; --kq: the K-quant forms only; --no-kq:
    // without them.
    bool quick = false;
    int kq = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) quick = true;
        else if (strcmp(argv[i], "--kq") == 0) kq = 2;
        else if (strcmp(argv[i], "--no-kq") == 0) kq = 0;
    }
    const Case cases[] = {
        {{136, 64, 0}, 192, 40, true, 2},   // partial row and token tiles; two matmuls; k split 3 + 3 steps (the plants' case)
        {{200, 64, 136}, 96, 150, true, 2}, // three matmuls, split 2 + 1
        {{128, 0, 0}, 256, 128, false, 1},  // whole tiles, eight steps
        {{64, 0, 0}, 32, 9, true, 1},       // one step, a row tile of 64, nine tokens
        {{256, 0, 0}, 64, 130, false, 1},   // two row tiles, a token tile of 2
        {{200, 64, 136}, 96, 150, true, 1}, // three matmuls, one launch
        {{256, 0, 0}, 160, 20, true, 2},    // five steps split 3 + 2
        {{72, 0, 0}, 64, 33, false, 2},     // one step a half
    };
    // The K-quant forms: k a multiple of 256, one to three
    // super-blocks, a split inside one.
    const Case kcases[] = {
        {{136, 0, 0}, 512, 24, true, 1},     // two super-blocks in one k range, a partial row tile (the plants' case)
        {{200, 64, 136}, 256, 150, true, 1}, // three matmuls, one super-block
        {{136, 64, 0}, 768, 40, true, 2},    // two matmuls, k split 12 + 12 steps (inside a super-block)
    };
    int bad = 0;
    unsigned seed = 23;
    for (const Case& c : cases) {
        if (kq != 2) bad += run(c, 0, seed);
        seed++;
        if (quick) break;
    }
    for (const Case& c : kcases) {
        if (kq == 0) break;
        bad += run(c, 1, seed) + run(c, 2, seed + 1);
        seed += 2;
        if (quick) break;
    }
    printf("%s\n", bad ? "FAIL" : "ALL WITHIN 1e-5 (f16 GEMM)");
    return bad != 0;
}
