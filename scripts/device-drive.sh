#!/usr/bin/env bash
# device-drive.sh: one session's unattended run on the GPU machine. It unpacks bin/bundle.tgz into
# /tmp/snap (HEAD's sources and binaries), records nvidia-smi, times a cold NVRTC bench, runs the device
# tests (the probe), then the STEPS in the order given. Everything goes under /tmp/dev: drive.log (one
# line with " exit N" or "rc=N" per finished piece of work), each step's output, and DONE at the end.
# A session records only its STEPS (and PROBE_RUN) and the commit it ran.
#
#   STEPS="kq ncug" [PROBE_RUN='Gemm16|AttnDecode2'] scripts/device-drive.sh [--check]
#   scripts/device-drive.sh          lists the steps and exits 2, as an unknown step does; both are
#                                    refused before anything is written. --check stops after that check.
#
# PROBE_RUN is the probe's -test.run filter (default: every device test). A probe failure names the
# failing tests and skips every A/B step (each A/B's suite gate runs all the device tests); the
# synthesis, quick-bench and ncu steps still run.
#
# Here (the CPU machine), at the commit to test, with bin/lib in place (abtest-device.sh's header):
#   SNAPSHOT=1 TINY=Q8_0 scripts/device-bundle.sh
# A call carries at most 64 MiB with the tree: move reports/ aside but keep reports/calibration (the
# A/Bs read it), move out/ aside, leave only bundle.tgz in bin/, and carry ["bin"]. A slim bundle (no
# models, no lib) works where an earlier call on the same machine left them in /tmp/stash/: each file
# there that the bundle lacks is copied into bin/.
#
# There, check the steps where the call shows the answer, then start the drive detached:
#   export STEPS="kq ncug"; bash scripts/device-drive.sh --check &&
#       { setsid nohup bash scripts/device-drive.sh </dev/null >/dev/null 2>&1 & }
# and poll it in chained calls (the machine goes back 30 s after a call returns, and the drive with it):
#   bash scripts/device-poll.sh SECONDS N
# N counts the " exit "/"rc=" lines to wait for: the cold bench and the probe print two before the
# first step, the nvcc build two more (before the first r-step or cover), then one per step (five for prof, four for qb, four for qbk, two for qg, one per 7B file for qd).
# Stop it early: `kill -- -$(cat /tmp/dev/pid)`, then `pkill -x minfer; pkill -x abtest` (never
# `pkill -f abtest`: it matches the calling shell's own command line).
# Skip the running A/B step and go on with the next: `bash scripts/device-drive.sh --skip`. It stops that
# step's abtest and minfer processes once and waits for the step's exit line, so that a second stop cannot
# land on the next step (session 31 lost an A/B to a repeated pkill 3 s after its start).
set -u

STEP_NAMES="kq fnq aq8 qkr nmv nmvr qkvx embedh dtc dtc0 dtcn syn synk qb qbk qg qt qt0 qtm qt8 qt16 qtn qtr qd r1 r2 r3 r4 r5 r6 r7 r8 r9 r10 cover ncug ncut ncud2 ncudt ncudt0 ncudn prof peer p20 p20t suite"

