#!/usr/bin/env bash
# Session 15's device driver (session 14's drive19 plus mmqa and pr89). Build
# the bundle at main's HEAD (`SNAPSHOT=1 TINY=Q8_0 scripts/device-bundle.sh`:
# both trained models inside) with bin/lib in place. Its suite gates every
# step that runs a new default or a new kernel (MINFER_FA_PREFILL_TC is on by
# default since c5c58f4; MINFER_MMQ_ASYNC's kernels are new). One setsid run,
# polled by chained calls (each poll tars /tmp/dev into $OUT). Carry in call 1:
# bin (bundle.tgz from `SNAPSHOT=1 TINY=Q8_0 scripts/device-bundle.sh` with
# bin/lib in place, this script), out (base29.tgz from /work/carry10 for step
# pr29). Trim the tree: move reports/ aside keeping reports/calibration.
# STEPS picks and orders the steps (default below). Costs measured in session
# 11: suite 3.5 min, one five-gate A/B on qwen2-0.5b 2.2-3.7 min.
#   suite  device suite at HEAD, NVRTC (issue 15's last item; 23, 25)
#   ptx    scripts/ptx-diff.sh with CUDA 13 (issue 25: is the 64-bit shared addressing NVRTC 13's too?)
#   kA     MINFER_KERNELS A/B per quant type with MINFER_MMVQ_SPLIT=1: mmq (both tiles), split decode, prefill attention
#   kB     the same with MINFER_MMQ=0 and MINFER_NO_FA_PREFILL=1: gemm_<type>, attn_f32, softmax
#   kC     MINFER_MMVQ_WIDE=1 + MINFER_FA_PREFILL_TC=1 on Q8_0 and Q4_K_M: wide decode, tensor-core attention
#   kF     F16, BF16, F32: gemm_f16/bf16/f32
#   draftpp why the trained MINFER_DRAFT pair prefills 2.2% slower (session 12): pp-only benches, interleaved,
#          --draft none vs the Q4_0 draft vs the F16 file itself as draft, each with a launch census (~1 min)
#   kR     session 11's six MINFER_KERNELS A/Bs again, all five gates (their gate-4 FAIL was the timing bar fixed in c22de0e)
#   pin    MINFER_PIN_STEP A/B (issue 20)
#   pr15   abtest pr a8f3761 vs this build: issue 15's perf table at HEAD (out/base15.tgz)
#   pr89   abtest pr 8969323 vs this build (out/base89.tgz: `CGO_ENABLED=0 go build -ldflags "-s -w"` of
#          ./cmd/minfer at 8969323, tarred): the perf rows with MINFER_FA_PREFILL_TC on by default
#   mmqa   MINFER_MMQ_ASYNC A/B on qwen2-7b Q8_0 (its registry workload) and Q4_K_M, five gates (issue 20:
#          does staging the MMQ loads with cp.async lift the long_scoreboard stalls? ~2 x 5 min)
#   pr29   abtest pr 29284f5 vs HEAD (issue 20's ForwardInto; out/base29.tgz, /work/carry11)
#   draft  MINFER_DRAFT's real-acceptance pair (issue 23): tiny-code F16 target,
#          Q4_0 draft, both requantized on the machine from the bundle's Q8_0
#          (the trained model up to Q8_0 rounding; the 85 MiB F16 file does not fit a carry)
#   wide7  MINFER_MMVQ_WIDE A/B on qwen2-7b Q8_0 with its calibration (issue 19: can the wide
#          kernels over the GGUF bytes replace the repacked copy? ~12 min)
#   peer   build llama-bench from out/llama-src.tgz (/work/carry10; ~7 min, CPU) and run
#          scripts/perf.sh with it on the 7B depth rows: both engines' speed and peak memory at
#          context 32768 side by side (issues 19 and 20)
#   tc4k   MINFER_FA_PREFILL_TC A/B on qwen2-7b Q4_K_M at depth 4096 (abtest --depth, new in
#          session 11: bench -d N --fill zeros, so no process prefills its depth; ~5 min):
#          issue 20's tensor-core prefill attention where it acts
#   tcq3   MINFER_FA_PREFILL_TC on qwen3-0.6b Q8_0 at depth 0 and 4096 (issue 20's qwen3 prefill rows: its
#          hd128 attention was 34% of the pp512 window; ~5 min for both, with the calibration)
#   tc32   the same at depth 32128 (~6-8 min: 26 processes x (7B load + zero fill + tests))
#   asplit MINFER_ATTN_SPLITS=128 on its workload (qwen2-7b Q8_0 at depth 32128; issue 20's
#          decode rows at depth): the wider split of the lean decode attention (~6-8 min)
#   ncummq ncu of the prefill MMQ kernels alone (7B Q8_0 and Q4_K_M pp512, clocks not locked) with the
#          warp-stall reasons: what bounds minfer_mmq_* before issue 20's matmul work (~3 min)
#   draft7 the synthetic 7B pair, MINFER_DRAFT=qwen2-0.5b:Q8_0@qwen2-7b:Q4_K_M (~10 min, no calibration)
set -u
R=$PWD D=/tmp/dev S=/tmp/snap MD=/tmp/abtest-models
STEPS="${STEPS:-suite mmqa pr89 tc32 wide7}"
mkdir -p $D $MD
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
cal() { mkdir -p "$1/reports" && cp -r $R/reports/calibration "$1/reports/"; }
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
mkdir -p /tmp/nvcc
(t1=$(ms); scripts/build-kernels.sh /tmp/nvcc/head.fatbin >$D/bk-head.log 2>&1; echo "rc=$? ms=$(($(ms) - t1))" >>$D/bk-head.log
 for f in $XDG_CACHE_HOME/minfer/*/*/*.cubin; do [[ -f $f ]] && cuobjdump --dump-sass $f; done >/tmp/nvcc/nvrtc.sass 2>/dev/null
 bin/abtest sass-diff /tmp/nvcc/head.fatbin /tmp/nvcc/nvrtc.sass >$D/sass-one-vs-nvrtc.md 2>&1; echo "sass-diff rc=$?" >>$D/bk-head.log) &
