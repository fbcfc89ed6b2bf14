#!/usr/bin/env bash
# perf.sh: issue 6's speed table on the H200 in one call. `abtest perf`
# synthesizes every row's model (cached), runs one `minfer bench -p 512 -n 128
# -r 5 --format json` per row after an untimed warmup, and writes
# $OUT/perf/<date>-<commit>.md and .json: ours, the llama.cpp reference,
# ratio, target met (or by how much missed), decode GB/s and its share of the
# 4.3 TB/s HBM floor, the GPU clocks before each row, the exact commands.
#
# Build here (the CPU machine; the GPU machine has no Go toolchain) and carry
# bin/ in the device tool's `carry`:
#
#   CGO_ENABLED=0 go build -buildvcs=true -o bin/ ./cmd/minfer ./cmd/abtest
#
# -buildvcs=true matters: the device copy of the tree has no .git, so the
# report's commit is read from the minfer binary's build stamp.
#
#   device run: OUT=... scripts/perf.sh                    (carry: bin)
#               ROWS=qwen2-0.5b:Q4_K_M,qwen2-0.5b:Q8_0 OUT=... scripts/perf.sh
#
# Size and time: the 0.5b/0.6b rows synthesize ~0.4-0.8 GB each in seconds.
# The 7B rows need the most: ~4.7 GB (Q4_K_M) and ~8.1 GB (Q8_0) of
# synthesized files on the device's /tmp ($MODEL_DIR; 64 GiB disk), each
# written once per machine, and each row may take several minutes at today's
# speed (synth plus the warmup and 5 repetitions of pp512 and tg128). One
# device command is limited to 10 minutes: when "all" does not fit, run the
# small rows and the 7B rows in separate calls with ROWS=. A row that does
# not finish is reported FAILED (timeout) with its stderr, never as zero.
#
# Long context: "all" ends with issue 6's long-context row
# qwen2-7b:Q4_K_M@d4096 (ROWS=qwen2-7b:Q4_K_M@d4096 runs it alone): one
# `minfer bench -p 512 -n 128 -d 4096 -r 5 --format json --ctx 4736`, its tg128 judged met when it
# is >= 0.85 x the same run's tg128 at depth 0 of qwen2-7b:Q4_K_M (the
# depth-0 row's number; run alone, the row benches depth 0 itself first). No
# llama.cpp number: the report's "Long context" section gives both tok/s and
# the ratio. Time: the 7B Q4_K_M file is already synthesized by its depth-0
# row; the 4096-token fill (~6k tok/s, < 1 s) runs once, untimed, and every
# repetition and warmup iteration starts from it (Engine.Truncate); 5 x tg128
# is ~3 s.
#
# Peer (issue 20): PEER=path/to/llama-bench measures llama.cpp's llama-bench
# on every row's same synthesized GGUF file in the same run (`abtest perf
# --peer llama-bench=$PEER`): per row one untimed -r 1 warm-up process of each
# engine, then PEER_ROUNDS rounds (default 2) of one `minfer bench` and one
# `llama-bench -m FILE -ngl 99 -p 512 -n 128 -r $REPS -o json [-d DEPTH]`,
# odd rounds minfer first, even rounds the peer first. The peer's medians are
# the ratio column (the stored issue-6 constants only without PEER, labelled
# "stored reference (issue 6)"), its peak device memory is sampled beside
# ours, and the report names its command and sha256. Building llama-bench on
# the H200: /work/shared/DEVICE.md, "The reference engine as a measured peer".
# Issue 20's depth rows, with the pp512 chunk-time slope over depth:
#   PEER=/tmp/llama.cpp/b/bin/llama-bench ROWS=qwen2-7b:Q4_K_M,qwen2-7b:Q4_K_M@d8192,qwen2-7b:Q4_K_M@d16384,qwen2-7b:Q4_K_M@d32128 REPS=2 OUT=... scripts/perf.sh
# (a depth row SHAPE:TYPE@dDEPTH runs pp and tg at that depth in one process,
# `minfer bench -p PP -n TG -d DEPTH --ctx DEPTH+PP+TG`).
#
# Base build (issue 20, "no slower than at 715715f"): BASE=path/to/minfer runs
# that other minfer binary (built from the old commit with -buildvcs=true, its
# kernels file beside it: minfer loads it from beside the binary) beside ours
# on every row (`abtest perf --base-minfer $BASE`): one untimed warm-up process
# of it too, then in each of the PEER_ROUNDS rounds one `minfer bench` with our
# arguments and environment (WITH and WARMUP_MS included), the engines' order
# rotating (minfer, base[, llama-bench] rotated left by round-1). Ours must be
# no slower: our median >= the base's / 1.015 on pp and tg (GATES.md gate 3's
# bar), else the row missed; a failed base bench fails the row. The report
# names the base's sha256 and commit (its build stamp). Issue 20's whole table:
#   BASE=/tmp/old/bin/minfer PEER=/tmp/llama.cpp/b/bin/llama-bench ROWS=issue20-table OUT=... scripts/perf.sh
# (13 rows with three engines each: split the 7B depth rows over calls with ROWS=
# when one call's 10 minutes do not hold them).
#
# Settings (env):
#   ROWS=all                  issue 6's table; issue20: issue 20's Must rows, judged at depth (7B rows up to
#                             depth 32128: run them with PEER= for the slope, alone in a call); or
#                             SHAPE:TYPE[@dDEPTH],... (issue 6's names; others run without reference)
#   DEVICE=cuda PP=512 TG=128 REPS=5 WARMUP_MS=2000 (MINFER_BENCH_WARMUP_MS of every bench)
#   PEER=path/to/llama-bench PEER_ROUNDS=2   (no PEER: the stored constants, labelled)
#   BASE=path/to/minfer       another minfer build measured beside ours (abtest perf --base-minfer;
#                             PEER_ROUNDS rounds per row); ROWS=issue20-table: issue 20's 13 table rows
#   WITH="MINFER_ONE_COPY=1 MINFER_EMBED_HOST=1"   lever settings every minfer process runs with
#                             (abtest perf --with; a MINFER_* variable exported around this script
#                             is refused by abtest, never silently dropped)
#   MODEL_DIR=/tmp/abtest-models    synth cache, shared with nightly.sh
#   ROW_TIMEOUT=15m           limit of each minfer process (synth, bench)
#   PERF_TIMEOUT=540          seconds for the whole abtest perf (SIGTERM: the rows done so far
#                             are written, the rest FAILED (interrupted); SIGKILL 30 s later)
#   KERNEL_TIMEOUT=300          (a .kcache miss compiled in 131 s on the H200, 2026-11-29)
#   KERNELS=nvrtc             no nvcc build: minfer compiles its embedded sources (NVRTC, cached); a
#                             kernels file beside the binary is refused rather than silently loaded
#
# Exit: 0 every judged row met both targets, 1 a target was missed or a row
# failed, 2 could not run (no binaries, no kernels, no device).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/out}"
mkdir -p "$out/perf"
log="$out/perf.log"
: >"$log"
say() { echo "perf: $*" | tee -a "$log" >&2; }

