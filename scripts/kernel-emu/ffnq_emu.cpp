// ffnq_emu.cpp: runs the fused FFN kernels that also write the down
// projection's Q8_1 row (minfer_mmvq_ffnq_<t>, minfer_mmvqr_ffnq_<t>:
// MINFER_FUSE_FFN_Q8, cuda/kernels/mmvq.cu and mmvq_repack.cu) on the CPU
// through include/cuda_fp16.h and requires, bitwise, what the launches the
// fusion removes give: the f32 row of minfer_mmvq[r]_ffn_<t> and the bytes
// minfer_quantize_q8_1 makes of it, and every group counter back at 0 after
// the launch. Two launches a case on the same counters (a second layer, a
// graph replay), each over stale scratch (NaN f32 row, 0xAB Q8_1 bytes)
// in another order.
//
// Order. emu_launch.h runs one block at a time, so the block that completes
// a group would always be its highest-numbered one. The fused launches here
// run through launch_mixed instead: up to R blocks in flight, taken in a
// seeded random order, and every scheduling round steps the live warps in
// a seeded random order, each with probability 1/2 (a step runs a warp's
// 32 fibers to their next barrier), so warps of one block and of different
// blocks overtake each other by any number of barriers, and which block of
// a group counts last varies. Memory is sequentially consistent (one OS
// thread): an ordering the kernel's barriers and counters do not enforce
// shows; a missing __threadfence cannot (the device test is the bar there).
//
// Cases: the gate/up types of real files: Q5_0 at qwen2-0.5b Q4_K_M's k 896,
// n_ff 4864 (the lever's workload; rows of 896 fall back from Q4_K), Q4_K at
// qwen3-0.6b's k 1024, n_ff 3072, the repacked Q8_0 at qwen2-0.5b Q8_0's k
// with 1536 rows, and the repacked Q6_K at a small shape (the tail does
// not depend on the type; the emulator's time does on the rows). The first 32 gate rows are
// zero (d = 0): a Q8_1 block of zeros. Exits 1 on any difference.
#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>
#include "emu_mmvq.h"
#include "mmvq.cu"
#include "mmvq_repack.cu"
#include "quantize_act.cu"
#include "emu_launch.h"

// g_completer[i]: how many groups the block at place i of its group
// completed (its count found 7 before it), the evidence that the order
// varies which block counts last.
static_assert(MINFER_MMVQ_GROUP_BLOCKS == 8, "g_completer counts groups of 8 blocks");
static long g_completer[8];
static void seen(const int*, int old) {
    if (old == MINFER_MMVQ_GROUP_BLOCKS - 1) g_completer[blockIdx.x % 8]++;
}

