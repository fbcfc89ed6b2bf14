#!/usr/bin/env bash
# device-ncu.sh: per-kernel ncu numbers of whole-model decode and prefill on
# the H200 (what bounds each row of issue 6's table): duration, DRAM bytes
# read/written, SM throughput, registers, achieved occupancy, grid and block,
# aggregated per kernel name by ncu (--print-summary per-kernel). Evidence for
# notes, not a speed claim (claims come from abtest).
#
#   MODELS="qwen2-7b:Q8_0 qwen2-7b:Q4_K_M" PHASES="decode prefill" scripts/device-ncu.sh
#
# decode: `minfer bench -p 0 -n 8 -r 1`, skipping DECODE_SKIP launches (the
# warmup steps) and profiling the next DECODE_COUNT (about one step of a
# 28-layer model); prefill: `-p 512 -n 0 -r 1`, the first PREFILL_COUNT
# launches after PREFILL_SKIP. Output: $OUT/ncu-<shape>-<type>-<phase>.csv and
# a short table in $OUT/ncu.log. Kernels come from bin/minfer-kernels.fatbin
# (built here when missing).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/out}"
mkdir -p "$out"
log="$out/ncu.log"
say() { echo "ncu: $*" | tee -a "$log" >&2; }
export PATH="$PATH:/usr/local/cuda/bin"
[[ -f bin/bundle.tgz && ! -x bin/minfer ]] && tar -xzf bin/bundle.tgz -C bin
if [[ ! -f bin/minfer-kernels.fatbin ]]; then
    timeout 150 scripts/build-kernels.sh bin/minfer-kernels.fatbin >"$out/build-kernels.log" 2>&1 || { say "build-kernels failed"; exit 2; }
fi
export MINFER_KERNELS="$root/bin/minfer-kernels.fatbin"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size
md="${MODEL_DIR:-/tmp/abtest-models}"
mkdir -p "$md"
for m in ${MODELS:-qwen2-7b:Q8_0}; do
    shape="${m%%:*}" typ="${m##*:}" f="$md/$shape-$typ-seed1.gguf"
    [[ -f "$f" ]] || timeout 300 bin/minfer synth --shape "$shape" --type "$typ" --seed 1 -o "$f" >/dev/null 2>&1 || { say "synth $m failed"; continue; }
    for phase in ${PHASES:-decode prefill}; do
        if [[ $phase == decode ]]; then
            pn=(-p 0 -n 8) skip="${DECODE_SKIP:-1500}" count="${DECODE_COUNT:-400}"
        else
            pn=(-p 512 -n 0) skip="${PREFILL_SKIP:-0}" count="${PREFILL_COUNT:-400}"
        fi
        csv="$out/ncu-$shape-$typ-$phase.csv"
        start=$(date +%s)
        LC_ALL=C MINFER_BENCH_WARMUP_MS=0 timeout "${NCU_TIMEOUT:-240}" ncu --clock-control none --csv --print-summary per-kernel \
            --metrics "$metrics" --launch-skip "$skip" --launch-count "$count" \
            bin/minfer bench --model "$f" --device cuda "${pn[@]}" -r 1 -o json >"$csv" 2>"$out/ncu-$shape-$typ-$phase.err"
        rc=$?
        say "$m $phase: ncu exit $rc in $(($(date +%s) - start)) s, $(grep -c '^"' "$csv") csv lines -> $(basename "$csv")"
    done
done
