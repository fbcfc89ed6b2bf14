// emu_launch.h: the definitions the emulated built-ins of cuda_fp16.h
// declare (thread index, warp and block context, the checked ranges) and
// launch(), which runs a grid of 128-thread blocks (four warps) one block
// at a time, each thread a std::thread. Included once, after the kernel
// source, by each *_emu.cpp.
#pragma once
#include <functional>
#include <thread>
#include <vector>
thread_local dim3 threadIdx, blockIdx;
thread_local WarpCtx* tw;
thread_local std::barrier<>* tblock;
std::vector<std::pair<const void*, size_t>> g_ranges;

static void launch(int grid, std::function<void()> body) {
    for (int b = 0; b < grid; b++) {
        WarpCtx w[4];
        std::barrier<> bars[4] = {std::barrier<>(32), std::barrier<>(32), std::barrier<>(32), std::barrier<>(32)};
        std::barrier<> blk(128);
        for (int i = 0; i < 4; i++) w[i].bar = &bars[i];
        std::vector<std::thread> ts;
        for (int t = 0; t < 128; t++)
            ts.emplace_back([&, t, b] {
                threadIdx = dim3{(unsigned)t, 0, 0};
                blockIdx = dim3{(unsigned)b, 0, 0};
                tw = &w[t >> 5];
                tblock = &blk;
                body();
            });
        for (auto& t : ts) t.join();
    }
}
