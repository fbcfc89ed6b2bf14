#!/usr/bin/env bash
# fatc-emu.sh: a CPU check of the tensor-core prefill attention
# (MINFER_FA_PREFILL_TC) without a GPU: g++ compiles
# cuda/kernels/attn_prefill2.cu against an emulation of the CUDA built-ins
# and of mma.sync m16n8k16 with the PTX ISA's fragment layouts
# (include/cuda_fp16.h, include/mma.h) and compares
# minfer_attn_prefill_tc_* and the FMA kernel minfer_attn_prefill2_hd64_bm16
# (the one variant of 128 threads) with attention in double (fatc_emu.cpp):
# fragments, tiling, masks, the online softmax, NaN rows. The device test
# (cuda/attn_prefill_tc_test.go) remains the bar on the H200.
#
#   scripts/kernel-emu/fatc-emu.sh             the kernels as they are
#   scripts/kernel-emu/fatc-emu.sh --plant X   a copy of attn_prefill2.cu with
#       a planted defect, which the check must catch (exit 1; f16 cases only):
#       pfrag  P's A fragment with its second and third words swapped
#       vfrag  V's B words from ldmatrix paired across the two column tiles
#       f16ld  the 16-byte f16 staging reads its columns from the wrong place
#       skip   a warp skips a tile its last row still sees
#       wait   the tile is read while its async copies may still be in flight
#       split  each split of the KV range drops its last tile
#       combine  the merge sums the splits' l without rescaling them to the common max
#       kfrag  K's B fragments from ldmatrix paired across the two 16-deep steps
#       full   a tile that crosses a row's last cell taken as seen whole (no mask)
#       lsum   the row sums of P count only its odd columns (ones in one half)
#       log2   the split partials keep m in log2 units (combine_tc reads e-units)
#       inld   an in-range tile's copies read the next 16-byte column
#   scripts/kernel-emu/fatc-emu.sh --decode [--plant X]   the decode kernels
#       (minfer_attn_decode_tc_*, MINFER_ATTN_DECODE_TC: the same body, one
#       warp a block) and their combine on nt 1..8; every plant above but
#       combine reaches them, and
#       thr    the block's thread count taken as twice what is launched
#       qpair  the decode form's Q pairs loaded from the neighbouring pair
#       dcw    the combine weighs every split 1 (no rescale to the common max)
#       dcq    the combine's Q8_1 blocks quantize neighbouring elements swapped
#       dcs    the combine's warps drop the first element of their last split in flight
#       dcu    the combine reads all nsplit splits, not the ones the range activated
#       dcp    the kernel's tiles a split ignore DEC_MIN_TILES (the combine's plan keeps it)
#   scripts/kernel-emu/fatc-emu.sh --decode-narrow [--plant X]   the narrow decode
#       form (minfer_attn_decode_tc32_* and minfer_attn_decode_tc32_combine,
#       MINFER_ATTN_DECODE_TC_NARROW: 32-cell tiles, up to 256 splits) on the
#       --decode cases at its 7B grid of 198 splits, plus 188 and 227 active
#       splits (f16); every --decode plant is caught there too (f16ld by an
#       abort, as under --decode), and
#       nbn    the narrow combine plans with 64-cell tiles (not the kernel's 32)
#       nmax   the narrow combine's lanes hold 128 splits (the 64-cell form's)
#       nstep  the kernel steps from tile to tile by 64 cells (fatc::BN), not its width
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kern="$here/../../cuda/kernels"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=plant.sh
source "$here/plant.sh"
quick=()
if [[ "${1:-}" == "--decode" || "${1:-}" == "--decode-narrow" ]]; then
    quick=("$1")
    shift
