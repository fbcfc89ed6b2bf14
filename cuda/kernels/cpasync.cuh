// cpasync.cuh: cp.async (sm_80+) for the kernels that stage global memory in
// shared memory without a register pass: the tensor-core prefill attention
// (attn_prefill2.cu) and the async MMQ (mmq.cu). The emulation
// (scripts/kernel-emu/include/mma.h) defines the same three on the CPU.
#pragma once

#ifndef MINFER_KERNEL_EMU
// minfer_cp_async16 copies 16 bytes global -> shared (both 16-byte
// aligned), reading src_bytes (0..16) of them and zero-filling the rest;
// a thread's copies form a group at minfer_cp_async_commit, and
// minfer_cp_async_wait<N> returns when at most the newest N of its groups
// are still in flight (a barrier then makes them visible to the block).
__device__ __forceinline__ void minfer_cp_async16(void* dst, const void* src, int src_bytes) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void minfer_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void minfer_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
#endif
