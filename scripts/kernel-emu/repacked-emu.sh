#!/usr/bin/env bash
# repacked-emu.sh: a CPU check of the kernels that read the repacked Q8_0 /
# Q6_K copy (mmvq_repack.cu's layout) without a GPU: g++ compiles mmvq.cu,
# mmvq_nt.cu, mmvq_repack.cu and embed.cu against an emulation of the CUDA
# built-ins (include/cuda_fp16.h) and requires minfer_mmvq_nt_q8_0r /
# _q6_kr and minfer_get_rows_r bitwise equal to minfer_mmvq_nt_q8_0 / _q6_k
# and minfer_get_rows over the GGUF bytes, and minfer_repack_<t> equal to
# the host repack (repacked_emu.cpp). The device tests remain the bar.
#
#   scripts/kernel-emu/repacked-emu.sh             the kernels as they are
#   scripts/kernel-emu/repacked-emu.sh --plant X   a copy of the sources with
#       a planted defect, which the check must catch (exit 1; fewer shapes):
#       q8d    mmvq_nt Q8_0r reads the f16 d of the block before
#       q6qh   the repacked Q6_K unit (repacked.cuh) reads qh word 8 + 2 h + hh (halves swapped)
#       rowsc  get_rows_r Q6_K reads the scale of the wrong 16 values
#       rowsd  get_rows_r Q8_0 takes the d array at 32 (n_rows - 1) blocks
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
    q8d) file=mmvq_nt.cu from='r.d = minfer_h2f(__ldg(w.d + (u >> 1)));' to='r.d = minfer_h2f(__ldg(w.d + (u >> 1) - 1));' ;;
    q6qh) file=repacked.cuh from='x.qh = __ldg(b + 8 + 2 * hh + h);' to='x.qh = __ldg(b + 8 + 2 * h + hh);' ;;
    rowsc) file=embed.cu from='8 * h + l / 16 + 2 * quarter);' to='8 * h + 2 * quarter);' ;;
    rowsd) file=embed.cu from='minfer_dqr_d(w, 32 * nblocks, g);' to='minfer_dqr_d(w, 32 * (nblocks - 1), g);' ;;
    *) echo "usage: $0 [--plant q8d|q6qh|rowsc|rowsd]" >&2; exit 2 ;;
    esac
    plant_defect "$file" "$2" "$from" "$to"
    quick=(--quick)
fi
# -O0: the run is thread-bound (about as fast as at -O1), the compile half as long.
g++ -std=c++20 -O0 -ffp-contract=off -Wall -Wno-unknown-pragmas -Wno-unused-function -Wno-unused-variable -I"$here/include" -I"$kern" \
    -include "$here/include/cuda_fp16.h" "$here/repacked_emu.cpp" -o "$tmp/repacked_emu" -pthread
"$tmp/repacked_emu" "${quick[@]}"
