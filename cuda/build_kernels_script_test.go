package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/kernels"
)

// fakeNvcc writes, for `nvcc ... -o OUT UNIT.cu`, one fatbin container whose
// body lists the sources UNIT.cu includes (base names); it fails for a unit
// including $FAKE_FAIL; with $FAKE_UNITS it copies each unit there.
// fakeCuobjdump prints the ELF symbols of a kernels
// file: one entry per source container ("k_<source>"), and one more
// "k_smoke" when $FAKE_DUP is set.
const fakeNvcc = `#!/usr/bin/env bash
if [[ "$1" == --version ]]; then echo "fake nvcc"; echo "Cuda compilation tools, release 0.0"; exit 0; fi
out="" unit=""
while [[ $# -gt 0 ]]; do
    case "$1" in -o) out="$2"; shift ;; *.cu) unit="$1" ;; esac
    shift
done
body=""
while IFS= read -r l; do [[ "$l" =~ ([a-z0-9_]+\.cu)\" ]] && body+="${BASH_REMATCH[1]} "; done <"$unit"
body="${body% }"
[[ -n "${FAKE_UNITS:-}" ]] && cp "$unit" "$FAKE_UNITS/"
if [[ -n "${FAKE_FAIL:-}" && "$body" == *"$FAKE_FAIL"* ]]; then echo "error: fake failure in $unit" >&2; exit 3; fi
{
    printf '\x50\xed\x55\xba\x01\x00\x10\x00'
    n=${#body}
    for i in 0 1 2 3 4 5 6 7; do printf "\\$(printf %03o $(((n >> (8 * i)) & 255)))"; done
    printf '%s' "$body"
} >"$out"
`

const fakeCuobjdump = `#!/usr/bin/env bash
case "$1" in
--dump-elf-symbols)
    grep -ao '[a-z0-9_]*\.cu' "$2" | sed 's/\.cu$//; s/^/STT_FUNC STB_GLOBAL STO_ENTRY k_/'
    [[ -n "${FAKE_DUP:-}" ]] && echo "STT_FUNC STB_GLOBAL STO_ENTRY k_smoke"
    ;;
esac
exit 0
`

