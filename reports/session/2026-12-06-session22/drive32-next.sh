#!/usr/bin/env bash
# Session 23's device driver (session 22's drive31.sh, its steps replaced). Bundle at main's HEAD:
# `SNAPSHOT=1 TINY=Q8_0 scripts/device-bundle.sh` with bin/lib in place (libdw1, libelf1 from `apt-get download`).
# The tree must stay under 64 MiB with what is carried: move reports/ aside (keep reports/calibration), keep only
# bundle.tgz, this script (as bin/drive32.sh) and poll.sh in bin/, move out/ aside, carry ["bin"].
# Poll with `bash bin/poll.sh SECONDS N` (N: how many " exit "/"rc=" lines to wait for: the cold bench and the probe
# print two before the first step). Chain the polls: the machine goes back 30 s after a call, and the driver with it.
# A start that finds no machine costs ~1.5-3 min of budget (session 22 lost ~4 min to three; naming nvidia-h100-x1
# got a machine once the tool's stated wait had passed). To stop the driver early: `kill -- -$(cat /tmp/dev/pid)`,
# then `pkill -x minfer; pkill -x abtest` (never `pkill -f abtest`: it matches the calling shell's own command line).
#
# Session 22's costs on the H100: a fresh machine ~40 s; cold NVRTC bench 18-23 s; the filtered probe 21-26 s; the
# MINFER_MMQ_F16 A/B at depth 0 (with its nvcc build and the 7B synthesis) 12 min 19 s; ncu steps ~30 s each.
# Steps (default: dlean f16 ncug, ~26 min with the probe):
#   dlean   MINFER_ATTN_DECODE_LEAN A/B at its workload, qwen2-7b Q8_0 at depth 32128 (issue 20's decode row). Its
#           device tests passed in session 22's probe; a quick interleaved bench (no A/B) gave tg128@d32128 178.4 ->
#           190.7 tok/s, and ncu 78.1 -> 66.9 us a launch (reports/session/2026-12-06-session22).
#   f16     MINFER_MMQ_F16 A/B at its workload, qwen2-7b Q8_0 at depth 0, its second form (one launch a fused op, k
#           split on small grids, conflict-free dequantizing stores) and its activation-precision class. Session 22's
#           first form: FAIL on parity A vs B only (B nearer the exact evaluation than A), pp512 +10.6%.
#   ncug    ncu --set full on three launches of minfer_gemm16_q8_0r (pp512): grid, occupancy, stalls of the new form.
#   ncuw    the same for minfer_gemm16w_q8_0r (MINFER_MMQ_WGMMA=1): cheap, and the first sight of the wgmma form's time.
#   wg      MINFER_MMQ_WGMMA A/B (arm A the f16 GEMM's mma.sync form), qwen2-7b Q8_0 depth 0: only with ~11 min left.
#   ncut, ncud2: as in session 22 (their results are in reports/session/2026-12-06-session22/ncu).
#   peer, mmqw, gqa, profg, ncuatt, prof, embedh, suite, r1..r10, cover: as in drive28.sh.
set -u
R=$PWD D=/tmp/dev S=/tmp/snap MD=/tmp/abtest-models
STEPS="${STEPS:-dlean f16 ncug ncuw}"; export PROBE_RUN="${PROBE_RUN:-Gemm16|AttnPrefillTC|AttnDecodeLean|AttnDecode2|KQuantModel16Byte|TestMMQDevice_BackendCensus|TestDeviceMemory|AttnDecodeGQA}"
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
# Any failure stops the drive: every A/B's suite gate runs all the device tests, so a test that fails here fails
# every lever's suite gate (session 22 first tried skipping only the failing lever's steps; that cannot help).
[[ $rc -ne 0 ]] && { echo "PROBE FAILED ($(grep -ohE '^--- FAIL: [A-Za-z0-9_]+' $D/probe/device-suite-*.log 2>/dev/null | awk '{print $3}' | sort -u | tr '\n' ' ')): no A/B run"; touch $D/DONE; exit 1; }
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
    wg) ab abwg /tmp/wk "MINFER_MMQ_WGMMA" ;;
    ncut | ncud2 | ncug | ncuw)
        NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
        [[ -f $MD/qwen2-7b-Q8_0-seed1.gguf ]] || { echo "$step: no 7B file (run an A/B on it first)"; continue; }
        if [[ $step == ncug ]]; then
            runs=("ncu-gemm16-d0|MINFER_NO_PREFILL_CAPTURE=1 MINFER_MMQ_F16=1|minfer_gemm16_q8_0r|20|3|-p 512 -n 0")
        elif [[ $step == ncuw ]]; then
            runs=("ncu-gemm16w-d0|MINFER_NO_PREFILL_CAPTURE=1 MINFER_MMQ_F16=1 MINFER_MMQ_WGMMA=1|minfer_gemm16w_q8_0r|20|3|-p 512 -n 0")
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
