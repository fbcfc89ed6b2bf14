#!/usr/bin/env bash
# abtest-device.sh: the one-call H200 recipe for abtest's device gates.
#
# The GPU machine has no Go toolchain and no network: everything it runs is
# built here (the CPU machine) and carried in bin/ (git-ignored; name it in
# the device tool's `carry`):
#
#   CGO_ENABLED=0 go build -buildvcs=true -o bin/ ./cmd/minfer ./cmd/abtest
#   go version -m bin/minfer | grep vcs.revision   # the commit the report names
#
# -buildvcs=true matters: this machine sets GOFLAGS=-buildvcs=false, and the
# device copy of the tree has no .git, so the report's commit is read from
# the minfer binary's build stamp (vcs.revision, vcs.modified).
#   CGO_ENABLED=0 go test -c -o bin/cuda.test ./cuda
#   CGO_ENABLED=0 go test -c -o bin/driver.test ./cuda/driver
#   # nsys's QdstrmImporter needs libdw.so.1 and libelf.so.1, which the H200
#   # lacks (DEVICE.md): take them from Debian's packages, once:
#   mkdir -p /tmp/debs bin/lib && cd /tmp/debs && apt-get download libdw1 libelf1 \
#     && for d in *.deb; do dpkg -x "$d" x; done \
#     && cp -L x/usr/lib/x86_64-linux-gnu/libdw.so.1 x/usr/lib/x86_64-linux-gnu/libelf.so.1 "$OLDPWD/bin/lib/"
#
# abtest puts bin/lib on LD_LIBRARY_PATH of the importer only (never of
# minfer); without bin/lib the report says why nsys produced nothing and uses
# the engine's MINFER_OP_TIMING instead.
#
# There (the device tool runs this from the repository root, with $OUT):
#   1. scripts/build-kernels.sh -> bin/minfer-kernels.fatbin (beside minfer,
#      where minfer and the test binaries look for it); KERNELS=nvrtc skips
#      it (79 s on the H100): every process then loads the NVRTC build of the
#      embedded sources, and the SASS census disassembles that build's cubins;
#   2. bin/minfer synth writes the model (qwen2-0.5b Q8_0 by default) to
#      $MODEL_DIR, outside $OUT (it is ~500 MB);
#   3. abtest calibrate for each workload in CALIBRATE (A/A noise; the lever
#      runs pre-register their rounds from it: reports/calibration/...);
#   4. abtest run --lever ... for each lever, all five gates each: the suite
#      through a cache (WORK/suite-cache), so levers whose arm B has the same
#      settings share one suite run; each run bounded by `timeout` (abtest
#      then writes an INCOMPLETE report); CALIBRATE_AFTER workloads after;
#   4. packs everything under $OUT: abtest-device.log, build-kernels.log, one
#      .md per lever and reports.tar.gz (reports with JSON and PNG plots) -
#      the device tool returns at most 8 files.
#
# Settings (env), defaults chosen so the whole script fits in ~8 minutes:
#   ROUNDS=                         A/B rounds: empty lets the calibration pre-register them (9 without one);
#                                   a number given beside a calibration is a deviation in the report
#   CALIBRATE="qwen2-0.5b:Q8_0"     workloads to calibrate before the levers (abtest calibrate --workload; "all",
#                                   "default" or specs separated by ';'); CALIBRATE_AFTER: the same, after them
#   CAL_ROUNDS=11                   A/A rounds per calibration
#   PP=512 TG=128 REPS=3            bench shapes
#   WARMUP_MS=2000                  untimed warmup before round 1
#   SHAPE=qwen2-0.5b TYPE=Q8_0 SEED=1   the synthesized model (or MODEL=path.gguf)
#   LEVERS="MINFER_NO_CUDA_GRAPH MINFER_NO_PREFILL_GEMM"   each NAME[=VALUE][@ppN][@SHAPE:TYPE][@own][@mutate=SITE[=F]][@baseline=A][@with=MINFER_X=V]
#                                   (a bare NAME[=VALUE] runs on the lever's declared workload, `minfer
#                                   levers`: WORKLOAD, through abtest run --workload; the @ options below
#                                   set it by hand instead)
#                                   (@ppN: that lever's prefill size, e.g. MINFER_MMVQ_NT=1@pp5;
#                                   @dN: gates 3 and 5 at KV depth N (abtest --depth), e.g.
#                                   MINFER_FA_PREFILL_TC@qwen2-7b:Q4_K_M@d32128; calibrate such a workload with
#                                   CALIBRATE="qwen2-7b:Q4_K_M d32128" (the workload grammar's dN term);
#                                   @SHAPE:TYPE: that lever's synthesized model, e.g.
#                                   MINFER_NO_KQ_MMVQ@qwen2-0.5b:Q4_K_M (a kill switch is named
#                                   bare: its arm A is already =1), MINFER_FUSE_QKNORM@qwen3-0.6b:Q8_0;
#                                   @own: parity and greedy on that model, not CORRECTNESS_MODEL -
#                                   for a path the correctness model does not have, such as qwen3's q/k norm;
#                                   @mutate=slow_decode=0.03: a mutation run, --mutate in arm B)
#                                   (MINFER_DRAFT: VALUE is the draft, a file or SHAPE:TYPE synthesized
#                                   into MODEL_DIR; @SHAPE:TYPE or MODEL is the target, e.g.
#                                   LEVERS="MINFER_DRAFT=qwen2-0.5b:Q8_0@qwen2-7b:Q4_K_M", or
#                                   MODEL=tiny-code-f16.gguf LEVERS="MINFER_DRAFT=/abs/tiny-code-q4_0.gguf")
#                                   (MINFER_KERNELS, issue 25: nvcc's file against the NVRTC build, both of this
#                                   commit's sources; @baseline=FILE sets arm A (abtest --baseline):
#                                   LEVERS="MINFER_KERNELS=nvrtc@baseline=$PWD/bin/minfer-kernels.fatbin" makes arm A
#                                   the file step 1 builds and arm B the NVRTC build, so gate 3 asks whether NVRTC's
#                                   is slower (the claim issue 25 needs); LEVERS="MINFER_KERNELS=$PWD/bin/minfer-kernels.fatbin"
#                                   is the registry's orientation (A nvrtc, B the file). A path is split only at '@'
#                                   and its first '=' belongs to NAME=, so '/' and later '=' pass; a path with '@' does
#                                   not. KERNELS_SPLIT=1 builds the split file instead. Each arm's MINFER_KERNELS
#                                   reaches the device suite; --kernels below names only the SASS census's file.
#                                   The whole H200 call: OUT=... GATES=parity,greedy,ab,suite,profile
#                                   LEVERS="MINFER_KERNELS=nvrtc@baseline=$PWD/bin/minfer-kernels.fatbin" scripts/abtest-device.sh)
#                                   @with=MINFER_X=V sets X=V in both arms (abtest --with; repeatable): the A/B of
#                                   an opt-in path's two builds, e.g. ...@baseline=FILE@with=MINFER_MMVQ_SPLIT=1
#   LEVER_TIMEOUT=200               seconds per lever run (SIGTERM, then SIGKILL 15 s later)
#   BIG_TIMEOUT=900 BIG_CAL_TIMEOUT=480   the same for a lever spec or calibration on a 7B model (qwen2-7b): on
#                                   2026-12-02 a 7B calibration was cut at 180 s after 3 of 11 rounds, the
#                                   MINFER_DRAFT 7B pair at 351 s before its suite and profile gates, and
#                                   again at 600 s in its profile gate (its other four gates took 516 s)
#   DEEP_TIMEOUT=1800               the same for a lever spec with @dN (every bench process fills its KV first);
#                                   a bare spec takes both from the workload the registry declares for it
#   SUITE_EXTRA=300                 extra seconds for a lever run whose gates include the device suite (450
#                                   tests took 190-250 s on the H100 on 2026-12-07, and the 350 s this made
#                                   with 150 cut MINFER_FUSE_NORM_Q8's profile gate)
#   CORRECTNESS_MODEL="a.gguf b.gguf" trained models for the parity and greedy gates, one per architecture
#                                   (each an abtest --correctness-model): abtest run takes the one of the run
#                                   model's architecture and quantizes it to its weight type (once, into the
#                                   synth dir), so parity and greedy run the lever's kernels; with none of that
#                                   architecture they run on the run's model and the report says so
#   KERNELS=nvrtc                   no nvcc build: the arms, the suite and the SASS census use the NVRTC build (step 1)
#   KERNEL_TIMEOUT=300 SYNTH_TIMEOUT=60        (a .kcache miss compiled in 131 s on 2026-11-29; a hit takes ms)
#   BIG_SYNTH_TIMEOUT=300           the synth limit for a 7B shape (qwen2-7b Q4_K_M took 113 s on 2026-12-02)
#   GATES=...                       abtest --gates (default all five: anything less is PARTIAL, never a PASS)
#   PR="slow_decode=0.03;perturb_logit"   abtest pr pages of this build against itself with each planted in the
#                                   head (MINFER_TEST_MUTATE): each must report a regression (exit 1);
#                                   PR_WORKLOADS=qwen2-0.5b:Q8_0, PR_TIMEOUT=300
#   BISECT="GOOD BAD WORKLOAD"      abtest bisect over BISECT_PACK=bin/bisect.tgz (scripts/bisect-builds.sh): BAD's
#                                   kernel sources compiled once here, linked into every build; BISECT_TIMEOUT=480
#
#   device run: OUT=... scripts/abtest-device.sh      (carry: bin)
#
# One run per $OUT: the device tool returns at most 8 files, and this script
# leaves 3 + one .md per lever there. Two runs into subfolders of one $OUT
# (10 files) lost reports.tar.gz, the JSON and plots, on 2026-11-29; run a
# second set of levers with its own OUT and WORK and pack both into one tar.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 2
out="${OUT:-$root/out}"
mkdir -p "$out"
work="${WORK:-/tmp/abtest-device}"
reports="$work/reports"
mkdir -p "$reports"
log="$out/abtest-device.log"
: >"$log"

