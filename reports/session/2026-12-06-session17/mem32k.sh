#!/usr/bin/env bash
# Session 17's last minutes: minfer's peak device memory on qwen2-7b Q8_0 at context 32768 (d32128), one copy
# (explicit, the a3c5286 bundle), with and without the host-mapped embedding. nvidia-smi per-process sampling
# every 50 ms beside the engine's own device_memory.
set -u
mkdir -p /tmp/s && tar -xzf bin/bundle.tgz -C /tmp/s && cd /tmp/s || exit 2
export XDG_CACHE_HOME=/tmp/xdg
t0=$(date +%s); ./minfer synth --shape qwen2-7b --type Q8_0 -o /tmp/m.gguf >$OUT/synth.log 2>&1; echo "synth rc=$? $(( $(date +%s) - t0 )) s" | tee -a $OUT/log
for eh in 1 0; do
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 50 >$OUT/smi-eh$eh.txt 2>&1 &
    sp=$!
    t0=$(date +%s)
    MINFER_ONE_COPY=1 MINFER_EMBED_HOST=$eh timeout 110 ./minfer bench --device cuda -m /tmp/m.gguf -c 32768 -p 512 -n 128 -d 32128 -r 1 \
        --format json -o $OUT/bench-eh$eh.json 2>$OUT/bench-eh$eh.err
    echo "bench EMBED_HOST=$eh rc=$? $(( $(date +%s) - t0 )) s peak MiB $(cut -d, -f2 $OUT/smi-eh$eh.txt | sort -n | tail -1)" | tee -a $OUT/log
    kill $sp
done
