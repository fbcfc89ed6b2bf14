#!/usr/bin/env bash
# Session 18's device driver (session 17's drive25.sh, its lessons applied). Bundle at main's HEAD:
# `SNAPSHOT=1 TINY=Q8_0 scripts/device-bundle.sh` with bin/lib in place (libdw1, libelf1 from `apt-get download`).
# The tree must stay under 64 MiB with what is carried: move reports/ aside (keep reports/calibration), move
# bin/lib and old scripts out of bin/, carry ["bin"] in the first call. out/llama-src.tgz does not fit beside the
# bundle: carry it alone in the second call, which starts `bin/llama-build.sh` (setsid) while the first step runs.
# Poll with `bash bin/poll.sh SECONDS N` (N: how many " exit "/"rc=" lines to wait for; the cold bench, the
# probe, build-kernels and sass-diff print four before the first A/B). Never kill the driver
# and start a step by hand: abtest's children outlive a killed process group (session 17's peer table ran beside
# an orphaned A/B) and a MINFER_* variable exported around perf.sh is now refused (use WITH=).
#
# Steps (costs on the H100 of 2026-12-06):
#   embedh  MINFER_EMBED_HOST A/B on qwen2-7b Q8_0, five gates (~11 min): where the embedding table lives (issue 19
#           item 3). Session 17 measured (one process each, not an A/B): 7B Q8_0 at d32128 with one copy, peak 9,910
#           MiB with the table on the host, 10,464 with it on the device; pp/tg equal within one repetition.
#   peer    llama-bench (built by bin/llama-build.sh) beside minfer on qwen2-7b Q8_0 and Q4_K_M at depth 32128,
#           context 32768, WITH="MINFER_EMBED_HOST=1" (one copy is the default since 33bd4f8): issue 19's memory
#           target side by side in one run (reference + 1%: Q8_0 9,868 -> 9,967 MiB, Q4_K_M 6,872 -> 6,941 MiB on
#           the H100 of session 17) and issue 20's long-context ratios (~10 min)
#   mmqw    MINFER_MMQ_WIDE_LOADS A/B on qwen2-7b Q4_K_M (issue 20: 16-byte loads in the Q4_K / Q5_K MMQ, new in
#           session 17, emulator-checked only; ~11 min)
#   r1..r10, cover  issue 25's MINFER_KERNELS A/Bs at one frozen kernel tree (drive24-next.sh of session 16 says which
#           routes each takes; MINFER_MMVQ_WIDE is gone, so r5 and r8 run without it, and one copy is the default, so
#           r1/r2 run the repacked MMQ / mmvq_nt / gather kernels and r9 (MINFER_ONE_COPY=0) their GGUF forms; r10
#           the wide-load MMQ kernels)
set -u
R=$PWD D=/tmp/dev S=/tmp/snap MD=/tmp/abtest-models
STEPS="${STEPS:-embedh peer mmqw}"; export PROBE_RUN="${PROBE_RUN:-TestMMQDevice_BackendCensus|TestDeviceMemory}"
rm -rf $D; mkdir -p $D $MD
exec >>$D/drive.log 2>&1
echo $$ >$D/pid
ts() { date -u +%T; }
ms() { echo $(($(date +%s%N) / 1000000)); }
echo "drive start $(ts) steps: $STEPS"
rm -rf $S && mkdir -p $S/bin && tar -xzf bin/bundle.tgz -C $S/bin && tar -xzf $S/bin/src.tgz -C $S && rm $S/bin/src.tgz || { echo "setup failed"; touch $D/DONE; exit 2; }
cd $S
export XDG_CACHE_HOME=/tmp/xdg LC_ALL=C PATH=$PATH:/usr/local/cuda/bin
rm -rf $XDG_CACHE_HOME
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,memory.used --format=csv >$D/smi.txt 2>&1
cal() { mkdir -p "$1/reports" && cp -r $R/reports/calibration "$1/reports/" 2>/dev/null; }
ab() { # OUT-name WORK LEVERS [CALIBRATE]
    OUT=$D/$1 WORK=$2 CALIBRATE="${4:-}" CORRECTNESS_MODEL="$S/bin/tiny-code-Q8_0.gguf $S/bin/tiny-qwen3-code-Q8_0.gguf" MODEL_DIR=$MD LEVERS="$3" \
        scripts/abtest-device.sh >$D/$1.out 2>&1
    echo "$1 exit $? ($3) $(ts)"
    tar -C $2 -czf $D/$1-work.tgz reports 2>/dev/null
}
echo "== NVRTC cold bench $(ts)"
t0=$(ms); timeout 400 bin/minfer bench --device cuda -p 512 -n 128 -r 3 --format json -o $D/bench-cold.json 2>$D/bench-cold.err
rc=$?; echo "cold bench rc=$rc wall_ms=$(($(ms) - t0))"
[[ $rc -ne 0 ]] && { echo "COMPILE OR RUN FAILURE: $(tail -c 3000 $D/bench-cold.err)"; touch $D/DONE; exit 1; }
# Session 17 changed the load (one arena reserved for the weights, ReserveWeights) without a GPU: the device tests
# run first, the whole suite at the defaults (the A/Bs' suite gate runs it too; session 18's first probe found a
# census test that one copy's default broke), and a failure stops the drive before any A/B spends its minutes.
echo "== probe $(ts)"
KERNELS=nvrtc RUN="${PROBE_RUN:-}" OUT=$D/probe SUITE_TIMEOUT=10m TINY_CODE_GGUF=$S/bin/tiny-code-Q8_0.gguf \
    scripts/device-suite.sh >$D/probe.out 2>&1
