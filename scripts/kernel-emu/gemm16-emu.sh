#!/usr/bin/env bash
# gemm16-emu.sh: a CPU check of the f16 prefill matmul of a repacked Q8_0
# weight's one copy and of Q4_K / Q6_K weights (cuda/kernels/gemm16.cu,
# MINFER_MMQ_F16_KQ) without a GPU: g++
# compiles the kernel source against the emulated CUDA built-ins and
# mma.sync / ldmatrix / cp.async (include/cuda_fp16.h, include/mma.h) and
# compares it with double sums over the same f16 values (gemm16_emu.cpp).
# The device test remains the bar on the GPU.
#
#   scripts/kernel-emu/gemm16-emu.sh             eight Q8_0 shapes, three K-quant
#                                                shapes of each K-quant type
#   scripts/kernel-emu/gemm16-emu.sh --plant X   a planted defect, which must
#       be caught (exit 1; one shape):
#       afrag  A's ldmatrix rows taken from the first 8 of the 16 only
#       bfrag  B's words from ldmatrix paired across the two row tiles
#       deq    the dequantization's offset 1024 instead of 1152
#       buf    the next step's copies into this step's buffer
#       seg    the second matmul's tiles counted from the grid's first
#       split  the bias added by both halves of a split k
#       dmap   the dequantizing lanes cover two of a row's four chunks
#     and of the K-quant forms (minfer_gemm16_q4_k, minfer_gemm16_q6_kr,
#     MINFER_MMQ_F16_KQ):
#       k4nib  Q4_K's nibble chosen by the pair of sub-blocks, not the sub-block
#       k4sc   Q4_K's sub-block 3 scale and min decoded as the high ones
#       k4hdr  Q4_K's header read only at a block's first step
#       k6swz  Q6_K's raw chunks staged without the swizzle the reads assume
#       k6sc   Q6_K's second 16 values of a step scaled by the first's scale
#       k6hi   Q6_K's quarter 1 read from the high nibbles
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kern="$here/../../cuda/kernels"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=plant.sh
source "$here/plant.sh"
quick=()
if [[ "${1:-}" == "--plant" ]]; then
    case "${2:-}" in
    afrag) from='16 * i + (lane & 15)]'; to='16 * i + (lane & 7)]' ;;
    bfrag) from='b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]}'; to='b0[2] = {r[0], r[2]}, b1[2] = {r[1], r[3]}' ;;
    deq) from='__floats2half2_rn(1152.0f, 1152.0f)'; to='__floats2half2_rn(1024.0f, 1024.0f)' ;;
    buf) from='stage<T>(sm, buf ^ 1,'; to='stage<T>(sm, buf,' ;;
    seg) from='n1}, tile = yt - t0;'; to='n1}, tile = yt;' ;;
    split) from='if (sp == 1) wk.sg.bias = nullptr;'; to='if (sp == 2) wk.sg.bias = nullptr;' ;;
    dmap) from='dq = (tid >> 3) & 3;'; to='dq = (tid >> 3) & 1;' ;;
    k4nib) from='const int sh = 4 * (kb & 1);'; to='const int sh = 4 * ((kb >> 1) & 1);' ;;
    k4sc) from='const int sc = j < 4 ? A & 63'; to='const int sc = j < 3 ? A & 63' ;;
    k4hdr) from='if (first || j == 0) hd[h]'; to='if (first) hd[h]' ;;
    k6swz) from='&sm.wr[buf][r][16 * (q ^ swz(r))]'; to='&sm.wr[buf][r][16 * q]' ;;
    k6sc) from='sc[b * 16 + 8 * hh + 2 * qtr + e]'; to='sc[b * 16 + 8 * hh + 2 * qtr]' ;;
    k6hi) from='const int ls = qtr >= 2 ? 4 : 0'; to='const int ls = qtr >= 1 ? 4 : 0' ;;
    *) echo "usage: $0 [--plant afrag|bfrag|deq|buf|seg|split|dmap|k4nib|k4sc|k4hdr|k6swz|k6sc|k6hi]" >&2; exit 2 ;;
    esac
    plant_defect gemm16.cu "$2" "$from" "$to"
    quick+=(--quick)
    if [[ "$2" == k* ]]; then quick+=(--kq); else quick+=(--no-kq); fi
fi
g++ -std=c++20 -O1 -ffp-contract=off -Wno-unknown-pragmas -I"$here/include" -I"$kern" -include "$here/include/cuda_fp16.h" \
    "$here/gemm16_emu.cpp" -o "$tmp/gemm16_emu" -pthread
"$tmp/gemm16_emu" "${quick[@]}"
