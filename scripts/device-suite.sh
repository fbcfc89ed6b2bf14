#!/usr/bin/env bash
# device-suite.sh: run the CUDA device suite on the GPU machine.
#
# It builds nothing Go (the GPU machine has no Go toolchain): it expects the
# test binaries built on the CPU machine,
#
#   CGO_ENABLED=0 go test -c -o bin/cuda.test ./cuda
#   CGO_ENABLED=0 go test -c -o bin/driver.test ./cuda/driver
#
# builds the kernels fatbin (scripts/build-kernels.sh -> bin/), runs every
# bin/*.test serially with -test.v, prints "N passed, N failed, N skipped"
# (top-level tests) and writes a markdown report to
# ${OUT:-reports/device-suite}/<date>.md.
#
#   scripts/device-suite.sh                 every test
#   RUN='TestPool|TestCapture' scripts/device-suite.sh   a -test.run filter
#   TINY_CODE_GGUF=path/to/tiny-code-f16.gguf          the trained model
#   KERNELS=nvrtc scripts/device-suite.sh   no kernels file: every test loads
#       the embedded sources' NVRTC build (issue 25), compiled on first use
#       into the user cache (XDG_CACHE_HOME) and taken from it afterwards
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
outdir="${OUT:-$root/reports/device-suite}"
mkdir -p "$outdir"
date_tag="$(date -u +%Y-%m-%d)"
report="$outdir/$date_tag.md"
log="$outdir/device-suite-$date_tag.log"
run_filter="${RUN:-}"
timeout="${SUITE_TIMEOUT:-9m}"

shopt -s nullglob
tests=(bin/*.test)
if [[ ${#tests[@]} -eq 0 ]]; then
    echo "device-suite: no bin/*.test; build them on the CPU machine (see the header of this script)" >&2
    exit 2
fi

if [[ "${KERNELS:-}" == nvrtc ]]; then
    # A kernels file beside the test binaries or in MINFER_KERNELS would be
    # loaded instead of the NVRTC build: refuse rather than test the wrong one.
    if [[ -n "${MINFER_KERNELS:-}" || -e bin/minfer-kernels.fatbin ]]; then
        echo "device-suite: KERNELS=nvrtc, but MINFER_KERNELS is set or bin/minfer-kernels.fatbin exists: unset it or move it away" >&2
        exit 2
    fi
    unset MINFER_KERNELS
    cache="${XDG_CACHE_HOME:-$HOME/.cache}/minfer/kernels"
    kernels_line="none given: the embedded sources' NVRTC build, cache $cache ($(ls "$cache" 2>/dev/null | wc -l) entries before the run)"
else
    if [[ ! -f bin/minfer-kernels.fatbin || -n "${REBUILD_KERNELS:-1}" ]]; then
        scripts/build-kernels.sh bin/minfer-kernels.fatbin 2>&1 | tee "$outdir/build-kernels.log" || {
            echo "device-suite: build-kernels.sh failed" >&2
            exit 2
        }
    fi
    export MINFER_KERNELS="${MINFER_KERNELS:-$root/bin/minfer-kernels.fatbin}"
    kernels_line="$(basename "$MINFER_KERNELS") ($(stat -c %s "$MINFER_KERNELS" 2>/dev/null) bytes), $(grep -m1 'build-kernels: Cuda\|build-kernels: Build' "$outdir/build-kernels.log" 2>/dev/null | sed 's/build-kernels: //')"
fi

smi="$(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 || true)"
: >"$log"
for t in "${tests[@]}"; do
    echo "=== device-suite: $t" | tee -a "$log"
    args=(-test.v -test.count=1 -test.timeout "$timeout")
    [[ -n "$run_filter" ]] && args+=(-test.run "$run_filter")
    # Run each binary in its package directory, as go test does.
    case "$(basename "$t")" in
    cuda.test) dir=cuda ;;
    driver.test) dir=cuda/driver ;;
    *) dir=. ;;
    esac
    (cd "$dir" && "$root/$t" "${args[@]}") 2>&1 | tee -a "$log"
    echo "=== device-suite: $t exit ${PIPESTATUS[0]}" | tee -a "$log"
done

pass=$(grep -cE '^--- PASS: ' "$log")
fail=$(grep -cE '^--- FAIL: ' "$log")
skip=$(grep -cE '^--- SKIP: ' "$log")
# A binary that died (panic, timeout) before printing its verdicts counts as a failure.
died=$(grep -cE '^=== device-suite: .* exit [^0]' "$log")
if [[ $fail -eq 0 && $died -gt 0 ]]; then fail=$died; fi

# stamp names the commit a test binary was built from: Go's build info
# stays in a stripped binary, and the device has no go tool to read it.
stamp() {
    local rev mod
    rev=$(grep -a -o -m1 'vcs.revision=[0-9a-f]*' "$1" | head -n 1 | cut -d= -f2)
    mod=$(grep -a -o -m1 'vcs.modified=[a-z]*' "$1" | head -n 1 | cut -d= -f2)
    if [[ -z "$rev" ]]; then echo "unknown ($1 has no VCS stamp)"; else echo "$rev (build stamp of $1; modified: ${mod:-unknown})"; fi
}

{
    echo "# Device suite, $date_tag"
    echo
    echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "- host: $(hostname)"
    echo "- command: \`${KERNELS:+KERNELS=$KERNELS }${RUN:+RUN='$RUN' }scripts/device-suite.sh\` (test binaries: ${tests[*]})"
    echo "- commit: $(stamp "${tests[0]}")"
    echo "- kernels: $kernels_line"
    echo "- result: **$pass passed, $fail failed, $skip skipped** (top-level tests)"
    echo
    echo "## Device (nvidia-smi)"
    echo
    echo '```'
    echo "$smi"
    echo '```'
    echo
    echo "## Results"
    echo
    echo "| test | result | time |"
    echo "| --- | --- | --- |"
    grep -E '^ *--- (PASS|FAIL|SKIP): ' "$log" | sed -E 's/^( *)--- (PASS|FAIL|SKIP): ([^ ]+) \(([^)]*)\).*/| \1\3 | \2 | \4 |/' | sed -E 's/^\| ( +)/| \&nbsp;\&nbsp;/'
    echo
    echo "## Failures and skips (first lines)"
    echo
    echo '```'
    grep -E -A6 '^ *--- (FAIL|SKIP): ' "$log" | head -n 200
    echo '```'
} >"$report"

echo "$pass passed, $fail failed, $skip skipped"
echo "device-suite: report $report, log $log"
[[ $fail -eq 0 ]]
