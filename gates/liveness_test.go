package gates

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/profile"
)

// leverCfg is an opt-in NO_* lever: A=1 (path off), B=0 (path on).
func leverCfg(name string) Config {
	cfg := Config{Lever: harness.Lever{Name: name, Kind: "opt-in", Default: "0", ArmA: "1", ArmB: "0", Backend: "cuda"},
		A:  Arm{Name: "A", Value: "1", Env: map[string]string{name: "1"}},
		B:  Arm{Name: "B", Value: "0", Env: map[string]string{name: "0"}},
		PP: 16, TG: 4}
	cfg.Defaults()
	return cfg
}

func profileWithFake(t *testing.T, lever string) Result {
	t.Helper()
	cfg := leverCfg(lever)
	cfg.TmpDir = t.TempDir()
	return Profile(context.Background(), cfg, &Env{M: fake(t), HasGPU: true})
}

func TestLiveness_PrefillGemmOnArmLaunchesGemmAndPhantomFails(t *testing.T) {
	r := profileWithFake(t, "MINFER_NO_PREFILL_GEMM")
	if r.Status != Pass || !strings.Contains(r.Reason, "minfer_gemm_q8_0") || r.Profile.Rule == nil {
		t.Fatalf("%s: %s", r.Status, r.Reason)
	}
	if r.Profile.CensusB["minfer_gemm_q8_0"] != 28 || r.Profile.CensusA["minfer_gemm_q8_0"] != 0 {
		t.Errorf("census A %v B %v", r.Profile.CensusA, r.Profile.CensusB)
	}
	// The nsys fallback parsed the op_timing line of both arms.
	if len(r.Profile.OpTiming) != 2 || r.Profile.OpTiming[1].Timing == nil || r.Profile.OpTiming[1].Timing.Kernels[0].Kernel != "minfer_mmv_q8_0" {
		t.Errorf("op timing %+v (nsys note %q)", r.Profile.OpTiming, r.Profile.NsysNote)
	}
	t.Setenv("FAKEMINFER_MODE", "phantom") // the GEMM path never runs
	r = profileWithFake(t, "MINFER_NO_PREFILL_GEMM")
	if r.Status != Fail || !strings.Contains(r.Reason, "launched no minfer_gemm_*") {
		t.Fatalf("phantom gain not caught: %s: %s", r.Status, r.Reason)
	}
}

func TestLiveness_CudaGraphLeverJudgedByGraphCounts(t *testing.T) {
	r := profileWithFake(t, "MINFER_NO_CUDA_GRAPH")
	if r.Status != Pass || r.Profile.GraphsB == nil || r.Profile.GraphsB.Replayed != 126 || r.Profile.GraphsA.Captured != 0 {
		t.Fatalf("%s: %s (%+v)", r.Status, r.Reason, r.Profile)
	}
	lv := leverCfg("MINFER_NO_CUDA_GRAPH").Lever
	c := profile.Census{"minfer_mmv_q8_0": 10}
	on := LivenessInput{Arm: Arm{Name: "B", Value: "0"}, Census: c, HasGraphs: true, Graphs: profile.Graphs{Captured: 2, Replayed: 40}}
	off := LivenessInput{Arm: Arm{Name: "A", Value: "1"}, Census: c, HasGraphs: true, Graphs: profile.Graphs{Captured: 1, Replayed: 3}}
	if st, why := Liveness(lv, off, on); st != Fail || !strings.Contains(why, "graphs off") {
		t.Errorf("graphs replayed with graphs off: %s %s", st, why)
	}
	off.Graphs = profile.Graphs{}
	off.HasGraphs = false
	if st, why := Liveness(lv, off, on); st != Fail || !strings.Contains(why, "cuda_graphs") {
		t.Errorf("missing cuda_graphs line: %s %s", st, why)
	}
	off.HasGraphs = true
	off.Census = profile.Census{"minfer_mmv_q8_0": 10, "minfer_extra": 1}
	if st, why := Liveness(lv, off, on); st != Fail || !strings.Contains(why, "minfer_extra") {
		t.Errorf("different kernel sets: %s %s", st, why)
	}
}

