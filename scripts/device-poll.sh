#!/usr/bin/env bash
# device-poll.sh SECONDS N: on the GPU machine, wait for scripts/device-drive.sh (its header says how to
# start it): at most SECONDS, looking every 5 s, until /tmp/dev/DONE exists or /tmp/dev/drive.log holds
# N lines with " exit " or "rc=" (one per finished piece of work). Then print drive.log and the GPU's
# state, and pack /tmp/dev (less kernels files and models) into $OUT/dev.tgz, which the call brings back,
# with the files of /tmp/dev-out beside it.
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
while ((t < lim)); do
    [[ -e $D/DONE ]] && break
    n=$(grep -c ' exit \|rc=' $D/drive.log 2>/dev/null)
    ((n >= want)) && break
    sleep 5
    t=$((t + 5))
done
cat $D/drive.log
nvidia-smi --query-gpu=name,memory.used,clocks.sm,temperature.gpu --format=csv,noheader
tar -C "$(dirname "$D")" -czf "$OUT/dev.tgz" --exclude='*.fatbin' --exclude='*.gguf' "$(basename "$D")" 2>/dev/null
# Files too large for dev.tgz's 16 MiB (the drive's SASS listings, gzipped) come back beside it.
cp "$X"/* "$OUT"/ 2>/dev/null
ls -la "$OUT"