# A/B steps: the lever, run by scripts/abtest-device.sh at the workload its registry entry declares.
declare -A LEVER=(
    [kq]=MINFER_MMQ_F16_KQ [fnq]=MINFER_FUSE_NORM_Q8 [aq8]=MINFER_FUSE_ATTN_Q8 [qkr]=MINFER_FUSE_QKV_ROPE
    [qkvx]=MINFER_MMVQ_QKV_MIXED [embedh]=MINFER_EMBED_HOST [dtc]=MINFER_ATTN_DECODE_TC
    # dtc0: the same lever at depth 0 (its declared workload is depth 32128; a default must not cost short contexts).
    # Routed by depth (MINFER_ATTN_DECODE_TC_FROM, default 12288), arm B runs the lean kernels at depth 0, so this
    # A/B's ab and profile liveness fail there by design; qtr times the route from depth 0 instead.
    [dtc0]=MINFER_ATTN_DECODE_TC@qwen2-7b:Q8_0
    # dtcn: the 32-cell tiles against the 64-cell ones, both arms on the tensor-core decode (at its declared workload)
    [dtcn]=MINFER_ATTN_DECODE_TC_NARROW@with=MINFER_ATTN_DECODE_TC=1
    # nmv: the decode q/k/v and gate/up matvecs norm their own row (at the defaults); nmvr: the same with the
    # q/k/v rope/store folded in on both arms, the form the issue 20 row's 147 launches a token need.
    [nmv]=MINFER_FUSE_NORM_MMVQ [nmvr]=MINFER_FUSE_NORM_MMVQ@with=MINFER_FUSE_QKV_ROPE=1
)
# r-steps (issue 25): the MINFER_KERNELS A/B, arm A nvcc's kernels file (built here first), arm B the
# NVRTC build, at these workloads and WITH settings (r10: the defaults at pp2048, where the decode
# attention's combine takes all 64 splits).
declare -A RSPEC=(
    [r1]="qwen2-0.5b:MIX"
    [r2]="qwen3-0.6b:MIX"
    [r3]="qwen2-0.5b:MIX@pp2048@with=MINFER_MMVQ_SPLIT=1@with=MINFER_MMQ_ASYNC=1@with=MINFER_FA_PREFILL_TC=0"
    [r4]="qwen2-0.5b:MIX@with=MINFER_MMQ=0@with=MINFER_NO_FA_PREFILL=1"
    [r5]="qwen3-0.6b:MIX@pp2048@with=MINFER_FA_PREFILL_TC=0@with=MINFER_MMQ_ASYNC=1"
    [r6]="qwen3-0.6b:MIX@with=MINFER_MMVQ_SPLIT=1@with=MINFER_MMVQ_REPACK=0"
    [r7]="qwen3-0.6b:MIX@pp2048@with=MINFER_MMVQ_SPLIT=1@with=MINFER_FUSE_RESIDUAL=0"
    [r8]="qwen2-0.5b:MIX@pp1024@with=MINFER_FA_PREFILL_TC=0@with=MINFER_FUSE_RESIDUAL=0"
    [r9]="qwen2-0.5b:MIX@with=MINFER_ONE_COPY=0"
    [r10]="qwen3-0.6b:MIX@pp2048"
)
# ncu steps: ncu --set full (clocks left to the driver) on launches of one kernel in a qwen2-7b Q8_0 bench,
# one row a profile: STEP|NAME|ENV|KERNEL REGEX|LAUNCH SKIP|LAUNCH COUNT|BENCH ARGS. ncug keeps its
# name (-d0) from the drives before this script, whose benches ran at depth 32128 too.
NCU_RUNS=(
    "ncug|ncu-gemm16-d0|MINFER_NO_PREFILL_CAPTURE=1|minfer_gemm16_q8_0r|20|3|-p 512 -n 0 -d 32128"
    "ncut|ncu-prefill-tc-d32128|MINFER_NO_PREFILL_CAPTURE=1|minfer_attn_prefill_tc_hd128|28|3|-p 512 -n 0 -d 32128"
    "ncud2|ncu-decode2l-d32128|MINFER_NO_CUDA_GRAPH=1|minfer_attn_decode2l_hd128_f16|56|2|-p 0 -n 4 -d 32128"
    # ncudt / ncudt0 (and the quick benches' tc arms): MINFER_ATTN_DECODE_TC_FROM=0, the tensor-core kernel at
    # every depth, not only from the route's threshold
    "ncudt|ncu-decode-tc-d32128|MINFER_NO_CUDA_GRAPH=1 MINFER_ATTN_DECODE_TC=1 MINFER_ATTN_DECODE_TC_FROM=0|minfer_attn_decode_tc_|112|4|-p 0 -n 4 -d 32128"
    # ncudt0: the same at depth 0, where one split a KV head does one tile and took ~14 us a launch (session 31's
    # op timing) against ~2 us for the lean kernel: its stall reasons say what one warp waits on
    "ncudt0|ncu-decode-tc-d0|MINFER_NO_CUDA_GRAPH=1 MINFER_ATTN_DECODE_TC=1 MINFER_ATTN_DECODE_TC_FROM=0|minfer_attn_decode_tc_|112|4|-p 0 -n 4"
    # ncudn: ncudt's launches of the 32-cell form (MINFER_ATTN_DECODE_TC_NARROW): its forecast is 22-28 us, >= 2.4 TB/s
    "ncudn|ncu-decode-tc32-d32128|MINFER_NO_CUDA_GRAPH=1 MINFER_ATTN_DECODE_TC=1 MINFER_ATTN_DECODE_TC_FROM=0 MINFER_ATTN_DECODE_TC_NARROW=1|minfer_attn_decode_tc32_|112|4|-p 0 -n 4 -d 32128"
)
# Profile steps: MINFER_OP_TIMING=1 benches of the 7B files (per-op times in the JSON), one row a bench:
# STEP|NAME|ENV|MODEL|BENCH ARGS. Decode rows run with graphs off so that every launch is timed.
PROF_RUNS=(
    "prof|prof-qwen2-7b-Q8_0-seed1-d0|MINFER_NO_PREFILL_CAPTURE=1|qwen2-7b-Q8_0|-p 512 -n 0 -d 0"
    "prof|prof-qwen2-7b-Q8_0-seed1-d32128|MINFER_NO_PREFILL_CAPTURE=1|qwen2-7b-Q8_0|-p 512 -n 0 -d 32128"
    "prof|prof-qwen2-7b-Q4_K_M-seed1-d0|MINFER_NO_PREFILL_CAPTURE=1|qwen2-7b-Q4_K_M|-p 512 -n 0 -d 0"
    "prof|prof-qwen2-7b-Q4_K_M-seed1-d32128|MINFER_NO_PREFILL_CAPTURE=1|qwen2-7b-Q4_K_M|-p 512 -n 0 -d 32128"
    "prof|prof-decode-qwen2-7b-Q8_0-d32128|MINFER_NO_CUDA_GRAPH=1|qwen2-7b-Q8_0|-p 0 -n 32 -d 32128"
)
# Synthesis steps: write a 7B model into the A/Bs' model dir (which they reuse) so that timing steps can
# run before any A/B: STEP|SHAPE|TYPE.
SYN_RUNS=("syn|qwen2-7b|Q8_0" "synk|qwen2-7b|Q4_K_M")
# Quick benches (no claim: one process a setting, interleaved twice; an A/B is the claim): STEP|MODEL|
# NAME=SETTINGS ... (the settings space-separated within a name, names separated by '|'). qb: the Q8_0
# prefill's f16 GEMM over the one copy against the int8 MMQ that two copies keep (MINFER_ONE_COPY=0).
QB_RUNS=(
    "qb|qwen2-7b-Q8_0|mmq=MINFER_ONE_COPY=0|f16=MINFER_ONE_COPY=1"
    "qbk|qwen2-7b-Q4_K_M|mmq=MINFER_MMQ_F16_KQ=0|kq=MINFER_MMQ_F16_KQ=1"
    "qg|qwen2-7b-Q8_0|lean="
    "qt|qwen2-7b-Q8_0|lean=|tc=MINFER_ATTN_DECODE_TC=1 MINFER_ATTN_DECODE_TC_FROM=0"
    "qt0|qwen2-7b-Q8_0|lean=|tc=MINFER_ATTN_DECODE_TC=1 MINFER_ATTN_DECODE_TC_FROM=0"
    "qtm|qwen2-7b-Q8_0|lean=|tc=MINFER_ATTN_DECODE_TC=1 MINFER_ATTN_DECODE_TC_FROM=0"
    "qt8|qwen2-7b-Q8_0|lean=|tc=MINFER_ATTN_DECODE_TC=1 MINFER_ATTN_DECODE_TC_FROM=0"
    "qt16|qwen2-7b-Q8_0|lean=|tc=MINFER_ATTN_DECODE_TC=1 MINFER_ATTN_DECODE_TC_FROM=0"
    "qtn|qwen2-7b-Q8_0|tc=MINFER_ATTN_DECODE_TC=1 MINFER_ATTN_DECODE_TC_FROM=0|narrow=MINFER_ATTN_DECODE_TC=1 MINFER_ATTN_DECODE_TC_FROM=0 MINFER_ATTN_DECODE_TC_NARROW=1"
    "qtr|qwen2-7b-Q8_0|lean=MINFER_LAUNCH_CENSUS=1|route=MINFER_ATTN_DECODE_TC=1 MINFER_LAUNCH_CENSUS=1"
)
# A quick bench's minfer bench arguments where not pp512 (qg: decode at depth at the defaults, the lean decode
# attention; its grouped and first forms and 128 splits, timed beside it in session 28, lost and were deleted).
# qt / qt0 / qtm: the tensor-core decode attention (MINFER_ATTN_DECODE_TC) beside the lean one at depth 32128, 0
# and 4096 (where two tiles a split leave 132 one-warp blocks); qt8 / qt16 at 8192 and 16384, all at context 32768:
# where the two cross (H100: TC -10% at depth 0, -2.7% at 4096, -0.6% at 8192, +0.9% at 16384, +11% at 32128), from
# which MINFER_ATTN_DECODE_TC_FROM's default (12288) was set (session 32). Their
# tc arms set MINFER_ATTN_DECODE_TC_FROM=0: the tensor-core kernel at every depth, whatever the route's threshold.
# qtr: the route as users get it (MINFER_ATTN_DECODE_TC=1 at the default threshold) from depth 0, tg128 at context
# 32768 as qt0: it should equal lean, and its census (both arms count launches, on stderr in the .out files) show
# no decode_tc launch below the threshold.
declare -A QB_ARGS=([qg]="-p 0 -n 64 -d 32128 --fill zeros -c 32768" [qt]="-p 0 -n 64 -d 32128 --fill zeros -c 32768"
    [qt0]="-p 0 -n 128 -c 32768" [qtr]="-p 0 -n 128 -c 32768" [qtm]="-p 0 -n 64 -d 4096 --fill zeros -c 8192"
    [qt8]="-p 0 -n 64 -d 8192 --fill zeros -c 32768" [qt16]="-p 0 -n 64 -d 16384 --fill zeros -c 32768"
    [qtn]="-p 0 -n 64 -d 32128 --fill zeros -c 32768")
