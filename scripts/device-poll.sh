#!/usr/bin/env bash
# device-poll.sh SECONDS N: on the GPU machine, wait for scripts/device-drive.sh (its header says how to
# start it): at most SECONDS, looking every 5 s, until /tmp/dev/DONE exists or /tmp/dev/drive.log holds
# N lines with " exit " or "rc=" (one per finished piece of work). Then print drive.log and the GPU's
# state, and pack /tmp/dev (less kernels files and models) into $OUT/dev.tgz, which the call brings back,
# with the files of /tmp/dev-out beside it. A TERM (the call's time or the session's budget running out) stops the
# wait and packs at once: give SECONDS below the call's limit all the same.
#
#   bash scripts/device-poll.sh 540 4      # in a device call; chain such calls until DONE
set -u
if [[ $# -ne 2 || ! $1 =~ ^[0-9]+$ || ! $2 =~ ^[0-9]+$ || -z ${OUT:-} ]]; then
    echo "usage: OUT=DIR scripts/device-poll.sh SECONDS N (SECONDS: the most to wait; N: the \" exit \"/\"rc=\" lines of /tmp/dev/drive.log to wait for)" >&2
    exit 2
fi
lim=$((10#$1)) want=$((10#$2)) t=0
# DRIVE_DIR / DRIVE_OUT: the drive's folders (tests point them elsewhere).
D=${DRIVE_DIR:-/tmp/dev} X=${DRIVE_OUT:-/tmp/dev-out}
# A call that runs out of time or budget stops this script with TERM (session 33 lost a whole call's files when
# the budget ended the wait): stop waiting and pack what there is. The sleep runs in the background so that the
# trap is taken at once, not after it.
stop=0 sp=''
trap 'stop=1; [[ -n $sp ]] && kill $sp 2>/dev/null' TERM INT
while ((t < lim && !stop)); do
    [[ -e $D/DONE ]] && break
    n=$(grep -c ' exit \|rc=' $D/drive.log 2>/dev/null)
    ((n >= want)) && break
    sleep 5 &
    sp=$!
    wait $sp
    t=$((t + 5))
done
trap - TERM INT
((stop)) && echo "device-poll: stopped after ${t}s by a signal; packing what the drive has written"
cat $D/drive.log
nvidia-smi --query-gpu=name,memory.used,clocks.sm,temperature.gpu --format=csv,noheader
tar -C "$(dirname "$D")" -czf "$OUT/dev.tgz" --exclude='*.fatbin' --exclude='*.gguf' "$(basename "$D")" 2>/dev/null
# Files too large for dev.tgz's 16 MiB (the drive's SASS listings, gzipped) come back beside it.
cp "$X"/* "$OUT"/ 2>/dev/null
ls -la "$OUT"
