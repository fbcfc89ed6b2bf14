#!/usr/bin/env bash
# ncu of the decode attention at depth 32128, one-warp vs grouped (staged) form: why the staged form lost.
D=$OUT S=/tmp/snap MD=/tmp/abtest-models
mkdir -p $S/bin $MD && tar -xzf bin/bundle.tgz -C $S/bin && tar -xzf $S/bin/src.tgz -C $S && cd $S
export XDG_CACHE_HOME=/tmp/xdg PATH=$PATH:/usr/local/cuda/bin
m=$MD/qwen2-7b-Q8_0-seed1.gguf
[[ -f $m ]] || { t0=$(date +%s); bin/minfer synth --shape qwen2-7b --type Q8_0 --seed 1 -o $m >$D/synth.log 2>&1; echo "synth rc=$? $(( $(date +%s)-t0 )) s"; }
for g in 0 1; do
  MINFER_ATTN_DECODE_GQA=$g MINFER_NO_CUDA_GRAPH=1 timeout 200 ncu --clock-control none --set full -k regex:minfer_attn_decode2 \
    --launch-skip 56 --launch-count 2 -o $D/ncu-dec-g$g bin/minfer bench --device cuda -m $m -p 0 -n 4 -d 32128 --fill zeros \
    -c 32768 -r 1 --format json -o $D/ncu-dec-g$g.json >$D/ncu-dec-g$g.out 2>&1
  echo "ncu g$g rc=$?"
  ncu --import $D/ncu-dec-g$g.ncu-rep --page details >$D/ncu-dec-g$g.txt 2>&1; rm -f $D/ncu-dec-g$g.ncu-rep
done
