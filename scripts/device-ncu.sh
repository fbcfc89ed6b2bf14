#!/usr/bin/env bash
# device-ncu.sh: per-kernel ncu evidence of whole-model decode and prefill on
# the H200, for issue 6's "what bounds each missed row": per profiled launch
# the duration, DRAM bytes read/written, SM throughput, issue-slot and
# tensor-pipe utilisation, DRAM throughput, registers, achieved occupancy,
# shared-memory bank conflicts, dynamic shared memory, grid and block.
# Evidence for notes, not a speed claim (claims come from abtest).
#
#   device run (carry: bin):  OUT=... scripts/device-ncu.sh
#   MODELS="qwen2-0.5b:Q8_0 qwen2-0.5b:Q4_K_M" PHASES=decode OUT=... scripts/device-ncu.sh
#
# Build here first (the device has no Go): CGO_ENABLED=0 go build -o bin/
# ./cmd/minfer ./cmd/abtest (or scripts/device-bundle.sh, unpacked here).
#
# Output ($OUT; the device tool returns at most 8 files): ncu.log (per phase:
# ncu exit status, wall time, launches profiled; the metric check),
# ncu.md (`bin/abtest ncu`: one table per window, kernels by total time,
# with the bound rule) and ncu-raw.tar.gz (ncu-SHAPE-TYPE-PHASE.csv: the plain
# per-launch `ncu --csv` output, ncu's own log; .err: minfer's stderr;
# query-metrics.txt; build-kernels.log). Re-summarize with
# `abtest ncu --out x.md ncu-*.csv` after unpacking.
#
# How ncu runs (LC_ALL=C, --csv, per launch, as gates/profile.go does; no
# --print-summary, which abtest ncu cannot read):
# - Clocks: ncu's default --clock-control base locks the GPU to its base
#   clocks: reproducible from run to run, but compute-heavy kernels run
#   slower than at the 1980 MHz boost the benchmarks see (the durations are
#   not bench timings; DRAM-bound kernels move little). CLOCK_CONTROL=none
#   leaves the clocks to the driver, as the profile gate does.
# - Caches: ncu's default --cache-control all flushes them before each
#   profiled launch, so DRAM bytes are cold-cache bytes (an activation that
#   lives in L2 in the real run is counted as DRAM traffic here).
# - CUDA graphs: ncu's default graph profiling is per node, so the kernels of
#   a replayed graph are profiled, and counted by --launch-skip, like direct
#   launches.
# - Metrics: `ncu --query-metrics` runs once first; a metric whose base name
#   (before the first '.') it does not list is dropped and logged, since one
#   unknown name aborts the whole profile. launch__* names are launch
#   attributes, which --query-metrics does not list: they are checked against
#   ncu's section files when those are found (all five used here are in its
#   LaunchStats section), else kept.
#
# Launch windows (--launch-skip / --launch-count over all kernel launches).
# Counted from a launch census of qwen2-0.5b Q8_0 (MINFER_MMVQ_REPACK report,
# 2026-11-29): one decode token launches ~13 kernels per layer (2 rms_norm,
# 4 quantize_q8_1, the qkv, o, gate+up and down mmvq, qkv_rope_store,
# attention, 2 add) plus ~4 (get_rows, final norm and its quantize, lm_head),
# so 13 L + 4: 316 for 24 layers, ~368-424 for the 28-layer 7B and qwen3
# (mixed Q4_K_M types may not fuse qkv). One pp512 prefill launches ~19 per
# layer (7 mmq matmuls, a split-K reduce, flash attention, swiglu, 2 norms,
# 4 quantizes, rope-store, 2 adds): ~460 (24 layers) to ~600 (28 layers).
# Before any forward, MINFER_MMVQ_REPACK (default on) launches one repack per
# Q8_0/Q6_K matrix at load: up to 7 L + 1 = 197 for 28 layers.
# - decode (`minfer bench -p 0 -n 8 -r 1`, MINFER_BENCH_WARMUP_MS=0): bench
#   still runs 3 warmup iterations (minWarmupIterations in
#   cmd/minfer/bench.go), each a 1-token prefill and one decode step, then
#   the timed 1 + 8: 15 decode-shaped forwards sharing one graph. The CUDA
#   graph runs direct twice, is captured on the 3rd forward (captureWarmup 2,
#   cuda/capture.go) and replayed from the 4th: steady state starts at most
#   197 + 3 x 424 ~ 1470 launches in; the run holds >= 169 + 15 x 316 ~ 4900.
#   DECODE_SKIP=2500 lands in forward ~6-8 (a replay) of every default model
#   and DECODE_COUNT=120 (~9 layers) ends well before the run does. A window
#   of 120 seldom crosses a forward boundary: lm_head, get_rows and the final
#   norm are then absent (NCU_KERNEL=regex:... profiles one kernel instead).
# - prefill (`-p 512 -n 0 -r 1`): 3 warmup + 1 timed pp512 = 4 forwards.
#   PREFILL_SKIP=800 PREFILL_COUNT=200 (~10 layers) lie inside the 2nd
#   forward (starting after <= 197 repacks + one forward of 460-600) for the
#   shapes above; a longer forward (more layers) puts the window in the
#   1st, still past the repacks. abtest ncu notes a window that holds a
#   load-time (repack) kernel.
#
# Time: the whole script fits one 10-minute device call (BUDGET=560 s by
# default; a phase or synth that would not fit in what is left is skipped
# and logged, never run half). Synth: 7B Q4_K_M ~93 s, 7B Q8_0 ~15 s, the
# 0.5b/0.6b a few s (cached in MODEL_DIR, shared with abtest perf/run: on a
# warm machine the next call reuses them). Each ncu phase is bounded by
# NCU_TIMEOUT and its wall time logged.
#
# Settings (env):
#   MODELS="qwen2-7b:Q8_0 qwen3-0.6b:Q8_0 qwen2-7b:Q4_K_M"  SHAPE:TYPE, in order
#   PHASES="decode prefill"
#   DECODE_SKIP=2500 DECODE_COUNT=120 PREFILL_SKIP=800 PREFILL_COUNT=200
#   NCU_KERNEL=                 optional ncu -k filter (e.g. regex:mmvq); the skip then counts its launches only
#   CLOCK_CONTROL=base          or none
#   NCU_TIMEOUT=120 SYNTH_TIMEOUT=150 KERNEL_TIMEOUT=300 BUDGET=560 (seconds)
#   EXTRA_METRICS="m1 m2"       more ncu metrics (checked against --query-metrics like the others)
#   KEEP_KERNELS=1              reuse bin/minfer-kernels.fatbin instead of rebuilding it
#   MODEL_DIR=/tmp/abtest-models  WORK=/tmp/device-ncu  FLOOR_GBS=4300
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
t0=$(date +%s)
out="${OUT:-$root/out}"
work="${WORK:-/tmp/device-ncu}"
mkdir -p "$out" "$work"
rm -f "$work"/ncu-*.csv "$work"/ncu-*.err "$work"/ncu-*.json "$out/ncu.md"
log="$out/ncu.log"
: >"$log"
say() { echo "ncu: $*" | tee -a "$log" >&2; }
elapsed() { echo $(($(date +%s) - t0)); }

