#!/bin/sh
# wait-for-shards.sh: the merge Job's init container. Returns when every
# shard 0..SHARDS-1 has its result under /results/$RUN_ID/shard-I, or when
# WAIT_SECONDS have passed: then the merge runs on what exists and says which
# shard is missing (abtest merge: INCONCLUSIVE, exit 3) rather than wait for
# a shard that will never come.
#
# Env: RUN_ID, SHARDS (ConfigMap minfer-nightly); WAIT_SECONDS (at least the
# shard Job's activeDeadlineSeconds); RESULTS=/results, POLL_SECONDS=30,
# SETTLE_SECONDS=30 (a result counts once untouched that long: a shard may
# still be writing it).
set -eu
: "${RUN_ID:?}" "${SHARDS:?}" "${WAIT_SECONDS:?}"
results="${RESULTS:-/results}/$RUN_ID"
poll="${POLL_SECONDS:-30}"
settle="${SETTLE_SECONDS:-30}"
deadline=$(($(date +%s) + WAIT_SECONDS))

# ready I: shard I's result file is there and settled.
ready() {
    for f in "$results/shard-$1"/nightly-*-shard-"$1"of"$SHARDS".json; do
        [ -f "$f" ] || continue
        [ $(($(date +%s) - $(stat -c %Y "$f"))) -ge "$settle" ] && return 0
    done
    return 1
}

while :; do
    missing=""
    i=0
    while [ "$i" -lt "$SHARDS" ]; do
        ready "$i" || missing="$missing $i"
        i=$((i + 1))
    done
    if [ -z "$missing" ]; then
        echo "wait-for-shards: all $SHARDS shards of $RUN_ID are done"
        exit 0
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "wait-for-shards: after ${WAIT_SECONDS}s shards$missing of $RUN_ID have no result; merging the rest"
        exit 0
    fi
    sleep "$poll"
done
