#!/usr/bin/env bash
# adec2-emu.sh: a CPU check of the lean split-K decode attention
# (attn_decode2.cu) at both caps of splits, 64 and 128
# (MINFER_ATTN_SPLITS), without a GPU: g++ compiles a copy of the kernel
# source with its inline L1 prefetch removed (a hint) against an emulation
# of the CUDA built-ins (include/cuda_fp16.h and adec2_emu.cpp's shims) and
# compares it with attention in double (adec2_emu.cpp). The device tests
# (cuda/attn_decode2_device_test.go) remain the bar on the H200.
#   --quick           one case past 64 active splits (the full list takes
#                     several minutes: every lane emulated)
#   --plant combine   (implies --quick) weighs the combine's partials past
#                     64 with the wrong group's weight (must exit 1)
#   --plant group     (implies --quick) a grouped block's warps compute the
#                     query heads of the next KV head's group (must exit 1)
#   --plant ggroup    the same defect under --grouped (must exit 1)
#   --grouped         the grouped kernels (MINFER_ATTN_DECODE_GQA) against the
#                     one-warp blocks, bitwise, over every KV format and
#                     head_dim class (4 runs, ~35 s; --grouped-full: all 144,
#                     ~15 min)
#   --lean            the lean kernels (MINFER_ATTN_DECODE_LEAN) against the
#                     one-warp blocks within 1e-4, every KV format and
#                     head_dim class (9 runs; --lean-full: all 144)
#   --plant lpass     (implies --lean) the second pass of an iteration reads
#                     the first pass's K / V registers
#   --plant ltail     (implies --lean) a last pass that is an iteration's
#                     second skips its end test
#   --plant lscale    (implies --lean) q scaled without log2(e)
#   --q8              the lean kernels with the Q8_1 output
#                     (MINFER_FUSE_ATTN_Q8) against the lean kernels then
#                     minfer_quantize_q8_1, bitwise (rows and bytes)
#   --plant q8one     (implies --q8) the single-split writer stores each
#                     lane's values at its neighbour's place
#   --plant q8comb    (implies --q8) the same in the combine's writer
#   --plant q8sum     (implies --q8) s from the lane's own sum of q, not
#                     the block's
#   --plant q8div     (implies --q8) only slot 0 reaches the writer's
#                     shuffles: the emulator must stop with exit 3 (a
#                     deadlock), not hang
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kern="$here/../../cuda/kernels"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
sed 's/asm volatile("prefetch.global.L1 \[%0\];" ::"l"(a));/(void)a;/' "$kern/attn_decode2.cu" >"$tmp/attn_decode2.cu"
grep -q 'prefetch.global' "$tmp/attn_decode2.cu" && { echo "adec2-emu: the prefetch asm was not stripped" >&2; exit 2; }
quick=()
[[ "${1:-}" == "--quick" || "${1:-}" == "--grouped" || "${1:-}" == "--grouped-full" || "${1:-}" == "--lean" || "${1:-}" == "--lean-full" || "${1:-}" == "--q8" ]] && quick=("$1")
if [[ "${1:-}" == "--plant" ]]; then
    quick=(--quick)
    [[ "${2:-}" == ggroup ]] && quick=(--grouped)
    [[ "${2:-}" == l* ]] && quick=(--lean)
    [[ "${2:-}" == q8* ]] && quick=(--q8)
    case "${2:-}" in
    combine) sed -i 's/wb = (s0 >> 5) == j ? w\[j\] : wb;/wb = (s0 >> 5) == j ? w[j \& 1] : wb;/' "$tmp/attn_decode2.cu" ;;
    group | ggroup) sed -i 's/bx = (blockIdx.x \/ n_head_kv) \* n_head + kvh \* G + /bx = (blockIdx.x \/ n_head_kv) * n_head + (kvh + 1) % n_head_kv * G + /' "$tmp/attn_decode2.cu" ;;
    lpass) sed -i 's/else step(pb + CPP, kn, vn, false);/else step(pb + CPP, kr, vr, false);/' "$tmp/attn_decode2.cu" ;;
    ltail) sed -i 's/if (pb + 2 \* CPP >= cnt) step(pb + CPP, kn, vn, true);/if (pb + 2 * CPP >= cnt) step(pb + CPP, kn, vn, false);/' "$tmp/attn_decode2.cu" ;;
    lscale) sed -i 's/const float sl2 = __fmul_rn(scale, 1.4426950408889634f);/const float sl2 = scale;/' "$tmp/attn_decode2.cu" ;;
    q8one) sed -i 's/q8_1_lanes<NE>(yq, v, lis, slot == 0);/q8_1_lanes<NE>(yq, v, lis ^ 1, slot == 0);/' "$tmp/attn_decode2.cu" ;;
    q8comb) sed -i 's/if constexpr (Q8) q8_1_lanes<CE>(yq, a, lane, true);/if constexpr (Q8) q8_1_lanes<CE>(yq, a, lane ^ 1, true);/' "$tmp/attn_decode2.cu" ;;
    q8div) sed -i 's/q8_1_lanes<NE>(yq, v, lis, slot == 0);/if (slot == 0) q8_1_lanes<NE>(yq, v, lis, true);/' "$tmp/attn_decode2.cu" ;;
    q8sum) sed -i 's/for (int off = 1; off < LPB; off <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);/(void)0;/' "$tmp/attn_decode2.cu" ;;
    *) echo "adec2-emu: unknown plant ${2:-}" >&2; exit 2 ;;
    esac
    cmp -s "$tmp/attn_decode2.cu" <(sed 's/asm volatile("prefetch.global.L1 \[%0\];" ::"l"(a));/(void)a;/' "$kern/attn_decode2.cu") && { echo "adec2-emu: the plant did not apply" >&2; exit 2; }
fi
g++ -std=c++20 -O1 -ffp-contract=off -Wno-unknown-pragmas -I"$here/include" -I"$tmp" -I"$kern" -include "$here/include/cuda_fp16.h" -include "$here/include/mma.h" \
    "$here/adec2_emu.cpp" -o "$tmp/adec2_emu" -pthread
"$tmp/adec2_emu" "${quick[@]}"
