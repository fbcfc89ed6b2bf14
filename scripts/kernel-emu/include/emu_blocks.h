// emu_blocks.h: random weight blocks, repacked copies, Q8_1 activation rows
// and biases for the decode MMVQ emulators (xqkv_emu.cpp, qkvrs_emu.cpp,
// normmv_emu.cpp). The includer defines `static std::mt19937 rng` (its own
// seed) and a Type (emu_types.h's, or its own) with name, bs (values a
// block), bb (bytes a block) and f16[2] (offsets of the block's f16 fields,
// -1 none) before including it; guarded() is emu_launch.h's.
#pragma once
#include <string.h>
#include <vector>

// f16r: a finite normal f16 of either sign, magnitude 2^-7 .. 2^2.
static uint16_t f16r() { return (uint16_t)((rng() & 1) << 15 | (8 + rng() % 10) << 10 | (rng() % 1024)); }
static void put16(uint8_t* p, uint16_t v) { memcpy(p, &v, 2); }

// gguf: n x k random blocks of t, each f16 field finite.
template <class T>
static uint8_t* gguf(const T& t, int k, int n) {
    const size_t nb = (size_t)(k / t.bs) * n, total = nb * t.bb;
    uint8_t* w = guarded(total);
    for (size_t i = 0; i < total; i++) w[i] = rng();
    for (size_t b = 0; b < nb; b++)
        for (int off : t.f16)
            if (off >= 0) put16(w + b * t.bb + off, f16r());
    return w;
}

// repacked: cuda.RepackHost (mmvq_repack.go) of the blocks of w (Q8_0 or Q6_K).
template <class T>
static uint8_t* repacked(const T& t, const uint8_t* w, int k, int n) {
    const size_t nb = (size_t)(k / t.bs) * n;
    uint8_t* r = guarded(nb * t.bb);
    for (size_t i = 0; i < nb; i++) {
        const uint8_t* b = w + i * t.bb;
        if (t.bb == 34) {
            memcpy(r + 32 * i, b + 2, 32);
            memcpy(r + 32 * nb + 2 * i, b, 2);
        } else {
            memcpy(r + 192 * i, b, 192);
            memcpy(r + 192 * nb + 16 * i, b + 192, 16);
            memcpy(r + 208 * nb + 2 * i, b + 208, 2);
        }
    }
    return r;
}

// act: the Q8_1 row of k values (f16 d, f16 s, 32 int8 a block), every
// 7th d zero.
static uint8_t* act(int k) {
    const size_t nb = (size_t)(k / 32);
    uint8_t* a = guarded(nb * 36);
    for (size_t i = 0; i < nb * 36; i++) a[i] = rng();
    for (size_t b = 0; b < nb; b++) put16(a + 36 * b, b % 7 == 3 ? 0 : f16r());
    return a;
}

static std::vector<float> biasOf(int n) {
    std::vector<float> b(n);
    for (auto& v : b) v = (float)(rng() % 2001) / 1000.0f - 1.0f;
    return b;
}