MODELS="${MODELS:-qwen2-7b:Q8_0 qwen3-0.6b:Q8_0 qwen2-7b:Q4_K_M}"
PHASES="${PHASES:-decode prefill}"
BUDGET="${BUDGET:-560}" NCU_TIMEOUT="${NCU_TIMEOUT:-120}" SYNTH_TIMEOUT="${SYNTH_TIMEOUT:-150}"
CLOCK_CONTROL="${CLOCK_CONTROL:-base}"
md="${MODEL_DIR:-/tmp/abtest-models}"
mkdir -p "$md"

pack() {
    cp -f "$out/build-kernels.log" "$work/" 2>/dev/null
    (cd "$work" && tar -czf "$out/ncu-raw.tar.gz" --ignore-failed-read ncu-*.csv ncu-*.err query-metrics.txt build-kernels.log 2>/dev/null)
    rm -f "$out/build-kernels.log"
    say "done in $(elapsed) s: $(ls "$out" | tr '\n' ' ')"
}
trap pack EXIT

export PATH="$PATH:/usr/local/cuda/bin"
ncu="$(command -v ncu)" || { say "ncu not found (PATH, /usr/local/cuda/bin)"; exit 2; }
say "$ncu: $("$ncu" --version 2>&1 | tail -n 1); clock control $CLOCK_CONTROL; budget $BUDGET s"
[[ -f bin/bundle.tgz ]] && tar -xzf bin/bundle.tgz -C bin
[[ -x bin/minfer ]] || { say "no bin/minfer: build it on the CPU machine (header of this script)"; exit 2; }
# Always rebuilt (as perf.sh does): a warm machine keeps an earlier call's
# fatbin, which may predate the kernels carried now. KEEP_KERNELS=1 reuses it.
if [[ "${KEEP_KERNELS:-0}" != 1 || ! -f bin/minfer-kernels.fatbin ]]; then
    s=$(date +%s)
    timeout -k 10 "${KERNEL_TIMEOUT:-300}" scripts/build-kernels.sh bin/minfer-kernels.fatbin >"$out/build-kernels.log" 2>&1 \
        || { say "build-kernels failed: $(tail -n 3 "$out/build-kernels.log" | tr '\n' ' ')"; exit 2; }
    say "kernels built in $(($(date +%s) - s)) s"
