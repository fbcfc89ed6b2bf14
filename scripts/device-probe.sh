#!/usr/bin/env bash
# device-probe.sh: one development batch on the H200 (a kernel change's first
# look, not a speed claim: claims come from abtest): build the kernels, run
# the device tests (RUN= filter), then per model bench the default build and
# the levers in PROBE_LEVERS (one process each, pp/tg as below), and an nsys
# per-kernel summary of the default build's decode. Everything lands in $OUT
# as probe.log + probe.tar.gz.
#
#   MODELS="qwen2-0.5b:Q8_0 qwen2-0.5b:Q4_K_M" PROBE_LEVERS="MINFER_NO_PDL=1" scripts/device-probe.sh
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/out}"
work="${WORK:-/tmp/probe}"
mkdir -p "$out" "$work"
log="$out/probe.log"
: >"$log"
say() { echo "probe: $*" | tee -a "$log" >&2; }
pack() {
    tar -C "$work" --exclude='*.nsys-rep' --exclude='*.sqlite' --exclude='*.qdstrm' -czf "$out/probe.tar.gz" . 2>/dev/null
    [[ -f "$work/suite.log" ]] && cp "$work/suite.log" "$out/suite.log"
}
trap pack EXIT
export PATH="$PATH:/usr/local/cuda/bin"
nsys=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
importer=/opt/nvidia/nsight-compute/2025.3.1/host/linux-desktop-glibc_2_11_3-x64/QdstrmImporter

# A bundle from scripts/device-bundle.sh is unpacked in place first.
[[ -f bin/bundle.tgz ]] && tar -xzf bin/bundle.tgz -C bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee -a "$log"
if ! timeout 120 scripts/build-kernels.sh bin/minfer-kernels.fatbin >"$work/build-kernels.log" 2>&1; then
    say "build-kernels failed:"; tail -n 30 "$work/build-kernels.log" | tee -a "$log"; exit 2
fi
export MINFER_KERNELS="$root/bin/minfer-kernels.fatbin"
say "git: $(git rev-parse --short HEAD 2>/dev/null) dirty=$(git status --porcelain 2>/dev/null | wc -l)"

if [[ "${SUITE:-1}" == 1 && -x bin/cuda.test ]]; then
    args=(-test.count=1 -test.timeout "${SUITE_TIMEOUT:-300s}")
    [[ -n "${RUN:-}" ]] && args+=(-test.run "$RUN") || true
    (cd cuda && timeout 330 ../bin/cuda.test -test.v "${args[@]}") >"$work/suite.log" 2>&1
    say "suite exit $?: $(grep -c '^--- PASS' "$work/suite.log") pass, $(grep -c '^--- FAIL' "$work/suite.log") fail, $(grep -c '^--- SKIP' "$work/suite.log") skip"
    grep -E '^\s*--- FAIL' "$work/suite.log" | tee -a "$log"
    grep -E '^(panic|fatal)' -A20 "$work/suite.log" | head -n 40 | tee -a "$log"
fi

md=/tmp/abtest-models
mkdir -p "$md"
PP="${PP:-512}" TG="${TG:-128}" REPS="${REPS:-3}"
for m in ${MODELS:-qwen2-0.5b:Q8_0 qwen2-0.5b:Q4_K_M}; do
    shape="${m%%:*}" typ="${m##*:}" f="$md/$shape-$typ-seed1.gguf"
    [[ -f "$f" ]] || timeout 120 bin/minfer synth --shape "$shape" --type "$typ" --seed 1 -o "$f" >/dev/null 2>&1 || { say "synth $m failed"; continue; }
    for lv in default ${PROBE_LEVERS:-}; do
        envs=(); [[ "$lv" != default ]] && envs=("$lv")
        r="$(env "${envs[@]}" MINFER_BENCH_WARMUP_MS=1500 MINFER_LAUNCH_CENSUS=1 timeout 120 bin/minfer bench --model "$f" --device cuda -p "$PP" -n "$TG" -r "$REPS" 2>"$work/bench-$shape-$typ-$lv.err")"
        say "$m [$lv]: $(echo "$r" | tr '\n' ' ' | tr -s ' ')"
        grep -E '^\{"launch_census|^\{"cuda_graphs' "$work/bench-$shape-$typ-$lv.err" | cut -c1-1500 >>"$log"
        grep -iE 'error|panic' "$work/bench-$shape-$typ-$lv.err" | head -5 | tee -a "$log"
    done
    if [[ "${NSYS:-1}" == 1 ]]; then
        for phase in decode prefill; do
            rep="$work/nsys-$shape-$typ-$phase"
            pn=(-p 0 -n 64); [[ $phase == prefill ]] && pn=(-p "$PP" -n 0)
            MINFER_BENCH_WARMUP_MS=0 timeout 120 "$nsys" profile --trace=cuda --cuda-graph-trace=node -o "$rep" --force-overwrite true \
                bin/minfer bench --model "$f" --device cuda "${pn[@]}" -r 1 >/dev/null 2>&1
            LD_LIBRARY_PATH="$root/bin/lib" timeout 120 "$importer" -i "$rep.qdstrm" >/dev/null 2>&1
            timeout 120 "$nsys" stats --report cuda_gpu_kern_sum --format csv "$rep.nsys-rep" 2>/dev/null >"$rep.csv"
            say "nsys $phase kernels $m (Time%,Total ns,Instances,Avg,Med,Name):"
            grep -E '^[0-9"]' "$rep.csv" | head -n 25 | cut -d, -f1-5,9 | tee -a "$log"
        done
    fi
done
say "done"
