#!/usr/bin/env bash
# embed-emu.sh: a CPU check of minfer_get_rows[_host|_r]_q8_1 (cuda/kernels/
# embed.cu, MINFER_FUSE_RES_NORM_Q8: the decode embedding gather that also
# writes layer 0's attn norm as its Q8_1 row) without a GPU: g++ compiles
# embed.cu and norm.cu against the emulated CUDA built-ins and compares the
# fused gather with its plain twin then minfer_rms_norm_q8_1, bitwise
# (embed_emu.cpp). The device test remains the bar on the GPU.
#
#   scripts/kernel-emu/embed-emu.sh             the kernels as they are
#   scripts/kernel-emu/embed-emu.sh --plant X   a planted defect, which must
#       be caught (exit 1; Q8_0 and Q6_K only, rows of 896 to 3584):
#       depth the 4-register depth taken for every row (values past 4 B of
#             a 3584-value row never loaded: rms_scale's loop has no twin)
#       eps   the norm's eps replaced by 1e-6
#       row   the f32 row not written (only its Q8_1 row)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=plant.sh
source "$here/plant.sh"
emu_dirs
quick=()
if [[ "${1:-}" == "--plant" ]]; then
    case "${2:-}" in
    depth) from='if (per <= 4) {'; to='if (per <= 16) {' ;;
    eps) from='__fadd_rn(mean, eps)'; to='__fadd_rn(mean, 1e-6f)' ;;
    row) from='if (i < k) y[i] = xv[m];'; to='' ;;
    *) echo "usage: $0 [--plant depth|eps|row]" >&2; exit 2 ;;
    esac
    plant_defect embed.cu "$2" "$from" "$to"
    quick=(--quick)
fi
emu_run embed_emu.cpp "${quick[@]}"
