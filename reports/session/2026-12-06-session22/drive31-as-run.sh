#!/usr/bin/env bash
# Session 22's device driver (session 21's drive30.sh, its steps replaced). Bundle at main's HEAD:
# `SNAPSHOT=1 TINY=Q8_0 scripts/device-bundle.sh` with bin/lib in place (libdw1, libelf1 from `apt-get download`).
# The tree must stay under 64 MiB with what is carried: move reports/ aside (keep reports/calibration), keep only
# bundle.tgz, this script (as bin/drive31.sh) and poll.sh in bin/, move out/ aside, carry ["bin"].
# Poll with `bash bin/poll.sh SECONDS N` (N: how many " exit "/"rc=" lines to wait for: the cold bench and the probe
# print two before the first step). Never kill the driver and start a step by hand. Chain the polls: the machine goes
# back 30 s after a call, and the driver with it. A start that finds no machine costs ~1.5-3 min of budget.
#
# Session 21's costs on the H100: a fresh machine ~40 s; cold NVRTC bench 23 s; the filtered probe 21 s; the first
# A/B of a session builds the nvcc kernels (84 s) and synthesizes the models; A/Bs on qwen2-7b at depth 32128 take
# 9.5-10.5 min each. The ncu steps need the 7B file, which only an A/B synthesizes: they come after one (session 21
# ran them first and both failed, "no such file").
# Steps (default: f16 dlean ncut ncug ncud2, ~26 min with the probe; r1, r2 only if a session has more time):
#   f16     MINFER_MMQ_F16 A/B at its workload, qwen2-7b Q8_0 at depth 0 (issue 20's prefill matmul rows). Not yet run
#           on a GPU: the probe runs its device test first. Forecast: pp512 ~6,700 -> ~9,500 tok/s on the H100.
#   ncug    ncu --set full on three launches of minfer_gemm16_q8_0r (pp512, depth 0): tensor pipe, issue, smem waits.
#   dlean   MINFER_ATTN_DECODE_LEAN A/B at its workload, qwen2-7b Q8_0 at depth 32128 (issue 20's decode row). Not yet
#           run on a GPU: the probe runs its device tests first. Forecast: tg128@d32128 177.7 -> ~182-186 tok/s.
#   ncut    ncu --set full on three launches of the default tensor-core prefill attention (the lean body since
#           session 21) at depth 32128: instructions a launch (forecast ~230 M against the first form's 702 M),
#           registers, occupancy, what bounds it now.
#   ncud2   ncu --set full on two launches each of minfer_attn_decode2_hd128_f16 and of its lean form at depth 32128.
#   ncul, ncud, lean, dectc, dectc0: session 21's (their levers are gone: do not run).
#   peer, mmqw, gqa, profg, ncuatt, prof, embedh, suite, r1..r10, cover: as in drive28.sh.
set -u
R=$PWD D=/tmp/dev S=/tmp/snap MD=/tmp/abtest-models
STEPS="${STEPS:-f16 dlean ncut ncug ncud2}"; export PROBE_RUN="${PROBE_RUN:-Gemm16|AttnPrefillTC|AttnDecodeLean|AttnDecode2|KQuantModel16Byte|TestMMQDevice_BackendCensus|TestDeviceMemory|AttnDecodeGQA}"
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
    r10) ab abr10 /tmp/wk-k "$K@qwen3-0.6b:MIX@pp2048@with=MINFER_ATTN_DECODE_LEAN=1" ;; # WIDE_LOADS retired (session 20)
    mmqw) ab abmmqw /tmp/wk "MINFER_MMQ_WIDE_LOADS" ;;
    gqa) ab abgqa /tmp/wk "MINFER_ATTN_DECODE_GQA" ;;
    cover)
        bin/abtest sass-diff --runs '/tmp/wk-k/reports/MINFER_KERNELS/*.json' \
            /tmp/nvcc/head.fatbin /tmp/nvcc/nvrtc.sass >$D/sass-cover.md 2>&1
        echo "cover rc=$? $(tail -n 3 $D/sass-cover.md | tr '\n' ' ' | cut -c1-400)" ;;
        peer)
        for i in $(seq 240); do grep -q "llama-bench build rc=" $D/llama-build.log 2>/dev/null && break; sleep 5; done; echo "$(tail -n 1 $D/llama-build.log)"
        PEER=/tmp/llama/b/bin/llama-bench ROWS=qwen2-7b:Q8_0@d32128,qwen2-7b:Q4_K_M@d32128 REPS=${PEER_REPS:-1} PERF_TIMEOUT=1200 \
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
    profg)
        n=prof-decode-gqa-qwen2-7b-Q8_0-d32128
        MINFER_ATTN_DECODE_GQA=1 MINFER_OP_TIMING=1 MINFER_NO_CUDA_GRAPH=1 timeout 300 bin/minfer bench --device cuda \
            -m $MD/qwen2-7b-Q8_0-seed1.gguf -p 0 -n 32 -d 32128 --fill zeros -c 32768 -r 2 --format json -o $D/$n.json 2>$D/$n.err
        echo "$n rc=$? $(ts)" ;;
    ncuatt)
        # Where the tensor-core prefill attention's time goes at depth (issue 20's first row): one 512-token chunk
        # over 32128 cells, capture off (direct launches), three launches of the kernel, ncu's full sections.
        NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
        MINFER_NO_PREFILL_CAPTURE=1 timeout 400 $NCU --clock-control none --set full -k regex:minfer_attn_prefill_tc_hd128 \
            --launch-skip 28 --launch-count 3 -o $D/ncu-prefill-tc-d32128 bin/minfer bench --device cuda -m $MD/qwen2-7b-Q8_0-seed1.gguf \
            -p 512 -n 0 -d 32128 --fill zeros -c 32768 -r 1 --format json -o $D/ncu-bench.json >$D/ncuatt.out 2>&1
        echo "ncuatt rc=$? $(ts)"
        $NCU --import $D/ncu-prefill-tc-d32128.ncu-rep --page details >$D/ncu-prefill-tc-d32128.txt 2>&1
        $NCU --import $D/ncu-prefill-tc-d32128.ncu-rep --page details --csv >$D/ncu-prefill-tc-d32128.csv 2>&1
        rm -f $D/ncu-prefill-tc-d32128.ncu-rep ;;
    dlean) ab abdlean /tmp/wk "MINFER_ATTN_DECODE_LEAN" ;;
    f16) ab abf16 /tmp/wk "MINFER_MMQ_F16" ;;
    ncut | ncud2 | ncug)
        NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
        [[ -f $MD/qwen2-7b-Q8_0-seed1.gguf ]] || { echo "$step: no 7B file (run an A/B on it first)"; continue; }
        if [[ $step == ncug ]]; then
            runs=("ncu-gemm16-d0|MINFER_NO_PREFILL_CAPTURE=1 MINFER_MMQ_F16=1|minfer_gemm16_q8_0r|20|3|-p 512 -n 0")
        elif [[ $step == ncut ]]; then
            runs=("ncu-prefill-tc-d32128|MINFER_NO_PREFILL_CAPTURE=1|minfer_attn_prefill_tc_hd128|28|3|-p 512 -n 0")
        else
            runs=("ncu-decode2-d32128|MINFER_NO_CUDA_GRAPH=1|minfer_attn_decode2_hd128_f16|56|2|-p 0 -n 4"
                "ncu-decode2l-d32128|MINFER_NO_CUDA_GRAPH=1 MINFER_ATTN_DECODE_LEAN=1|minfer_attn_decode2l_hd128_f16|56|2|-p 0 -n 4")
        fi
        for r in "${runs[@]}"; do
            IFS='|' read -r n env k skip cnt pn <<<"$r"
            env $env timeout 400 $NCU --clock-control none --set full -k regex:$k --launch-skip $skip --launch-count $cnt -o $D/$n \
                bin/minfer bench --device cuda -m $MD/qwen2-7b-Q8_0-seed1.gguf $pn -d 32128 --fill zeros -c 32768 -r 1 --format json \
                -o $D/$n.json >$D/$n.out 2>&1
            echo "$step $n rc=$? $(ts)"
            $NCU --import $D/$n.ncu-rep --page details >$D/$n.txt 2>&1
            rm -f $D/$n.ncu-rep
        done ;;
    *) echo "unknown step $step" ;;
    esac
done
echo "drive done $(ts)"
touch $D/DONE
