// emu_launch.h: the definitions the emulated built-ins of cuda_fp16.h
// declare (thread index, warp and block context, the checked ranges) and
// launch() and launch_xy(), which run a grid of blocks of `threads` threads
// (128 by default: four warps) one block at a time, each thread a
// std::thread. Included once, after the kernel source, by each *_emu.cpp.
#pragma once
#include <deque>
#include <functional>
#include <thread>
#include <vector>
thread_local dim3 threadIdx, blockIdx, blockDim = {128, 1, 1};
thread_local WarpCtx* tw;
thread_local std::barrier<>* tblock;
std::vector<std::pair<const void*, size_t>> g_ranges;

// launch_xy runs a gx x gy grid (blockIdx.y = the row of blocks) of blocks
// of threads threads (a multiple of 32).
static void launch_xy(int gx, int gy, std::function<void()> body, int threads = 128);
static void launch(int grid, std::function<void()> body) { launch_xy(grid, 1, body); }
static void launch_xy(int gx, int gy, std::function<void()> body, int threads) {
    const int warps = threads / 32;
    for (int b = 0; b < gx * gy; b++) {
        std::vector<WarpCtx> w(warps);
        std::deque<std::barrier<>> bars; // a barrier cannot move: built in place
        for (int i = 0; i < warps; i++) w[i].bar = &bars.emplace_back(32);
        std::barrier<> blk(threads);
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; t++)
            ts.emplace_back([&, t, b] {
                threadIdx = dim3{(unsigned)t, 0, 0};
                blockIdx = dim3{(unsigned)(b % gx), (unsigned)(b / gx), 0};
                blockDim = dim3{(unsigned)threads, 1, 1};
                tw = &w[t >> 5];
                tblock = &blk;
                body();
            });
        for (auto& t : ts) t.join();
    }
}
