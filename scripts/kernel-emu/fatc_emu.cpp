// fatc_emu.cpp: runs minfer_attn_prefill_tc_hd{64,128} of
// cuda/kernels/attn_prefill2.cu (the tensor-core prefill attention,
// MINFER_FA_PREFILL_TC) on the CPU through include/cuda_fp16.h and
// include/mma.h, and compares it with attention computed in double on the
// same cache (f32 and f16 KV): GQA 1, 2 and 7, head_dim 64, 80 and 128, a
// window, a start past zero, a partial row tile, and a start < 0 (NaN rows).
// --decode: the decode kernels minfer_attn_decode_tc_* and their combine;
// --decode-narrow: the narrow form's (minfer_attn_decode_tc32_*: 32-cell
// tiles, up to 256 splits).
// Run by fatc-emu.sh; exits 1 past the bar (1e-2, the device test's).
#include <type_traits>
#include <thread>
#include <random>
#include <functional>
#include <stdio.h>
#undef __shared__
#define __shared__
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
inline float2 make_float2(float a, float b) { return float2{a, b}; }
inline __half __float2half(float f) { _Float16 h = (_Float16)f; __half r; memcpy(&r.x, &h, 2); return r; }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
struct alignas(4) __half2 { __half x, y; };
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__float2half(a), __float2half(b)}; }
inline float2 __half22float2(__half2 h) { return float2{__half2float(h.x), __half2float(h.y)}; }
#include "emu_sync.h" // the decode combine's loads and weight broadcast
// The decode combine's partial loads are watched: a load of a record the
// split kernel did not write (an inactive split's) is counted, and each
// record read is marked (every record written must be: a combine whose
// plan stops short of the kernel's drops a split's cells).
static const float* g_part = nullptr;
static size_t g_part_floats = 0, g_ld = 1;
static std::vector<char> g_written; // a record's m slot holds no NaN (the poison) after the kernel
static std::vector<char> g_read;
static long g_unwritten_reads = 0;
template <class T> inline T ldcg_watched(const T* p) {
    const float* f = reinterpret_cast<const float*>(p);
    if (g_part != nullptr && f >= g_part && f < g_part + g_part_floats) {
        const size_t r = (size_t)(f - g_part) / g_ld;
        g_unwritten_reads += !g_written[r];
        g_read[r] = 1;
    }
    return __ldcg(p);
}
#define __ldcg ldcg_watched
#include "mma.h"
#include "attn_prefill2.cu"
#undef __ldcg
namespace fap2 { alignas(32) float4 fap2_smem4[fap2::smem_floats(64, 16) / 4]; }
namespace fatc { alignas(32) float4 fatc_smem4[fatc::Geo<128>::BYTES / 16]; }
#include "emu_launch.h"

static std::mt19937 rng(11);
static float uni() { return (float)((double)rng() / 4294967296.0 * 2 - 1); }

struct Case { int nt, nh, nkv, hd, nctx, window, start, format, nsplit = 1; float vbias = 0.0f; };
// decode: the MINFER_ATTN_DECODE_TC kernels (minfer_attn_decode_tc_*: one
// warp and 16 rows a block, always split) and their combine, which also
// writes the rows' Q8_1 blocks: checked bitwise against a quantization of
// the f32 rows it writes (--decode).
static bool decode = false;
// narrow: the narrow decode form (MINFER_ATTN_DECODE_TC_NARROW,
// minfer_attn_decode_tc32_* and minfer_attn_decode_tc32_combine: 32-cell
// tiles, at least 4 of them an active split); decode is set with it.
static bool narrow = false;