# qtn: the tensor-core decode's 32-cell tiles (MINFER_ATTN_DECODE_TC_NARROW) beside its 64-cell ones at depth 32128.
# peer needs /tmp/llama/b/bin/llama-bench, built beside the drive (DEVICE.md, the reference engine as a
# peer; start the build after the drive, which clears /tmp/dev) with its log in /tmp/dev/llama-build.log
# ending in a line "llama-bench build rc=N": the step waits up to 20 minutes for that line.
declare -A ABOUT=(
    [qd]="quick bench of every 7B file in the model dir at the defaults: pp512 and tg128 at depth 32128 (no claim)"
    [cover]="which kernels nvcc and NVRTC compile differently a PASS r-step timed (abtest sass-diff --runs; after r-steps)"
    [prof]="per-op times: 7B Q8_0 and Q4_K_M prefill at depth 0 and 32128, Q8_0 decode at 32128"
    [peer]="llama-bench beside minfer at qwen2-7b Q8_0 and Q4_K_M d32128 (scripts/perf.sh, REPS=\${PEER_REPS:-1})"
    [p20]="abtest perf --rows issue20 (issue 20's Must rows; NVRTC kernels; REPS=\${P20_REPS:-3}; the peer beside it where /tmp/llama/b/bin/llama-bench is built)"
    [p20t]="abtest perf --rows issue20-table beside the base build (device-bundle.sh BASE=715715f; its kernels built here with its own nvcc script first, in the background from the drive's start) and the peer where built: the Must rows, the slope and no slower than the base in one run"
    [suite]="the whole device suite at the defaults, NVRTC kernels"
)
for s in "${!LEVER[@]}"; do
    l=${LEVER[$s]}
    if [[ $l == *@with=* ]]; then # @with= keeps the declared workload (abtest-device.sh)
        ABOUT[$s]="${l%%@*} A/B at its declared workload, ${l#*@} in both arms"
    elif [[ $l == *@* ]]; then
        ABOUT[$s]="${l%%@*} A/B at ${l#*@} (pp512, tg128, depth 0)"
    else
        ABOUT[$s]="$l A/B at its declared workload"
    fi
