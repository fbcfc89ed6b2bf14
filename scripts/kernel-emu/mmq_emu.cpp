// mmq_emu.cpp: runs the prefill MMQ kernels (cuda/kernels/mmq.cu) of every
// weight type on the CPU through include/cuda_fp16.h and include/mma.h (the
// int8 mma.sync and cp.async emulated with the PTX ISA's layouts and
// semantics), the plain 64-row tile (minfer_mmq_<type>_r64, H200-verified)
// against its async variant (minfer_mmq_<type>_async_r64, MINFER_MMQ_ASYNC),
// and requires every output bitwise equal. For Q4_K / Q5_K that compares
// two load paths: the plain kernels read the quants with 16-byte loads, the
// async ones with 4-byte loads. Q8_0's, Q4_K's and Q5_K's plain output must
// also be within f32 rounding of the sum in double (a check of the emulation,
// and of what plain and async share: the K-quant scales and min term). The
// shapes leave partial row and token tiles and (small types) a partial last
// stage; weight and activation rows start at every address mod 16 the
// async kernel's alignment allows (the plain Q4_K / Q5_K, which need 16,
// read a 16-byte aligned copy of the same bytes), and each weight ends where
// a PROT_NONE page begins, so a copy that reads past a span's end faults;
// a 16-byte load from an address that is not 16-byte aligned traps, as the
// GPU would fault. The 128-row tile (256 threads) runs too, for Q8_0, Q4_K
// and Q5_K (async against plain, and the double sum), and the repacked
// variant (minfer_mmq_q6_kr, both tiles) against the GGUF kernel.
// Exits 1 on any difference.
#include "mmq.cu"
#include <random>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#include "emu_launch.h"

// at_guard returns n bytes that end extra bytes before a PROT_NONE page,
// and registers the 16-byte aligned range around them (an allocation is
// at least 16-byte aligned, so the kernels may read there).
static uint8_t* at_guard(size_t n, size_t extra) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    const size_t body = (n + extra + 16 + pg - 1) / pg * pg;
    uint8_t* base = (uint8_t*)mmap(nullptr, body + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED || mprotect(base + body, pg, PROT_NONE) != 0) { perror("mmap"); exit(2); }
    uint8_t* p = base + body - extra - n;
    uint8_t* lo = (uint8_t*)((uintptr_t)p & ~(uintptr_t)15);
    g_ranges.push_back({lo, (size_t)(base + body - lo)});
    return p;
}

static std::mt19937 rng(11);
static uint16_t f16r() { return (uint16_t)((rng() & 1) << 15 | (8 + rng() % 10) << 10 | (rng() % 1024)); }
static void put16(uint8_t* p, uint16_t v) { memcpy(p, &v, 2); }

struct Type {
    const char* name;
    int bs, bb, align; // align: the async kernel's weight alignment
    int palign;        // the plain kernel's (16: the Q4_K / Q5_K 16-byte loads)
    std::vector<int> f16; // offsets of the block's f16 scales
    void (*plain)(float*, const uint8_t*, const uint8_t*, const float*, int, int, int);
    void (*async)(float*, const uint8_t*, const uint8_t*, const float*, int, int, int);
    void (*plainBig)(float*, const uint8_t*, const uint8_t*, const float*, int, int, int); // the 128-row tile
    void (*asyncBig)(float*, const uint8_t*, const uint8_t*, const float*, int, int, int);
};

using MmqFn = void (*)(float*, const uint8_t*, const uint8_t*, const float*, int, int, int);

