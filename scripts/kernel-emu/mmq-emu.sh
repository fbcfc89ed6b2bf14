#!/usr/bin/env bash
# mmq-emu.sh: a CPU check of the async prefill MMQ kernels
# (MINFER_MMQ_ASYNC) and the repacked ones without a GPU: g++ compiles
# cuda/kernels/mmq.cu against an emulation of the CUDA built-ins, of the int8
# mma.sync and of cp.async (include/cuda_fp16.h, include/mma.h) and requires
# minfer_mmq_<type>_async_r64 bitwise equal to minfer_mmq_<type>_r64 for every
# weight type (Q4_K / Q5_K: the async kernels' 4-byte loads against the plain
# kernels' 16-byte ones), Q8_0's, Q4_K's and Q5_K's plain output within f32
# rounding of a sum in double, and minfer_mmq_q6_kr[_r64] over the repacked
# copy bitwise equal to the GGUF kernel (mmq_emu.cpp).
# The device test (cuda/mmq_device_test.go) remains the bar on the H200.
#
#   scripts/kernel-emu/mmq-emu.sh             the kernels as they are
#   scripts/kernel-emu/mmq-emu.sh --plant X   a copy of mmq.cu with a planted
#       defect, which the check must catch (exit 1; Q8_0, Q4_K and Q5_K, one shape):
#       wait    a stage is unpacked before its copies are waited for
#       tail    each span's last 16-byte chunk is not copied
#       mod16   the staged address ignores the span's offset mod 16
#       next    the next stage is copied from the current stage's blocks
#       rsc     the repacked Q6_K unit reads its scales one byte off
#       wr      the 128-row tile maps its warps as the 64-row one does (rows 64..127 never computed)
#       kwh     the plain Q5_K unit's 16-byte loads read its high bits 16 bytes on (the async 4-byte form unchanged)
#       kmin    Q4_K / Q5_K lose the min term, plain and async alike (the double sum catches it; was kwmin)
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
    wait) from='minfer_cp_async_wait<0>(); // this thread'; to='// (planted: no wait)' ;;
    tail) from='if (src < g1) minfer_cp_async16'; to='if (src + 16 < g1) minfer_cp_async16' ;;
    mod16) from='return dst + (reinterpret_cast<uintptr_t>(g0) & 15) + (g - g0);'; to='return dst + (g - g0);' ;;
    next) from='n0, n, m0, nt, k0 + MINFER_MMQ_NB, kbEnd);'; to='n0, n, m0, nt, k0, kbEnd);' ;;
    rsc) from='u.sc = (int)minfer_mmq_u16(w + 192 * nb + 16 * i + 8 * hh + 2 * quarter);'; to='u.sc = (int)minfer_mmq_u16(w + 192 * nb + 16 * i + 8 * hh + quarter);' ;;
    wr) from='const int wr = warp % WR; // rows 32 wr ..'; to='const int wr = warp % 2; // rows 32 wr ..' ;;
    kwh) from='minfer_mmq_load8<W16>(b + 16, qh);'; to='minfer_mmq_load8<W16>(b + 16 + 16 * W16, qh);' ;;
    kmin) from='T == MINFER_T_Q4_K || T == MINFER_T_Q5_K;'; to='false;' ;;
    *) echo "usage: $0 [--plant wait|tail|mod16|next|rsc|wr|kwh|kmin]" >&2; exit 2 ;;
    esac
    plant_defect mmq.cu "$2" "$from" "$to"
    quick=(--quick)
fi
g++ -std=c++20 -O1 -ffp-contract=off -Wall -Wno-unknown-pragmas -Wno-unused-function -Wno-unused-variable -I"$here/include" -I"$kern" \
    -include "$here/include/cuda_fp16.h" -include "$here/include/mma.h" "$here/mmq_emu.cpp" -o "$tmp/mmq_emu" -pthread
"$tmp/mmq_emu" "${quick[@]}"