done
for s in "${!RSPEC[@]}"; do ABOUT[$s]="MINFER_KERNELS A/B, nvcc vs NVRTC, at ${RSPEC[$s]}"; done
for r in "${SYN_RUNS[@]}"; do IFS='|' read -r s sh ty <<<"$r"; ABOUT[$s]="minfer synth $sh $ty into the model dir"; done
for r in "${QB_RUNS[@]}"; do IFS='|' read -r s m _ <<<"$r"; ABOUT[$s]="quick bench (${QB_ARGS[$s]:--p 512 -n 0}) of $m, its settings interleaved (${r#*|*|})"; done
for r in "${NCU_RUNS[@]}"; do
    IFS='|' read -r s n env k _ _ pn <<<"$r"
    ABOUT[$s]="${ABOUT[$s]:+${ABOUT[$s]}; }ncu of $k ($env, $pn)"
done

usage() {
    echo "usage: STEPS=\"STEP ...\" [PROBE_RUN=REGEX] scripts/device-drive.sh [--check]   (or --skip: stop the running A/B step)"
    echo "steps: $STEP_NAMES"
    for s in $STEP_NAMES; do printf '  %-7s %s\n' "$s" "${ABOUT[$s]:-}"; done
}
if [[ $# -eq 1 && $1 == --skip ]]; then
    D=${DRIVE_DIR:-/tmp/dev} # (tests point it elsewhere, and shorten SKIP_WAIT_S)
    [[ -f $D/step && -f $D/drive.log && ! -e $D/DONE ]] || { echo "device-drive --skip: no drive is running a step" >&2; exit 1; }
    step=$(cat $D/step) # only ab() writes it: the other steps are stopped with the drive
    n0=$(grep -c ' exit \|rc=' $D/drive.log)
    pkill -x abtest
    pkill -x minfer
    for _ in $(seq "${SKIP_WAIT_S:-120}"); do
        (($(grep -c ' exit \|rc=' $D/drive.log) > n0)) && { echo "device-drive --skip: $step stopped: $(tail -n 1 $D/drive.log)"; exit 0; }
        sleep 1
    done
    echo "device-drive --skip: $step did not end within ${SKIP_WAIT_S:-120} s of the stop" >&2
    exit 1
fi
# Only builtins until the steps are known good: a refused start writes nothing and runs nothing.
[[ $# -eq 0 || ($# -eq 1 && $1 == --check) ]] || { echo "device-drive: unknown arguments: $*" >&2; usage >&2; exit 2; }
STEP_LIST=()
read -d '' -ra STEP_LIST <<<"${STEPS:-}"
((${#STEP_LIST[@]})) || { echo "device-drive: STEPS is required" >&2; usage >&2; exit 2; }
bad=""
for step in "${STEP_LIST[@]}"; do [[ " $STEP_NAMES " == *" $step "* ]] || bad+=" $step"; done
[[ -z $bad ]] || { echo "device-drive: unknown step(s):$bad" >&2; usage >&2; exit 2; }
if [[ ${1:-} == --check ]]; then
    echo "device-drive: steps ok: ${STEP_LIST[*]}"
    exit 0
fi

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
R=$PWD D=/tmp/dev S=/tmp/snap MD=/tmp/abtest-models
M7=$MD/qwen2-7b-Q8_0-seed1.gguf
export PROBE_RUN="${PROBE_RUN:-}"
rm -rf $D /tmp/dev-out; mkdir -p $D $MD /tmp/dev-out
exec >>$D/drive.log 2>&1
echo $$ >$D/pid
ts() { date -u +%T; }
ms() { echo $(($(date +%s%N) / 1000000)); }
echo "drive start $(ts) steps: ${STEP_LIST[*]}"
rm -rf $S && mkdir -p $S/bin && tar -xzf bin/bundle.tgz -C $S/bin && tar -xzf $S/bin/src.tgz -C $S && rm $S/bin/src.tgz || { echo "setup failed"; touch $D/DONE; exit 2; }
[[ -d /tmp/stash ]] && for f in /tmp/stash/*; do [[ -e $S/bin/${f##*/} ]] || cp -r $f $S/bin/; done
# Keep the models and importer libraries for a later slim bundle on this machine (a p20t bundle has no room for them).
mkdir -p /tmp/stash && for f in $S/bin/*.gguf $S/bin/lib; do [[ -e $f && ! -e /tmp/stash/${f##*/} ]] && cp -r $f /tmp/stash/; done
cd $S
export XDG_CACHE_HOME=/tmp/xdg LC_ALL=C PATH=$PATH:/usr/local/cuda/bin
rm -rf $XDG_CACHE_HOME
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,memory.used --format=csv >$D/smi.txt 2>&1
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)

