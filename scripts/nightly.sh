#!/usr/bin/env bash
# nightly.sh: the nightly device gate run on the H200: `abtest nightly` runs
# every lever with arms (or $LEVERS), all five gates each (the device suite
# through a cache), and writes one summary page (verdict per lever, speed
# table, regressions of arm B against the previous nightly summary found in
# the output folder, the history of the nights). SHARDS=N runs it as N shards
# one after another and merges them, as a pool of N machines would.
#
# Build on the CPU machine and carry bin/ exactly as scripts/abtest-device.sh
# says in its header (bin/minfer, bin/abtest, bin/*.test, bin/lib/ for nsys).
#
#   OUT=... scripts/nightly.sh
#
# Settings (env):
#   NIGHTLY_OUT=reports/nightly   output folder; it must persist between nights (commit it,
#                                 or keep it on the machine) or no regression can be found
#   LEVERS=all                    or L1,L2 (NAME or NAME=B)
#   ROUNDS= PP=512 TG=128 REPS=3 WARMUP_MS=2000   (ROUNDS empty: each lever's rounds pre-registered by the
#                                 calibration under NIGHTLY_OUT, 9 without one; a number is a deviation)
#   SHARDS=1                      N > 1: abtest nightly --shard i/N for each i (balanced by the previous
#                                 night's lever times), then abtest merge into NIGHTLY_OUT
#   CONTROL=                      with SHARDS: a lever every shard runs besides its part (abtest nightly --control);
#                                 the merge says whether the shards' machines agree on it
#   SHAPE=qwen2-0.5b TYPE=Q8_0 SEED=1 (or MODEL=path.gguf)   the default workload's model
#   MODEL_DIR=/tmp/abtest-models  synthesized models, SHAPE-TYPE-seedSEED.gguf: the default one
#                                 and each lever's own (abtest nightly --synth-dir): a lever that
#                                 declares a workload (`minfer levers`: WORKLOAD, e.g.
#                                 MINFER_FUSE_QKNORM qwen3-0.6b:Q8_0, MINFER_MMVQ_NT pp5) runs on
#                                 that model and/or pp, synthesized once and reused every night
#   CORRECTNESS_MODEL=path.gguf   trained model for parity and greedy (default: bin/tiny-code-Q8_0.gguf
#                                 when a bundle put it there); a lever whose workload has another weight
#                                 type gets it quantized to that type, one of another architecture its own
#   THRESHOLD=2%                  smallest change against the previous night that counts
#   CALIBRATION=reports           where the calibrations are (reports/calibration/<GPU>/: the committed ones)
#   NIGHTLY_TIMEOUT=3600          seconds for the whole abtest nightly (SIGTERM: partial reports
#                                 are kept, each marked INCOMPLETE)
#
# On a machine without a device the CUDA levers are SKIP in the summary (with
# the reason), never PASS. Exit: 0 nothing failed, 1 a gate failed, the suite
# failed or arm B regressed, 2 could not run.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 2
out="${OUT:-$root/out}"
mkdir -p "$out"
nout="${NIGHTLY_OUT:-$root/reports/nightly}"
mkdir -p "$nout"
log="$out/nightly.log"
: >"$log"
SHAPE="${SHAPE:-qwen2-0.5b}" TYPE="${TYPE:-Q8_0}" SEED="${SEED:-1}"
MODEL_DIR="${MODEL_DIR:-/tmp/abtest-models}"
say() { echo "nightly: $*" | tee -a "$log" >&2; }

export PATH="$PATH:/usr/local/cuda/bin:/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64"
for b in bin/minfer bin/abtest; do
    [[ -x "$b" ]] || { say "no $b: build it on the CPU machine (scripts/abtest-device.sh header)"; exit 2; }
done

device=cpu
if nvidia-smi >/dev/null 2>&1; then
    device=cuda
    if ! timeout -k 10 "${KERNEL_TIMEOUT:-300}" scripts/build-kernels.sh bin/minfer-kernels.fatbin >"$out/build-kernels.log" 2>&1; then
        say "build-kernels.sh failed: $(tail -n 3 "$out/build-kernels.log" | tr '\n' ' ')"
        exit 2
    fi