ROUNDS="${ROUNDS:-}" PP="${PP:-512}" TG="${TG:-128}" REPS="${REPS:-3}" WARMUP_MS="${WARMUP_MS:-2000}"
SHAPE="${SHAPE:-qwen2-0.5b}" TYPE="${TYPE:-Q8_0}" SEED="${SEED:-1}"
LEVERS="${LEVERS-MINFER_NO_CUDA_GRAPH MINFER_NO_PREFILL_GEMM}"
LEVER_TIMEOUT="${LEVER_TIMEOUT:-200}" SUITE_EXTRA="${SUITE_EXTRA:-300}" BIG_TIMEOUT="${BIG_TIMEOUT:-900}" BIG_CAL_TIMEOUT="${BIG_CAL_TIMEOUT:-480}" DEEP_TIMEOUT="${DEEP_TIMEOUT:-1800}"
# CORRECTNESS_MODEL: a trained GGUF for the parity and greedy gates (abtest --correctness-model);
# the real-shape synthetic model keeps the A/B, suite and profile gates.
CORRECTNESS_MODEL="${CORRECTNESS_MODEL:-}" KERNEL_TIMEOUT="${KERNEL_TIMEOUT:-300}" SYNTH_TIMEOUT="${SYNTH_TIMEOUT:-60}" BIG_SYNTH_TIMEOUT="${BIG_SYNTH_TIMEOUT:-300}"
CALIBRATE="${CALIBRATE-qwen2-0.5b:Q8_0}" CALIBRATE_AFTER="${CALIBRATE_AFTER:-}" CAL_ROUNDS="${CAL_ROUNDS:-11}" CAL_TIMEOUT="${CAL_TIMEOUT:-180}"
GATES="${GATES:-parity,greedy,ab,suite,profile}"
MODEL_DIR="${MODEL_DIR:-/tmp/abtest-models}"

