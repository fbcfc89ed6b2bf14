#!/usr/bin/env bash
# bisect-builds.sh (run HERE, on the CPU machine): the builds an H200 bisect
# takes with `abtest bisect --builds`, since the GPU machine has no Go:
# one stripped, stamped minfer per commit of the first-parent line from
# GOOD to BAD in <hash>/, commits.txt (HASH<TAB>SUBJECT, oldest first; the
# device copy has no .git) and kernels-src.tgz, BAD's kernel sources with
# the kernels build script, which scripts/abtest-device.sh (BISECT=...)
# compiles there once and links into every folder; all of it packed into
# OUT.tgz (a device call carries 64 MiB: eleven stripped builds are ~49 MiB,
# ~21 MiB packed).
#
#   scripts/bisect-builds.sh GOOD BAD [OUT.tgz]        (default: bin/bisect.tgz)
#
# One kernels build serves the range only if no commit in it changed the
# kernel sources: the script checks and refuses otherwise (each commit would
# need its own, ~90 s of device time apiece).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
good="$(git rev-parse --verify "${1:?GOOD}^{commit}")"
bad="$(git rev-parse --verify "${2:?BAD}^{commit}")"
pack="${3:-bin/bisect.tgz}"
git merge-base --is-ancestor "$good" "$bad" || { echo "bisect-builds: $1 is not an ancestor of $2" >&2; exit 2; }
if ! git diff --quiet "$good" "$bad" -- cuda/kernels; then
    echo "bisect-builds: the kernel sources differ between $1 and $2:" >&2
    git diff --stat "$good" "$bad" -- cuda/kernels >&2
    exit 2
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
tree="$tmp/src" out="$tmp/bisect"
mkdir -p "$out"
# A local clone, not a worktree: go build stamps vcs.revision only where
# .git is a directory, and abtest bisect refuses a build without the stamp.
git clone -q --no-checkout "$root" "$tree"
{ printf '%s\t%s\n' "$good" "$(git log -1 --format=%s "$good")"; git log --first-parent --reverse --format='%H%x09%s' "$good..$bad"; } >"$out/commits.txt"
while IFS=$'\t' read -r c _; do
    git -C "$tree" checkout -q --detach "$c"
    mkdir -p "$out/$c"
    if (cd "$tree" && CGO_ENABLED=0 go build -buildvcs=true -ldflags "-s -w" -o "$out/$c/minfer" ./cmd/minfer) 2>"$out/$c.build.log"; then
        rm -f "$out/$c.build.log"
    else
        rmdir "$out/$c" 2>/dev/null || true
        echo "bisect-builds: ${c:0:9} does not build (its folder is left out; abtest bisect skips it): $(tail -n 1 "$out/$c.build.log")" >&2
    fi
done <"$out/commits.txt"
git archive "$bad" -- cuda/kernels scripts/build-kernels.sh | gzip >"$out/kernels-src.tgz"
mkdir -p "$(dirname "$pack")"
tar -C "$out" -czf "$pack" .
echo "bisect-builds: $(wc -l <"$out/commits.txt") commits, $(ls -d "$out"/*/ | wc -l) builds, $(du -sh "$pack" | cut -f1) in $pack"