// decUsed is the decode kernels' active splits for row R's 16-row tile as
// the rule states it: the bn-cell tiles (64; 32 narrow) from the tile's
// first cell (its first row's, rounded down to bn) to its last row's cell,
// per = max(ceil(tiles / nsplit), 128 / bn) of them a split, ceil(tiles /
// per) splits.
static int decUsed(const Case& c, long long R) {
    const int G = c.nh / c.nkv;
    const long long rows = (long long)c.nt * G, r0 = R / 16 * 16;
    if (c.start < 0) return 0;
    const long long t0 = r0 / G, t1 = (std::min(r0 + 16, rows) - 1) / G;
    const long long lo = c.window > 0 ? std::min(std::max(0LL, c.start + t0 - c.window + 1), (long long)c.nctx) : 0;
    const int bn = narrow ? 32 : 64;
    const long long hi = std::min((long long)c.start + t1, (long long)c.nctx - 1), cb = lo / bn * bn;
    const int tiles = hi >= cb ? (int)((hi - cb) / bn + 1) : 0;
    const int per = std::max((tiles + c.nsplit - 1) / c.nsplit, 128 / bn);
    return (tiles + per - 1) / per;
}

// q8Ref is the Q8_1 block of 32 values by q8_1.cuh's arithmetic on the CPU.
static void q8Ref(uint8_t* b, const float* v) {
    float amax = fabsf(v[0]); // as the warp's tree: NaN only when every value is
    for (int i = 1; i < 32; i++) amax = fmaxf(amax, fabsf(v[i]));
    float id;
    const float d = minfer_q8_1_scale(amax, &id);
    int sum = 0;
    for (int i = 0; i < 32; i++) {
        const int q = minfer_q8_1_quant(v[i], id);
        b[4 + i] = (uint8_t)(int8_t)q;
        sum += q;
    }
    const unsigned short h[2] = {minfer_q8_1_dbits(d), minfer_q8_1_sbits(sum, d)};
    memcpy(b, h, 4);
}

