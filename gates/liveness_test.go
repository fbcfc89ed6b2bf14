package gates

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/profile"
)

// regLever is the registry's entry as the harness reads it (`minfer levers
// --json`), so the tests judge the rules the binary declares.
func regLever(t *testing.T, name string) harness.Lever {
	t.Helper()
	b, err := json.Marshal(levers.All())
	if err != nil {
		t.Fatal(err)
	}
	ls, err := harness.ParseLevers(b)
	if err != nil {
		t.Fatal(err)
	}
	l, err := harness.FindLever(ls, name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// leverCfg runs the registry's lever on the fake's CUDA backend with its
// declared arms.
func leverCfg(t *testing.T, name string) Config {
	t.Helper()
	lv := regLever(t, name)
	cfg := Config{Lever: lv, Backend: "cuda", Device: "cuda",
		A:  Arm{Name: "A", Value: lv.ArmA, Env: map[string]string{name: lv.ArmA}},
		B:  Arm{Name: "B", Value: lv.ArmB, Env: map[string]string{name: lv.ArmB}},
		PP: 16, TG: 4}
	cfg.Defaults()
	return cfg
}

func profileWithFake(t *testing.T, lever string) Result {
	t.Helper()
	cfg := leverCfg(t, lever)
	cfg.TmpDir = t.TempDir()
	return Profile(context.Background(), cfg, &Env{M: fake(t), HasGPU: true})
}

func ev(arm Arm, c profile.Census, g *profile.Graphs) ArmEvidence {
	e := ArmEvidence{Arm: arm, Census: c, Processes: 1}
	if g != nil {
		e.Graphs, e.HasGraphs = *g, true
	}
	return e
}

func TestLiveness_MMQOnArmLaunchesMMQAndPhantomFails(t *testing.T) {
	r := profileWithFake(t, "MINFER_MMQ")
	if !strings.HasPrefix(r.Liveness, "PASS") || !strings.Contains(r.Liveness, "minfer_mmq_q8_0") || r.Profile.Rule == nil {
		t.Fatalf("%s: %s / %s", r.Status, r.Reason, r.Liveness)
	}
	if r.Profile.CensusB["minfer_mmq_q8_0"] != 28 || r.Profile.CensusA["minfer_mmq_q8_0"] != 0 {
		t.Errorf("census A %v B %v", r.Profile.CensusA, r.Profile.CensusB)
	}
	// The nsys fallback parsed the op_timing line of both arms.
	if len(r.Profile.OpTiming) != 2 || r.Profile.OpTiming[1].Timing == nil || r.Profile.OpTiming[1].Timing.Kernels[0].Kernel != "minfer_mmv_q8_0" {
		t.Errorf("op timing %+v (nsys note %q)", r.Profile.OpTiming, r.Profile.NsysNote)
	}
	t.Setenv("FAKEMINFER_MODE", "phantom") // the fast path never runs
	r = profileWithFake(t, "MINFER_MMQ")
	if r.Status != Fail || !strings.Contains(r.Reason, "ran no minfer_mmq_q*") {
		t.Fatalf("phantom gain not caught: %s: %s", r.Status, r.Reason)
	}
}

// Without ncu and cuobjdump (this machine) the profile gate cannot produce
// its evidence: INCONCLUSIVE with what is missing, never PASS.
func TestProfile_MissingProfilerEvidenceIsInconclusive(t *testing.T) {
	if FindTool("ncu") != "" && FindTool("cuobjdump") != "" {
		t.Skip("this machine has ncu and cuobjdump")
	}
	r := profileWithFake(t, "MINFER_MMQ")
	if r.Status != Inconclusive || !strings.Contains(r.Reason, "evidence missing") || !strings.Contains(r.Reason, "ncu") {
		t.Fatalf("%s: %s", r.Status, r.Reason)
	}
}

func TestLiveness_CudaGraphLeverJudgedByGraphCounts(t *testing.T) {
	lv := regLever(t, "MINFER_NO_CUDA_GRAPH")
	c := profile.Census{"minfer_mmv_q8_0": 10}
	on := ev(Arm{Name: "B", Value: "0"}, c, &profile.Graphs{Captured: 2, Replayed: 40})
	off := ev(Arm{Name: "A", Value: "1"}, c, &profile.Graphs{Captured: 1, Replayed: 3})
	if st, why := Liveness(lv, "cuda", off, on); st != Fail || !strings.Contains(why, "graphs off") {
		t.Errorf("graphs replayed with graphs off: %s %s", st, why)
	}
	off.Graphs, off.HasGraphs = profile.Graphs{}, false
	if st, why := Liveness(lv, "cuda", off, on); st != Fail || !strings.Contains(why, "cuda_graphs") {
		t.Errorf("missing cuda_graphs line: %s %s", st, why)
	}
	off.HasGraphs = true
	if st, why := Liveness(lv, "cuda", off, on); st != Pass {
		t.Errorf("graphs on vs off: %s %s", st, why)
	}
	off.Census = profile.Census{"minfer_mmv_q8_0": 10, "minfer_extra": 1}
	if st, why := Liveness(lv, "cuda", off, on); st != Fail || !strings.Contains(why, "minfer_extra") {
		t.Errorf("different kernel sets: %s %s", st, why)
	}
}

// TestLiveness_PrefillCaptureJudgedByCapturedGraphs: prefill capture on
// must capture more graphs than off, and the off arm keeps its decode graph.
func TestLiveness_PrefillCaptureJudgedByCapturedGraphs(t *testing.T) {
	lv := regLever(t, "MINFER_NO_PREFILL_CAPTURE")
	c := profile.Census{"minfer_mmq_q8_0": 10}
	on := ev(Arm{Name: "B", Value: "0"}, c, &profile.Graphs{Captured: 2, Replayed: 133})
	off := ev(Arm{Name: "A", Value: "1"}, c, &profile.Graphs{Captured: 1, Replayed: 130})
	if st, why := Liveness(lv, "cuda", off, on); st != Pass {
		t.Errorf("2 captures on, 1 off: %s %s", st, why)
	}
	same := off
	same.Graphs.Captured = 2
	if st, why := Liveness(lv, "cuda", same, on); st != Fail || !strings.Contains(why, "not more than") {
		t.Errorf("lever that switched nothing: %s %s", st, why)
	}
	none := off
	none.Graphs = profile.Graphs{}
	if st, why := Liveness(lv, "cuda", none, on); st != Fail || !strings.Contains(why, "decode graph") {
		t.Errorf("off arm with no graphs at all: %s %s", st, why)
	}
}

// A lever without a rule, or a process without a census line, can never
// make liveness PASS.
func TestLiveness_NoRuleOrNoCensusIsInconclusiveNeverPass(t *testing.T) {
	r := profileWithFake(t, "MINFER_NO_PINNED_READBACK")
	if r.Status != Inconclusive || !strings.Contains(r.Reason, "declares no liveness rule") {
		t.Fatalf("%s: %s", r.Status, r.Reason)
	}
	lv := regLever(t, "MINFER_MMQ")
	on := ev(Arm{Name: "B", Value: "1"}, profile.Census{"minfer_mmq_q8_0": 3}, nil)
	off := ev(Arm{Name: "A", Value: "0"}, profile.Census{"minfer_gemm_q8_0": 3}, nil)
	if st, _ := Liveness(lv, "cuda", off, on); st != Pass {
		t.Fatalf("the control: %s", st)
	}
	off.NoCensus = []string{"parity A nt=1"}
	if st, why := Liveness(lv, "cuda", off, on); st != Inconclusive || !strings.Contains(why, "printed no launch census") {
		t.Errorf("a process without census: %s %s", st, why)
	}
	both := ev(Arm{Name: "A", Value: harness.Unset}, nil, nil) // unset reads as the default, 1: on
	if st, _ := Liveness(lv, "cuda", both, on); st != Inconclusive {
		t.Errorf("both arms on: %s, want INCONCLUSIVE", st)
	}
	if st, why := Liveness(lv, "cpu", off, on); st != Inconclusive || !strings.Contains(why, "no liveness rule for the cpu backend") {
		t.Errorf("a CUDA lever judged on the CPU: %s %s", st, why)
	}
}

// A CPU lever is proven live by the CPU backend's op/path census.
func TestLiveness_CPULeverJudgedByTheCPUCensus(t *testing.T) {
	lv := regLever(t, "MINFER_NO_FUSE_FFN")
	on := ev(Arm{Name: "B", Value: "0"}, profile.Census{"cpu_fused_ffn_q8_0": 24, "cpu_matmul_q8_0": 100}, nil)
	off := ev(Arm{Name: "A", Value: "1"}, profile.Census{"cpu_matmul_q8_0": 148}, nil)
	if st, why := Liveness(lv, "cpu", off, on); st != Pass || !strings.Contains(why, "cpu_fused_ffn_q8_0") {
		t.Fatalf("%s %s", st, why)
	}
	// "whose census equals arm A's": the fused op never ran in B.
	if st, why := Liveness(lv, "cpu", off, ev(Arm{Name: "B", Value: "0"}, off.Census, nil)); st != Fail || !strings.Contains(why, "ran no cpu_fused_ffn_*") {
		t.Errorf("a CPU lever that switched nothing: %s %s", st, why)
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
	if got := packageDir(root, suiteBinary{Path: "bin/x.test", Pkg: "cuda/driver"}); got != filepath.Join(root, "cuda/driver") {
		t.Errorf("stamped package: %s", got)
	}
}

// The census parser used to drop pdl_launches, so MINFER_PDL's rule could
// never pass; the evidence now sums it over the processes. MINFER_PDL is
// retired from the registry; the rule kind stays for registries that
// declare it (recorded ones, the fake's), so the lever is declared here.
func TestLiveness_PDLLeverJudgedByPDLLaunchCount(t *testing.T) {
	lv := harness.Lever{Lever: levers.Lever{Name: "MINFER_PDL", KindS: "opt-in", Default: "0", Values: []string{"0", "1"},
		Backend: "cuda", ArmA: "0", ArmB: "1", Liveness: &levers.Liveness{On: "1", CUDA: &levers.PathRule{PDL: true}}}}
	var on, off ArmEvidence
	on.Arm, off.Arm = Arm{Name: "B", Value: "1"}, Arm{Name: "A", Value: "0"}
	on.Add("B", &harness.Exec{StderrAll: `{"launch_census":{"minfer_mmvq_q8_0":10}}` + "\n" + `{"cuda_graphs":{"captured":1,"replayed":3,"pdl_launches":412}}`})
	off.Add("A", &harness.Exec{StderrAll: `{"launch_census":{"minfer_mmvq_q8_0":10}}` + "\n" + `{"cuda_graphs":{"captured":1,"replayed":3}}`})
	if st, why := Liveness(lv, "cuda", off, on); st != Pass || !strings.Contains(why, "412 PDL launches") {
		t.Fatalf("%s: %s", st, why)
	}
	on.Graphs.PDLLaunches = 0 // the attribute never reached a launch
	if st, why := Liveness(lv, "cuda", off, on); st != Fail || !strings.Contains(why, "no PDL launch") {
		t.Errorf("phantom PDL not caught: %s %s", st, why)
	}
}

// TestLiveness_FailOffTheDeclaredWorkloadNamesIt: a lever run on another
// model than its declared workload, whose on-arm ran none of the rule's
// kernels, fails with a reason that names the workload it needs.
func TestLiveness_FailOffTheDeclaredWorkloadNamesIt(t *testing.T) {
	dir := t.TempDir()
	wrong := filepath.Join(dir, "qwen2-0.5b-F16-seed1.gguf")
	if err := os.WriteFile(wrong, []byte("fake"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKEMINFER_MODE", "phantom") // MMQ never launches
	cfg := leverCfg(t, "MINFER_MMQ")
	cfg.Model, cfg.TmpDir = wrong, t.TempDir()
	r := Profile(context.Background(), cfg, &Env{M: fake(t), HasGPU: true})
	want := "MINFER_MMQ's path needs qwen2-0.5b:Q8_0; this run used qwen2-0.5b-F16-seed1.gguf"
	if r.Status != Fail || !strings.Contains(r.Reason, want) {
		t.Fatalf("%s: %s\nwant %q", r.Status, r.Reason, want)
	}
}

// MINFER_KERNELS (issue 25): the file arm's census names kernels_file, the
// nvrtc arm's kernels_nvrtc, and both launch the same minfer_ kernels. A
// phantom file arm (it loaded the NVRTC build), an nvrtc arm that loaded a
// file, or arms that launched different kernels fail.
func TestLiveness_KernelsLeverJudgedByWhereTheKernelsCameFrom(t *testing.T) {
	lv := regLever(t, "MINFER_KERNELS")
	kern := profile.Census{"minfer_mmq_q8_0": 28, "minfer_rms_norm_f32": 49}
	with := func(name string) profile.Census {
		c := profile.Census{name: 1}
		for k, v := range kern {
			c[k] = v
		}
		return c
	}
	a := ev(Arm{Name: "A", Value: levers.KernelsNVRTC}, with(levers.CensusKernelsNVRTC), nil)
	b := ev(Arm{Name: "B", Value: "/abs/minfer-kernels.fatbin"}, with(levers.CensusKernelsFile), nil)
	if st, why := Liveness(lv, "cuda", a, b); st != Pass || !strings.Contains(why, "kernels_file") || !strings.Contains(why, "kernels_nvrtc") || !strings.Contains(why, "same 2 kernels") {
		t.Errorf("file against nvrtc: %s %s", st, why)
	}
	// --baseline FILE --lever MINFER_KERNELS=nvrtc: the arms swap sides.
	a2, b2 := b, a
	a2.Arm.Name, b2.Arm.Name = "A", "B"
	if st, why := Liveness(lv, "cuda", a2, b2); st != Pass {
		t.Errorf("file as arm A: %s %s", st, why)
	}
	phantom := b
	phantom.Census = with(levers.CensusKernelsNVRTC)
	if st, why := Liveness(lv, "cuda", a, phantom); st != Fail || !strings.Contains(why, "ran no kernels_file") || !strings.Contains(why, "path on) still ran kernels_nvrtc") {
		t.Errorf("file arm that ran the NVRTC build: %s %s", st, why)
	}
	besides := a
	besides.Census = with(levers.CensusKernelsFile)
	if st, why := Liveness(lv, "cuda", besides, b); st != Fail || !strings.Contains(why, "path off) ran no kernels_nvrtc") || !strings.Contains(why, "path off) still ran kernels_file") {
		t.Errorf("nvrtc arm that loaded a file: %s %s", st, why)
	}
	other := b
	other.Census = with(levers.CensusKernelsFile)
	other.Census["minfer_gemm_q8_0"] = 3
	if st, why := Liveness(lv, "cuda", a, other); st != Fail || !strings.Contains(why, "minfer_gemm_q8_0 only with the path on") {
		t.Errorf("different kernels: %s %s", st, why)
	}
}

// --with pins another lever in both arms: where its value runs a path,
// both arms must show it (an A/B "with the split kernels on" that launched
// none of them in one arm fails), on top of the lever's own rule.
func TestLiveness_AWithPathMustRunInBothArms(t *testing.T) {
	cfg := leverCfg(t, "MINFER_NO_Q80_MMVQ")
	cfg.With = []WithLever{{Lever: regLever(t, "MINFER_MMVQ_SPLIT"), Value: "1"}}
	a := ev(cfg.A, profile.Census{"minfer_mmv_q8_0": 24, "minfer_mmvq_s_q8_0": 0, "minfer_rms_norm_f32": 9}, nil)
	b := ev(cfg.B, profile.Census{"minfer_mmvq_s_q8_0": 24, "minfer_rms_norm_f32": 9}, nil)
	st, why := LivenessOf(cfg, a, b)
	if st != Fail || !strings.Contains(why, "arm A (--with MINFER_MMVQ_SPLIT=1) ran no minfer_mmvq*_s_*") || strings.Contains(why, "arm B (--with") {
		t.Fatalf("%s: %s", st, why)
	}
	a.Census["minfer_mmvq_s_q6_k"] = 3
	if st, why := LivenessOf(cfg, a, b); strings.Contains(why, "--with") {
		t.Fatalf("both arms ran the pinned path: %s: %s", st, why)
	}
	cfg.With[0].Value = "0" // a pinned value that runs no path of its own asks nothing
	a.Census["minfer_mmvq_s_q6_k"] = 0
	if _, why := LivenessOf(cfg, a, b); strings.Contains(why, "--with") {
		t.Fatalf("value 0: %s", why)
	}
}

// A --with that the lever requires is asked of arm A only: arm B runs the
// lever's path, which may replace the required path's kernels
// (MINFER_ATTN_DECODE_TC --with MINFER_NO_SPLITK_ATTN=0: at depth arm B's
// decode attention runs minfer_attn_decode_tc_* where the split-K path's
// minfer_attn_decode2* ran). Arm A must still show it, and a --with the
// lever does not require is still asked of both arms.
func TestLiveness_ARequiredWithPathIsAskedOfArmAOnly(t *testing.T) {
	cfg := leverCfg(t, "MINFER_ATTN_DECODE_TC")
	cfg.With = []WithLever{{Lever: regLever(t, "MINFER_NO_SPLITK_ATTN"), Value: "0"}}
	a := ev(cfg.A, profile.Census{"minfer_attn_decode2q_128": 24, "minfer_mmvq_res_q8_0": 48}, nil)
	b := ev(cfg.B, profile.Census{"minfer_attn_decode_tc_128": 24, "minfer_attn_decode_tc_combine": 24, "minfer_mmvq_res_q8_0": 48}, nil)
	if st, why := LivenessOf(cfg, a, b); st != Pass || strings.Contains(why, "--with") {
		t.Fatalf("arm B without the required path's kernel: %s: %s", st, why)
	}
	delete(a.Census, "minfer_attn_decode2q_128")
	if st, why := LivenessOf(cfg, a, b); st != Fail || !strings.Contains(why, "arm A (--with MINFER_NO_SPLITK_ATTN=0) ran no minfer_attn_decode2*") {
		t.Fatalf("arm A without it: %s: %s", st, why)
	}
	a.Census["minfer_attn_decode2q_128"] = 24
	cfg.With = []WithLever{{Lever: regLever(t, "MINFER_FUSE_QKV_ROPE"), Value: "1"}} // not a Requires entry
	a.Census["minfer_mmvq_qkvrs_q8_0"] = 24
	if st, why := LivenessOf(cfg, a, b); st != Fail || !strings.Contains(why, "arm B (--with MINFER_FUSE_QKV_ROPE=1) ran no minfer_mmvq*qkvrs_*") {
		t.Fatalf("a --with it does not require, missing in arm B: %s: %s", st, why)
	}
}
