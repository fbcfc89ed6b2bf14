#!/usr/bin/env bash
# Session 17's device driver (drive24-next plus a one-copy probe first). Bundle at main's HEAD:
# `SNAPSHOT=1 TINY=Q8_0 scripts/device-bundle.sh` with bin/lib in place (libdw1,
# libelf1 from `apt-get download`); carry ["bin", "out/llama-src.tgz"] (under 64 MiB together); move reports/ aside keeping
# reports/calibration. One setsid run, polled by chained calls: each poll waits
# for a step's "exit" line in /tmp/dev/drive.log and tars /tmp/dev into $OUT.
# Do not `pkill -f` a pattern that the poll's own command line contains.
# Costs measured 2026-12-06 (H200): cold NVRTC bench 19 s, nvcc one-unit build
# 70 s, a 0.5b MIX A/B 2.3 min when its suite is cached, 4.5-5 min when its
# --with settings need a suite run of their own.
#
# Issue 25: MINFER_KERNELS (nvcc file vs NVRTC, same sources) over the MIX
# workloads. Session 16's two PASS runs (m1, m2) were of kernel sources d227bee, and
# 6794e42 / 8d59a47 changed the sources since, so every run is of this drive: r1 and r2
# are m1 and m2 again. The settings are chosen so every one of the changed functions
# (94 in reports/kernels/2026-12-06-ff1d7b5/sass-one-vs-nvrtc.md, more since) runs in some arm B
# (routes: cuda/mmq.go mmqPlanFor, cuda/attn_prefill2.go attnPrefill2BM,
# cuda/mmvq.go mmvqFromQ8 / mmvqQKVFromQ8, cuda/mmvq_split.go):
#   r1  qwen2-0.5b MIX (default settings: this run's suite is the default-settings suite)
#   r2  qwen3-0.6b MIX
#   r3  qwen2-0.5b MIX pp2048, SPLIT=1 MMQ_ASYNC=1 FA_PREFILL_TC=0: async MMQ both tiles,
#       attn_prefill2_hd64_bm64, split res/qkv (repacked)           (session 16's m3 again)
#   r4  qwen2-0.5b MIX, MMQ=0 NO_FA_PREFILL=1: gemm_<type>, attn_f32  (m4 again)
#   r5  qwen3-0.6b MIX pp2048, FA_PREFILL_TC=0 MMVQ_WIDE=1 MMQ_ASYNC=1: attn_prefill2_hd128_bm64,
#       mmvqw fused/res, async big-tile K-quants                      (m5 again, wider)
#   r6  qwen3-0.6b MIX, SPLIT=1 MMVQ_REPACK=0: mmvq_qkv_s_* of every type, mmvq_res_s_q8_0/q6_k
#   r7  qwen3-0.6b MIX pp2048, SPLIT=1 FUSE_RESIDUAL=0: mmvq_s_*, mmvqr_s_*, big-tile K-quant MMQ
#   r8  qwen2-0.5b MIX pp1024, FA_PREFILL_TC=0 MMVQ_WIDE=1 FUSE_RESIDUAL=0: attn_prefill2_hd64_bm32,
#       mmvqw_q6_k / _q8_0 plain
# Issue 19 item 3 (one copy of the weights; CUDA code new in session 16, emulator-checked only):
#   onecopy MINFER_ONE_COPY on its registry workload (qwen2-7b Q8_0), five gates: its suite gate runs
#          the whole device suite with one copy, including TestOneCopyDevice_* (~11 min)
#   peer   llama-bench built from out/llama-src.tgz in the background from the start (carry
#          out/llama-src.tgz too; out/llama-src.README has the commit and the commands), then
#          scripts/perf.sh with PEER on the 7B rows at context 32768 with MINFER_ONE_COPY=1 and
#          MINFER_EMBED_HOST=1 (predicted: 7B Q8_0 ~9,840 MiB against the reference's 9,877 MiB): both
#          engines' speed and peak memory side by side (issue 19's memory target, issue 20's ratios)
#   suite  the device suite at HEAD with the default settings (NVRTC)
# Also, CPU only, in the background at the start: can nvcc be told to address __shared__ with
# 64-bit pointers as NVRTC 13 does (reports/kernels/2026-12-02-ptx-diff-cuda13: NVRTC refuses every
# spelling of the reverse)? Each spelling's PTX of the attention unit, its ld.shared through 64-bit
# and 32-bit registers counted ($D/nvccptr.log). If one spelling gives 64-bit ones and
# scripts/ptx-diff.sh with NVCC_EXTRA=<it> then shows nvcc's SASS equal to NVRTC's, issue 25's
# differences vanish at the source and build-kernels.sh takes the option.
# Order: issue 19 item 3 first (onecopy ~11 min, embedh ~11 min, peer 10-20 min: more than one session's 30
# minutes, so STEPS="onecopy peer" in one session and embedh in the next is the fallback), then issue 25's
# runs (r1-r8, cover: a session of their own, with the kernel sources frozen), then MMQ_ASYNC and WIDE.
# then issue 20 / 19 (lost with session 15's cut-off):
#   mmqa  MINFER_MMQ_ASYNC on qwen2-7b Q8_0 (its registry workload)
#   wide7 MINFER_MMVQ_WIDE on qwen2-7b Q8_0 (session 15: exit 1, report lost)
#   embedh MINFER_EMBED_HOST on qwen2-7b Q8_0
#   cover  abtest sass-diff --runs over every MINFER_KERNELS report of these sources: which of the
#          changed functions a PASS run launched in both arms (exit 0: all of them). Put it after
#          the r steps (STEPS="r3 ... r8 cover mmqa ...").
set -u
R=$PWD D=/tmp/dev S=/tmp/snap MD=/tmp/abtest-models
STEPS="${STEPS:-onecopy embedh peer r1 r2 r3 r4 r5 r6 r7 r8 cover mmqa wide7}"
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
OCFAIL=0
if [[ " $STEPS " == *" onecopy "* || " $STEPS " == *" peer "* ]]; then
    echo "== ocprobe $(ts)"
    KERNELS=nvrtc RUN='OneCopy|Repack|DeviceMemory' OUT=$D/ocprobe SUITE_TIMEOUT=6m TINY_CODE_GGUF=$S/bin/tiny-code-Q8_0.gguf \
        scripts/device-suite.sh >$D/ocprobe.out 2>&1
    rc=$?; echo "ocprobe rc=$rc $(tail -n 1 $D/ocprobe.out) $(ts)"; [[ $rc -ne 0 ]] && OCFAIL=1