BK=$!
K="MINFER_KERNELS=nvrtc@baseline=$S/bin/minfer-kernels.fatbin"
TYPES="Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K_M Q5_K_M"
cal /tmp/wk; cal /tmp/wk-k
for step in $STEPS; do
    echo "== $step $(ts)"
    case $step in
    suite)
        KERNELS=nvrtc OUT=$D/suite SUITE_TIMEOUT=10m TINY_CODE_GGUF=$S/bin/tiny-code-Q8_0.gguf scripts/device-suite.sh >$D/suite.out 2>&1
        rc=$?; echo "suite rc=$rc $(tail -n 1 $D/suite.out)"; [[ $rc -eq 0 ]] && SUITE_OK=1 ;;
    ptx)
        (JOBS=8 timeout 900 scripts/ptx-diff.sh /tmp/ptxd >$D/ptx-diff.log 2>&1; cp /tmp/ptxd/sass-*.md $D/ 2>/dev/null) &
        # Does NVRTC 13 take any spelling of nvcc's 32-bit shared pointers? (11.8: none)
        lib=/usr/local/cuda/lib64/libnvrtc.so.13 inc=/usr/local/cuda/targets/x86_64-linux/include
        for o in "" "--sharedmem32" "-Xnvvm=-sharedmem32" "-Xnvvm=-nvptx-short-ptr" "-Xcicc=-sharedmem32" "--nvptx-short-ptr" "-Xnvvm -sharedmem32"; do
            NVRTC_EXTRA="$o" python3 scripts/nvrtc-unit.py $lib . attention compute_90a /tmp/t.ptx $inc $inc/cccl >/tmp/o.txt 2>&1
            echo "nvrtc13 [$o] rc=$? $(tail -n 1 /tmp/o.txt | cut -c1-100) 64-bit shared loads $(grep -c 'ld.shared.f32.*%rd' /tmp/t.ptx 2>/dev/null), 32-bit $(grep -c 'ld.shared.f32.*\[%r[0-9]' /tmp/t.ptx 2>/dev/null)"
            rm -f /tmp/t.ptx
        done
        echo "ptx-diff started in the background" ;;
    kA | kB | kC | kF | kR)
        [[ -n "${BK_DONE:-}" ]] || { wait $BK; echo "head kernels: $(tail -n 2 $D/bk-head.log | tr '\n' ' ')"; cp /tmp/nvcc/head.fatbin bin/minfer-kernels.fatbin; BK_DONE=1; }
        L=""
        case $step in
        kA) for t in $TYPES; do L+="$K@qwen2-0.5b:$t@with=MINFER_MMVQ_SPLIT=1 "; done ;;
        kB) for t in $TYPES; do L+="$K@qwen2-0.5b:$t@with=MINFER_MMQ=0@with=MINFER_NO_FA_PREFILL=1 "; done ;;
        kC) for t in Q8_0 Q4_K_M; do L+="$K@qwen2-0.5b:$t@with=MINFER_MMVQ_WIDE=1@with=MINFER_FA_PREFILL_TC=1 "; done ;;
        kF) for t in F16 BF16 F32; do L+="$K@qwen2-0.5b:$t "; done ;;
        kR) for t in Q4_K_M Q5_0 Q5_K_M F16 Q4_1 Q5_1; do L+="$K@qwen2-0.5b:$t "; done ;;
        esac
        ab ab$step /tmp/wk-k "$L" ;;
    pin) ab abpin /tmp/wk "MINFER_PIN_STEP" ;;
    pr15 | pr29 | pr89)
        # abtest pr of a base build (out/base15.tgz: a8f3761, the head of issue 15's
        # last pr; out/base29.tgz: 29284f5) against this bundle's minfer.
        n=${step#pr}; wl=qwen2-0.5b:Q8_0,qwen2-0.5b:Q4_K_M
        [[ $n == 15 || $n == 89 ]] && wl=qwen2-0.5b:Q4_K_M,qwen2-0.5b:Q8_0,qwen3-0.6b:Q8_0 # session 10's rows
        rm -rf /tmp/pr$n && mkdir -p /tmp/pr$n/base /tmp/pr$n/head && tar -xzf $R/out/base$n.tgz -C /tmp/pr$n/base && cp bin/minfer /tmp/pr$n/head/ || { echo "no out/base$n.tgz"; continue; }
        cal /tmp/wk-pr
        timeout 120 /tmp/pr$n/base/minfer bench --device cuda -p 16 -n 4 -r 1 >/dev/null 2>$D/pr$n-warm.err
        timeout -k 15 400 bin/abtest pr --base /tmp/pr$n/base --head /tmp/pr$n/head --workloads $wl \
            --device cuda --synth-dir $MD --correctness-model $S/bin/tiny-code-Q8_0.gguf --correctness-model $S/bin/tiny-qwen3-code-Q8_0.gguf --suite-bin 'bin/*.test' \
            --out /tmp/wk-pr/reports/pr >$D/pr$n.log 2>&1
        echo "pr$n exit $? $(tail -n 2 $D/pr$n.log | head -n 1)"
        tar -C /tmp/wk-pr -czf $D/pr.tgz reports/pr 2>/dev/null ;;
    draft)
        bin/minfer quantize $S/bin/tiny-code-Q8_0.gguf $MD/tc-f16.gguf F16 >/dev/null 2>&1 &&
            bin/minfer quantize $S/bin/tiny-code-Q8_0.gguf $MD/tc-q4_0.gguf Q4_0 >/dev/null 2>&1 || { echo "quantize failed"; continue; }
        OUT=$D/abdraft WORK=/tmp/wk CALIBRATE= MODEL=$MD/tc-f16.gguf CORRECTNESS_MODEL=$S/bin/tiny-code-Q8_0.gguf MODEL_DIR=$MD \
            LEVERS="MINFER_DRAFT=$MD/tc-q4_0.gguf" scripts/abtest-device.sh >$D/abdraft.out 2>&1
        echo "abdraft exit $? $(ts)"; tar -C /tmp/wk -czf $D/abdraft-work.tgz reports 2>/dev/null ;;
    wide7) ab abwide7 /tmp/wk "MINFER_MMVQ_WIDE@qwen2-7b:Q8_0" "qwen2-7b:Q8_0" ;;
    peer)
        mkdir -p /tmp/llama.cpp && tar -xzf $R/out/llama-src.tgz -C /tmp/llama.cpp || { echo "no llama-src.tgz"; continue; }
        (cd /tmp/llama.cpp && cmake -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF >$D/llama-cmake.log 2>&1 &&
            cmake --build b --target llama-bench -j 15 >>$D/llama-cmake.log 2>&1); echo "llama-bench build rc=$? $(ts)"
        PEER=/tmp/llama.cpp/b/bin/llama-bench ROWS=qwen2-7b:Q8_0,qwen2-7b:Q4_K_M,qwen2-7b:Q4_K_M@d32128,qwen2-7b:Q8_0@d32128 REPS=2 \
            OUT=$D/perf MODEL_DIR=$MD scripts/perf.sh >$D/perf.out 2>&1
        echo "perf rc=$? $(ts)" ;;
    draftpp)
        [[ -f $MD/tc-f16.gguf ]] || bin/minfer quantize $S/bin/tiny-code-Q8_0.gguf $MD/tc-f16.gguf F16 >/dev/null 2>&1
        [[ -f $MD/tc-q4_0.gguf ]] || bin/minfer quantize $S/bin/tiny-code-Q8_0.gguf $MD/tc-q4_0.gguf Q4_0 >/dev/null 2>&1
        for i in 1 2 3; do for dr in none $MD/tc-q4_0.gguf $MD/tc-f16.gguf; do
            n=$(basename $dr .gguf)
            MINFER_LAUNCH_CENSUS=1 timeout 120 bin/minfer bench -m $MD/tc-f16.gguf --device cuda -p 512 -n 0 -r 5 --draft $dr \
                --format json -o $D/draftpp-$i-$n.json 2>$D/draftpp-$i-$n.err
            echo "draftpp $i $n rc=$? $(tr -d ' \n' <$D/draftpp-$i-$n.json 2>/dev/null | grep -o '"mean_tok_s":[^,]*\|"device_tok_s":\[[^]]*' | tr '\n' ' ')"
        done; done ;;
    ncummq)
        st=""; for r in long_scoreboard short_scoreboard barrier mio_throttle math_pipe_throttle wait not_selected lg_throttle dispatch_stall no_instruction selected; do
            st+="smsp__warp_issue_stalled_${r}_per_warp_active.pct "; done
        MODELS="qwen2-7b:Q8_0 qwen2-7b:Q4_K_M" PHASES=prefill NCU_KERNEL=regex:minfer_mmq_ PREFILL_SKIP=150 PREFILL_COUNT=16 \
            CLOCK_CONTROL=none KEEP_KERNELS=1 EXTRA_METRICS="$st sm__pipe_tensor_op_imma_cycles_active.avg.pct_of_peak_sustained_active" \
            MODEL_DIR=$MD OUT=$D/ncummq BUDGET=300 scripts/device-ncu.sh >$D/ncummq.out 2>&1
        echo "ncummq rc=$? $(tail -n 1 $D/ncummq.out)" ;;
    mmqa) [[ -n "${SUITE_OK:-}" ]] || { echo "mmqa skipped: the suite did not pass"; continue; }
        ab abmmqa /tmp/wk "MINFER_MMQ_ASYNC MINFER_MMQ_ASYNC@qwen2-7b:Q4_K_M" ;;
    tc4k) [[ -n "${SUITE_OK:-}" ]] || { echo "tc4k skipped: the suite did not pass"; continue; }; ab abtc4k /tmp/wk "MINFER_FA_PREFILL_TC@qwen2-7b:Q4_K_M@d4096" ;;
    tcq3) [[ -n "${SUITE_OK:-}" ]] || { echo "tcq3 skipped: the suite did not pass"; continue; }
        ab abtcq3 /tmp/wk "MINFER_FA_PREFILL_TC@qwen3-0.6b:Q8_0 MINFER_FA_PREFILL_TC@qwen3-0.6b:Q8_0@d4096" ;; # depth 0 calibrated in reports/calibration
    tc32) [[ -n "${SUITE_OK:-}" ]] || { echo "tc32 skipped: the suite did not pass"; continue; }; ab abtc32 /tmp/wk "MINFER_FA_PREFILL_TC@qwen2-7b:Q4_K_M@d32128" ;;
    asplit) ab abasplit /tmp/wk "MINFER_ATTN_SPLITS=128" ;;
    draft7) ab abdraft7 /tmp/wk "MINFER_DRAFT=qwen2-0.5b:Q8_0@qwen2-7b:Q4_K_M" ;;  # no calibration: 11 7B A/A rounds cost ~10 min; 9 rounds, power from their own noise
    *) echo "unknown step $step" ;;
    esac
done
wait
echo "drive done $(ts)"
touch $D/DONE
