package kernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scripts/kernel-emu/clang-check.sh parses every kernel source with clang's
// CUDA front end (no toolkit, no GPU), so a compile error shows here before
// a device call pays for it. Both tests skip where no clang is installed
// (CI's machine: apt-get install clang-14 enables them).
func clangCheck(t *testing.T, dir string) (string, int) {
	t.Helper()
	if _, err := exec.LookPath("clang-14"); err != nil {
		if _, err := exec.LookPath("clang"); err != nil {
			t.Skip("no clang in PATH (apt-get install clang-14)")
		}
	}
	out, err := exec.Command("../../scripts/kernel-emu/clang-check.sh", dir).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

func TestKernelSources_ParseWithClang(t *testing.T) {
	if out, code := clangCheck(t, "."); code != 0 {
		t.Fatalf("clang-check.sh exit %d:\n%s", code, out)
	}
}

// The check can fail: an undeclared name planted in a copy of mmvq.cu.
func TestClangCheck_PlantedUndeclaredNameFails(t *testing.T) {
	dir := t.TempDir()
	srcs, err := filepath.Glob("*.cu*")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range srcs {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if s == "mmvq.cu" {
			b = []byte(strings.Replace(string(b), "float acc = 0.0f;", "float acc = 0.0f; int planted = no_such_name;", 1))
		}
		if err := os.WriteFile(filepath.Join(dir, s), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, code := clangCheck(t, dir)
	if code != 1 || !strings.Contains(out, "no_such_name") {
		t.Fatalf("a planted undeclared name: exit %d, want 1 naming it:\n%s", code, out)
	}
}