// run checks the tensor-core kernel (fma false: f16 tiles, bar 1e-2) or
// the FMA kernel minfer_attn_prefill2_hd64_bm16 (fma: f32, bar 1e-3; the
// one variant of 128 threads, head_dim <= 64) against attention in double.
static int run(const Case& c, bool fma = false) {
    const int G = c.nh / c.nkv, esz = c.format == mops::KV_F16 ? 2 : 4;
    const long long rb = (long long)c.nkv * c.hd * esz;
    std::vector<float> q((size_t)c.nt * c.nh * c.hd), kf((size_t)c.nctx * c.nkv * c.hd), vf(kf.size());
    for (auto& x : q) x = uni();
    for (auto& x : kf) x = uni();
    for (auto& x : vf) x = uni() + c.vbias; // a bias keeps a long row's output far from 0: every split's share shows
    std::vector<uint8_t> kr((size_t)c.nctx * rb), vr(kr.size());
    for (size_t i = 0; i < kf.size(); i++) {
        if (c.format == mops::KV_F16) { // the cache holds f16: the reference reads the same values
            __half hk = __float2half(kf[i]), hv = __float2half(vf[i]);
            memcpy(&kr[2 * i], &hk.x, 2); memcpy(&vr[2 * i], &hv.x, 2);
            kf[i] = __half2float(hk); vf[i] = __half2float(hv);
        } else {
            memcpy(&kr[4 * i], &kf[i], 4); memcpy(&vr[4 * i], &vf[i], 4);
        }
    }
    g_ranges.clear();
    g_ranges.push_back({kr.data(), kr.size()});
    g_ranges.push_back({vr.data(), vr.size()});
    int win[2] = {c.start, c.start + c.nt};
    const float scale = 1.0f / sqrtf((float)c.hd);
    std::vector<float> out(q.size(), -7.0f);
    const long long rows = (long long)c.nt * G;
    const int bm = fma || decode ? 16 : 64, grid = (int)((rows + bm - 1) / bm) * c.nkv;
    int q8bad = 0;
    long offplan = 0, unwritten = 0, unread = 0; // decode: partials written against the plan; combine loads of unwritten ones; written ones it never loads
    if (fma)
        launch(grid, [&] { minfer_attn_prefill2_hd64_bm16(out.data(), q.data(), kr.data(), vr.data(), c.format, win, c.nt, c.nh, c.nkv, c.hd, rb, c.nctx, c.window, scale); });
    else {
        // The split kernels write [nsplit][nkv][rows][HD + 2] partials, which
        // the combine merges (a NaN fill, fresh for each case's one launch,
        // shows any record left unwritten and read).
        const int HD = c.hd <= 64 ? 64 : 128, ns = c.nsplit;
        std::vector<float> part(ns > 1 ? (size_t)ns * c.nkv * rows * (HD + 2) : 1, NAN);
        float* pp = ns > 1 ? part.data() : nullptr;
        g_ranges.push_back({part.data(), part.size() * 4});
        auto* k = narrow ? (c.hd <= 64 ? minfer_attn_decode_tc32_hd64 : minfer_attn_decode_tc32_hd128)
                  : decode ? (c.hd <= 64 ? minfer_attn_decode_tc_hd64 : minfer_attn_decode_tc_hd128)
                           : (c.hd <= 64 ? minfer_attn_prefill_tc_hd64 : minfer_attn_prefill_tc_hd128);
        launch_xy(grid, ns, [&] { k(out.data(), q.data(), kr.data(), vr.data(), c.format, win, c.nt, c.nh, c.nkv, c.hd, rb, c.nctx, c.window, scale, pp, ns); },
                  decode ? 32 : 128);
        const bool q8 = decode && c.hd % 32 == 0;
        std::vector<uint8_t> q8o(q8 ? q.size() / 32 * MINFER_Q8_1_BYTES : 1, 0xA5);
        if (decode) {
            // Split s writes row R's record iff s < decUsed (an inactive split
            // exits before it stages Q); the combine loads no other record.
            const size_t nrec = part.size() / (HD + 2);
            g_written.assign(nrec, 0);
            g_read.assign(nrec, 0);
            for (size_t r = 0; r < nrec; r++) {
                g_written[r] = !std::isnan(part[r * (HD + 2) + HD]);
                offplan += g_written[r] != (r / (rows * c.nkv) < (size_t)decUsed(c, (long long)(r % rows)));
            }
            g_part = part.data(), g_part_floats = part.size(), g_ld = HD + 2, g_unwritten_reads = 0;
            auto* comb = narrow ? minfer_attn_decode_tc32_combine : minfer_attn_decode_tc_combine;
            launch((int)(rows * c.nkv), [&] {
                comb(out.data(), q8 ? q8o.data() : nullptr, part.data(), win, c.nt, c.nh, c.nkv, c.hd, c.nctx, c.window, ns, HD + 2);
            });
            unwritten = g_unwritten_reads, g_part = nullptr;
            for (size_t r = 0; r < nrec; r++) unread += g_written[r] && !g_read[r];
        }
        else if (ns > 1)
            launch((int)((rows * c.nkv + 3) / 4), [&] { minfer_attn_prefill_tc_combine(out.data(), part.data(), win, c.nt, c.nh, c.nkv, c.hd, c.nctx, c.window, ns, HD + 2); });
        for (size_t b = 0; q8 && b < q.size() / 32; b++) { // the Q8_1 blocks are those of the f32 row written
            uint8_t want[MINFER_Q8_1_BYTES];
            q8Ref(want, &out[32 * b]);
            q8bad += memcmp(want, &q8o[b * MINFER_Q8_1_BYTES], MINFER_Q8_1_BYTES) != 0;
        }
    }
    double worst = 0;
    int badnan = 0;
    for (int t = 0; t < c.nt; t++)
        for (int h = 0; h < c.nh; h++) {
            const float* y = &out[((size_t)t * c.nh + h) * c.hd];
            const long long cell = (long long)c.start + t;
            if (c.start < 0 || cell >= c.nctx) {
                for (int d = 0; d < c.hd; d++) badnan += !std::isnan(y[d]);
                continue;
            }
            const int last = (int)cell, first = c.window > 0 ? std::max(0, last - c.window + 1) : 0;
            const int kvh = h / G;
            std::vector<double> s(last - first + 1);
            double mx = -1e300;
            for (int j = first; j <= last; j++) {
                double a = 0;
                for (int d = 0; d < c.hd; d++) a += (double)q[((size_t)t * c.nh + h) * c.hd + d] * kf[((size_t)j * c.nkv + kvh) * c.hd + d];
                s[j - first] = a * scale;
                mx = std::max(mx, s[j - first]);
            }
            double sum = 0;
            for (auto& x : s) { x = exp(x - mx); sum += x; }
            for (int d = 0; d < c.hd; d++) {
                double o = 0;
                for (int j = first; j <= last; j++) o += s[j - first] * vf[((size_t)j * c.nkv + kvh) * c.hd + d];
                o /= sum;
                if (std::isnan(y[d])) badnan++;
                else worst = std::max(worst, fabs(o - y[d]));
            }
        }
    const bool ok = badnan == 0 && q8bad == 0 && offplan == 0 && unwritten == 0 && unread == 0 && worst <= (fma ? 1e-3 : 1e-2);
    char plan[160] = "";
    if (offplan || unwritten || unread)
        snprintf(plan, sizeof plan, " (%ld records written off the split plan, %ld loads of unwritten records, %ld written records never read)", offplan,
                 unwritten, unread);
    printf("%s nt %4d heads %2d/%d hd %3d n_ctx %4d window %3d start %4d %s split %d: max|diff| %.2e%s%s%s %s\n", fma ? "fma" : narrow ? "dtn" : decode ? "dtc" : "tc ", c.nt, c.nh,
           c.nkv, c.hd, c.nctx, c.window, c.start, c.format == mops::KV_F16 ? "f16" : "f32", c.nsplit, worst, badnan ? " (NaN placement differs)" : "",
           q8bad ? " (Q8_1 blocks differ)" : "", plan, ok ? "ok" : "OVER");
    return !ok;
}

