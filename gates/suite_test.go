package gates

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExpandGlobs_ReportsPatternsThatMatchNothing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.test"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	bins, unmatched := expandGlobs([]string{filepath.Join(dir, "*.test"), filepath.Join(dir, "missing*.test")})
	if len(bins) != 1 || len(unmatched) != 1 || !strings.Contains(unmatched[0], "missing") {
		t.Fatalf("bins %v unmatched %v", bins, unmatched)
	}
}

// The device suite runs with the arm's own MINFER_KERNELS (the lever
// MINFER_KERNELS): nvrtc stays nvrtc and a file stays that file, whatever
// --kernels or the fatbin beside minfer say; other levers get --kernels.
func TestSuiteKernels_TheArmsMINFERKERNELSWinsOverKernelsFlag(t *testing.T) {
	cfg := Config{Backend: "cuda", Kernels: "/flag/minfer-kernels.fatbin"}
	env := &Env{}
	k, e := suiteKernels(cfg, env, map[string]string{"MINFER_KERNELS": "nvrtc", "MINFER_MMQ": "1"})
	if k != "" || e["MINFER_KERNELS"] != "nvrtc" || e["MINFER_MMQ"] != "1" {
		t.Errorf("nvrtc arm: kernels %q env %v; want no file and MINFER_KERNELS=nvrtc", k, e)
	}
	k, e = suiteKernels(cfg, env, map[string]string{"MINFER_KERNELS": "/abs/nvcc.fatbin"})
	if _, set := e["MINFER_KERNELS"]; k != "/abs/nvcc.fatbin" || set {
		t.Errorf("file arm: kernels %q env %v; want the arm's file as the kernels (hashed in the key)", k, e)
	}
	k, e = suiteKernels(cfg, env, map[string]string{"MINFER_MMQ": "1"})
	if k != "/flag/minfer-kernels.fatbin" || len(e) != 1 {
		t.Errorf("another lever: kernels %q env %v; want --kernels", k, e)
	}
}
