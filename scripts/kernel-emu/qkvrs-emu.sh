#!/usr/bin/env bash
# qkvrs-emu.sh: a CPU check of the decode q/k/v matvec with the rope/store
# folded in (MINFER_FUSE_QKV_ROPE: minfer_mmvq_qkvrs_<t>,
# minfer_mmvqr_qkvrs_<t>, minfer_mmvq_xqkvrs_<qk>_<v>[r] in
# cuda/kernels/mmvq_xqkv.cu) without a GPU: g++ compiles the mmvq unit and
# qkv_rope_store.cu against the emulated CUDA built-ins and requires the
# fused launch's q' and both KV regions bitwise equal to the two launches
# it replaces, the q/k/v matvec then minfer_qkv_rope_store (qkvrs_emu.cpp).
# qkv_rope_store.cu's dynamic shared row is pointed at a static array in a
# copy (g++ has no extern __shared__). The device tests remain the bar.
#
#   scripts/kernel-emu/qkvrs-emu.sh            every case (~1 min on 2 cores)
#   scripts/kernel-emu/qkvrs-emu.sh --quick    the small shapes only
#   scripts/kernel-emu/qkvrs-emu.sh --plant X  a planted defect in
#       mmvq_xqkv.cu, which the check must catch (exit 1; --quick):
#       pair    a pair rotated with the wrong partner (the other pair's dim)
#       angle   the second pair of a block given the first pair's angle
#       vstore  the v rows never stored
#       cell    a K cell past n_ctx stored (the range check's upper bound dropped)
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
    pair) from='mops::rope_rotate(xs[p], xs[p + 2], c, s, &y0, &y1);'; to='mops::rope_rotate(xs[p], xs[p ^ 1], c, s, &y0, &y1);' ;;
    angle) from='mops::rope_angle((double)t.pos[0], i, t.hd,'; to='mops::rope_angle((double)t.pos[0], 2 * j, t.hd,' ;;
    vstore) from='if (cell >= 0) mops::kv_put(t.format, mops::kv_row(t.vreg'; to='if (cell >= 0 && false) mops::kv_put(t.format, mops::kv_row(t.vreg' ;;
    cell) from='return cell < 0 || cell >= t.n_ctx ? -1 : cell;'; to='return cell < 0 ? -1 : cell;' ;;
    *) echo "usage: $0 [--quick | --plant pair|angle|vstore|cell]" >&2; exit 2 ;;
    esac
    plant_defect mmvq_xqkv.cu "$2" "$from" "$to"
    mode=(--quick)
    ;;
"") ;;
*) echo "usage: $0 [--quick | --plant pair|angle|vstore|cell]" >&2; exit 2 ;;
esac
mkdir -p "$tmp/emu"
sed 's/extern __shared__ float qrs_krow\[\];/float* qrs_krow = emu_qrs_smem;/' "$kern/qkv_rope_store.cu" >"$tmp/emu/qkv_rope_store.cu"
grep -q 'emu_qrs_smem' "$tmp/emu/qkv_rope_store.cu" || { echo "qkvrs-emu: the dynamic shared row was not replaced" >&2; exit 2; }
# -O0: the run is fiber-bound, the compile of the mmvq unit twice as long at -O1.
g++ -std=c++20 -O0 -ffp-contract=off -Wall -Wno-unknown-pragmas -Wno-unused-function -Wno-unused-variable -I"$here/include" \
    -I"$tmp/emu" -I"$kern" -include "$here/include/cuda_fp16.h" "$here/qkvrs_emu.cpp" -o "$tmp/qkvrs_emu" -pthread
"$tmp/qkvrs_emu" "${mode[@]}"