// Pair is one comparison's inputs and outputs: random Q8_1 activations (nt
// rows of k values, ending aextra bytes before a PROT_NONE page) and bias,
// o1 from f1 over w1 and o2 from f2 over w2 (the 64-row tile's grid and
// 128-thread blocks, or with big the 128-row tile's and 256 threads).
struct Pair {
    uint8_t* a;
    std::vector<float> bias, o1, o2;
};
static Pair run_pair(MmqFn f1, const uint8_t* w1, MmqFn f2, const uint8_t* w2, int k, int n, int nt, size_t aextra, bool big = false) {
    const size_t kblocks = k / 32, actRow = kblocks * 36;
    Pair p{at_guard(actRow * nt, aextra), std::vector<float>(n), std::vector<float>((size_t)nt * n, -7.0f),
           std::vector<float>((size_t)nt * n, -9.0f)};
    for (size_t i = 0; i < actRow * nt; i++) p.a[i] = rng();
    for (size_t b = 0; b < kblocks * nt; b++) put16(p.a + b * 36, f16r());
    for (auto& x : p.bias) x = (float)(rng() % 2001) / 1000.0f - 1.0f;
    const int rows = big ? MINFER_MMQ_ROWS : MINFER_MMQ_ROWS_SMALL, threads = big ? MINFER_MMQ_THREADS : MINFER_MMQ_THREADS_SMALL;
    const int gx = (n + rows - 1) / rows, gy = (nt + MINFER_MMQ_TOKS - 1) / MINFER_MMQ_TOKS;
    launch_xy(gx, gy, [&] { f1(p.o1.data(), p.a, w1, p.bias.data(), k, n, nt); }, threads);
    launch_xy(gx, gy, [&] { f2(p.o2.data(), p.a, w2, p.bias.data(), k, n, nt); }, threads);
    return p;
}

static double f16d(const uint8_t* p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return __half2float(__half{v});
}

