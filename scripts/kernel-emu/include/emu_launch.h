// emu_launch.h: the definitions the emulated built-ins of cuda_fp16.h
// declare (thread index, warp and block context, the checked ranges) and
// launch() and launch_xy(), which run a grid of 128-thread blocks (four
// warps) one block at a time, each thread a std::thread. Included once, after the kernel
// source, by each *_emu.cpp.
#pragma once
#include <functional>
#include <thread>
#include <vector>
thread_local dim3 threadIdx, blockIdx;
thread_local WarpCtx* tw;
thread_local std::barrier<>* tblock;
std::vector<std::pair<const void*, size_t>> g_ranges;

// launch_xy runs a gx x gy grid (blockIdx.y = the row of blocks).
static void launch_xy(int gx, int gy, std::function<void()> body);
static void launch(int grid, std::function<void()> body) { launch_xy(grid, 1, body); }
static void launch_xy(int gx, int gy, std::function<void()> body) {
    for (int b = 0; b < gx * gy; b++) {
        WarpCtx w[4];
        std::barrier<> bars[4] = {std::barrier<>(32), std::barrier<>(32), std::barrier<>(32), std::barrier<>(32)};
        std::barrier<> blk(128);
        for (int i = 0; i < 4; i++) w[i].bar = &bars[i];
        std::vector<std::thread> ts;
        for (int t = 0; t < 128; t++)
            ts.emplace_back([&, t, b] {
                threadIdx = dim3{(unsigned)t, 0, 0};
                blockIdx = dim3{(unsigned)(b % gx), (unsigned)(b / gx), 0};
                tw = &w[t >> 5];
                tblock = &blk;
                body();
            });
        for (auto& t : ts) t.join();
    }
}