// launch_mixed runs a grid of gx blocks of `threads` threads, at most
// `resident` of them in flight, in the order above (seed). A round in which
// no fiber arrives at a barrier or finishes, with every live warp stepped,
// is a deadlock: exit 3.
static void launch_mixed(int gx, std::function<void()> body, int threads, int resident, uint64_t seed) {
    constexpr size_t kStack = 256 << 10; // touched lazily: new char[], not a zero-filled vector
    struct Slot {
        int block = -1, left = 0;
        std::vector<emu::Fiber> fs;
        std::vector<std::unique_ptr<char[]>> stacks;
        std::vector<WarpCtx> w;
        std::vector<EmuBarrier> bars;
        std::unique_ptr<EmuBarrier> blk;
    };
    const int warps = threads / 32;
    std::mt19937_64 rng(seed);
    std::vector<int> order(gx);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<Slot> slots(resident);
    for (auto& s : slots) {
        s.fs = std::vector<emu::Fiber>(threads);
        for (int t = 0; t < threads; t++) s.stacks.emplace_back(new char[kStack]);
    }
    emu::body = &body;
    size_t next = 0;
    auto start = [&](Slot& s, int b) {
        s.block = b, s.left = threads;
        s.w = std::vector<WarpCtx>(warps);
        s.bars = std::vector<EmuBarrier>(warps, EmuBarrier(32));
        for (int i = 0; i < warps; i++) s.w[i].bar = &s.bars[i];
        s.blk = std::make_unique<EmuBarrier>(threads);
        for (int t = 0; t < threads; t++) {
            emu::Fiber& f = s.fs[t];
            f.done = false;
            getcontext(&f.ctx);
            f.ctx.uc_stack.ss_sp = s.stacks[t].get();
            f.ctx.uc_stack.ss_size = kStack;
            f.ctx.uc_link = &emu::sched;
            makecontext(&f.ctx, emu::trampoline, 0);
        }
    };
    auto step = [&](Slot& s, int wi) { // the warp's fibers, each to its next barrier
        int finished = 0;
        for (int t = 32 * wi; t < 32 * wi + 32; t++) {
            emu::Fiber& f = s.fs[t];
            if (f.done) continue;
            threadIdx = dim3{(unsigned)t, 0, 0};
            blockIdx = dim3{(unsigned)s.block, 0, 0};
            blockDim = dim3{(unsigned)threads, 1, 1};
            tw = &s.w[wi];
            tblock = s.blk.get();
            emu::cur = &f;
            swapcontext(&emu::sched, &f.ctx);
            if (f.done) finished++;
        }
        s.left -= finished;
        return finished;
    };
    std::vector<std::pair<int, int>> live;
    for (;;) {
        for (auto& s : slots)
            if (s.left == 0 && next < order.size()) start(s, order[next++]);
        live.clear();
        for (int i = 0; i < resident; i++)
            for (int wi = 0; wi < warps && slots[i].left > 0; wi++) live.push_back({i, wi});
        if (live.empty()) return;
        std::shuffle(live.begin(), live.end(), rng);
        const long before = emu::arrivals;
        int finished = 0;
        for (auto [i, wi] : live)
            if (rng() & 1) finished += step(slots[i], wi);
        if (finished == 0 && emu::arrivals == before) { // maybe only unlucky: step every warp once
            for (auto [i, wi] : live) finished += step(slots[i], wi);
            if (finished == 0 && emu::arrivals == before) {
                fprintf(stderr, "emu: %zu warps wait at barriers no other thread reaches\n", live.size());
                exit(3);
            }
        }
    }
}

// guarded16 is emu_launch.h's guarded of n rounded up to 16 bytes (the
// range checks of __ldg, __ldcg and atomicAdd cover whole 16-byte loads).
static uint8_t* guarded16(size_t n) { return guarded((n + 15) / 16 * 16); }

static std::mt19937 rng(41);
// f16r: a finite normal f16 of either sign, small enough that silu(g) * u
// stays finite.
static uint16_t f16r() { return (uint16_t)((rng() & 1) << 15 | (4 + rng() % 10) << 10 | (rng() % 1024)); }

struct Type {
    const char* name;
    int bs, bb;           // values and bytes per block
    int d0, d1;           // offsets of its f16 scales (-1: none)
    bool repacked;        // the _ffnq_ form of mmvq_repack.cu, over minfer_repack_<t>'s copy
};
static const Type kQ5_0 = {"Q5_0", 32, MINFER_Q5_0_BYTES, 0, -1, false};
static const Type kQ4_K = {"Q4_K", 256, MINFER_Q4_K_BYTES, 0, 2, false};
static const Type kQ8_0r = {"Q8_0r", 32, MINFER_Q8_0_BYTES, 0, -1, true};
static const Type kQ6_Kr = {"Q6_Kr", 256, MINFER_Q6_K_BYTES, 208, -1, true};

// weight: n rows of k random values with finite scales; zero: the first 32
// rows' scales 0 (a gate of zeros: out 0 there, a Q8_1 block with d 0).
static uint8_t* weight(const Type& t, int k, int n, bool zero) {
    const size_t nb = (size_t)(k / t.bs) * n;
    uint8_t* w = guarded16(nb * t.bb);
    for (size_t i = 0; i < nb * t.bb; i++) w[i] = rng();
    for (size_t b = 0; b < nb; b++) {
        const bool z = zero && b < (size_t)(k / t.bs) * 32;
        for (int off : {t.d0, t.d1}) {
            if (off < 0) continue;
            const uint16_t d = z ? 0 : f16r();
            memcpy(w + b * t.bb + off, &d, 2);
        }
    }
    if (!t.repacked) return w;
    uint8_t* r = guarded16(nb * t.bb);
    launch_xy(1, 1, [&] {
        if (t.bb == MINFER_Q8_0_BYTES) minfer_repack_q8_0(r, w, (long long)nb);
        else minfer_repack_q6_k(r, w, (long long)nb);
    }, MINFER_REPACK_THREADS);
    return r;
}

