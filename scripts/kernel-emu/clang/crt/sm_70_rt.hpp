// Empty: clang 14's __clang_cuda_intrinsics.h includes it; clang-check.sh has no CUDA toolkit.
