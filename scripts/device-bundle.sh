#!/usr/bin/env bash
# device-bundle.sh (run HERE, on the CPU machine): pack what an H200 run needs
# into bin/bundle.tgz, small enough to carry (a device call carries at most
# 64 MiB): stripped CGO_ENABLED=0 minfer, abtest, cuda.test and driver.test (build info
# and so the VCS stamp are kept), the nsys importer libraries of bin/lib, and
# optionally the trained models (one per architecture) quantized for the
# parity and greedy gates (abtest --correctness-model), which do not fit
# next to unstripped binaries. scripts/abtest-device.sh unpacks it into bin/ first.
#
#   TINY=Q8_0 scripts/device-bundle.sh      # + the trained qwen2 and qwen3 models inside, as
#                                           # tiny-code-Q8_0.gguf and tiny-qwen3-code-Q8_0.gguf
#                                           # (about 55 MiB with the binaries, 2026-12-03)
#   TINY_SRC="a-f16.gguf ..." TINY=Q8_0 ... # those instead, each <name without -f16>-Q8_0.gguf
#   BASE=715715f scripts/device-bundle.sh   # + base/minfer and base-src.tgz (the drive's p20t; no TINY)
#   then carry ["bin"] and on the device:
#   CORRECTNESS_MODEL="bin/tiny-code-Q8_0.gguf bin/tiny-qwen3-code-Q8_0.gguf" LEVERS=... scripts/abtest-device.sh
#
# SNAPSHOT=1 builds from a clean local clone of HEAD instead of the work
# tree (helpers may be editing it) and adds src.tgz, HEAD's files without
# reports/: on the device, extract it and run the scripts from there, so the
# kernels compiled are HEAD's too:
#   mkdir -p /tmp/snap && tar -xzf bin/bundle.tgz -C bin && tar -xzf bin/src.tgz -C /tmp/snap \
#     && cp -r bin /tmp/snap/ && cd /tmp/snap && OUT=$OUT scripts/perf.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
stage="$(mktemp -d)"
tree="$root"
if [[ "${SNAPSHOT:-0}" == 1 ]]; then
    # A local clone, not `git worktree`: Go stamps vcs.revision only where
    # .git is a directory (a worktree's .git is a file: no stamp, and the
    # device's reports would name no commit).
    tree="$(mktemp -d)/wt"
    git clone -q "$root" "$tree" && git -C "$tree" checkout -q --detach "$(git rev-parse HEAD)"
    trap 'rm -rf "$stage" "$(dirname "$tree")"' EXIT
    git archive HEAD -- . ':!reports' | gzip >"$stage/src.tgz"
else
    trap 'rm -rf "$stage"' EXIT
fi
(cd "$tree" && CGO_ENABLED=0 go build -buildvcs=true -ldflags "-s -w" -o "$stage/" ./cmd/minfer ./cmd/abtest \
    && CGO_ENABLED=0 go test -c -buildvcs=true -ldflags "-s -w" -o "$stage/cuda.test" ./cuda \
    && CGO_ENABLED=0 go test -c -buildvcs=true -ldflags "-s -w" -o "$stage/driver.test" ./cuda/driver)
if [[ -d bin/lib ]]; then cp -r bin/lib "$stage/lib"; fi
# BASE=REV: a minfer build of REV (base/minfer) and REV's kernel sources and build script (base-src.tgz),
# for the drive's p20t step (issue 20: "no slower than at 715715f"; its kernels are built with nvcc
# there, as REV's minfer loads the kernels file beside it). About 3 MiB more: with TINY the carry is
# over 64 MiB, so a p20t session's bundle leaves TINY out (the drive keeps the models of an earlier
# call on the same machine in /tmp/stash).
if [[ -n "${BASE:-}" ]]; then
    btree="$(mktemp -d)"
    git clone -q "$root" "$btree/base" && git -C "$btree/base" checkout -q --detach "$BASE"
    (cd "$btree/base" && CGO_ENABLED=0 go build -buildvcs=true -ldflags "-s -w" -o "$stage/base/" ./cmd/minfer)
    git -C "$root" archive "$BASE" -- cuda/kernels scripts/build-kernels.sh | gzip >"$stage/base-src.tgz"
    rm -rf "$btree"
fi
if [[ -n "${TINY:-}" ]]; then
    for src in ${TINY_SRC:-$root/../shared/models/tiny-code-f16.gguf $root/../shared/models/tiny-qwen3-code-f16.gguf}; do
        name="$(basename "$src" .gguf)"
        "$stage/minfer" quantize "$src" "$stage/${name%-f16}-$TINY.gguf" "$TINY" >/dev/null
    done
fi
mkdir -p bin
tar -C "$stage" -czf bin/bundle.tgz .
size=$(stat -c %s bin/bundle.tgz)
echo "device-bundle: bin/bundle.tgz $((size / 1048576)) MiB: $(tar -tzf bin/bundle.tgz | grep -v '/$' | tr '\n' ' ')"
# Everything else under bin/ travels too: say what the carry will weigh.
total=$(du -sb bin | cut -f1)
if ((total > 64 * 1048576)); then
    echo "device-bundle: bin/ holds $((total / 1048576)) MiB in all (over the 64 MiB a call carries): move the unbundled binaries out of bin/" >&2
    exit 1
fi
