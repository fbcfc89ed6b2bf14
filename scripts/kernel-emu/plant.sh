# plant.sh (sourced by the *-emu.sh scripts): plant_defect FILE NAME FROM TO
# copies the kernel sources of $kern into $tmp, replaces the text FROM by
# TO in $tmp/FILE (taken literally, the first on each line), shows the
# change, and points $kern at the copy. A FROM not found is an error
# (exit 2): a plant that no longer matches the source cannot pass silently.
plant_defect() {
    local file="$1" name="$2"
    cp "$kern"/*.cu "$kern"/*.cuh "$tmp/"
    FROM="$3" TO="$4" perl -pi -e 's/\Q$ENV{FROM}\E/$ENV{TO}/' "$tmp/$file"
    if cmp -s "$kern/$file" "$tmp/$file"; then
        echo "plant $name: pattern not found in $file" >&2
        exit 2
    fi
    echo "planted $name:"
    diff "$kern/$file" "$tmp/$file" || true
    kern="$tmp"
}