fi
mkdir -p /tmp/nvcc
t1=$(ms); scripts/build-kernels.sh /tmp/nvcc/head.fatbin >$D/bk-head.log 2>&1; echo "build-kernels rc=$? ms=$(($(ms) - t1))"
for f in $XDG_CACHE_HOME/minfer/*/*/*.cubin; do [[ -f $f ]] && cuobjdump --dump-sass $f; done >/tmp/nvcc/nvrtc.sass 2>/dev/null
bin/abtest sass-diff /tmp/nvcc/head.fatbin /tmp/nvcc/nvrtc.sass >$D/sass-one-vs-nvrtc.md 2>&1; echo "sass-diff rc=$? $(sed -n 3p $D/sass-one-vs-nvrtc.md)"
cp /tmp/nvcc/head.fatbin bin/minfer-kernels.fatbin
K="MINFER_KERNELS=nvrtc@baseline=$S/bin/minfer-kernels.fatbin"
(for o in "" "-Xcicc -nvptx-short-ptr=false" "-Xcicc -nvptx-short-ptr=0" "-Xcicc --nvptx-short-ptr=false" \
    "-Xcicc -sharedmem32=false" "-Xcicc -no-sharedmem32" "-Xptxas -no-short-ptr"; do
    rm -f /tmp/nvccptr.ptx
    nvcc -ptx -arch=sm_90a -std=c++17 -O3 $o -I cuda/kernels cuda/kernels/attention.cu -o /tmp/nvccptr.ptx >/tmp/nvccptr.err 2>&1
    echo "nvcc [$o] rc=$? 64-bit ld.shared $(grep -c 'ld.shared.*\[%rd' /tmp/nvccptr.ptx 2>/dev/null) 32-bit $(grep -c 'ld.shared.*\[%r[0-9]' /tmp/nvccptr.ptx 2>/dev/null) $(head -c 160 /tmp/nvccptr.err | tr '\n' ' ')"
done >$D/nvccptr.log 2>&1) &
cal /tmp/wk-k; cal /tmp/wk
for step in $STEPS; do
    echo "== $step $(ts)"
    case $step in
    r1) ab abr1 /tmp/wk-k "$K@qwen2-0.5b:MIX" ;;
    r2) ab abr2 /tmp/wk-k "$K@qwen3-0.6b:MIX" ;;
    r3) ab abr3 /tmp/wk-k "$K@qwen2-0.5b:MIX@pp2048@with=MINFER_MMVQ_SPLIT=1@with=MINFER_MMQ_ASYNC=1@with=MINFER_FA_PREFILL_TC=0" ;;
    r4) ab abr4 /tmp/wk-k "$K@qwen2-0.5b:MIX@with=MINFER_MMQ=0@with=MINFER_NO_FA_PREFILL=1" ;;
    r5) ab abr5 /tmp/wk-k "$K@qwen3-0.6b:MIX@pp2048@with=MINFER_FA_PREFILL_TC=0@with=MINFER_MMVQ_WIDE=1@with=MINFER_MMQ_ASYNC=1" ;;
    r6) ab abr6 /tmp/wk-k "$K@qwen3-0.6b:MIX@with=MINFER_MMVQ_SPLIT=1@with=MINFER_MMVQ_REPACK=0" ;;
    r7) ab abr7 /tmp/wk-k "$K@qwen3-0.6b:MIX@pp2048@with=MINFER_MMVQ_SPLIT=1@with=MINFER_FUSE_RESIDUAL=0" ;;
    r8) ab abr8 /tmp/wk-k "$K@qwen2-0.5b:MIX@pp1024@with=MINFER_FA_PREFILL_TC=0@with=MINFER_MMVQ_WIDE=1@with=MINFER_FUSE_RESIDUAL=0" ;;
    cover)
        bin/abtest sass-diff --runs '/tmp/wk-k/reports/MINFER_KERNELS/*.json' \
            /tmp/nvcc/head.fatbin /tmp/nvcc/nvrtc.sass >$D/sass-cover.md 2>&1
        echo "cover rc=$? $(tail -n 3 $D/sass-cover.md | tr '\n' ' ' | cut -c1-400)" ;;
    onecopy) if [[ $OCFAIL == 1 ]]; then echo "onecopy skipped: ocprobe failed"; else ab abonecopy /tmp/wk "MINFER_ONE_COPY"; fi ;;
    peer)
        for i in $(seq 240); do grep -q "llama-bench build rc=" $D/llama-build.log 2>/dev/null && break; sleep 5; done; echo "$(tail -n 1 $D/llama-build.log)"
        OC=1; [[ $OCFAIL == 1 ]] && OC=0; echo "peer with MINFER_ONE_COPY=$OC"
        MINFER_ONE_COPY=$OC MINFER_EMBED_HOST=1 PEER=/tmp/llama/b/bin/llama-bench ROWS=qwen2-7b:Q8_0@d32128,qwen2-7b:Q4_K_M@d32128 REPS=2 PERF_TIMEOUT=1200 \
            OUT=$D/perf MODEL_DIR=$MD scripts/perf.sh >$D/perf.out 2>&1
        echo "perf rc=$? $(ts)" ;;
    suite)
        KERNELS=nvrtc OUT=$D/suite SUITE_TIMEOUT=10m TINY_CODE_GGUF=$S/bin/tiny-code-Q8_0.gguf scripts/device-suite.sh >$D/suite.out 2>&1
        echo "suite rc=$? $(tail -n 1 $D/suite.out)" ;;
    mmqa) ab abmmqa /tmp/wk "MINFER_MMQ_ASYNC" ;;
    wide7) ab abwide7 /tmp/wk "MINFER_MMVQ_WIDE" ;;
    embedh) ab abembedh /tmp/wk "MINFER_EMBED_HOST" ;;
    *) echo "unknown step $step" ;;
    esac
done
echo "drive done $(ts)"
touch $D/DONE
