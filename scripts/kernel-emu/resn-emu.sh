#!/usr/bin/env bash
# resn-emu.sh: a CPU check of minfer_mmvq[r]_resn_<t> (cuda/kernels/
# mmvq_resn.cu, MINFER_FUSE_RES_NORM_Q8) without a GPU: g++ compiles the
# mmvq unit and norm.cu against the emulated CUDA built-ins and compares the
# fused kernel with the _res_ kernel then minfer_rms_norm_q8_1, bitwise
# (resn_emu.cpp). The device test remains the bar on the GPU.
#
#   scripts/kernel-emu/resn-emu.sh             the kernels as they are
#   scripts/kernel-emu/resn-emu.sh --chain     the resn kernel after the fused
#       FFN (MINFER_FUSE_FFN_Q8 with RES_NORM_Q8): its Q8_1 input the FFN's
#       row, apart from the scratch its tail writes; two layers against the
#       four launches the pair replaces
#   scripts/kernel-emu/resn-emu.sh --plant X   a planted defect, which must
#       be caught (exit 1):
#       first  the first block to finish norms the row (a stale row)
#       reset  the counter not reset (the next launch never norms)
#       eps    the norm's eps replaced by 1e-6
#     and in the --chain run:
#       input  the down projection reads the scratch, not the FFN's Q8_1 row
#       alias  its tail writes into the FFN's Q8_1 row it reads, not the
#              scratch the next layer reads
#       early  alias, and the first block to finish writes it: into the
#              input while the other blocks have yet to read it
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=plant.sh
source "$here/plant.sh"
emu_dirs
args=()
[[ "${1:-}" == "--chain" ]] && args=(--chain)
if [[ "${1:-}" == "--plant" ]]; then
    case "${2:-}" in
    first|early) from='atomicAdd(counter, 1) == nblocks - 1;'; to='atomicAdd(counter, 1) == 0;' ;;
    reset) from='if (last) *counter = 0;'; to='' ;;
    eps) from='__fadd_rn(mean, eps)'; to='__fadd_rn(mean, 1e-6f)' ;;
    input) args=(--chain --wire=input) ;;
    alias) args=(--chain --wire=alias) ;;
    *) echo "usage: $0 [--chain] [--plant first|reset|eps|input|alias|early]" >&2; exit 2 ;;
    esac
    [[ "$2" == early ]] && args=(--chain --wire=alias)
    # the wiring plants change the emulator's launches, not the kernels
    [[ "$2" == input || "$2" == alias ]] || plant_defect mmvq_resn.cu "$2" "$from" "$to"
fi
emu_run resn_emu.cpp "${args[@]}"