export PATH="$PATH:/usr/local/cuda/bin"
# A bundle from scripts/device-bundle.sh is unpacked in place first.
[[ -f bin/bundle.tgz ]] && tar -xzf bin/bundle.tgz -C bin
for b in bin/minfer bin/abtest; do
    [[ -x "$b" ]] || { say "no $b: build it on the CPU machine (header of this script)"; exit 2; }
done

DEVICE="${DEVICE:-cuda}"
if [[ "${KERNELS:-}" == nvrtc ]]; then
    [[ -e bin/minfer-kernels.fatbin ]] && { say "KERNELS=nvrtc, but bin/minfer-kernels.fatbin is there (minfer would load it): move it aside"; exit 2; }
elif [[ "$DEVICE" != cpu ]]; then
    if ! timeout -k 10 "${KERNEL_TIMEOUT:-300}" scripts/build-kernels.sh bin/minfer-kernels.fatbin >"$out/build-kernels.log" 2>&1; then
        say "build-kernels.sh failed: $(tail -n 3 "$out/build-kernels.log" | tr '\n' ' ')"
        exit 2
    fi
fi

MODEL_DIR="${MODEL_DIR:-/tmp/abtest-models}"
mkdir -p "$MODEL_DIR"
with=()
for w in ${WITH:-}; do with+=(--with "$w"); done
peer=()
if [[ -n "${PEER:-}" ]]; then
    [[ -x "$PEER" ]] || { say "PEER=$PEER is not an executable llama-bench"; exit 2; }
    peer=(--peer "llama-bench=$PEER" --peer-rounds "${PEER_ROUNDS:-2}")
fi
base=()
if [[ -n "${BASE:-}" ]]; then
    [[ -x "$BASE" ]] || { say "BASE=$BASE is not an executable minfer"; exit 2; }
    base=(--base-minfer "$BASE" --peer-rounds "${PEER_ROUNDS:-2}")
fi
say "abtest perf on $DEVICE, rows ${ROWS:-all}, peer ${PEER:-none}, base ${BASE:-none}, models in $MODEL_DIR ($(df -h --output=avail "$MODEL_DIR" 2>/dev/null | tail -n 1 | tr -d ' ') free)"
timeout -k 30 "${PERF_TIMEOUT:-540}" bin/abtest perf --device "$DEVICE" --rows "${ROWS:-all}" \
    --pp "${PP:-512}" --tg "${TG:-128}" --reps "${REPS:-5}" --bench-warmup-ms "${WARMUP_MS:-2000}" \
    --synth-dir "$MODEL_DIR" --row-timeout "${ROW_TIMEOUT:-15m}" --out "$out/perf" "${peer[@]}" "${base[@]}" "${with[@]}" 2>&1 | tee -a "$log" >&2
rc=${PIPESTATUS[0]}
say "abtest perf: exit $rc"
report="$(ls "$out"/perf/*.md 2>/dev/null | sort | tail -n 1)"
if [[ -n "$report" ]]; then
    head -n 1 "$report" | tee -a "$log" >&2
else
    say "no report written"
fi
exit "$rc"
