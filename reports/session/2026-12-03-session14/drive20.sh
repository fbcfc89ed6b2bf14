#!/usr/bin/env bash
# Session 14, call 2: MINFER_FA_PREFILL_TC on qwen3-0.6b Q8_0 again, parity and
# greedy on the trained qwen3 model (f5dc882: one correctness model per
# architecture); the first run (8969323) fell back to the random-weight model.
set -u
R=$PWD D=/tmp/dev S=/tmp/snap MD=/tmp/abtest-models
mkdir -p $D $MD
exec >>$D/drive.log 2>&1
echo "drive start $(date -u +%T)"
rm -rf $S && mkdir -p $S/bin && tar -xzf bin/bundle.tgz -C $S/bin && tar -xzf $S/bin/src.tgz -C $S && rm $S/bin/src.tgz || { echo "setup failed"; touch $D/DONE; exit 2; }
cd $S
export XDG_CACHE_HOME=/tmp/xdg LC_ALL=C PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/wk/reports && cp -r $R/reports/calibration /tmp/wk/reports/
OUT=$D/abtcq3 WORK=/tmp/wk CALIBRATE= CORRECTNESS_MODEL=$S/bin/tiny-qwen3-code-Q8_0.gguf MODEL_DIR=$MD \
    LEVERS="MINFER_FA_PREFILL_TC@qwen3-0.6b:Q8_0@d4096 MINFER_FA_PREFILL_TC@qwen3-0.6b:Q8_0" \
    scripts/abtest-device.sh >$D/abtcq3.out 2>&1
echo "abtcq3 exit $? $(date -u +%T)"
echo "drive done $(date -u +%T)"
touch $D/DONE
