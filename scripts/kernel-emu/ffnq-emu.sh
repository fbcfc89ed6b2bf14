#!/usr/bin/env bash
# ffnq-emu.sh: a CPU check of the fused FFN kernels that also write the
# down projection's Q8_1 row (minfer_mmvq_ffnq_<t>, minfer_mmvqr_ffnq_<t>:
# MINFER_FUSE_FFN_Q8) without a GPU: g++ compiles mmvq.cu, mmvq_repack.cu
# and quantize_act.cu against the emulated CUDA built-ins
# (include/cuda_fp16.h) and requires the fused launch's f32 row, Q8_1 bytes
# and counters bitwise equal to minfer_mmvq[r]_ffn_<t> then
# minfer_quantize_q8_1, with the blocks and warps of the fused launch run
# interleaved in seeded random orders (ffnq_emu.cpp). The device test
# remains the bar on the GPU (a missing fence cannot show here).
#
#   scripts/kernel-emu/ffnq-emu.sh             the kernels as they are
#   scripts/kernel-emu/ffnq-emu.sh --plant X   a planted defect, which must
#       be caught (exit 1; the run stops at the first difference):
#       last   the block before a group's last one quantizes it (and the
#              counter is reset one arrival early)
#       reset  the counter is never reset: the next launch finds it at 8
#       sync   no barrier before the count: a block counted while its
#              other warps may still be computing their rows
#       grp    a group's counter and Q8_1 block taken as 64 rows, not 32
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=plant.sh
source "$here/plant.sh"
emu_dirs
quick=()
if [[ "${1:-}" == "--plant" ]]; then
    case "${2:-}" in
    last) from='== MINFER_MMVQ_GROUP_BLOCKS - 1;'; to='== MINFER_MMVQ_GROUP_BLOCKS - 2;' ;;
    reset) from='if (done) counters[g] = 0;'; to=';' ;;
    sync) from='__syncthreads();'; to=';' ;;
    grp) from='const int g = blockIdx.x / MINFER_MMVQ_GROUP_BLOCKS;'; to='const int g = blockIdx.x / (2 * MINFER_MMVQ_GROUP_BLOCKS);' ;;
    *) echo "usage: $0 [--plant last|reset|sync|grp]" >&2; exit 2 ;;
    esac
    plant_defect mmvq.cu "$2" "$from" "$to"
    quick=(--quick)
fi
g++ -std=c++20 -O1 -ffp-contract=off -Wall -Wno-unknown-pragmas -Wno-unused-function -Wno-unused-variable -I"$here/include" -I"$kern" \
    -include "$here/include/cuda_fp16.h" "$here/ffnq_emu.cpp" -o "$tmp/ffnq_emu" -pthread
"$tmp/ffnq_emu" "${quick[@]}"