rc=$?; echo "probe rc=$rc $(tail -n 1 $D/probe.out) $(ts)"
[[ $rc -ne 0 ]] && { echo "PROBE FAILED: no A/B run"; touch $D/DONE; exit 1; }
# The nvcc build and its SASS diff serve only the r-steps and cover (issue 25); without them they cost 2+ minutes.
if [[ " $STEPS " == *" r"* || " $STEPS " == *" cover "* ]]; then
mkdir -p /tmp/nvcc
t1=$(ms); scripts/build-kernels.sh /tmp/nvcc/head.fatbin >$D/bk-head.log 2>&1; echo "build-kernels rc=$? ms=$(($(ms) - t1))"
for f in $XDG_CACHE_HOME/minfer/*/*/*.cubin; do [[ -f $f ]] && cuobjdump --dump-sass $f; done >/tmp/nvcc/nvrtc.sass 2>/dev/null
bin/abtest sass-diff /tmp/nvcc/head.fatbin /tmp/nvcc/nvrtc.sass >$D/sass-one-vs-nvrtc.md 2>&1; echo "sass-diff rc=$? $(sed -n 3p $D/sass-one-vs-nvrtc.md)"
cp /tmp/nvcc/head.fatbin bin/minfer-kernels.fatbin
K="MINFER_KERNELS=nvrtc@baseline=$S/bin/minfer-kernels.fatbin"
fi
cal /tmp/wk-k; cal /tmp/wk
for step in $STEPS; do
    echo "== $step $(ts)"
    case $step in
    r1) ab abr1 /tmp/wk-k "$K@qwen2-0.5b:MIX" ;;
    r2) ab abr2 /tmp/wk-k "$K@qwen3-0.6b:MIX" ;;
    r3) ab abr3 /tmp/wk-k "$K@qwen2-0.5b:MIX@pp2048@with=MINFER_MMVQ_SPLIT=1@with=MINFER_MMQ_ASYNC=1@with=MINFER_FA_PREFILL_TC=0" ;;
    r4) ab abr4 /tmp/wk-k "$K@qwen2-0.5b:MIX@with=MINFER_MMQ=0@with=MINFER_NO_FA_PREFILL=1" ;;
    r5) ab abr5 /tmp/wk-k "$K@qwen3-0.6b:MIX@pp2048@with=MINFER_FA_PREFILL_TC=0@with=MINFER_MMQ_ASYNC=1" ;;
    r6) ab abr6 /tmp/wk-k "$K@qwen3-0.6b:MIX@with=MINFER_MMVQ_SPLIT=1@with=MINFER_MMVQ_REPACK=0" ;;
    r7) ab abr7 /tmp/wk-k "$K@qwen3-0.6b:MIX@pp2048@with=MINFER_MMVQ_SPLIT=1@with=MINFER_FUSE_RESIDUAL=0" ;;
    r8) ab abr8 /tmp/wk-k "$K@qwen2-0.5b:MIX@pp1024@with=MINFER_FA_PREFILL_TC=0@with=MINFER_FUSE_RESIDUAL=0" ;;
    r9) ab abr9 /tmp/wk-k "$K@qwen2-0.5b:MIX@with=MINFER_ONE_COPY=0" ;;
    r10) ab abr10 /tmp/wk-k "$K@qwen3-0.6b:MIX@pp2048@with=MINFER_MMQ_WIDE_LOADS=1" ;;
    mmqw) ab abmmqw /tmp/wk "MINFER_MMQ_WIDE_LOADS" ;;
    cover)
        bin/abtest sass-diff --runs '/tmp/wk-k/reports/MINFER_KERNELS/*.json' \
            /tmp/nvcc/head.fatbin /tmp/nvcc/nvrtc.sass >$D/sass-cover.md 2>&1
        echo "cover rc=$? $(tail -n 3 $D/sass-cover.md | tr '\n' ' ' | cut -c1-400)" ;;
        peer)
        for i in $(seq 240); do grep -q "llama-bench build rc=" $D/llama-build.log 2>/dev/null && break; sleep 5; done; echo "$(tail -n 1 $D/llama-build.log)"
        WITH="MINFER_EMBED_HOST=1" PEER=/tmp/llama/b/bin/llama-bench ROWS=qwen2-7b:Q8_0@d32128,qwen2-7b:Q4_K_M@d32128 REPS=${PEER_REPS:-2} PERF_TIMEOUT=1200 \
            OUT=$D/perf MODEL_DIR=$MD scripts/perf.sh >$D/perf.out 2>&1
        echo "perf rc=$? $(ts)" ;;
    suite)
        KERNELS=nvrtc OUT=$D/suite SUITE_TIMEOUT=10m TINY_CODE_GGUF=$S/bin/tiny-code-Q8_0.gguf scripts/device-suite.sh >$D/suite.out 2>&1
        echo "suite rc=$? $(tail -n 1 $D/suite.out)" ;;
    embedh) ab abembedh /tmp/wk "MINFER_EMBED_HOST" ;;
    *) echo "unknown step $step" ;;
    esac
done
echo "drive done $(ts)"
touch $D/DONE
