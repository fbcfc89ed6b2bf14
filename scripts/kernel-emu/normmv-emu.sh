#!/usr/bin/env bash
# normmv-emu.sh: a CPU check of the normed decode matvecs (MINFER_FUSE_NORM_MMVQ:
# minfer_mmvqn[r]_* in cuda/kernels/mmvq_znorm.cu) without a GPU: g++
# compiles the mmvq unit and norm.cu against the emulated CUDA built-ins
# and requires every normed launch's outputs (and its shared Q8_1 row)
# bitwise equal to minfer_rms_norm_q8_1 then the plain kernel
# (normmv_emu.cpp). The device tests remain the bar.
#
#   scripts/kernel-emu/normmv-emu.sh            every kernel at every k
#   scripts/kernel-emu/normmv-emu.sh --quick    k 896 / 1024 only
#   scripts/kernel-emu/normmv-emu.sh --deep     k 2048 only (the second depth)
#   scripts/kernel-emu/normmv-emu.sh --plant X  a planted defect in
#       mmvq_znorm.cu, which the check must catch (exit 1; --quick --few, depth
#       --deep --few: the Q8_0, Q4_0 and 0.5b pair forms, a few seconds each):
#       vthread  the second virtual thread (t + 128) of the norm block dropped
#       eps      eps left out of the scale
#       sync     the rows read the shared row before the barrier after it
#       blk      each warp's Q8_1 block written one block further on
#       depth    rows up to 2048 held at the 1024 depth (values dropped)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=plant.sh
source "$here/plant.sh"
emu_dirs
mode=()
usage="usage: $0 [--quick | --deep | --plant vthread|eps|sync|blk|depth]"
case "${1:-}" in
--quick | --deep) mode=("$1") ;;
--plant)
    case "${2:-}" in
    vthread) from='const bool in = v < nb && i < k;'; to='const bool in = v < MINFER_MMVQ_THREADS && v < nb && i < k;' ;;
    eps) from='(double)__fadd_rn(mean, eps)'; to='(double)mean' ;;
    sync) from='__syncthreads(); // the row, written by every warp'; to='// the row, written by every warp' ;;
    blk) from='minfer_mmvqn_row + (size_t)(i0 / 32) * MINFER_Q8_1_BYTES'; to='minfer_mmvqn_row + (size_t)(i0 / 32 + 1) % (k / 32) * MINFER_Q8_1_BYTES' ;;
    depth) from='if (k <= 4 * MINFER_MMVQN_OPS_THREADS) {'; to='if (k <= 8 * MINFER_MMVQN_OPS_THREADS) {' ;;
    *) echo "$usage" >&2; exit 2 ;;
    esac
    plant_defect mmvq_znorm.cu "$2" "$from" "$to"
    mode=(--quick --few)
    [[ "$2" == depth ]] && mode=(--deep --few)
    ;;
"") ;;
*) echo "$usage" >&2; exit 2 ;;
esac
# -O0: the run is fiber-bound, the compile of the mmvq unit twice as long at -O1.
g++ -std=c++20 -O0 -ffp-contract=off -Wall -Wno-unknown-pragmas -Wno-unused-function -Wno-unused-variable -I"$here/include" \
    -I"$kern" -include "$here/include/cuda_fp16.h" "$here/normmv_emu.cpp" -o "$tmp/normmv_emu" -pthread
"$tmp/normmv_emu" "${mode[@]}"