say() { echo "abtest-device: $*" | tee -a "$log" >&2; }

pack() {
    # Everything under $OUT, in few files: the tool returns at most 8.
    for md in "$reports"/*/*.md; do
        [[ -f "$md" ]] || continue
        lever="$(basename "$(dirname "$md")")"
        cp "$md" "$out/$lever.md"
    done
    if compgen -G "$reports/*" >/dev/null; then
        tar -C "$work" -czf "$out/reports.tar.gz" reports
    fi
    say "done: $(ls "$out" | tr '\n' ' ')"
}
trap pack EXIT

# The CUDA tools and the nsys of DEVICE.md.
export PATH="$PATH:/usr/local/cuda/bin:/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64"

# A bundle from scripts/device-bundle.sh (stripped binaries, maybe a trained
# model for --correctness-model) is unpacked in place.
if [[ -f bin/bundle.tgz ]]; then
    tar -xzf bin/bundle.tgz -C bin && say "unpacked bin/bundle.tgz: $(tar -tzf bin/bundle.tgz | grep -v '/$' | tr '\n' ' ')"
fi

for b in bin/minfer bin/abtest; do
    if [[ ! -x "$b" ]]; then
        say "no $b: build it on the CPU machine (see this script's header) and carry bin/"
        exit 2
    fi
done
say "start $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname); ROUNDS=$ROUNDS PP=$PP TG=$TG REPS=$REPS WARMUP_MS=$WARMUP_MS model $SHAPE $TYPE seed $SEED"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$log"
for t in ncu nsys cuobjdump nvcc; do say "$t: $(command -v "$t" || echo 'not found')"; done
if [[ -f bin/lib/libdw.so.1 && -f bin/lib/libelf.so.1 ]]; then
    say "nsys importer libraries: bin/lib (libdw.so.1, libelf.so.1)"
else
    say "nsys importer libraries: bin/lib/libdw.so.1 or libelf.so.1 missing: nsys will likely fall back to MINFER_OP_TIMING"
fi

# 1. Kernels: nvcc's file beside minfer, or with KERNELS=nvrtc none (every
# process loads the NVRTC build from the user cache; the SASS census reads its cubins).
kernels_arg=(--kernels bin/minfer-kernels.fatbin)
if [[ "${KERNELS:-}" == nvrtc ]]; then
    if [[ -e bin/minfer-kernels.fatbin || -n "${MINFER_KERNELS:-}" ]]; then
        say "KERNELS=nvrtc, but bin/minfer-kernels.fatbin exists or MINFER_KERNELS is set: every arm would load that file; move it away or unset it"
        exit 2
    fi
    kernels_arg=()
    say "kernels: the NVRTC build of the embedded sources (KERNELS=nvrtc: no nvcc build)"
elif ! timeout -k 10 "$KERNEL_TIMEOUT" scripts/build-kernels.sh bin/minfer-kernels.fatbin >"$out/build-kernels.log" 2>&1; then
    say "build-kernels.sh failed (see build-kernels.log): $(tail -n 3 "$out/build-kernels.log" | tr '\n' ' ')"
    exit 2
else
    say "kernels: $(grep -m1 'wrote' "$out/build-kernels.log" | sed 's/build-kernels: //')"
fi

# 2. Models: SHAPE/TYPE (or MODEL) for every lever without its own.
# declared_workload NAME: the workload the registry declares for lever NAME
# (`minfer levers`' WORKLOAD column, e.g. "qwen2-7b:Q8_0 d32128"), or nothing;
# a registry it cannot read is said in the log (the limit then is the
# default model's) rather than taken for "none declared".
declared_workload() {
    local table
    if ! table="$(bin/minfer levers 2>&1)" || [[ "$table" != LEVER* ]]; then
        say "minfer levers failed, so $1's declared workload is unknown and its limit is the default model's: $(head -n 1 <<<"$table")"
        return 0
    fi
    awk -v l="$1" 'NR == 1 { s = index($0, "WORKLOAD"); e = index($0, "WHAT IT SWITCHES") }
        NR > 1 && $1 == l && s > 0 && e > s { w = substr($0, s, e - s); gsub(/ +$/, "", w); if (w != "-") print w }' <<<"$table"
}
synth_model() { # shape type -> the model's path on stdout (synthesized once per machine)
    local f="$MODEL_DIR/$1-$2-seed$SEED.gguf" start limit="$SYNTH_TIMEOUT" code
    mkdir -p "$MODEL_DIR"
    [[ "$1" == *7b* ]] && limit=$((limit > BIG_SYNTH_TIMEOUT ? limit : BIG_SYNTH_TIMEOUT))
    if [[ ! -s "$f" ]]; then
        start=$(date +%s)
        timeout -k 5 "$limit" bin/minfer synth --shape "$1" --type "$2" --seed "$SEED" -o "$f.tmp" >>"$log" 2>&1
        code=$?
        if [[ $code -ne 0 ]]; then
            say "minfer synth $1 $2 failed: exit $code$([[ $code -eq 124 || $code -eq 137 ]] && echo ", cut at its limit of $limit s")"
            rm -f "$f.tmp"
            return 1
        fi
        mv "$f.tmp" "$f"
        say "synthesized $f ($(stat -c %s "$f") bytes) in $(($(date +%s) - start)) s"
    fi
    echo "$f"
}
default_model="${MODEL:-}"
if [[ -z "$default_model" ]]; then
    default_model="$(synth_model "$SHAPE" "$TYPE")" || exit 2
fi

# 3. Calibrations: A/A noise of each workload, from which the lever runs
# pre-register their rounds (reports/calibration/<GPU>/...).
calibrate() { # "spec;spec;..."
    local w limit
    IFS=';' read -r -a ws <<<"$1"
    for w in "${ws[@]}"; do
        [[ -z "$w" ]] && continue
        say "=== abtest calibrate --workload '$w' ($CAL_ROUNDS rounds)"
        limit="$CAL_TIMEOUT"
        [[ "$w" == *7b* ]] && limit="$BIG_CAL_TIMEOUT"
        timeout -k 15 "$limit" bin/abtest calibrate --workload "$w" --device cuda --synth-dir "$MODEL_DIR" --seed "$SEED" \
            --rounds "$CAL_ROUNDS" --pp "$PP" --tg "$TG" --reps "$REPS" --warmup-ms "$WARMUP_MS" --out "$reports" >>"$log" 2>&1
        say "=== calibrate '$w': exit $?"
        grep -h 'abtest: calibration ' "$log" | tail -n 1 >&2
    done
}
calibrate "$CALIBRATE"

cmodel_args=()
for m in $CORRECTNESS_MODEL; do cmodel_args+=(--correctness-model "$m"); done

# 3b. Pull-request pages with a planted defect in the head: each must say
# regression (exit 1), the evidence that `abtest pr` catches it.
PR="${PR:-}" PR_WORKLOADS="${PR_WORKLOADS:-qwen2-0.5b:Q8_0}" PR_TIMEOUT="${PR_TIMEOUT:-300}"
IFS=';' read -r -a prs <<<"$PR"
for m in "${prs[@]}"; do
    [[ -z "$m" ]] && continue
    say "=== abtest pr --head-env MINFER_TEST_MUTATE=$m on $PR_WORKLOADS"
    timeout -k 15 "$PR_TIMEOUT" bin/abtest pr --base bin --head bin --head-env "MINFER_TEST_MUTATE=$m" --workloads "$PR_WORKLOADS" \
        --device cuda --synth-dir "$MODEL_DIR" --seed "$SEED" "${cmodel_args[@]}" --pp "$PP" --tg "$TG" --reps "$REPS" \
        --warmup-ms "$WARMUP_MS" --out "$reports/pr" >>"$log" 2>&1
    say "=== pr $m: exit $? (1: the regression was caught)"
done

# 3c. A bisect over prebuilt commits (this machine has no Go): BAD's kernel
# sources compiled once, linked into every build folder.
BISECT="${BISECT:-}" BISECT_TIMEOUT="${BISECT_TIMEOUT:-480}" BISECT_PACK="${BISECT_PACK:-bin/bisect.tgz}"
if [[ -n "$BISECT" ]]; then
    read -r bgood bbad bwl <<<"$BISECT"
    bdir="$work/bisect"
    rm -rf "$bdir" && mkdir -p "$bdir/src" && tar -xzf "$BISECT_PACK" -C "$bdir" && tar -xzf "$bdir/kernels-src.tgz" -C "$bdir/src"
    if LC_ALL=C timeout -k 10 "$KERNEL_TIMEOUT" "$bdir/src/scripts/build-kernels.sh" "$bdir/kernels.fatbin" >>"$out/build-kernels.log" 2>&1; then
        for d in "$bdir"/*/; do [[ -x "$d/minfer" ]] && ln -sf "$bdir/kernels.fatbin" "$d/minfer-kernels.fatbin"; done
        say "=== abtest bisect --good $bgood --bad $bbad --workload $bwl"
        timeout -k 15 "$BISECT_TIMEOUT" bin/abtest bisect --minfer bin/minfer --builds "$bdir" --good "$bgood" --bad "$bbad" --workload "$bwl" \
            --device cuda --synth-dir "$MODEL_DIR" --seed "$SEED" --pp "$PP" --tg "$TG" --reps "$REPS" \
            --out "$reports/bisect" >>"$log" 2>&1
        say "=== bisect: exit $? (0: the first bad commit named and confirmed)"
    else
        say "the bisect's kernels did not build (build-kernels.log)"
    fi
fi

# 4. The levers.
rc=0
gates="$GATES"
rounds=()
[[ -n "$ROUNDS" ]] && rounds=(--rounds "$ROUNDS")
for spec in $LEVERS; do
    # NAME[=VALUE][@ppN][@SHAPE:TYPE][@own] (header): a 2..8-token path such
    # as MINFER_MMVQ_NT never runs at pp512, a K-quant or qwen3 path never
    # on qwen2-0.5b Q8_0.
    lever="${spec%%@*}" pp="$PP" model="$default_model" own=0 mutate=() base=() with=() depth=()
    IFS=@ read -r -a opts <<<"${spec#"$lever"}"
    for o in "${opts[@]}"; do
        case "$o" in
        "") ;;
        own) own=1 ;;
        mutate=*) mutate=(--mutate "${o#mutate=}") ;;
        baseline=*) base=(--baseline "${o#baseline=}") ;;
        with=*) with+=(--with "${o#with=}") ;;
        pp[0-9]*) pp="${o#pp}" ;;
        d[0-9]*) depth=(--depth "${o#d}") ;;
        *:*) model="$(synth_model "${o%%:*}" "${o#*:}")" || { rc=1; continue 2; } ;;
        *) say "lever spec $spec: unknown option @$o (want @ppN, @dN, @SHAPE:TYPE, @own, @mutate=, @baseline=, @with=)"; rc=1; continue 2 ;;
        esac
    done
    cmodel=""
    [[ -n "$CORRECTNESS_MODEL" && $own == 0 ]] && cmodel="$CORRECTNESS_MODEL"
    # A bare spec runs on the workload the registry declares for the lever
    # (see wl below): name it, and size the limit for it, not for $model.
    declared=""
    [[ "$spec" != *@[!mbwd]* ]] && declared="$(declared_workload "${lever%%=*}")"
    on="$(basename "$model")"
    [[ -n "$declared" ]] && on="the registry's workload $declared"
    start=$(date +%s)
    limit="$LEVER_TIMEOUT"
    # The first lever runs the device suite (~200 s on the H200; later ones
    # reuse it from the cache where arm B's settings are the same): a limit
    # sized for the other gates cut it short on 2026-11-29.
    [[ ",$gates," == *,suite,* ]] && limit=$((LEVER_TIMEOUT + SUITE_EXTRA))
    [[ "$spec" == *7b* || "$on" == *7b* ]] && limit=$((limit > BIG_TIMEOUT ? limit : BIG_TIMEOUT))
    # At depth every bench process fills its KV cache first (7B at 32K: ~23 s each, ~26 processes).
    [[ ${#depth[@]} -gt 0 || "$declared" =~ (^| )d[0-9]+ ]] && limit=$((limit > DEEP_TIMEOUT ? limit : DEEP_TIMEOUT))
    say "=== abtest run --lever $lever --pp $pp on $on (gates $gates$([[ -n "$cmodel" ]] && echo ", correctness model $cmodel"); limit $limit s)"
    cm=()
    for m in $cmodel; do cm+=(--correctness-model "$m"); done
    # A bare spec runs on the workload the registry declares for the lever
    # (abtest run --workload: its model, pp and correctness model; none
    # declared: the default model); any @ option is taken as given instead.
    wl=(--synth-dir "$MODEL_DIR")
    [[ "$spec" != *@[!mbwd]* ]] && wl+=(--workload --seed "$SEED")
    timeout -k 15 "$limit" bin/abtest run --lever "$lever" --device cuda --model "$model" "${cm[@]}" "${wl[@]}" "${mutate[@]}" "${base[@]}" "${with[@]}" "${depth[@]}" \
        --suite-bin 'bin/*.test' --suite-cache "$work/suite-cache" "${kernels_arg[@]}" --gates "$gates" \
        "${rounds[@]}" --pp "$pp" --tg "$TG" --reps "$REPS" --warmup-ms "$WARMUP_MS" \
        --out "$reports" >>"$log" 2>&1
    code=$?
    say "=== $lever: exit $code in $(($(date +%s) - start)) s (0 PASS, 1 FAIL or a mutation not caught, 2 could not run, 3 INCONCLUSIVE/PARTIAL/INCOMPLETE, 124/137 timeout)"
    grep -h '^\*\*Verdict' "$reports/${lever%%=*}"/*.md 2>/dev/null | tail -n 1 | tee -a "$log" >&2
    [[ $code -ne 0 ]] && rc=1
done
calibrate "$CALIBRATE_AFTER"
exit $rc
