#!/usr/bin/env bash
# Session 19's device driver (session 18's drive26.sh, its lessons applied). Bundle at main's HEAD:
# `SNAPSHOT=1 TINY=Q8_0 scripts/device-bundle.sh` with bin/lib in place (libdw1, libelf1 from `apt-get download`),
# then move bin/lib out again. The tree must stay under 64 MiB with what is carried: move reports/ aside (keep
# reports/calibration), keep only bundle.tgz, this script (as bin/drive27.sh) and poll.sh in bin/, carry ["bin"].
# Poll with `bash bin/poll.sh SECONDS N` (N: how many " exit "/"rc=" lines to wait for: the cold bench and the probe
# print two before the first A/B). Never kill the driver and start a step by hand.
#
# Session 18's costs on the H100 (1,470 s of device time in all): a fresh machine ~30 s; cold NVRTC bench 21-25 s; the
# whole device suite 3.7 min; an A/B on qwen2-7b ~11 min (77 s of it abtest-device's nvcc build, 202 s the suite
# gate); the peer rows at d32128 with PEER_REPS=1 ~4 min once llama-bench is built (~6 min of CPU, second call).
# Steps (default: embedh gqa mmqw prof; embedh and gqa first, ~24 min with the probe; the rest as the budget allows):
#   embedh  MINFER_EMBED_HOST A/B on qwen2-7b Q8_0, five gates. Session 18's FAILed only on liveness in parity and
#           greedy (the trained correctness models are tied); abtest now unties them (quantize --untie).
#   gqa     MINFER_ATTN_DECODE_GQA A/B on its workload, qwen2-7b Q8_0 at depth 32128 (issue 20: the decode kernel's
#           query heads of a KV head as warps of one block, so their K / V rows come from L1 once fetched instead of
#           from L2 seven times; emulator-checked bitwise in session 18, its device tests in the probe; forecast tg128
#           at depth 32128 from ~178 to ~230-245 tok/s on the H100)
#   mmqw    MINFER_MMQ_WIDE_LOADS A/B on qwen2-7b Q4_K_M (issue 20; its device tests passed in session 18's probe).
#   prof    where a 7B pp512 chunk's time goes at depth 0 and 32128, and a decode step's at 32128 (issue 20):
#           MINFER_OP_TIMING=1 (events around
#           every direct launch; prefill capture off so every launch is direct), --fill zeros, both 7B files the A/Bs
#           synthesized; per-kernel device time in prof-*.err. Not a speed claim: which kernel to work on next.
#   peer    llama-bench beside minfer at d32128 (issue 19/20). Session 18 measured it with MINFER_EMBED_HOST=1: minfer
#           below the reference on both files. Run it again at the defaults once the lever is on by default.
#   r1..r10, cover  issue 25's MINFER_KERNELS A/Bs (they add the nvcc build and SASS diff, ~2.5 min).
set -u
R=$PWD D=/tmp/dev S=/tmp/snap MD=/tmp/abtest-models
STEPS="${STEPS:-embedh gqa mmqw prof}"; export PROBE_RUN="${PROBE_RUN:-TestMMQDevice_BackendCensus|TestDeviceMemory|TestMMQWideLoads|EmbedHost|AttnDecodeGQA|AttnDecode2}"
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
    gqa) ab abgqa /tmp/wk "MINFER_ATTN_DECODE_GQA" ;;
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
    prof)
        for m in $MD/qwen2-7b-Q8_0-seed1.gguf $MD/qwen2-7b-Q4_K_M-seed1.gguf; do
            for d in 0 32128; do
                n=prof-$(basename $m .gguf)-d$d
                MINFER_OP_TIMING=1 MINFER_NO_PREFILL_CAPTURE=1 timeout 300 bin/minfer bench --device cuda -m $m -p 512 -n 0 \
                    -d $d --fill zeros -c 32768 -r 2 --format json -o $D/$n.json 2>$D/$n.err
                echo "$n rc=$? $(ts)"
            done
        done
        # Decode at depth: the grouped-query re-reads (attn_decode2: one warp per query head, each re-reading its
        # KV head's rows from L2) are the suspect; graphs off so every launch is timed.
        n=prof-decode-qwen2-7b-Q8_0-d32128
        MINFER_OP_TIMING=1 MINFER_NO_CUDA_GRAPH=1 timeout 300 bin/minfer bench --device cuda -m $MD/qwen2-7b-Q8_0-seed1.gguf \
            -p 0 -n 32 -d 32128 --fill zeros -c 32768 -r 2 --format json -o $D/$n.json 2>$D/$n.err
        echo "$n rc=$? $(ts)" ;;
    *) echo "unknown step $step" ;;
    esac
done
echo "drive done $(ts)"
touch $D/DONE