fi
export MINFER_KERNELS="$root/bin/minfer-kernels.fatbin"

# Metrics: the gate's (proven on this H200) first, then the issue-6 additions.
proven=(gpu__time_duration.sum dram__bytes_read.sum dram__bytes_write.sum
    sm__throughput.avg.pct_of_peak_sustained_elapsed launch__registers_per_thread
    sm__warps_active.avg.pct_of_peak_sustained_active)
wanted=("${proven[@]}" launch__grid_size launch__block_size
    sm__inst_issued.avg.pct_of_peak_sustained_active
    sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
    gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed
    l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
    launch__shared_mem_per_block_dynamic)
# EXTRA_METRICS (space-separated) joins the list, checked like the rest: an
# unknown name is dropped and logged (e.g. the warp-stall reasons,
# smsp__warp_issue_stalled_<reason>_per_warp_active.pct, for a latency-bound kernel).
read -ra extra <<<"${EXTRA_METRICS:-}"
wanted+=("${extra[@]}")
qm="$work/query-metrics.txt"
timeout -k 5 60 "$ncu" --query-metrics >"$qm" 2>&1
known="$(awk '$1 ~ /^[a-z0-9]+__[a-z0-9_]+$/ {print $1}' "$qm" | sort -u)"
ncudir="$(dirname "$(readlink -f "$ncu")")"
launch_known="$(find /usr/local/cuda/ /opt/nvidia/ "$ncudir/.." -maxdepth 5 -name '*.section' 2>/dev/null | head -n 500 \
    | xargs -r grep -hoE 'launch__[a-z0-9_]+' 2>/dev/null | sort -u)"
keep=() dropped=()
if [[ -z "$known" ]]; then
    say "ncu --query-metrics listed nothing (see query-metrics.txt): using only the profile gate's metrics, proven here: ${proven[*]}"
    keep=("${proven[@]}")
else
    for m in "${wanted[@]}"; do
        base="${m%%.*}"
        if [[ $base == launch__* ]]; then
            if [[ -z "$launch_known" ]] || grep -qx "$base" <<<"$launch_known"; then keep+=("$m"); else dropped+=("$m"); fi
        elif grep -qx "$base" <<<"$known"; then
            keep+=("$m")
        else
            dropped+=("$m")
        fi
    done
    [[ -z "$launch_known" ]] && say "no ncu section files found: launch__ metrics kept unchecked"