// TestLiveness_PrefillCaptureJudgedByCapturedGraphs: prefill capture on
// must capture more graphs than off (2 against 1 on the H200: decode and
// pp512), and the off arm must keep its decode graph.
func TestLiveness_PrefillCaptureJudgedByCapturedGraphs(t *testing.T) {
	lv := leverCfg("MINFER_NO_PREFILL_CAPTURE").Lever
	c := profile.Census{"minfer_mmq_q8_0": 10}
	on := LivenessInput{Arm: Arm{Name: "A", Value: "0"}, Census: c, HasGraphs: true, Graphs: profile.Graphs{Captured: 2, Replayed: 133}}
	off := LivenessInput{Arm: Arm{Name: "B", Value: "1"}, Census: c, HasGraphs: true, Graphs: profile.Graphs{Captured: 1, Replayed: 130}}
	if st, why := Liveness(lv, on, off); st != Pass {
		t.Errorf("2 captures on, 1 off: %s %s", st, why)
	}
	same := off
	same.Graphs.Captured = 2
	if st, why := Liveness(lv, on, same); st != Fail || !strings.Contains(why, "not more than") {
		t.Errorf("lever that switched nothing: %s %s", st, why)
	}
	none := off
	none.Graphs = profile.Graphs{}
	if st, why := Liveness(lv, on, none); st != Fail || !strings.Contains(why, "decode graph") {
		t.Errorf("off arm with no graphs at all: %s %s", st, why)
	}
	none.HasGraphs = false
	if st, why := Liveness(lv, on, none); st != Fail || !strings.Contains(why, "cuda_graphs") {
		t.Errorf("missing cuda_graphs line: %s %s", st, why)
	}
}

func TestLiveness_LeverWithoutRuleIsSkipNeverPass(t *testing.T) {
	r := profileWithFake(t, "MINFER_NO_PINNED_READBACK")
	if r.Status != Skip || !strings.Contains(r.Reason, "no liveness rule for MINFER_NO_PINNED_READBACK") {
		t.Fatalf("%s: %s", r.Status, r.Reason)
	}
	lv := leverCfg("MINFER_NO_PREFILL_GEMM").Lever
	same := LivenessInput{Arm: Arm{Name: "A", Value: "0"}}
	if st, _ := Liveness(lv, same, LivenessInput{Arm: Arm{Name: "B", Value: harness.Unset}}); st != Skip {
		t.Errorf("both arms on (B unset = default 0): %s, want SKIP", st)
	}
}

func TestSuite_TestBinaryRunsInItsPackageDirectory(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"cuda/driver", "bin", "other/driver/testdata"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "cuda/driver/x_test.go"), []byte("package driver\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := PackageDir(root, "bin/driver.test"); got != filepath.Join(root, "cuda/driver") {
		t.Errorf("driver.test runs in %s", got)
	}
	if got := PackageDir(root, "bin/nope.test"); got != root {
		t.Errorf("unknown package: %s, want the root", got)
	}
}

func TestLiveness_PDLLeverJudgedByPDLLaunchCount(t *testing.T) {
	lv := leverCfg("MINFER_PDL").Lever
	c := profile.Census{"minfer_mmvqx_q8_0": 10}
	on := LivenessInput{Arm: Arm{Name: "B", Value: "1"}, Census: c, HasGraphs: true, Graphs: profile.Graphs{PDLLaunches: 412}}
	off := LivenessInput{Arm: Arm{Name: "A", Value: "0"}, Census: c, HasGraphs: true}
	if st, why := Liveness(lv, off, on); st != Pass || !strings.Contains(why, "412 PDL launches") {
		t.Fatalf("%s: %s", st, why)
	}
	on.Graphs.PDLLaunches = 0 // the attribute never reached a launch
	if st, why := Liveness(lv, off, on); st != Fail || !strings.Contains(why, "no PDL launch") {
		t.Errorf("phantom PDL not caught: %s %s", st, why)
	}
	on.Graphs.PDLLaunches, off.Graphs.PDLLaunches = 412, 3 // the off arm still used it
	if st, why := Liveness(lv, off, on); st != Fail || !strings.Contains(why, "PDL off") {
		t.Errorf("PDL launches with the lever set: %s %s", st, why)
	}
}

