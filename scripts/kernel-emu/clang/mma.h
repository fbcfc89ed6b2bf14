// mma.h for clang-check.sh: nvcuda::wmma declared as gemm.cu uses it (no bodies).
#pragma once
#include "cuda_fp16.h"
namespace nvcuda { namespace wmma {
struct row_major {}; struct col_major {};
struct matrix_a {}; struct matrix_b {}; struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision { struct tf32 {}; }
struct __nv_bfloat16;
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment { T x[16]; enum { num_elements = 16 }; };
template <class Use, int M, int N, int K, class T, class Layout> __device__ void load_matrix_sync(fragment<Use, M, N, K, T, Layout>&, const T*, unsigned);
template <class Use, int M, int N, int K, class T, class Layout, class U> __device__ void load_matrix_sync(fragment<Use, M, N, K, T, Layout>&, const U*, unsigned);
template <int M, int N, int K, class T> __device__ void load_matrix_sync(fragment<accumulator, M, N, K, T>&, const T*, unsigned, layout_t);
template <int M, int N, int K, class T> __device__ void store_matrix_sync(T*, const fragment<accumulator, M, N, K, T>&, unsigned, layout_t);
template <class Use, int M, int N, int K, class T, class Layout, class V> __device__ void fill_fragment(fragment<Use, M, N, K, T, Layout>&, const V&);
template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC> __device__ void mma_sync(fragment<accumulator, M, N, K, TC>&, const fragment<matrix_a, M, N, K, TA, LA>&, const fragment<matrix_b, M, N, K, TB, LB>&, const fragment<accumulator, M, N, K, TC>&);
}}
