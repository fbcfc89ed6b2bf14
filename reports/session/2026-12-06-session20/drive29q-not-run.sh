#!/usr/bin/env bash
# Session 20's last device minutes: the lean tensor-core prefill attention (MINFER_FA_PREFILL_LEAN) on a GPU for the
# first time. Its device tests (NVRTC), then per-kernel device time of a pp512 chunk at depth with the lever off and
# on (op timing, capture off): a forecast check, not a speed claim (the A/B is next session's). Writes into $OUT as it
# goes, so a cut run still returns what it did.
set -u
D=$OUT S=/tmp/snap MD=/tmp/abtest-models
exec >>$D/drive.log 2>&1
ts() { date -u +%T; }
echo "start $(ts)"
mkdir -p $S/bin $MD && tar -xzf bin/bundle.tgz -C $S/bin && tar -xzf $S/bin/src.tgz -C $S && rm $S/bin/src.tgz || { echo "setup failed"; exit 2; }
cd $S
export XDG_CACHE_HOME=/tmp/xdg LC_ALL=C PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
KERNELS=nvrtc RUN='AttnPrefillTC|FAPrefillLean' OUT=$D/probe SUITE_TIMEOUT=2m TINY_CODE_GGUF=$S/bin/tiny-code-Q8_0.gguf \
    scripts/device-suite.sh >$D/probe.out 2>&1
rc=$?; echo "probe rc=$rc $(tail -n 1 $D/probe.out) $(ts)"
[[ $rc -ne 0 ]] && { echo "PROBE FAILED: no timing"; exit 1; }
for shape in ${SHAPES:-qwen3-0.6b}; do
    m=$MD/$shape-Q8_0-seed1.gguf
    t0=$(date +%s); timeout 150 bin/minfer synth --shape $shape --type Q8_0 --seed 1 -o $m >$D/synth-$shape.log 2>&1
    echo "synth $shape rc=$? $(( $(date +%s) - t0 )) s"
    for d in 4096 32128; do
        for lean in 0 1; do
            n=op-$shape-d$d-lean$lean
            MINFER_FA_PREFILL_LEAN=$lean MINFER_OP_TIMING=1 MINFER_NO_PREFILL_CAPTURE=1 timeout 120 bin/minfer bench --device cuda -m $m \
                -p 512 -n 0 -d $d --fill zeros -c 32768 -r 2 --format json -o $D/$n.json 2>$D/$n.err
            echo "$n rc=$? $(grep -o '"mean_tok_s":[0-9.]*' $D/$n.json | head -1) $(ts)"
        done
    done
done
echo "done $(ts)"