fi
if [[ "${1:-}" == "--plant" ]]; then
    case "${2:-}" in
    pfrag) from='h2u(s[2 * kk][2], s[2 * kk][3]),'; to='h2u(s[2 * kk + 1][0], s[2 * kk + 1][1]),' ;;
    vfrag) from='b0[2] = {b4[0], b4[1]}, b1[2] = {b4[2], b4[3]}'; to='b0[2] = {b4[0], b4[2]}, b1[2] = {b4[1], b4[3]}' ;;
    f16ld) from='const long long src = 2LL * (off + d);'; to='const long long src = 2LL * off + d;' ;;
    skip) from='sees = !(wlast < c0 ||'; to='sees = !(wlast < c0 + 8 ||' ;;
    wait) from='minfer_cp_async_wait<1>();'; to='minfer_cp_async_wait<2>();' ;;
    split) from='t1 = min(ntiles, t0 + per);'; to='t1 = min(ntiles, t0 + per - 1);' ;;
    combine) from='L = fmaf(rec[sp * stride + ld - 1], expf(ms - M), L);'; to='L += rec[sp * stride + ld - 1];' ;;
    kfrag) from='bk0[2] = {r[0], r[1]}, bk1[2] = {r[2], r[3]}'; to='bk0[2] = {r[0], r[2]}, bk1[2] = {r[1], r[3]}' ;;
    full) from='c0 + BNT - 1 <= whi;'; to='c0 <= whi;' ;;
    lsum) from='ONES = 0x3C003C00u;'; to='ONES = 0x3C000000u;' ;;
    log2) from='m[i] * 0.6931471805599453f'; to='m[i]' ;;
    inld) from='2LL * (off + 8 * (tid % CPR));'; to='2LL * (off + 8 * ((tid + 1) % CPR));' ;;
    thr) from='constexpr int THR = 2 * ROWS;'; to='constexpr int THR = 4 * ROWS;' ;;
    qpair) from='* hd + d);'; to='* hd + (d ^ 2));' ;;
    dcw) from='wt[j] = ms[j] == -INFINITY ? 0.0f : expf(ms[j] - M);'; to='wt[j] = ms[j] == -INFINITY ? 0.0f : 1.0f;' ;;
    dcq) from='value(32 * b + lane), lane);'; to='value(32 * b + (lane ^ 1)), lane);' ;;
    dcs) from='a[i].x = fmaf(ws[u], v[u][i].x, a[i].x)'; to='a[i].x = u == DC_U - 1 ? a[i].x : fmaf(ws[u], v[u][i].x, a[i].x)' ;;
    dcu) from='< used'; to='< nsplit' ;;
    dcp) from='per = ROWS == 16 ? dec_per : (ntiles + nsplit - 1) / nsplit;'; to='per = (ntiles + nsplit - 1) / nsplit;' ;;
    nbn) from='combine_dec<fatc::BN_NARROW, fatc::DC_MAXS_NARROW>'; to='combine_dec<fatc::BN, fatc::DC_MAXS_NARROW>' ;;
    nmax) from='combine_dec<fatc::BN_NARROW, fatc::DC_MAXS_NARROW>'; to='combine_dec<fatc::BN_NARROW, fatc::DC_MAXS>' ;;
    nstep) from='c0 <= c_last; c0 += BNT, it++'; to='c0 <= c_last; c0 += BN, it++' ;;
    *) echo "usage: $0 [--decode|--decode-narrow] [--plant pfrag|vfrag|f16ld|skip|wait|split|combine|kfrag|full|lsum|log2|inld|thr|qpair|dcw|dcq|dcs|dcu|dcp|nbn|nmax|nstep]" >&2; exit 2 ;;
    esac
    plant_defect attn_prefill2.cu "$2" "$from" "$to"
    quick+=(--quick)
fi
g++ -std=c++20 -O1 -ffp-contract=off -Wno-unknown-pragmas -I"$here/include" -I"$kern" -include "$here/include/cuda_fp16.h" \
    "$here/fatc_emu.cpp" -o "$tmp/fatc_emu" -pthread
"$tmp/fatc_emu" "${quick[@]}"