cal() { mkdir -p "$1/reports" && cp -r $R/reports/calibration "$1/reports/" 2>/dev/null; }
ab() { # OUT-name WORK LEVERS [CALIBRATE]
    [[ $NOAB == 1 ]] && { echo "$1 skipped: the probe failed"; return; }
    echo "$1" >$D/step # what --skip stops
    # No nvcc build for a lever A/B unless an r-step put nvcc's file in bin/ (then every arm loads it).
    KERNELS=$([[ -e bin/minfer-kernels.fatbin ]] || echo nvrtc) OUT=$D/$1 WORK=$2 CALIBRATE="${4:-}" CORRECTNESS_MODEL="$S/bin/tiny-code-Q8_0.gguf $S/bin/tiny-qwen3-code-Q8_0.gguf" MODEL_DIR=$MD LEVERS="$3" \
        scripts/abtest-device.sh >$D/$1.out 2>&1
    echo "$1 exit $? ($3) $(ts)"
    rm -f $D/step
    tar -C $2 -czf $D/$1-work.tgz reports 2>/dev/null
}
ncu_step() { # STEP: its NCU_RUNS rows
    [[ -f $M7 ]] || { echo "$1 rc=skipped: no 7B file (run an A/B on it first)"; return; }
    local r s n env k skip cnt pn
    for r in "${NCU_RUNS[@]}"; do
        IFS='|' read -r s n env k skip cnt pn <<<"$r"
        [[ $s == "$1" ]] || continue
        env $env timeout 400 $NCU --clock-control none --set full -k regex:$k --launch-skip $skip --launch-count $cnt -o $D/$n \
            bin/minfer bench --device cuda -m $M7 $pn --fill zeros -c 32768 -r 1 --format json -o $D/$n.json >$D/$n.out 2>&1
        echo "$1 $n rc=$? $(ts)"
        $NCU --import $D/$n.ncu-rep --page details >$D/$n.txt 2>&1
        $NCU --import $D/$n.ncu-rep --page details --csv >$D/$n.csv 2>&1
        # Per SASS instruction: stall samples, excessive shared wavefronts and global sectors (which load or
        # store the details page's bank-conflict and uncoalescing totals come from).
        $NCU --import $D/$n.ncu-rep --page source --print-source sass --csv >$D/$n-sass.csv 2>&1
        rm -f $D/$n.ncu-rep
    done
}
# KERNELS=nvrtc refuses a kernels file in bin/ (an r-step leaves nvcc's there): set it aside meanwhile.
kernels_aside() { [[ -e bin/minfer-kernels.fatbin ]] && mv bin/minfer-kernels.fatbin /tmp/kernels-aside.fatbin; }
kernels_back() { [[ -e /tmp/kernels-aside.fatbin ]] && mv /tmp/kernels-aside.fatbin bin/minfer-kernels.fatbin; }
syn_step() { # STEP: its SYN_RUNS row
    local r s sh ty f t1
    for r in "${SYN_RUNS[@]}"; do
        IFS='|' read -r s sh ty <<<"$r"
        [[ $s == "$1" ]] || continue
        f=$MD/$sh-$ty-seed1.gguf
        [[ -f $f ]] && { echo "$1 rc=0 (there)"; continue; }
        t1=$(ms); timeout 400 bin/minfer synth --shape $sh --type $ty --seed 1 -o $f.tmp >$D/$1.out 2>&1 && mv $f.tmp $f
        echo "$1 rc=$? ms=$(($(ms) - t1))"
    done
}
qb_step() { # STEP: its QB_RUNS row, each setting twice, interleaved
    local r s m cfgs rep c name env
    for r in "${QB_RUNS[@]}"; do
        IFS='|' read -r s m cfgs <<<"$r"
        [[ $s == "$1" ]] || continue
        IFS='|' read -ra cfgs <<<"$cfgs"
        for rep in 1 2; do
            for c in "${cfgs[@]}"; do
                name=${c%%=*} env=${c#*=}
                # shellcheck disable=SC2086 # the arguments split
                env $env timeout 120 bin/minfer bench --device cuda -m $MD/$m-seed1.gguf ${QB_ARGS[$s]:--p 512 -n 0} -r 3 --format json \
                    -o $D/$1-$rep-$name.json >$D/$1-$rep-$name.out 2>&1
                echo "$1 $rep $name rc=$? $(grep -m1 -o '"mean_tok_s": *[0-9.]*' $D/$1-$rep-$name.json 2>/dev/null) $(ts)"
            done
        done
    done
}
qd_step() { # the defaults at issue 20's depth rows, each 7B file there once (an A/B or the perf table is the claim)
    local f n
    for f in $MD/qwen2-7b-*-seed1.gguf; do
        [[ -f $f ]] || continue
        n=$(basename $f .gguf)
        timeout 300 bin/minfer bench --device cuda -m $f -p 512 -n 128 -d 32128 --fill zeros -c 32768 -r 2 --format json \
            -o $D/qd-$n.json >$D/qd-$n.out 2>&1
        echo "qd $n rc=$? $(grep -o '"mean_tok_s": *[0-9.]*' $D/qd-$n.json 2>/dev/null | tr '\n' ' ') $(ts)"
    done
}
prof_step() { # STEP: its PROF_RUNS rows
    local r s n env m pn
    for r in "${PROF_RUNS[@]}"; do
        IFS='|' read -r s n env m pn <<<"$r"
        [[ $s == "$1" ]] || continue
        env MINFER_OP_TIMING=1 $env timeout 300 bin/minfer bench --device cuda -m $MD/$m-seed1.gguf $pn --fill zeros -c 32768 -r 2 \
            --format json -o $D/$n.json 2>$D/$n.err
        echo "$n rc=$? $(ts)"
    done
}

# p20t's base kernels (REV's nvcc build, ~2 minutes) compile while the cold bench and the probe run.
BKPID=""
if [[ " ${STEP_LIST[*]} " == *" p20t "* && -f bin/base-src.tgz && -x bin/base/minfer ]]; then
    rm -rf /tmp/base-src && mkdir -p /tmp/base-src && tar -xzf bin/base-src.tgz -C /tmp/base-src
    (cd /tmp/base-src && scripts/build-kernels.sh $S/bin/base/minfer-kernels.fatbin) >$D/bk-base.log 2>&1 &
    BKPID=$!
fi
echo "== NVRTC cold bench $(ts)"
t0=$(ms); timeout 400 bin/minfer bench --device cuda -p 512 -n 128 -r 3 --format json -o $D/bench-cold.json 2>$D/bench-cold.err
rc=$?; echo "cold bench rc=$rc wall_ms=$(($(ms) - t0))"
[[ $rc -ne 0 ]] && { echo "COMPILE OR RUN FAILURE: $(tail -c 3000 $D/bench-cold.err)"; touch $D/DONE; exit 1; }
echo "== probe $(ts)"
KERNELS=nvrtc RUN="$PROBE_RUN" OUT=$D/probe SUITE_TIMEOUT=10m TINY_CODE_GGUF=$S/bin/tiny-code-Q8_0.gguf \
    scripts/device-suite.sh >$D/probe.out 2>&1
rc=$?; echo "probe rc=$rc $(tail -n 1 $D/probe.out) $(ts)"
# A failing probe skips every A/B (each one's suite gate runs all the device tests and would fail too);
# the synthesis, bench and ncu steps still run: what they measure is still worth seeing.
NOAB=0
[[ $rc -ne 0 ]] && { NOAB=1; echo "PROBE FAILED ($(grep -ohE '^--- FAIL: [A-Za-z0-9_]+' $D/probe/device-suite-*.log 2>/dev/null | awk '{print $3}' | sort -u | tr '\n' ' ')): no A/B run"; }
# nvcc's kernels file and its SASS diff against the NVRTC build serve only the r-steps and cover (2+ minutes). It
# is built when the first of them comes (session 33: a budget that ends before the r-steps should not have paid for
# it): the steps before it run on NVRTC's kernels, those after on nvcc's file (bin/, every arm loads it). A failed
# build is tried once; each r-step then says it was skipped.
K=""
nvcc_build() { # 0 when nvcc's file is in bin/ (built now or before), 1 when its build failed
    [[ -n $K ]] && return 0
    [[ -e /tmp/nvcc/FAILED ]] && return 1
    mkdir -p /tmp/nvcc
    local t1 rc src
    t1=$(ms); scripts/build-kernels.sh /tmp/nvcc/head.fatbin >$D/bk-head.log 2>&1; rc=$?; echo "build-kernels rc=$rc ms=$(($(ms) - t1))"
    ((rc == 0)) || { touch /tmp/nvcc/FAILED; return 1; }
    for f in $XDG_CACHE_HOME/minfer/*/*/*.cubin; do [[ -f $f ]] && cuobjdump --dump-sass $f; done >/tmp/nvcc/nvrtc.sass 2>/dev/null
    cuobjdump --dump-sass /tmp/nvcc/head.fatbin >/tmp/nvcc/head.sass 2>/dev/null
    # The diff, and the ledger of these sources in $D/ledger (the hash the cold bench, whose NVRTC build is the
    # listing, reports): it comes back in dev.tgz and goes to reports/MINFER_KERNELS/sass, so that this session's
    # r-step runs count in any later cover.
    src=$(grep -o '"kernel_sources_sha256": *"[0-9a-f]*"' $D/bench-cold.json | grep -o '[0-9a-f]\{64\}')
    bin/abtest sass-diff --ledger $D/ledger --sources "$src" /tmp/nvcc/head.sass /tmp/nvcc/nvrtc.sass >$D/sass-one-vs-nvrtc.md 2>&1
    echo "sass-diff rc=$? $(sed -n 3p $D/sass-one-vs-nvrtc.md) ledger: $(ls $D/ledger 2>/dev/null)"
    # Both listings come back too (device-poll.sh copies /tmp/dev-out into the call's files).
    gzip -9 -c /tmp/nvcc/head.sass >/tmp/dev-out/nvcc.sass.gz; gzip -9 -c /tmp/nvcc/nvrtc.sass >/tmp/dev-out/nvrtc.sass.gz
    cp /tmp/nvcc/head.fatbin bin/minfer-kernels.fatbin
    K="MINFER_KERNELS=nvrtc@baseline=$S/bin/minfer-kernels.fatbin"
}
cal /tmp/wk-k; cal /tmp/wk

for step in "${STEP_LIST[@]}"; do
    echo "== $step $(ts)"
    case $step in
    kq | fnq | aq8 | qkr | nmv | nmvr | qkvx | embedh | dtc | dtc0 | dtcn) ab ab$step /tmp/wk "${LEVER[$step]}" ;;
    syn | synk) syn_step $step ;;
    qb | qbk | qg | qt | qt0 | qtm | qt8 | qt16 | qtn | qtr) qb_step $step ;;
    qd) qd_step ;;
    r1 | r2 | r3 | r4 | r5 | r6 | r7 | r8 | r9 | r10)
        if nvcc_build; then ab ab$step /tmp/wk-k "$K@${RSPEC[$step]}"; else echo "ab$step exit skipped: nvcc's build failed ($D/bk-head.log)"; fi ;;
    cover)
        nvcc_build || { echo "cover rc=skipped: nvcc's build failed"; continue; }
        bin/abtest sass-diff --runs '/tmp/wk-k/reports/MINFER_KERNELS/*.json' \
            /tmp/nvcc/head.sass /tmp/nvcc/nvrtc.sass >$D/sass-cover.md 2>&1
        echo "cover rc=$? $(tail -n 3 $D/sass-cover.md | tr '\n' ' ' | cut -c1-400)" ;;
    ncug | ncut | ncud2 | ncudt | ncudt0 | ncudn) ncu_step $step ;;
    prof) prof_step $step ;;
    peer)
        for i in $(seq 240); do grep -q "llama-bench build rc=" $D/llama-build.log 2>/dev/null && break; sleep 5; done
        echo "$(tail -n 1 $D/llama-build.log 2>/dev/null || echo "no $D/llama-build.log")"
        PEER=/tmp/llama/b/bin/llama-bench ROWS=qwen2-7b:Q8_0@d32128,qwen2-7b:Q4_K_M@d32128 REPS=${PEER_REPS:-1} PERF_TIMEOUT=1200 \
            OUT=$D/perf MODEL_DIR=$MD scripts/perf.sh >$D/perf.out 2>&1
        echo "perf rc=$? $(ts)" ;;
    p20)
        kernels_aside
        P=""; [[ -x /tmp/llama/b/bin/llama-bench ]] && P=/tmp/llama/b/bin/llama-bench
        PEER=$P KERNELS=nvrtc ROWS=issue20 REPS=${P20_REPS:-3} PERF_TIMEOUT=1500 OUT=$D/p20 MODEL_DIR=$MD scripts/perf.sh >$D/p20.out 2>&1
        echo "p20 rc=$? peer=${P:-none} $(ts)"
        kernels_back ;;
    p20t)
        if [[ -z $BKPID ]]; then
            echo "p20t rc=skipped: no base build in the bundle (device-bundle.sh BASE=REV)"
        elif ! wait $BKPID; then
            echo "p20t rc=skipped: the base kernels did not build: $(tail -n 3 $D/bk-base.log | tr '\n' ' ')"
        else
            kernels_aside
            P=""; [[ -x /tmp/llama/b/bin/llama-bench ]] && P=/tmp/llama/b/bin/llama-bench
            BASE=$S/bin/base/minfer PEER=$P KERNELS=nvrtc ROWS=issue20-table REPS=${P20_REPS:-3} PERF_TIMEOUT=3000 \
                OUT=$D/p20t MODEL_DIR=$MD scripts/perf.sh >$D/p20t.out 2>&1
            echo "p20t rc=$? peer=${P:-none} $(ts)"
            kernels_back
        fi ;;
    suite)
        kernels_aside
        KERNELS=nvrtc OUT=$D/suite SUITE_TIMEOUT=10m TINY_CODE_GGUF=$S/bin/tiny-code-Q8_0.gguf scripts/device-suite.sh >$D/suite.out 2>&1
        echo "suite rc=$? $(tail -n 1 $D/suite.out)"
        kernels_back ;;
    *) echo "$step rc=unhandled: no branch for it in device-drive.sh" ;;
    esac
done
echo "drive done $(ts)"
touch $D/DONE
