// emu_launch.h: the definitions the emulated built-ins of cuda_fp16.h
// declare (thread index, warp and block context, the checked ranges) and
// launch() and launch_xy(), which run a grid of blocks of `threads` threads
// (128 by default: four warps) one block at a time. Included once, after
// the kernel source, by each *_emu.cpp.
//
// Each CUDA thread is a fiber (ucontext) of the calling OS thread: the
// block's fibers run in thread order, each until it waits at a barrier
// (__syncwarp, a shuffle, __syncthreads) or returns, and the last to arrive
// at a barrier releases the others. Switching fibers costs no scheduler
// round trip, which a thread per lane paid at every shuffle (most of the
// emulators' time went to futex waits). The order is deterministic; a
// round in which no fiber arrives at a barrier or finishes is a deadlock
// (barriers a kernel's threads do not all reach): it exits 3 with a message.
#pragma once
#include <functional>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#include <vector>
thread_local dim3 threadIdx, blockIdx, blockDim = {128, 1, 1};
thread_local WarpCtx* tw;
thread_local EmuBarrier* tblock;
void (*emu_lane_start)(int) = nullptr;
std::vector<std::pair<const void*, size_t>> g_ranges;

// guarded returns n registered bytes starting at a 16-byte boundary that
// end at most 15 bytes before a PROT_NONE page: a read past the end faults.
inline uint8_t* guarded(size_t n) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    const size_t body = (n + 15 + pg - 1) / pg * pg;
    uint8_t* base = (uint8_t*)mmap(nullptr, body + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED || mprotect(base + body, pg, PROT_NONE) != 0) { perror("mmap"); exit(2); }
    uint8_t* p = (uint8_t*)((uintptr_t)(base + body - n) & ~(uintptr_t)15);
    g_ranges.push_back({p, n});
    return p;
}

namespace emu {
struct Fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    bool done = false;
};
inline ucontext_t sched;
inline Fiber* cur = nullptr;
inline long arrivals = 0; // barrier arrivals, for the deadlock check
inline const std::function<void()>* body = nullptr;
inline void trampoline() {
    if (emu_lane_start) emu_lane_start((int)threadIdx.x);
    (*body)();
    cur->done = true; // uc_link returns to the scheduler
}
} // namespace emu

void emu_yield() { swapcontext(&emu::cur->ctx, &emu::sched); }

void EmuBarrier::arrive_and_wait() {
    emu::arrivals++;
    const unsigned ph = phase;
    if (++count == n) {
        count = 0, phase++;
        return;
    }
    while (phase == ph) emu_yield();
}

// launch_xy runs a gx x gy grid (blockIdx.y = the row of blocks) of blocks
// of threads threads (a multiple of 32).
static void launch_xy(int gx, int gy, std::function<void()> body, int threads = 128);
static void launch(int grid, std::function<void()> body) { launch_xy(grid, 1, body); }
static void launch_xy(int gx, int gy, std::function<void()> body, int threads) {
    constexpr size_t kStack = 256 << 10;
    const int warps = threads / 32;
    std::vector<emu::Fiber> fs(threads);
    for (auto& f : fs) f.stack.resize(kStack);
    emu::body = &body;
    for (int b = 0; b < gx * gy; b++) {
        std::vector<WarpCtx> w(warps);
        std::vector<EmuBarrier> bars(warps, EmuBarrier(32));
        for (int i = 0; i < warps; i++) w[i].bar = &bars[i];
        EmuBarrier blk(threads);
        const dim3 bi{(unsigned)(b % gx), (unsigned)(b / gx), 0};
        for (int t = 0; t < threads; t++) {
            emu::Fiber& f = fs[t];
            f.done = false;
            getcontext(&f.ctx);
            f.ctx.uc_stack.ss_sp = f.stack.data();
            f.ctx.uc_stack.ss_size = f.stack.size();
            f.ctx.uc_link = &emu::sched;
            makecontext(&f.ctx, emu::trampoline, 0);
        }
        for (int left = threads; left > 0;) {
            const long before = emu::arrivals;
            int finished = 0;
            for (int t = 0; t < threads; t++) {
                emu::Fiber& f = fs[t];
                if (f.done) continue;
                threadIdx = dim3{(unsigned)t, 0, 0};
                blockIdx = bi;
                blockDim = dim3{(unsigned)threads, 1, 1};
                tw = &w[t >> 5];
                tblock = &blk;
                emu::cur = &f;
                swapcontext(&emu::sched, &f.ctx);
                if (f.done) finished++;
            }
            left -= finished;
            if (left > 0 && finished == 0 && emu::arrivals == before) {
                fprintf(stderr, "emu: block (%u, %u): %d threads wait at barriers no other thread reaches\n", bi.x, bi.y, left);
                exit(3);
            }
        }
    }
}
