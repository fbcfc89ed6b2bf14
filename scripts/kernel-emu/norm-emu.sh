#!/usr/bin/env bash
# norm-emu.sh: a CPU check of minfer_rms_norm_q8_1 (cuda/kernels/norm.cu,
# MINFER_FUSE_NORM_Q8) without a GPU: g++ compiles norm.cu and
# quantize_act.cu against the emulated CUDA built-ins (include/cuda_fp16.h)
# and compares the fused kernel's bytes with minfer_rms_norm_f32 then
# minfer_quantize_q8_1 (norm_emu.cpp). The device test remains the bar on
# the GPU.
#
#   scripts/kernel-emu/norm-emu.sh             the kernels as they are
#   scripts/kernel-emu/norm-emu.sh --plant X   a planted defect, which must
#       be caught (exit 1):
#       qblk   two warps' blocks taken as one (the odd warp's block never written)
#       qscale the row's scale left out of the quantized values
#       qw     the weight left out of the quantized values
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=plant.sh
source "$here/plant.sh"
emu_dirs
if [[ "${1:-}" == "--plant" ]]; then
    case "${2:-}" in
    qblk) from='const int i0 = m * nb + (tid & ~31);'; to='const int i0 = m * nb + (tid & ~63);' ;;
    qscale) from='const float y = __fmul_rn(xv[m], scale);'; to='const float y = xv[m];' ;;
    qw) from='w ? __fmul_rn(y, wv[m]) : y, lane);'; to='y, lane);' ;;
    *) echo "usage: $0 [--plant qblk|qscale|qw]" >&2; exit 2 ;;
    esac
    plant_defect norm.cu "$2" "$from" "$to"
fi
emu_run norm_emu.cpp
