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
#       qamax  max |x| over half the warp
#       qw     the weight left out of the quantized values
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kern="$here/../../cuda/kernels"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=plant.sh
source "$here/plant.sh"
if [[ "${1:-}" == "--plant" ]]; then
    case "${2:-}" in
    qblk) from='const int i0 = m * nb + (tid & ~31);'; to='const int i0 = m * nb + (tid & ~63);' ;;
    qamax) from='for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));'
        to='for (int off = 8; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));' ;;
    qw) from='v = w ? __fmul_rn(v, wv[m]) : v;'; to='v = v;' ;;
    *) echo "usage: $0 [--plant qblk|qamax|qw]" >&2; exit 2 ;;
    esac
    plant_defect norm.cu "$2" "$from" "$to"
fi
g++ -std=c++20 -O1 -ffp-contract=off -Wno-unknown-pragmas -I"$here/include" -I"$kern" -include "$here/include/cuda_fp16.h" \
    "$here/norm_emu.cpp" -o "$tmp/norm_emu" -pthread
"$tmp/norm_emu"