// kscale is the GGUF K-quant scale and min of sub-block j (ggml's
// get_scale_min_k4), written here from the format, not from dequant.cuh.
static void kscale(const uint8_t* sc, int j, int* d, int* m) {
    if (j < 4) {
        *d = sc[j] & 63;
        *m = sc[j + 4] & 63;
    } else {
        *d = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
        *m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
}

// ref_dot is weight row wrow dotted with the Q8_1 activation row arow
// (kblocks 32-blocks) in double, the sum of its terms' magnitudes in *mag:
// Q8_0 d_w d_a sum(q_w q_a); Q4_K / Q5_K d sc d_a sum(q_w q_a) - dmin m d_a
// sum(q_a) per 32-sub-block (the sum of q_a exact, as the kernel takes it).
static double ref_dot(const Type& t, const uint8_t* wrow, const uint8_t* arow, size_t kblocks, double* mag) {
    const bool q5k = t.bb == 176;
    double ref = 0;
    *mag = 0;
    for (size_t b = 0; b < kblocks; b++) {
        const uint8_t* ab = arow + b * 36;
        const double da = f16d(ab);
        long dot = 0, sumq = 0;
        double scale, minTerm = 0;
        if (t.bs == 32) { // Q8_0
            const uint8_t* wb = wrow + b * 34;
            for (int i = 0; i < 32; i++) dot += (long)(int8_t)wb[2 + i] * (int8_t)ab[4 + i];
            scale = f16d(wb);
        } else { // Q4_K (qs at 16) / Q5_K (qh at 16, qs at 48)
            const uint8_t* sb = wrow + (b / 8) * t.bb;
            const int j = b % 8;
            int sc, m;
            kscale(sb + 4, j, &sc, &m);
            const uint8_t* qs = sb + (q5k ? 48 : 16) + 32 * (j / 2);
            for (int i = 0; i < 32; i++) {
                int q = (qs[i] >> (4 * (j % 2))) & 15;
                if (q5k) q |= ((sb[16 + i] >> j) & 1) << 4;
                dot += (long)q * (int8_t)ab[4 + i];
                sumq += (int8_t)ab[4 + i];
            }
            scale = f16d(sb) * sc;
            minTerm = -f16d(sb + 2) * m * da * (double)sumq;
        }
        const double term = scale * da * (double)dot;
        ref += term + minTerm;
        *mag += fabs(term) + fabs(minTerm);
    }
    return ref;
}

static int run(const Type& t, int k, int n, int nt, size_t wextra, size_t aextra, bool big = false) {
    const size_t rowBytes = (size_t)(k / t.bs) * t.bb, kblocks = k / 32, actRow = kblocks * 36;
    uint8_t* w = at_guard(rowBytes * n, wextra);
    for (size_t i = 0; i < rowBytes * n; i++) w[i] = rng();
    for (size_t b = 0; b < rowBytes * n / t.bb; b++)
        for (int o : t.f16) put16(w + b * t.bb + o, f16r());
    // The plain kernel reads the same bytes from an address it can load from.
    const uint8_t* wp = w;
    if ((uintptr_t)w % t.palign != 0) {
        const size_t bytes = rowBytes * n;
        uint8_t* c = at_guard(bytes, (16 - bytes % 16) % 16);
        memcpy(c, w, bytes);
        wp = c;
    }
    Pair p = big ? run_pair(t.plainBig, wp, t.asyncBig, w, k, n, nt, aextra, true) : run_pair(t.plain, wp, t.async, w, k, n, nt, aextra);
    const uint8_t* a = p.a;
    const std::vector<float>&bias = p.bias, &o1 = p.o1, &o2 = p.o2;
    int bad = 0;
    if ((t.bs == 32 && t.bb == 34) || t.bb == 144 || t.bb == 176) {
        // Q8_0, Q4_K, Q5_K: the plain kernel against the sum in double (a
        // wrong mma layout, scale or min term is off by far more than f32
        // rounding).
        for (int tok = 0; tok < nt; tok++)
            for (int row = 0; row < n; row++) {
                double mag;
                const double ref = bias[row] + ref_dot(t, w + row * rowBytes, a + tok * actRow, kblocks, &mag);
                mag += fabs(bias[row]);
                const double got = o1[(size_t)tok * n + row];
                if (fabs(got - ref) > 1e-5 * mag + 1e-30) {
                    if (bad < 4) fprintf(stderr, "%s plain out[%d][%d] %.9g, double reference %.9g\n", t.name, tok, row, got, ref);
                    bad++;
                }
            }
    }
    for (size_t i = 0; i < o1.size(); i++) {
        if (memcmp(&o1[i], &o2[i], 4) != 0) {
            if (bad < 4) fprintf(stderr, "%s k=%d n=%d nt=%d w+%zu a+%zu: out[%zu] (token %zu, row %zu) plain %.9g async %.9g\n", t.name, k, n, nt,
                                 (size_t)((uintptr_t)w & 15), (size_t)((uintptr_t)a & 15), i, i / n, i % n, o1[i], o2[i]);
            bad++;
        }
    }
    printf("%-5s k=%-4d n=%d nt=%d weight at +%-2zu act at +%-2zu%s: %s (%zu outputs)\n", t.name, k, n, nt, (size_t)((uintptr_t)w & 15),
           (size_t)((uintptr_t)a & 15), big ? " (128-row tile)" : "", bad ? "DIFFER" : "bitwise equal", o1.size());
    return bad ? 1 : 0;
}

// repack is cuda/mmvq_repack.go RepackHost of Q6_K: ql + qh at 192 i,
// scales at 192 N + 16 i, d at 208 N + 2 i (block i of N).
static void repack(const uint8_t* src, uint8_t* dst, size_t nb) {
    for (size_t i = 0; i < nb; i++) {
        const uint8_t* b = src + i * 210;
        memcpy(dst + 192 * i, b, 192);
        memcpy(dst + 192 * nb + 16 * i, b + 192, 16);
        memcpy(dst + 208 * nb + 2 * i, b + 208, 2);
    }
}

// run_r: the repacked variant (minfer_mmq_q6_kr[_r64]) over the repacked
// copy of random Q6_K bytes against the GGUF kernel over the bytes
// themselves: every output bitwise equal. The copy ends where a PROT_NONE
// page begins.
static int run_r(const char* name, MmqFn plain, MmqFn rep, int k, int n, int nt, bool big = false) {
    const int bs = 256, bb = 210, dOff = 208;
    const size_t nb = (size_t)(k / bs) * n, bytes = nb * bb;
    std::vector<uint8_t> w(bytes);
    for (auto& x : w) x = rng();
    for (size_t b = 0; b < nb; b++) put16(w.data() + b * bb + dOff, f16r());
    uint8_t* r = at_guard(bytes, (16 - bytes % 16) % 16); // 16-byte aligned, ends at the guard
    repack(w.data(), r, nb);
    const Pair p = run_pair(plain, w.data(), rep, r, k, n, nt, 0, big);
    const std::vector<float>&o1 = p.o1, &o2 = p.o2;
    int bad = 0;
    for (size_t i = 0; i < o1.size(); i++) {
        if (memcmp(&o1[i], &o2[i], 4) != 0) {
            if (bad < 4) fprintf(stderr, "%s k=%d n=%d nt=%d: out[%zu] (token %zu, row %zu) GGUF %.9g repacked %.9g\n", name, k, n, nt, i, i / n, i % n, o1[i], o2[i]);
            bad++;
        }
    }
    printf("%-6s k=%-4d n=%d nt=%d%s: %s (%zu outputs)\n", name, k, n, nt, big ? " (128-row tile)" : "", bad ? "DIFFER" : "bitwise equal", o1.size());
    return bad ? 1 : 0;
}

#define T(name, ty, bs, bb, al, pal, ...)                                                                  \
    Type{#ty, bs, bb, al, pal, __VA_ARGS__, minfer_mmq_##name##_r64, minfer_mmq_##name##_async_r64, minfer_mmq_##name, \
         minfer_mmq_##name##_async}

// --quick: Q8_0, Q4_K and Q5_K, one shape each (the planted-defect runs: a
// copy defect shows on any type, a K-quant load or min-term defect on the
// two whose plain kernels make 16-byte loads).
int main(int argc, char** argv) {
    const bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const Type types[] = {
        T(q8_0, Q8_0, 32, 34, 2, 2, {0}),          T(q4_0, Q4_0, 32, 18, 2, 2, {0}),
        T(q4_1, Q4_1, 32, 20, 4, 4, {0, 2}),       T(q5_0, Q5_0, 32, 22, 2, 2, {0}),
        T(q5_1, Q5_1, 32, 24, 4, 4, {0, 2}),       T(q4_k, Q4_K, 256, 144, 4, 16, {0, 2}),
        T(q5_k, Q5_K, 256, 176, 4, 16, {0, 2}),    T(q6_k, Q6_K, 256, 210, 2, 2, {208}),
    };
    auto quickSet = [](const Type& t) { return t.bb == 34 || t.bb == 144 || t.bb == 176; };
    int fails = 0;
    int cases = 0;
    for (const Type& t : types) {
        if (quick && !quickSet(t)) continue;
        const int k = t.bs == 32 ? 192 : 512; // small types: a partial last stage (6 blocks)
        fails += run(t, k, 70, 67, 0, 0);
        cases++;
        if (quick) continue;
        // Other starts mod 16; K-quants over three super-blocks a row (a
        // partial last stage pair).
        fails += run(t, t.bs == 32 ? k : 768, 66, 9, (size_t)(t.align == 4 ? 4 : 6), 4);
        cases++;
    }
    // The 128-row tile (256 threads, 8 warps), async against plain, once per
    // type family (Q8_0 and Q4_K: the quick set) and Q5_K.
    for (const Type& t : types) {
        if (strcmp(t.name, "Q8_0") != 0 && strcmp(t.name, "Q4_K") != 0 && (quick || strcmp(t.name, "Q5_K") != 0)) continue;
        fails += run(t, t.bs == 32 ? 192 : 512, 130, 40, 0, 0, true);
        cases++;
    }
    // The repacked variant (one shape under --quick): Q6_K over three
    // super-blocks a row, then the 128-row tile. (Q8_0's went with
    // MINFER_MMQ_F16: the f16 GEMM reads its one copy.)
    fails += run_r("Q6_Kr", minfer_mmq_q6_k_r64, minfer_mmq_q6_kr_r64, 768, 66, 9);
    cases++;
    if (!quick) {
        fails += run_r("Q6_Kr", minfer_mmq_q6_k, minfer_mmq_q6_kr, 512, 130, 40, true);
        cases++;
    }
    if (fails) {
        fprintf(stderr, "mmq-emu: %d of %d cases differ\n", fails, cases);
        return 1;
    }
    printf("mmq-emu: every async output is bitwise the plain kernel's (Q4_K / Q5_K: 4-byte against 16-byte loads), every repacked output the GGUF kernel's\n");
    return 0;
}