fi

model="${MODEL:-}"
if [[ -z "$model" ]]; then
    mkdir -p "$MODEL_DIR"
    model="$MODEL_DIR/$SHAPE-$TYPE-seed$SEED.gguf"
    if [[ ! -s "$model" ]]; then
        timeout -k 5 "${SYNTH_TIMEOUT:-60}" bin/minfer synth --shape "$SHAPE" --type "$TYPE" --seed "$SEED" -o "$model.tmp" >>"$log" 2>&1 &&
            mv "$model.tmp" "$model" || { say "minfer synth failed"; rm -f "$model.tmp"; exit 2; }
    fi
fi

# The trained models for parity and greedy (one per architecture):
# CORRECTNESS_MODEL, else those a device bundle carries
# (scripts/device-bundle.sh TINY=Q8_0); none: the synthetic models, whose
# small top-2 margins make weak instruments (the report says so).
cm="${CORRECTNESS_MODEL:-}"
if [[ -z "$cm" ]]; then
    for f in bin/tiny-code-Q8_0.gguf bin/tiny-qwen3-code-Q8_0.gguf; do [[ -s $f ]] && cm="${cm:+$cm }$f"; done
fi
cmargs=()
for m in $cm; do cmargs+=(--correctness-model "$m"); done
say "abtest nightly on $device, model $model, correctness model ${cm:-none}, levers ${LEVERS:-all}, out $nout"
mkdir -p "$MODEL_DIR"
rounds=()
[[ -n "${ROUNDS:-}" ]] && rounds=(--rounds "$ROUNDS")
nargs=(--device "$device" --model "$model" "${cmargs[@]}" --synth-dir "$MODEL_DIR" --seed "$SEED" --levers "${LEVERS:-all}"
    --suite-bin 'bin/*.test' --calibration "${CALIBRATION:-$root/reports}" --threshold "${THRESHOLD:-2%}" "${rounds[@]}" --pp "${PP:-512}" --tg "${TG:-128}" --reps "${REPS:-3}"
    --warmup-ms "${WARMUP_MS:-2000}")
SHARDS="${SHARDS:-1}"
if [[ "$SHARDS" -le 1 ]]; then
    timeout -k 30 "${NIGHTLY_TIMEOUT:-3600}" bin/abtest nightly "${nargs[@]}" --out "$nout" >>"$log" 2>&1
    rc=$?
    say "abtest nightly: exit $rc"
else
    # The shards one after another (a pool runs them at once), balanced by
    # the previous nights of NIGHTLY_OUT, then the merge into it.
    shards="$(mktemp -d)"
    ctl=()
    [[ -n "${CONTROL:-}" ]] && ctl=(--control "$CONTROL")
    for ((i = 0; i < SHARDS; i++)); do
        timeout -k 30 "${NIGHTLY_TIMEOUT:-3600}" bin/abtest nightly "${nargs[@]}" --shard "$i/$SHARDS" --balance-from "$nout" "${ctl[@]}" \
            --out "$shards/shard-$i" >>"$log" 2>&1
        say "abtest nightly --shard $i/$SHARDS: exit $?"
    done
    bin/abtest merge --out "$nout" "$shards"/shard-* >>"$log" 2>&1
    rc=$?
    say "abtest merge: exit $rc"
    # The merge copied every lever's report into NIGHTLY_OUT; a merge that
    # could not run leaves the shards' results where they are.
    if [[ $rc -ne 2 ]]; then rm -rf "$shards"; else say "shard results kept in $shards"; fi
fi
summary=""
for f in "$nout"/nightly-*.md; do # name order is date order; a shard's partial page is not the night's
    [[ -f "$f" && "$f" != *-shard-* ]] && summary="$f"
done
if [[ -n "$summary" ]]; then
    cp "$summary" "$out/"
    head -n 1 "$summary" | tee -a "$log" >&2
fi
tar -C "$(dirname "$nout")" -czf "$out/nightly-reports.tar.gz" "$(basename "$nout")" 2>>"$log"
exit $rc
