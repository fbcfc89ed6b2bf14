#!/usr/bin/env bash
# xqkv-emu.sh: a CPU check of the mixed-type decode q/k/v kernels
# (cuda/kernels/mmvq_xqkv.cu, MINFER_MMVQ_QKV_MIXED) without a GPU: g++
# compiles mmvq.cu, mmvq_repack.cu and mmvq_xqkv.cu against the emulated
# CUDA built-ins (include/cuda_fp16.h) and requires every output of
# minfer_mmvq_xqkv_<qk>_<v>[r] bitwise equal to the three separate launches
# it replaces (xqkv_emu.cpp): the real pairs at qwen2-0.5b's and qwen2-7b's
# shapes, every pair of the table at a small shape. The device tests
# remain the bar.
#
#   scripts/kernel-emu/xqkv-emu.sh             the kernels as they are (~25 s on 2 cores)
#   scripts/kernel-emu/xqkv-emu.sh --quick     the 0.5b pair and the small shapes only
#   scripts/kernel-emu/xqkv-emu.sh --plant X   a planted defect in mmvq_xqkv.cu,
#       which the check must catch (exit 1; the --quick shapes):
#       vtype  v's rows read with the q/k type's row function
#       kbias  k's rows given q's bias
#       vn     v's rows located with k's row count (the repacked layout's
#              scales follow all of v's quants: only v rows != k rows shows it)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=plant.sh
source "$here/plant.sh"
emu_dirs
mode=()
case "${1:-}" in
--quick) mode=(--quick) ;;
--plant)
    case "${2:-}" in
    vtype) from='acc = V::row(wv, nv, k, r, act);'; to='acc = QK::row(wv, nv, k, r, act);' ;;
    kbias) from='bias = isq ? bq : bk;'; to='bias = bq;' ;;
    vn) from='acc = V::row(wv, nv, k, r, act);'; to='acc = V::row(wv, nk, k, r, act);' ;;
    *) echo "usage: $0 [--quick | --plant vtype|kbias|vn]" >&2; exit 2 ;;
    esac
    plant_defect mmvq_xqkv.cu "$2" "$from" "$to"
    mode=(--quick)
    ;;
"") ;;
*) echo "usage: $0 [--quick | --plant vtype|kbias|vn]" >&2; exit 2 ;;
esac
# -O0: the run is fiber-bound, the compile of the mmvq unit twice as long at -O1.
g++ -std=c++20 -O0 -ffp-contract=off -Wall -Wno-unknown-pragmas -Wno-unused-function -Wno-unused-variable -I"$here/include" -I"$kern" \
    -include "$here/include/cuda_fp16.h" "$here/xqkv_emu.cpp" -o "$tmp/xqkv_emu" -pthread
"$tmp/xqkv_emu" "${mode[@]}"
