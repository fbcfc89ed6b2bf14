#!/usr/bin/env bash
# Session 16's device driver: issue 25's nvcc-against-NVRTC A/Bs over the MIX
# workloads (every weight type in one model, cycled by block), then issue 20's
# MINFER_MMQ_ASYNC on its 7B workload. Bundle: `SNAPSHOT=1 TINY=Q8_0
# scripts/device-bundle.sh` with bin/lib in place; carry ["bin"]. One setsid
# run, polled by chained calls (each poll tars /tmp/dev into $OUT).
#   m1  K on qwen2-0.5b:MIX: the default paths (mmq of every type, both tiles;
#       mmvqr / mmvq; mmv and gemm of F16 / BF16 / F32; TC prefill attention hd64;
#       qkv_rope_store, rms_norm)
#   m2  K on qwen3-0.6b:MIX: hd128 TC prefill attention, qkv_norm_rope_store, K-quants
#       on every matrix (rows of 1024)
#   m3  K on qwen2-0.5b:MIX with MINFER_MMVQ_SPLIT=1, MINFER_MMQ_ASYNC=1, MINFER_FA_PREFILL_TC=0:
#       split decode kernels, async MMQ, attn_prefill2 hd64
#   m4  K on qwen2-0.5b:MIX with MINFER_MMQ=0, MINFER_NO_FA_PREFILL=1: gemm_<type>, attn_f32
#   m5  K on qwen3-0.6b:MIX with MINFER_FA_PREFILL_TC=0, MINFER_MMVQ_WIDE=1: attn_prefill2 hd128, mmvqw
#   mmqa MINFER_MMQ_ASYNC on qwen2-7b:Q8_0 (its registry workload), five gates
set -u
R=$PWD D=/tmp/dev S=/tmp/snap MD=/tmp/abtest-models
STEPS="${STEPS:-m1 m2 m3 m4 m5 mmqa}"
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
mkdir -p /tmp/nvcc
t1=$(ms); scripts/build-kernels.sh /tmp/nvcc/head.fatbin >$D/bk-head.log 2>&1; echo "build-kernels rc=$? ms=$(($(ms) - t1))"
for f in $XDG_CACHE_HOME/minfer/*/*/*.cubin; do [[ -f $f ]] && cuobjdump --dump-sass $f; done >/tmp/nvcc/nvrtc.sass 2>/dev/null
bin/abtest sass-diff /tmp/nvcc/head.fatbin /tmp/nvcc/nvrtc.sass >$D/sass-one-vs-nvrtc.md 2>&1; echo "sass-diff rc=$? $(sed -n 3p $D/sass-one-vs-nvrtc.md)"
cp /tmp/nvcc/head.fatbin bin/minfer-kernels.fatbin
K="MINFER_KERNELS=nvrtc@baseline=$S/bin/minfer-kernels.fatbin"
cal /tmp/wk-k; cal /tmp/wk
for step in $STEPS; do
    echo "== $step $(ts)"
    case $step in
    m1) ab abm1 /tmp/wk-k "$K@qwen2-0.5b:MIX" ;;
    m2) ab abm2 /tmp/wk-k "$K@qwen3-0.6b:MIX" ;;
    m3) ab abm3 /tmp/wk-k "$K@qwen2-0.5b:MIX@with=MINFER_MMVQ_SPLIT=1@with=MINFER_MMQ_ASYNC=1@with=MINFER_FA_PREFILL_TC=0" ;;
    m4) ab abm4 /tmp/wk-k "$K@qwen2-0.5b:MIX@with=MINFER_MMQ=0@with=MINFER_NO_FA_PREFILL=1" ;;
    m5) ab abm5 /tmp/wk-k "$K@qwen3-0.6b:MIX@with=MINFER_FA_PREFILL_TC=0@with=MINFER_MMVQ_WIDE=1" ;;
    mmqa) ab abmmqa /tmp/wk "MINFER_MMQ_ASYNC" ;;
    *) echo "unknown step $step" ;;
    esac
done
echo "drive done $(ts)"
touch $D/DONE