// Every live CUDA lever whose path is a set of kernels has a rule, and each
// rule's patterns are valid globs that match the kernel names the sources
// define (a typo would make the rule fail every run, or pass vacuously).
func TestLiveness_RulesCoverTheDeviceLeversWithValidPatterns(t *testing.T) {
	for _, name := range []string{"MINFER_MMQ", "MINFER_NO_Q80_MMVQ", "MINFER_NO_Q40_MMVQ", "MINFER_NO_KQ_MMVQ",
		"MINFER_MMVQ_INLINE_Q8", "MINFER_NO_SPLITK_ATTN", "MINFER_NO_FA_PREFILL", "MINFER_NO_FUSE_FFN",
		"MINFER_NO_FUSE_QKV", "MINFER_NO_CUDA_GRAPH", "MINFER_PDL", "MINFER_NO_PREFILL_GEMM",
		"MINFER_NORM_Q8", "MINFER_MMVQ_REPACK", "MINFER_ATTN_DECODE_V2", "MINFER_FA_PREFILL_V2",
		"MINFER_FUSE_RESIDUAL", "MINFER_QUANTIZE_X4", "MINFER_MMVQ_NT", "MINFER_FUSE_QKNORM",
		"MINFER_MMVQ_SPLIT", "MINFER_NO_PREFILL_CAPTURE"} {
		if _, ok := LivenessRules[name]; !ok {
			t.Errorf("%s has no liveness rule", name)
		}
	}
	examples := map[string]string{
		"minfer_mmq_q*":      "minfer_mmq_q5_0_r64",
		"minfer_mmvq*_res_*": "minfer_mmvqr_res_q8_0", "minfer_quantize_q8_1_x4": "minfer_quantize_q8_1_x4",
		"minfer_mmvq_nt_*": "minfer_mmvq_nt_q4_k", "minfer_mmvq*_q8_0": "minfer_mmvqx_ffn_q8_0",
		"minfer_mmvq*_q[45]_[01]": "minfer_mmvqx_qkv_q5_0", "minfer_mmvq*_q[456]_k": "minfer_mmvq_q6_k",
		"minfer_mmvqx_*": "minfer_mmvqx_q4_k", "minfer_attn_decode*_*": "minfer_attn_decode_hd64_g8_f32",
		"minfer_attn_prefill*_*": "minfer_attn_prefill_hd64_bm32", "minfer_mmvq*_ffn_*": "minfer_mmvqx_ffn_q5_0",
		"minfer_qkv*_rope_store": "minfer_qkv_norm_rope_store", "minfer_mmvq*_qkv_*": "minfer_mmvq_qkv_q8_0",
		"minfer_gemm_*":              "minfer_gemm_q8_0",
		"minfer_rms_norm_q8_1":       "minfer_rms_norm_q8_1",
		"minfer_attn_decode2_*":      "minfer_attn_decode2_hd64_f32",
		"minfer_attn_prefill2_*":     "minfer_attn_prefill2_hd64_bm16",
		"minfer_mmvqr_*":             "minfer_mmvqr_ffn_q6_k",
		"minfer_mmvq*_s_*":           "minfer_mmvqr_res_s_q8_0",
		"minfer_qkv_norm_rope_store": "minfer_qkv_norm_rope_store",
	}
	for name, r := range LivenessRules {
		for _, pat := range r.Kernels {
			ex, ok := examples[pat]
			if !ok {
				t.Errorf("%s: pattern %q has no example kernel name in this test", name, pat)
				continue
			}
			if m, err := path.Match(pat, ex); err != nil || !m {
				t.Errorf("%s: pattern %q does not match %q (%v)", name, pat, ex, err)
			}
		}
	}
	// The split-K and tiled rules hold for v1 and v2 alike (v2 is the
	// default), and neither matches the plain attention kernel.
	for pat, names := range map[string][]string{
		"minfer_attn_decode*_*":  {"minfer_attn_decode_hd64_g8_f32", "minfer_attn_decode2_hd128_q8_0"},
		"minfer_attn_prefill*_*": {"minfer_attn_prefill_hd64_bm32", "minfer_attn_prefill2_hd64_bm16"},
	} {
		for _, n := range names {
			if m, _ := path.Match(pat, n); !m {
				t.Errorf("%q does not match %q", pat, n)
			}
		}
		if m, _ := path.Match(pat, "minfer_attn_f32"); m {
			t.Errorf("%q matches the plain attention kernel", pat)
		}
	}
	for _, n := range []string{"minfer_mmq_q8_0", "minfer_mmq_q6_k_r64", "minfer_mmq_q4_0"} {
		if m, _ := path.Match("minfer_mmq_q*", n); !m {
			t.Errorf("the MMQ pattern misses %s", n)
		}
	}
	for _, n := range []string{"minfer_mmq_reduce", "minfer_mmvq_q8_0", "minfer_gemm_q8_0"} {
		if m, _ := path.Match("minfer_mmq_q*", n); m {
			t.Errorf("the MMQ pattern matches %s", n)
		}
	}
	if m, _ := path.Match("minfer_mmvq*_q[45]_[01]", "minfer_mmvq_q8_0"); m {
		t.Error("the legacy-quant pattern matches Q8_0")
	}
	// MINFER_MMVQ_SPLIT: every split name matches, no one-warp MMVQ name does.
	for n, want := range map[string]bool{"minfer_mmvq_s_q4_k": true, "minfer_mmvq_res_s_q6_k": true,
		"minfer_mmvq_qkv_s_q5_0": true, "minfer_mmvqr_s_q6_k": true, "minfer_mmvqr_qkv_s_q8_0": true,
		"minfer_mmvq_q8_0": false, "minfer_mmvqr_res_q6_k": false, "minfer_mmvq_nt_q4_k": false,
		"minfer_mmvqx_qkv_q5_1": false, "minfer_mmvq_ffn_q4_0": false, "minfer_mmvqr_ffn_q8_0": false} {
		if m, _ := path.Match("minfer_mmvq*_s_*", n); m != want {
			t.Errorf("the MMVQ split pattern on %s: match %v, want %v", n, m, want)
		}
	}
}

