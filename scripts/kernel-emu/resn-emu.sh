#!/usr/bin/env bash
# resn-emu.sh: a CPU check of minfer_mmvq[r]_resn_<t> (cuda/kernels/
# mmvq_resn.cu, MINFER_FUSE_RES_NORM_Q8) without a GPU: g++ compiles the
# mmvq unit and norm.cu against the emulated CUDA built-ins and compares the
# fused kernel with the _res_ kernel then minfer_rms_norm_q8_1, bitwise
# (resn_emu.cpp). The device test remains the bar on the GPU.
#
#   scripts/kernel-emu/resn-emu.sh             the kernels as they are
#   scripts/kernel-emu/resn-emu.sh --plant X   a planted defect, which must
#       be caught (exit 1):
#       first  the first block to finish norms the row (a stale row)
#       reset  the counter not reset (the next launch never norms)
#       eps    the norm's eps replaced by 1e-6
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=plant.sh
source "$here/plant.sh"
emu_dirs
if [[ "${1:-}" == "--plant" ]]; then
    case "${2:-}" in
    first) from='atomicAdd(counter, 1) == nblocks - 1;'; to='atomicAdd(counter, 1) == 0;' ;;
    reset) from='if (last) *counter = 0;'; to='' ;;
    eps) from='__fadd_rn(mean, eps)'; to='__fadd_rn(mean, 1e-6f)' ;;
    *) echo "usage: $0 [--plant first|reset|eps]" >&2; exit 2 ;;
    esac
    plant_defect mmvq_resn.cu "$2" "$from" "$to"
fi
emu_run resn_emu.cpp