// buildKernels runs scripts/build-kernels.sh with the fakes; it returns the
// output file's containers (each body: the sources of one unit), the log
// and whether the script succeeded.
func buildKernels(t *testing.T, cache string, env ...string) ([]string, string, bool) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	tools := t.TempDir()
	for name, body := range map[string]string{"nvcc": fakeNvcc, "cuobjdump": fakeCuobjdump} {
		if err := os.WriteFile(filepath.Join(tools, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "k.fatbin")
	cmd := exec.Command("bash", filepath.Join("..", "scripts", "build-kernels.sh"), out)
	cmd.Env = append(os.Environ(), "NVCC="+filepath.Join(tools, "nvcc"), "MINFER_KCACHE="+cache)
	cmd.Env = append(cmd.Env, env...)
	log, err := cmd.CombinedOutput()
	if err != nil {
		if _, statErr := os.Stat(out); statErr == nil {
			t.Errorf("the build failed (%v) but left %s", err, out)
		}
		return nil, string(log), false
	}
	imgs := readFatbins(t, out)
	var bodies []string
	for _, img := range imgs {
		bodies = append(bodies, strings.TrimSpace(string(img[16:])))
	}
	return bodies, string(log), true
}

// TestBuildKernelsScript_SplitUnitsSingleUnitFailuresAndDuplicates: with
// KERNELS_SPLIT=1 each source is its own container, in name order, except
// the mmvq*.cu sources, which share one; the default is one container of
// every source; a failing unit or a kernel in two units fails the build and
// writes nothing; the same sources hit the cache, per mode.
func TestBuildKernelsScript_SplitUnitsSingleUnitFailuresAndDuplicates(t *testing.T) {
	srcs, err := filepath.Glob(filepath.Join("kernels", "*.cu"))
	if err != nil || len(srcs) < 5 {
		t.Fatalf("sources: %v %v", srcs, err)
	}
	var all, mmvq []string
	for _, s := range srcs {
		all = append(all, filepath.Base(s))
		if strings.HasPrefix(filepath.Base(s), "mmvq") {
			mmvq = append(mmvq, filepath.Base(s))
		}
	}
	cache := t.TempDir()

	split, log, ok := buildKernels(t, cache, "KERNELS_SPLIT=1")
	if !ok {
		t.Fatalf("split build failed:\n%s", log)
	}
	if want := len(all) - len(mmvq) + 1; len(split) != want {
		t.Fatalf("%d containers, want %d: %q", len(split), want, split)
	}
	var joined []string
	for _, b := range split {
		if strings.Contains(b, "mmvq") && b != strings.Join(mmvq, " ") {
			t.Errorf("the mmvq unit holds %q, want %q", b, strings.Join(mmvq, " "))
		}
		joined = append(joined, strings.Fields(b)...)
	}
	if strings.Join(joined, " ") != strings.Join(all, " ") {
		t.Errorf("units in order %q, want the sources in name order %q", joined, all)
	}
	if !strings.Contains(log, "units) in") {
		t.Errorf("log lacks the unit count:\n%s", log)
	}

	one, log, ok := buildKernels(t, cache)
	if !ok || len(one) != 1 || one[0] != strings.Join(all, " ") {
		t.Fatalf("default build: %q ok %v:\n%s", one, ok, log)
	}
	if _, log, _ = buildKernels(t, cache, "KERNELS_SPLIT=1"); !strings.Contains(log, "cache hit") {
		t.Errorf("the same sources and mode did not hit the cache:\n%s", log)
	}

	fresh := t.TempDir()
	if _, log, ok = buildKernels(t, fresh, "KERNELS_SPLIT=1", "FAKE_FAIL=attn_decode2.cu"); ok || !strings.Contains(log, "unit-attn_decode2.cu failed") || !strings.Contains(log, "fake failure") {
		t.Errorf("a failing unit: ok %v:\n%s", ok, log)
	}
	if _, log, ok = buildKernels(t, fresh, "KERNELS_SPLIT=1", "FAKE_DUP=1"); ok || !strings.Contains(log, "kernels defined in more than one unit: k_smoke") {
		t.Errorf("a duplicate kernel: ok %v:\n%s", ok, log)
	}
	if ents, _ := os.ReadDir(fresh); len(ents) != 0 {
		t.Errorf("failed builds left %d cache entries", len(ents))
	}
	if _, log, ok = buildKernels(t, fresh, "KERNELS_SPLIT=2"); ok || !strings.Contains(log, "want 0 or 1") {
		t.Errorf("KERNELS_SPLIT=2: ok %v:\n%s", ok, log)
	}
}

// Issue 25: the kernels file names the sources it was built from. The
// script's hash is the one minfer computes over its embedded sources, and
// the build writes it, with the compiler and the flags, into exactly one
// unit as minfer_kernels_stamp (in both modes).
func TestBuildKernelsScript_StampsTheSourceHashMinferComputes(t *testing.T) {
	out, err := exec.Command("bash", filepath.Join("..", "scripts", "build-kernels.sh"), "--source-hash").Output()
	if err != nil {
		t.Fatalf("--source-hash: %v", err)
	}
	want := kernels.SourceHash()
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("build-kernels.sh --source-hash = %s, minfer's embedded sources hash to %s", got, want)
	}
	for _, mode := range []string{"KERNELS_SPLIT=0", "KERNELS_SPLIT=1"} {
		units := t.TempDir()
		if _, log, ok := buildKernels(t, t.TempDir(), mode, "FAKE_UNITS="+units); !ok {
			t.Fatalf("%s: build failed:\n%s", mode, log)
		}
		ents, _ := os.ReadDir(units)
		var stamps []string
		for _, e := range ents {
			b, _ := os.ReadFile(filepath.Join(units, e.Name()))
			if i := strings.Index(string(b), "minfer_kernels_stamp[] = \""); i >= 0 {
				lit := string(b[i:])
				stamps = append(stamps, lit[:strings.Index(lit, ";")])
			}
		}
		if len(stamps) != 1 {
			t.Fatalf("%s: %d units carry the stamp, want 1 of %d", mode, len(stamps), len(ents))
		}
		st, err := ParseKernelsStamp([]byte(unquoteC(t, stamps[0])))
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if st.Source != want || st.Compiler != "fake nvcc" || !strings.Contains(st.Flags, "-O3") {
			t.Errorf("%s: stamp %+v, want source %s, the fake compiler and the flags", mode, st, want)
		}
	}
}

// unquoteC takes the string literal out of `name[] = "..."` and turns its
// \n escapes into newlines, as the compiler does.
func unquoteC(t *testing.T, decl string) string {
	t.Helper()
	i, j := strings.Index(decl, "\""), strings.LastIndex(decl, "\"")
	if i < 0 || j <= i {
		t.Fatalf("no string literal in %q", decl)
	}
	return strings.ReplaceAll(decl[i+1:j], `\n`, "\n")
}
