package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// kernelEntryRE finds each extern "C" kernel and the first token of its
// body (line continuations of macro-defined kernels skipped).
var kernelEntryRE = regexp.MustCompile(`extern "C" __global__[^{]*\{[\s\\]*(\S+)`)

// kernelsMissingEntry returns, per kernel of src, the first token of the
// bodies that do not begin with MINFER_KERNEL_ENTRY(); and the kernel count.
func kernelsMissingEntry(src string) (bad []string, n int) {
	for _, m := range kernelEntryRE.FindAllStringSubmatch(src, -1) {
		n++
		if m[1] != "MINFER_KERNEL_ENTRY();" {
			bad = append(bad, m[1])
		}
	}
	return bad, n
}

// TestKernelSources_EveryKernelBeginsWithEntry: a kernel launched with
// programmatic dependent launch (driver.Function.LaunchPDL; the backend's
// MINFER_PDL, retired as slower, did it for every kernel) may start before
// its predecessor finished; only the entry's griddepcontrol.wait makes that
// safe. The entries stay in the sources until a kernel change removes
// them, so the rule is still checked over every source.
func TestKernelSources_EveryKernelBeginsWithEntry(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("kernels", "*.cu"))
	if err != nil || len(files) == 0 {
		t.Fatalf("kernel sources: %v (%d files)", err, len(files))
	}
	total := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		bad, n := kernelsMissingEntry(string(b))
		total += n
		if n == 0 {
			t.Errorf("%s: no extern \"C\" __global__ kernel found (the check would pass vacuously)", f)
		}
		for _, tok := range bad {
			t.Errorf("%s: a kernel begins with %q, want MINFER_KERNEL_ENTRY();", f, tok)
		}
	}
	for _, h := range []string{"common.cuh", "dequant.cuh"} {
		b, err := os.ReadFile(filepath.Join("kernels", h))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `#include "pdl.cuh"`) {
			t.Errorf("%s does not include pdl.cuh", h)
		}
	}
	t.Logf("%d kernel definitions checked in %d files", total, len(files))
}

// The checker itself fails on a kernel without the entry, plain or defined
// in a macro (mutation evidence for the rule above).
func TestKernelSources_CheckerCatchesAMissingEntry(t *testing.T) {
	for _, src := range []string{
		"extern \"C\" __global__ void k(float* y) {\n    y[0] = 1;\n}\n",
		"#define K(n) \\\n    extern \"C\" __global__ void n(float* y) { \\\n        y[0] = 1; \\\n    }\n",
	} {
		if bad, n := kernelsMissingEntry(src); n != 1 || len(bad) != 1 {
			t.Errorf("source %q: %d kernels, %d flagged; want 1 and 1", src, n, len(bad))
		}
	}
	good := "#define K(n) \\\n    extern \"C\" __global__ void n(float* y) { \\\n        MINFER_KERNEL_ENTRY(); \\\n        y[0] = 1; \\\n    }\n"
	if bad, n := kernelsMissingEntry(good); n != 1 || len(bad) != 0 {
		t.Errorf("a macro kernel with the entry: %d kernels, flagged %v", n, bad)
	}
}

// includeClosure returns the headers file reaches through #include "..."
// (relative to dir), itself excluded.
func includeClosure(t *testing.T, dir, file string) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?m)^\s*#include\s+"([^"]+)"`)
	seen := map[string]bool{}
	var walk func(string)
	walk = func(f string) {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if !seen[m[1]] {
				seen[m[1]] = true
				walk(m[1])
			}
		}
	}
	walk(file)
	return seen
}

// TestKernelSources_EverySourceIncludesTheEntryMacro: every .cu reaches
// pdl.cuh (MINFER_KERNEL_ENTRY) through its own includes, so it compiles
// as its own unit (scripts/build-kernels.sh KERNELS_SPLIT=1), not only after
// the files before it in the single unit; smoke.cu once did not.
func TestKernelSources_EverySourceIncludesTheEntryMacro(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("kernels", "*.cu"))
	if err != nil || len(files) == 0 {
		t.Fatalf("kernel sources: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		if !includeClosure(t, "kernels", filepath.Base(f))["pdl.cuh"] {
			t.Errorf("%s does not include pdl.cuh, directly or through a header", f)
		}
	}
}
