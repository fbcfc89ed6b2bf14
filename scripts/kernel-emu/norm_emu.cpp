// norm_emu.cpp: runs minfer_rms_norm_q8_1 of cuda/kernels/norm.cu (the
// decode norm written as its Q8_1 quantization, MINFER_FUSE_NORM_Q8) on the
// CPU through include/cuda_fp16.h, and compares its bytes with
// minfer_rms_norm_f32 followed by minfer_quantize_q8_1 (quantize_act.cu),
// the unfused pair it replaces: bitwise, for the hidden sizes of the Qwen
// shapes (both register depths), with and without a weight, rows with zero
// blocks. Run by norm-emu.sh; exits 1 on any differing byte.
#include <functional>
#include <random>
#include <stdio.h>
#include <string.h>
#include <thread>
inline __half __float2half(float f) { _Float16 h = (_Float16)f; __half r; memcpy(&r.x, &h, 2); return r; }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
#include "norm.cu"
#include "quantize_act.cu"
#include "emu_launch.h"

int main() {
    std::mt19937 rng(29);
    std::uniform_real_distribution<float> uni(-3.0f, 3.0f);
    int bad = 0;
    for (int n : {64, 896, 1024, 2048, 3584, 4096}) {
        for (int wmode = 0; wmode < 2; wmode++) {
            std::vector<float> x(n), w(n), y(n);
            for (auto& v : x) v = uni(rng);
            for (auto& v : w) v = 1.0f + 0.1f * uni(rng);
            for (int i = 0; i < 32; i++) x[i] = 0.0f; // a block of zeros: d = 0
            const int threads = std::max(32, std::min(256, (n + 31) / 32 * 32)); // opsRowBlock
            const float* wp = wmode ? w.data() : nullptr;
            std::vector<uint8_t> want((size_t)n / 32 * 36), got((size_t)n / 32 * 36, 0xAB);
            launch_xy(1, 1, [&] { minfer_rms_norm_f32(y.data(), x.data(), wp, n, 1e-6f); }, threads);
            launch_xy((n / 32 + 3) / 4, 1, [&] { minfer_quantize_q8_1(want.data(), y.data(), n, 1); }, 128);
            launch_xy(1, 1, [&] { minfer_rms_norm_q8_1(got.data(), x.data(), wp, n, 1e-6f); }, threads);
            int diff = 0;
            for (size_t i = 0; i < want.size(); i++) diff += want[i] != got[i];
            printf("n %5d weight %d: %d of %zu bytes differ %s\n", n, wmode, diff, want.size(), diff ? "DIFFER" : "ok");
            bad += diff != 0;
        }
    }
    printf("%s\n", bad ? "FAIL" : "NORM Q8_1 BITWISE");
    return bad != 0;
}
