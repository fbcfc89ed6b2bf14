#!/usr/bin/env bash
# fatc-emu.sh: a CPU check of the tensor-core prefill attention
# (MINFER_FA_PREFILL_TC) without a GPU: g++ compiles
# cuda/kernels/attn_prefill2.cu against an emulation of the CUDA built-ins
# and of WMMA (include/cuda_fp16.h, include/mma.h) and compares
# minfer_attn_prefill_tc_* and the FMA kernel minfer_attn_prefill2_hd64_bm16
# (the one variant of 128 threads) with attention in double (fatc_emu.cpp):
# tiling, masks, the online softmax, NaN rows. The device test
# (cuda/attn_prefill_tc_test.go) remains the bar on the H200.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kern="$here/../../cuda/kernels"
bin="$(mktemp -d)/fatc_emu"
g++ -std=c++20 -O1 -ffp-contract=off -Wno-unknown-pragmas -I"$here/include" -I"$kern" -include "$here/include/cuda_fp16.h" \
    "$here/fatc_emu.cpp" -o "$bin" -pthread
"$bin"
