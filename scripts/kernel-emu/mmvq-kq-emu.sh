#!/usr/bin/env bash
# mmvq-kq-emu.sh: a CPU check of the Q4_K / Q5_K decode MMVQ kernels
# without a GPU: g++ compiles the mmvq unit (cuda/kernels/mmvq*.cu, in
# name order, as one translation unit) against an emulation of the CUDA
# built-ins (include/cuda_fp16.h) and compares minfer_mmvq[_res|_qkv|_ffn]
# _q4_k/_q5_k and their split forms bitwise with a scalar reference of the
# same arithmetic (mmvq_kq_emu.cpp). The device tests remain the bar on the
# H200.
#
#   scripts/kernel-emu/mmvq-kq-emu.sh            the kernels as they are
#   scripts/kernel-emu/mmvq-kq-emu.sh --plant X  a copy of mmvq.cu with a
#       planted Q5_K bug, which the check must catch (exit 1):
#       qh     the fifth bit dropped
#       qhbit  the fifth bit read from bit (sub & 1) instead of bit sub
#       qhoff  qh read 16 bytes off (at +32 + 16 h instead of +16 + 16 h)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kern="$here/../../cuda/kernels"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=plant.sh
source "$here/plant.sh"
if [[ "${1:-}" == "--plant" ]]; then
    case "${2:-}" in
    qh) from=' | (((hw[t] >> sub) & 0x01010101u) << 4)'; to='' ;;
    qhbit) from='(hw[t] >> sub)'; to='(hw[t] >> (sub & 1))' ;;
    qhoff) from='wb + 16 + 16 * h)'; to='wb + 32 + 16 * h)' ;;
    *) echo "usage: $0 [--plant qh|qhbit|qhoff]" >&2; exit 2 ;;
    esac
    plant_defect mmvq.cu "$2" "$from" "$to"
fi
g++ -std=c++20 -O1 -ffp-contract=off -Wall -Wno-unknown-pragmas -Wno-unused-function -I"$here/include" -I"$kern" \
    -include "$here/include/cuda_fp16.h" "$here/mmvq_kq_emu.cpp" -o "$tmp/mmvq_kq_emu" -pthread
"$tmp/mmvq_kq_emu"
