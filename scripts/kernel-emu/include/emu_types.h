// emu_types.h: the GGUF block types of the decode MMVQ emulators that need
// only a type's shape (qkvrs_emu.cpp, normmv_emu.cpp): name, bs (values a
// block), bb (bytes a block) and f16[2] (offsets of its f16 fields, -1
// none), the Type that emu_blocks.h's generators take.
#pragma once

struct Type {
    const char* name;
    int bs, bb;
    int f16[2];
};
static const Type kQ4_0 = {"Q4_0", 32, 18, {0, -1}};
static const Type kQ4_1 = {"Q4_1", 32, 20, {0, 2}};
static const Type kQ5_0 = {"Q5_0", 32, 22, {0, -1}};
static const Type kQ5_1 = {"Q5_1", 32, 24, {0, 2}};
static const Type kQ8_0 = {"Q8_0", 32, 34, {0, -1}};
static const Type kQ4_K = {"Q4_K", 256, 144, {0, 2}};
static const Type kQ5_K = {"Q5_K", 256, 176, {0, 2}};
static const Type kQ6_K = {"Q6_K", 256, 210, {208, -1}};