// TestLiveness_FailOffTheDeclaredWorkloadNamesIt: a lever run on another
// model than its declared workload, whose on-arm launched none of the
// rule's kernels, fails with a reason that names the workload it needs; on
// its workload the same failure is the path's own (no such note).
func TestLiveness_FailOffTheDeclaredWorkloadNamesIt(t *testing.T) {
	dir := t.TempDir()
	model := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("fake "+name), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(modelPath string) Result {
		cfg := leverCfg("MINFER_NO_PREFILL_GEMM")
		cfg.Lever.Workload = "qwen2-0.5b:F16"
		cfg.Model, cfg.TmpDir = modelPath, t.TempDir()
		return Profile(context.Background(), cfg, &Env{M: fake(t), HasGPU: true})
	}
	wrong, right := model("qwen2-0.5b-Q8_0-seed1.gguf"), model("qwen2-0.5b-F16-seed1.gguf")

	if r := run(wrong); r.Status != Pass || strings.Contains(r.Reason, "path needs") {
		t.Errorf("a live path on another model: %s: %s (a PASS carries no workload note)", r.Status, r.Reason)
	}
	t.Setenv("FAKEMINFER_MODE", "phantom") // the GEMM never launches
	r := run(wrong)
	want := "MINFER_NO_PREFILL_GEMM's path needs qwen2-0.5b:F16; this run used qwen2-0.5b-Q8_0-seed1.gguf"
	if r.Status != Fail || !strings.Contains(r.Reason, want) || !strings.Contains(r.Reason, "launched no minfer_gemm_*") {
		t.Fatalf("off its workload: %s: %s\nwant the reason to contain %q", r.Status, r.Reason, want)
	}
	if r := run(right); r.Status != Fail || strings.Contains(r.Reason, "path needs") {
		t.Errorf("on its workload: %s: %s (a dead path there is the path's own failure)", r.Status, r.Reason)
	}
}
