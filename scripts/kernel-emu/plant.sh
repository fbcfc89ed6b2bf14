# plant.sh (sourced by the *-emu.sh scripts): emu_dirs, emu_run and
# plant_defect FILE NAME FROM TO.
#
# emu_dirs sets kern (the kernel sources) and tmp (a directory removed at
# exit); emu_run SRC compiles scripts/kernel-emu/SRC with the emulated
# built-ins against $kern and runs it. The scripts before them spell both
# out.
emu_dirs() {
    kern="$here/../../cuda/kernels"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
}
emu_run() {
    g++ -std=c++20 -O1 -ffp-contract=off -Wno-unknown-pragmas -I"$here/include" -I"$kern" -include "$here/include/cuda_fp16.h" \
        "$here/$1" -o "$tmp/${1%.cpp}" -pthread
    "$tmp/${1%.cpp}"
}

# plant_defect FILE NAME FROM TO
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
