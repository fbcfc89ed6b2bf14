#!/usr/bin/env bash
# poll.sh SECONDS N: wait until /tmp/dev/drive.log has N lines matching " exit \|rc=" or DONE, at most SECONDS; then copy out.
lim=$1 want=$2 t=0
while (( t < lim )); do
    [[ -e /tmp/dev/DONE ]] && break
    n=$(grep -c ' exit \|rc=' /tmp/dev/drive.log 2>/dev/null); (( n >= want )) && break
    sleep 5; t=$((t+5))
done
cat /tmp/dev/drive.log
nvidia-smi --query-gpu=name,memory.used,clocks.sm,temperature.gpu --format=csv,noheader
tar -C /tmp -czf $OUT/dev.tgz --exclude='*.fatbin' --exclude='*.gguf' dev 2>/dev/null; ls -la $OUT