int main(int argc, char** argv) {
    // --quick: the f16 cache only (the planted-defect runs: every plant
    // shows there, at half the time).
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        quick = quick || strcmp(argv[i], "--quick") == 0;
        decode = decode || strcmp(argv[i], "--decode") == 0;
        narrow = narrow || strcmp(argv[i], "--decode-narrow") == 0;
    }
    decode = decode || narrow;
    int bad = 0;
    if (decode) { // nt 1..8: one token to a verify batch; the 7B's G 7, G 8 (two tokens fill 16 rows), G 1 and 2
        // A plant is caught at its first case over the bar: the rest is skipped.
        auto D = [&](const Case& c) {
            if (!(quick && bad)) bad += run(c);
        };
        const int ns7 = narrow ? 198 : 99; // the 7B's grid on 132 SMs (3 blocks an SM of 64-cell tiles, 6 of 32)
        for (int f : {mops::KV_F32, mops::KV_F16}) {
            if (quick && f != mops::KV_F16) continue;
            D({1, 7, 1, 128, 700, 0, 640, f, 2});     // one token over a filled cache: 11 tiles, 2 splits
            D({1, 28, 4, 128, 700, 0, 640, f, 13});   // 4 KV heads, 13 splits (some of one tile)
            D({1, 7, 1, 128, 2880, 0, 2879, f, 20});  // a share above the floor: 15 splits of 3 64-cell tiles, 18 of 5 32-cell ones
            D({1, 28, 4, 128, 9000, 0, 8600, f, ns7, 0.5f}); // the 7B's splits: more than 32 partials a lane group
            D({2, 16, 2, 64, 300, 0, 200, f, 3});     // G 8: two tokens fill the 16 rows
            D({3, 14, 2, 64, 300, 0, 10, f, 5});      // 21 rows: two row tiles a KV head; more splits than tiles
            D({8, 4, 4, 80, 400, 50, 300, f, 4});     // G 1, head_dim 80 (no Q8_1), a window
            D({4, 4, 2, 128, 200, 0, 198, f, 2});     // cells past n_ctx: NaN rows
            D({1, 2, 1, 64, 64, 0, -3, f, 2});        // start < 0: every row NaN
            D({1, 28, 4, 128, 0, 0, 0, f, ns7});      // an empty region: no tile, no active split, NaN rows
            if (narrow && f == mops::KV_F16) {
                // Deep ranges (f16, the cache the route sends here), where
                // more splits run than the 64-cell form's combine holds
                // (128), one KV head to keep the time: the 7B's group and
                // grid of 198 at depth 23990 (750 tiles, 4 a split: 188
                // active, a partial last tile), and head_dim 64 at the
                // 256-split cap (906 tiles: 227 active, the lanes' last
                // group of 32), two tokens of G 8.
                D({1, 7, 1, 128, 24000, 0, 23990, f, 198, 0.5f});
                D({2, 8, 1, 64, 29000, 0, 28985, f, 256, 0.5f});
            }
            // Short ranges at the 7B's splits (its grid from depth 0): n_ctx
            // cells filled, the last token's the last; one token (7B), and 3
            // tokens at G 8 (24 rows: two 16-row tiles, whose last cells and
            // so tiles differ); with no window and a window of 40 (the range
            // starts past tile 0).
            for (int fill : {1, 2, 31, 33, 63, 64, 65, 128, 129, 200})
                for (int w : {0, 40}) {
                    D({1, 28, 4, 128, fill, w, fill - 1, f, ns7, 0.5f});
                    D({3, 16, 2, 64, fill, w, std::max(0, fill - 3), f, ns7, 0.5f}); // fill < 3: NaN rows past n_ctx
                }
        }
        printf("%s\n", bad ? "FAIL" : narrow ? "ALL WITHIN 1e-2 (tensor-core decode, 32-cell tiles; Q8_1 bitwise)"
                                             : "ALL WITHIN 1e-2 (tensor-core decode; Q8_1 bitwise)");
        return bad != 0;
    }
    // A plant is caught at its first case over the bar: the rest is skipped.
    auto R = [&](const Case& c, bool fma = false) {
        if (!(quick && bad)) bad += run(c, fma);
    };
    for (int f : {mops::KV_F32, mops::KV_F16}) {
        if (quick && f != mops::KV_F16) continue;
        R({20, 7, 1, 128, 96, 0, 0, f});    // GQA 7 (7B-like), a partial row tile
        R({40, 7, 1, 128, 700, 0, 600, f}); // over a filled cache: 11 tiles, 5 row blocks
        R({70, 4, 2, 64, 160, 0, 50, f});   // start past zero, two tiles of cells
        R({33, 2, 2, 80, 140, 40, 90, f});  // head_dim 80 (padded), a window
        R({9, 14, 2, 64, 64, 0, 60, f});    // cells past n_ctx: NaN rows
        R({12, 2, 1, 64, 64, 0, -3, f});    // start < 0: every row NaN
        R({40, 7, 1, 128, 700, 0, 600, f, 3}); // split over 3 blocks, 3-4 tiles each
        R({33, 2, 2, 80, 140, 40, 90, f, 2});  // a window: some splits see none of a row
        R({9, 14, 2, 64, 64, 0, 60, f, 5});    // more splits than tiles; NaN rows
        if (quick) continue;                              // the plants reach the tensor-core kernel only
        R({70, 4, 2, 64, 160, 0, 50, f}, true);  // the FMA tiles (hd64, 16 rows a block)
        R({33, 14, 2, 64, 140, 40, 90, f}, true);
        R({9, 14, 2, 64, 64, 0, 60, f}, true);
    }
    printf("%s\n", bad ? "FAIL" : "ALL WITHIN 1e-2 (tensor cores) and 1e-3 (FMA)");
    return bad != 0;
}
