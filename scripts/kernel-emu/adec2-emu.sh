#!/usr/bin/env bash
# adec2-emu.sh: a CPU check of the lean split-K decode attention
# (attn_decode2.cu) at the launcher's cap of 64 splits, without a GPU: g++
# compiles a copy of the kernel source with its inline L1 prefetch removed
# (a hint) against an emulation of the CUDA built-ins (include/cuda_fp16.h
# and adec2_emu.cpp's shims) and compares it with attention in double
# (adec2_emu.cpp). The device tests (cuda/attn_decode2_device_test.go)
# remain the bar on the H200.
#   --quick           one case of all 64 active splits (the full list takes
#                     several minutes: every lane emulated)
#   --plant combine   (implies --quick) the combine weighs partials 0..31
#                     with partials 32..63's weights (must exit 1)
#   --lean            every KV format and head_dim class against attention
#                     in double within 1e-4 (9 runs; --lean-full: all 144)
#   --plant lpass     (implies --lean) the second pass of an iteration reads
#                     the first pass's K / V registers
#   --plant ltail     (implies --lean) a last pass that is an iteration's
#                     second skips its end test
#   --plant lscale    (implies --lean) q scaled without log2(e)
#   --q8              the kernels with the Q8_1 output
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
[[ "${1:-}" == "--quick" || "${1:-}" == "--lean" || "${1:-}" == "--lean-full" || "${1:-}" == "--q8" ]] && quick=("$1")
if [[ "${1:-}" == "--plant" ]]; then
    quick=(--quick)
    [[ "${2:-}" == l* ]] && quick=(--lean)
    [[ "${2:-}" == q8* ]] && quick=(--q8)
    case "${2:-}" in
    combine) sed -i 's/wb = (s0 >> 5) == j ? w\[j\] : wb;/wb = (s0 >> 5) == j ? w[j ^ 1] : wb;/' "$tmp/attn_decode2.cu" ;;
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
