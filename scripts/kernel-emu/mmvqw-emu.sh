#!/usr/bin/env bash
# mmvqw-emu.sh: a CPU check of the MINFER_MMVQ_WIDE kernels without a GPU:
# g++ compiles cuda/kernels/mmvq.cu against an emulation of the CUDA
# built-ins (include/cuda_fp16.h) and runs minfer_mmvqw_* beside
# minfer_mmvq_*, which must agree bitwise (mmvqw_emu.cpp). It checks the
# staging arithmetic, the summation order and the load bounds; the device
# tests (cuda/mmvq_wide_device_test.go) remain the bar on the H200.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kern="$here/../../cuda/kernels"
bin="$(mktemp -d)/mmvqw_emu"
g++ -std=c++20 -O1 -ffp-contract=off -Wno-unknown-pragmas -I"$here/include" -I"$kern" -include "$here/include/cuda_fp16.h" \
    "$here/mmvqw_emu.cpp" -o "$bin" -pthread
"$bin"