// act: k / 32 random Q8_1 blocks with finite d.
static uint8_t* act(int k) {
    uint8_t* a = guarded16((size_t)k / 32 * 36);
    for (int i = 0; i < k / 32 * 36; i++) a[i] = rng();
    for (int b = 0; b < k / 32; b++) {
        const uint16_t d = f16r();
        memcpy(a + 36 * b, &d, 2);
    }
    return a;
}

using Kern = void (*)(float*, const uint8_t*, const uint8_t*, const uint8_t*, int, int);
using KernQ = void (*)(float*, const uint8_t*, const uint8_t*, const uint8_t*, int, int, uint8_t*, int*);

struct Case {
    const Type& t;
    int k, n, resident;
    Kern ffn;
    KernQ ffnq;
};

int main(int argc, char** argv) {
    // --quick (a plant): n_ff at most 1024, stop at the first difference.
    const bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const Case cases[] = {
        {kQ5_0, 896, 4864, 16, minfer_mmvq_ffn_q5_0, minfer_mmvq_ffnq_q5_0},
        {kQ4_K, 1024, 3072, 64, minfer_mmvq_ffn_q4_k, minfer_mmvq_ffnq_q4_k},
        {kQ8_0r, 896, 1536, 8, minfer_mmvqr_ffn_q8_0, minfer_mmvqr_ffnq_q8_0},
        {kQ6_Kr, 256, 512, 32, minfer_mmvqr_ffn_q6_k, minfer_mmvqr_ffnq_q6_k},
    };
    emu_atomic_seen = seen;
    int bad = 0;
    uint64_t seed = 1;
    for (const Case& c : cases) {
        const int k = c.k, n = quick ? std::min(c.n, 1024) : c.n, groups = n / 32;
        const uint8_t* wg = weight(c.t, k, n, true);
        const uint8_t* wu = weight(c.t, k, n, false);
        float* out = (float*)guarded16((size_t)n * 4);
        uint8_t* q8 = guarded16((size_t)groups * 36);
        int* counters = (int*)guarded16((size_t)groups * 4);
        memset(counters, 0, (size_t)groups * 4);
        // The unfused pair: the _ffn_ kernel's row, then minfer_quantize_q8_1.
        const uint8_t* a = act(k);
        std::vector<float> want(n);
        std::vector<uint8_t> wantq((size_t)groups * 36, 0xCD);
        launch((n + 3) / 4, [&] { c.ffn(want.data(), a, wg, wu, k, n); });
        launch_xy((groups + 3) / 4, 1, [&] { minfer_quantize_q8_1(wantq.data(), want.data(), n, 1); }, 128);
        for (int li = 0; li < 2; li++, seed++) {
            // The fused launch over stale scratch.
            for (int i = 0; i < n; i++) out[i] = NAN;
            memset(q8, 0xAB, (size_t)groups * 36);
            launch_mixed(n / 4, [&] { c.ffnq(out, a, wg, wu, k, n, q8, counters); }, 128, c.resident, seed);
            int rowDiff = 0, q8Diff = 0, cnt = 0;
            for (int i = 0; i < n; i++) rowDiff += memcmp(&out[i], &want[i], 4) != 0;
            for (int i = 0; i < groups * 36; i++) q8Diff += q8[i] != wantq[i];
            for (int g = 0; g < groups; g++) cnt += counters[g] != 0;
            const bool ok = rowDiff == 0 && q8Diff == 0 && cnt == 0;
            printf("%-5s k %4d n_ff %4d launch %d (%2d blocks in flight, seed %llu): %d of %d f32 differ, %d of %d Q8_1 bytes differ, "
                   "%d of %d counters not 0 %s\n",
                   c.t.name, k, n, li, c.resident, (unsigned long long)seed, rowDiff, n, q8Diff, groups * 36, cnt, groups,
                   ok ? "ok" : "DIFFER");
            fflush(stdout);
            bad += !ok;
            if (!ok && quick) {
                printf("FAIL\n");
                return 1;
            }
        }
    }
    printf("groups completed by the block at place 0..7 of the group:");
    for (long c : g_completer) printf(" %ld", c);
    printf("\n%s\n", bad ? "FAIL" : "FFN Q8_1 BITWISE");
    return bad != 0;
}
