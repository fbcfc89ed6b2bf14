package gates

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/harness"
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

// TestSuiteEnv_LeavesOutTheKVCacheAPathNeedsKeepsRequires: the device
// tests run with arm B's settings less the KV cache a path's need pinned
// (each test chooses its cache; its bar belongs to it), while a Requires pin
// and the lever itself stay; a lever without the need keeps the cache as set.
func TestSuiteEnv_LeavesOutTheKVCacheAPathNeedsKeepsRequires(t *testing.T) {
	lv := harness.Lever{Lever: levers.Lever{Name: "MINFER_X", Requires: []string{"MINFER_NO_SPLITK_ATTN=0"},
		Liveness: &harness.Liveness{CUDA: &harness.PathRule{Needs: harness.Needs{KVCache: "f16"}}}}}
	b := map[string]string{"MINFER_X": "1", "MINFER_NO_SPLITK_ATTN": "0", "MINFER_CACHE_TYPE": "f16"}
	e := suiteEnv(Config{Lever: lv, Backend: "cuda"}, b)
	if _, set := e["MINFER_CACHE_TYPE"]; set || e["MINFER_X"] != "1" || e["MINFER_NO_SPLITK_ATTN"] != "0" {
		t.Errorf("a path that needs f16: suite env %v, want the lever and its Requires without MINFER_CACHE_TYPE", e)
	}
	lv.Liveness = nil
	if e := suiteEnv(Config{Lever: lv, Backend: "cuda"}, b); e["MINFER_CACHE_TYPE"] != "f16" {
		t.Errorf("no KV need: suite env %v, want MINFER_CACHE_TYPE kept as set", e)
	}
}
