#!/usr/bin/env bash
# gemm16-emu.sh: a CPU check of the f16 prefill matmul of a repacked Q8_0
# weight and of Q4_K / Q6_K weights (cuda/kernels/gemm16.cu, MINFER_MMQ_F16,
# MINFER_MMQ_F16_KQ) without a GPU: g++
# compiles the kernel source against the emulated CUDA built-ins and
# mma.sync / ldmatrix / cp.async (include/cuda_fp16.h, include/mma.h) and
# compares it with double sums over the same f16 values (gemm16_emu.cpp).
# The device test remains the bar on the GPU.
#
#   scripts/kernel-emu/gemm16-emu.sh             eight Q8_0 shapes (both forms), three K-quant
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
#     and of the wgmma form (minfer_gemm16w_q8_0r, MINFER_MMQ_WGMMA):
#       wlbo   the descriptors' lbo and sbo swapped
#       wslice the second 16-deep slice starting 8 deep
#       wring  the copies of step kb + 2 into the buffers of step kb + 1
#       wwait  waiting for the MMA two steps back, not one (a weight
#              buffer dequantized over while its MMA is in flight)
#       wscale the scales loaded a step ahead used for this step
#     and of the step-ahead scales (minfer_gemm16a_*, MINFER_MMQ_F16_AHEAD):
#       anext  the next step's scales used for this step
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
    wlbo) from='LBO = 128, SBO = 512;'; to='LBO = 512, SBO = 128;' ;;
    wslice) from='wgmma_desc(xa + cm(0, 16), LBO, SBO)'; to='wgmma_desc(xa + cm(0, 8), LBO, SBO)' ;;
    wring) from='const int s = (i + 2) % 3;'; to='const int s = (i + 1) % 3;' ;;
    wwait) from='wgmma_wait<1>();           // this'; to='wgmma_wait<2>();           // this' ;;
    wscale) from='const __half dh = h == 0 ? c0 : c1;'; to='const __half dh = h == 0 ? d0 : d1;' ;;
    anext) from='if (kb + 1 < kb1) nx.load(kb + 1, false);'; to='if (kb + 1 < kb1) nx.load(kb + 1, false), dz = nx;' ;;
    k4nib) from='const int sh = 4 * (kb & 1);'; to='const int sh = 4 * ((kb >> 1) & 1);' ;;
    k4sc) from='const int sc = j < 4 ? A & 63'; to='const int sc = j < 3 ? A & 63' ;;
    k4hdr) from='if (first || j == 0) hd[h]'; to='if (first) hd[h]' ;;
    k6swz) from='&sm.wr[buf][r][16 * (q ^ swz(r))]'; to='&sm.wr[buf][r][16 * q]' ;;
    k6sc) from='sc[b * 16 + 8 * hh + 2 * qtr + e]'; to='sc[b * 16 + 8 * hh + 2 * qtr]' ;;
    k6hi) from='const int ls = qtr >= 2 ? 4 : 0'; to='const int ls = qtr >= 1 ? 4 : 0' ;;
    *) echo "usage: $0 [--plant afrag|bfrag|deq|buf|seg|split|dmap|wlbo|wslice|wring|wwait|wscale|anext|k4nib|k4sc|k4hdr|k6swz|k6sc|k6hi]" >&2; exit 2 ;;
    esac
    plant_defect gemm16.cu "$2" "$from" "$to"
    quick+=(--quick)
    if [[ "$2" == k* ]]; then quick+=(--kq); else quick+=(--no-kq); fi
fi
g++ -std=c++20 -O1 -ffp-contract=off -Wno-unknown-pragmas -I"$here/include" -I"$kern" -include "$here/include/cuda_fp16.h" \
    "$here/gemm16_emu.cpp" -o "$tmp/gemm16_emu" -pthread
"$tmp/gemm16_emu" "${quick[@]}"