fi
((${#dropped[@]})) && say "dropped (ncu does not list them): ${dropped[*]}"
metrics="$(IFS=,; echo "${keep[*]}")"
say "metrics: $metrics"
filter=()
[[ -n "${NCU_KERNEL:-}" ]] && filter=(-k "$NCU_KERNEL") && say "kernel filter: $NCU_KERNEL (skip/count count its launches only)"

csvs=()
for m in $MODELS; do
    shape="${m%%:*}" typ="${m##*:}" f="$md/$shape-$typ-seed1.gguf"
    if [[ ! -f "$f" ]]; then
        left=$((BUDGET - $(elapsed) - 60))
        if ((left < 30)); then say "$m: skipped, $(elapsed) s of $BUDGET used: no time to synthesize"; continue; fi
        s=$(date +%s)
        if ! timeout -k 5 "$((left < SYNTH_TIMEOUT ? left : SYNTH_TIMEOUT))" bin/minfer synth --shape "$shape" --type "$typ" --seed 1 -o "$f.tmp" >"$work/synth.log" 2>&1; then
            say "$m: synth failed or timed out after $(($(date +%s) - s)) s: $(tail -n 2 "$work/synth.log" | tr '\n' ' ')"
            rm -f "$f.tmp"
            continue
        fi
        mv "$f.tmp" "$f"
        say "$m: synthesized in $(($(date +%s) - s)) s"
    fi
    for phase in $PHASES; do
        if [[ $phase == decode ]]; then
            pn=(-p 0 -n 8) skip="${DECODE_SKIP:-2500}" count="${DECODE_COUNT:-120}"
        else
            pn=(-p 512 -n 0) skip="${PREFILL_SKIP:-800}" count="${PREFILL_COUNT:-200}"
        fi
        left=$((BUDGET - $(elapsed) - 20))
        if ((left < 45)); then say "$m $phase: skipped, $(elapsed) s of $BUDGET used"; continue; fi
        lim=$((left < NCU_TIMEOUT ? left : NCU_TIMEOUT))
        base="ncu-$shape-$typ-$phase"
        csv="$work/$base.csv"
        s=$(date +%s)
        # --log-file: ncu's CSV apart from minfer's JSON on stdout.
        LC_ALL=C MINFER_BENCH_WARMUP_MS=0 timeout -k 10 "$lim" "$ncu" --csv --print-units base \
            --clock-control "$CLOCK_CONTROL" --metrics "$metrics" "${filter[@]}" \
            --launch-skip "$skip" --launch-count "$count" --log-file "$csv" \
            bin/minfer bench --model "$f" --device cuda "${pn[@]}" -r 1 --format json >"$work/$base.json" 2>"$work/$base.err"
        rc=$?
        if ! grep -q '"Metric Name"' "$csv" 2>/dev/null && grep -q '"Metric Name"' "$work/$base.json" 2>/dev/null; then
            cat "$work/$base.json" >>"$csv" # this ncu printed its results to stdout despite --log-file
            say "$m $phase: ncu's CSV came on stdout: appended to $base.csv (abtest ncu skips what precedes the header)"
        fi
        n=$(grep -c '"gpu__time_duration.sum"' "$csv" 2>/dev/null)
        say "$m $phase: ncu exit $rc in $(($(date +%s) - s)) s (limit $lim), skip $skip count $count: ${n:-0} launches profiled -> $base.csv"
        ((rc == 124 || rc == 137)) && say "$m $phase: TIMED OUT: raise NCU_TIMEOUT or lower the count"
        ((rc != 0)) && say "$m $phase: minfer stderr: $(tail -n 3 "$work/$base.err" | tr '\n' ' ')"
        [[ -s "$csv" ]] && csvs+=("$csv")
    done
done

if [[ -x bin/abtest ]] && ((${#csvs[@]})); then
    bin/abtest ncu --floor-gbs "${FLOOR_GBS:-4300}" --out "$out/ncu.md" "${csvs[@]}" 2>&1 | tee -a "$log" >&2
    say "abtest ncu exit ${PIPESTATUS[0]} -> ncu.md"
elif ((${#csvs[@]})); then
    say "no bin/abtest: summarize later with abtest ncu on ncu-raw.tar.gz's CSVs"
else
    say "no CSV written"
    exit 1
fi
