package gates

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/harness"
)

// synthLogits returns positions x vocab logits with std ~8 (the synthetic
// model's scale) and a clear top-1 (margin 2) at a position-dependent id.
func synthLogits(positions, vocab int) []float32 {
	out := make([]float32, positions*vocab)
	x := uint64(12345)
	for i := range out {
		// sum of 4 uniforms, scaled to std ~8
		var s float64
		for k := 0; k < 4; k++ {
			x = x*6364136223846793005 + 1442695040888963407
			s += float64(x>>11)/float64(1<<53) - 0.5
		}
		out[i] = float32(s * 8 / math.Sqrt(4.0/12))
	}
	for p := 0; p < positions; p++ {
		row := out[p*vocab : (p+1)*vocab]
		var m float32
		for _, v := range row {
			m = max(m, v)
		}
		row[(p*37+11)%vocab] = m + 2
	}
	return out
}

// withNoise adds deterministic Gaussian noise of the given std (Box-Muller:
// over 40k values its max is ~4 std, as the device's max|diff| is ~40x its
// typical difference).
func withNoise(ref []float32, std float64) []float32 {
	out := make([]float32, len(ref))
	x := uint64(99)
	uni := func() float64 {
		x = x*6364136223846793005 + 1442695040888963407
		return (float64(x>>11) + 0.5) / float64(1<<53)
	}
	for i, v := range ref {
		g := math.Sqrt(-2*math.Log(uni())) * math.Cos(2*math.Pi*uni())
		out[i] = v + float32(g*std)
	}
	return out
}

func TestParityClass_ActivationQuantizationPassesObservedNumbersAndFailsLayoutBug(t *testing.T) {
	const positions, vocab = 5, 8192
	ref := synthLogits(positions, vocab)
	actq := ChooseGraphClass("cuda", "--device cuda", "cpu", []string{"Q8_0:169"}, "F32:121 Q8_0:169", nil, 0.5, 0.1)
	abs := ChooseGraphClass("cpu", "--device cpu", "cpu", []string{"Q8_0:169"}, "F32:121 Q8_0:169", nil, 0.5, 0.1)
	if actq.Name != ClassActivationQuant || abs.Name != ClassAbsolute {
		t.Fatalf("classes %q / %q", actq.Name, abs.Name)
	}

	// What the H200 showed on qwen2-0.5b Q8_0: rel L2 ~0.024, max|diff| ~0.8-1.1, top-1 all equal.
	obs := withNoise(ref, 0.024*8)
	c := CompareLogits("A vs CPU ref", ref, obs, vocab, 0.1)
	if r := float64(c.RelL2); r < 0.02 || r > 0.03 || float64(c.MaxAbsDiff) <= 0.5 || c.Top1Agree != positions {
		t.Fatalf("fixture: rel L2 %.4f max|diff| %.3f top-1 %d/%d", r, float64(c.MaxAbsDiff), c.Top1Agree, positions)
	}
	c.judgeClass(actq)
	if !c.Pass || c.Class != ClassActivationQuant || !strings.Contains(c.Why, "max|diff|") {
		t.Errorf("observed numbers under %s: pass %v: %s", actq.Name, c.Pass, c.Why)
	}
	c = CompareLogits("A vs CPU ref", ref, obs, vocab, 0.1)
	c.judgeClass(abs)
	if c.Pass {
		t.Errorf("the same numbers under the absolute bar 0.5 should fail: %s", c.Why)
	}

	// A layout bug: the right values in the wrong places (rows reversed).
	bug := make([]float32, len(ref))
	for p := 0; p < positions; p++ {
		for i := 0; i < vocab; i++ {
			bug[p*vocab+i] = ref[p*vocab+vocab-1-i]
		}
	}
	c = CompareLogits("A vs CPU ref", ref, bug, vocab, 0.1)
	c.judgeClass(actq)
	if c.Pass || float64(c.RelL2) < 0.5 || !strings.Contains(c.Why, "rel L2") || !strings.Contains(c.Why, "top-1 differs") {
		t.Errorf("layout bug under %s: pass %v, rel L2 %.3f: %s", actq.Name, c.Pass, float64(c.RelL2), c.Why)
	}

	// Small rel L2 but a flipped top-1 where the reference margin is clear still fails.
	flip := append([]float32(nil), ref...)
	flip[3] = flip[(0*37+11)%vocab] + 1
	c = CompareLogits("A vs CPU ref", ref, flip, vocab, 0.1)
	c.judgeClass(actq)
	if c.Pass || !strings.Contains(c.Why, "top-1 differs at pos 0") {
		t.Errorf("top-1 flip under %s: %s", actq.Name, c.Why)
	}
	// NaN logits fail any class.
	nan := append([]float32(nil), ref...)
	nan[5] = float32(math.NaN())
	c = CompareLogits("A vs CPU ref", ref, nan, vocab, 0.1)
	c.judgeClass(actq)
	if c.Pass {
		t.Errorf("NaN passed: %s", c.Why)
	}
}

func TestParityClass_ChosenFromBackendsAndWeightTypes(t *testing.T) {
	for _, tc := range []struct {
		arm       string
		quantized []string
		err       error
		want      string
		why       string
	}{
		{"cuda", []string{"Q8_0:169"}, nil, ClassActivationQuant, "quantized matmul weights"},
		{"cpu", []string{"Q8_0:169"}, nil, ClassAbsolute, "reference's backend"},
		{"cuda", nil, nil, ClassAbsolute, "no quantized weights"},
		{"cuda", nil, errors.New("exit 1"), ClassAbsolute, "weight types are unknown"},
	} {
		k := ChooseGraphClass(tc.arm, "test", "cpu", tc.quantized, "hist", tc.err, 0.5, 0.1)
		if k.Name != tc.want || !strings.Contains(k.Why, tc.why) {
			t.Errorf("%s %v %v: %s (%s)", tc.arm, tc.quantized, tc.err, k.Name, k.Why)
		}
	}
	info := harness.ModelInfo{TypeHistogram: map[string]int{"F32": 121, "F16": 2, "Q8_0": 169}}
	if q := info.QuantizedTypes(); len(q) != 1 || q[0] != "Q8_0:169" {
		t.Errorf("quantized types %v", q)
	}
	if be, _ := armBackend("auto", nil, true, "minfer: model: no CUDA device (x); running on the CPU\n"); be != "cpu" {
		t.Errorf("a process that fell back to the CPU is a cpu arm, got %s", be)
	}
	if be, _ := armBackend("cuda", map[string]string{"MINFER_DISABLE_CUDA": "1"}, true, ""); be != "cpu" {
		t.Errorf("MINFER_DISABLE_CUDA arm: %s", be)
	}
	if be, _ := armBackend("cuda", nil, true, ""); be != "cuda" {
		t.Errorf("device arm: %s", be)
	}
}

// TestParity_DeviceArmsOnQuantizedModelReportTheirClass runs gate 1 through
// the fake minfer as if on the device (--device cuda, a Q8_0 histogram):
// both arms are judged by activation-quantization and the result says so.
func TestParity_DeviceArmsOnQuantizedModelReportTheirClass(t *testing.T) {
	cfg := leverCfg(t, "MINFER_MMQ")
	cfg.Device = "cuda"
	cfg.Tol = harness.Tolerance{Bitwise: true, Bounded: true, Top1Equal: true, Class: "bitwise"}
	cfg.TmpDir = t.TempDir()
	m := fake(t)
	m.Device = "cuda"
	r := Parity(context.Background(), cfg, &Env{M: m, HasGPU: true})
	d := r.Parity
	if d == nil || len(d.Classes) != 2 || d.Classes[0].Name != ClassActivationQuant || d.Classes[1].Name != ClassActivationQuant {
		t.Fatalf("%s: %s (%+v)", r.Status, r.Reason, d)
	}
	if !strings.Contains(d.Classes[0].Why, "Q8_0:15") || d.Backends["A"] != "cuda" {
		t.Errorf("class facts: %+v, backends %v", d.Classes[0], d.Backends)
	}
	for _, c := range d.Graph {
		if c.Class != ClassActivationQuant || !c.Pass {
			t.Errorf("%s nt=%d: class %q pass %v: %s", c.Label, c.NT, c.Class, c.Pass, c.Why)
		}
	}
	if r.Status == Fail || !strings.Contains(r.Evidence, "A and B activation-quantization") || !strings.HasPrefix(r.Liveness, "PASS") {
		t.Errorf("%s: %s — %s", r.Status, r.Reason, r.Evidence)
	}

	// An all-float model keeps the absolute bar.
	t.Setenv("FAKEMINFER_TYPES", "F32:11,F16:15")
	r = Parity(context.Background(), cfg, &Env{M: m, HasGPU: true})
	if d := r.Parity; d == nil || len(d.Classes) == 0 || d.Classes[0].Name != ClassAbsolute || !strings.Contains(d.Classes[0].Why, "no quantized weights") {
		t.Fatalf("all-float model: %+v", r.Parity)
	}
}

// TestCorrectnessModel_ParityAndGreedyRunOnItABKeepsTheRunModel: with
// --correctness-model the parity and greedy commands name that file (the
// reproducing commands are what the report prints), the A/B bench keeps the
// run's model, and the gates' reasons name the instrument with its sha256.
func TestCorrectnessModel_ParityAndGreedyRunOnItABKeepsTheRunModel(t *testing.T) {
	dir := t.TempDir()
	run, trained := filepath.Join(dir, "real-shape.gguf"), filepath.Join(dir, "trained.gguf")
	for _, p := range []string{run, trained} {
		if err := os.WriteFile(p, []byte("GGUF fake "+p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := fake(t)
	m.Model = run
	cfg := leverCfg(t, "MINFER_NO_PREFILL_GEMM")
	cfg.Tol = harness.Tolerance{Bitwise: true, Bounded: true, Top1Equal: true, Class: "bitwise"}
	cfg.TmpDir = t.TempDir()
	cfg.Model, cfg.CorrectnessModel = run, trained
	cfg.Gates = []string{GateParity, GateGreedy, GateAB}
	cfg.Rounds, cfg.WarmupMS, cfg.BenchWarm = 3, 1, 1
	cfg.Prompts = cfg.Prompts[:1]
	env := &Env{M: m, GPUWhy: "test"}
	rec := &Record{}
	Run(context.Background(), cfg, env, rec, func(*Record) {})
	var parityCmd, greedyCmd, abCmd string
	for _, c := range env.Commands() {
		switch {
		case strings.HasPrefix(c, "# parity: arm A"):
			parityCmd = c
		case strings.HasPrefix(c, "# greedy: arm A"):
			greedyCmd = c
		case strings.HasPrefix(c, "# ab: timed round, arm A"):
			abCmd = c
		}
	}
	if !strings.Contains(parityCmd, trained) || !strings.Contains(greedyCmd, trained) {
		t.Errorf("parity/greedy not on the correctness model:\n%s\n%s", parityCmd, greedyCmd)
	}
	if !strings.Contains(abCmd, run) || strings.Contains(abCmd, trained) {
		t.Errorf("A/B not on the run's model:\n%s", abCmd)
	}
	for _, g := range rec.Gates {
		named := strings.Contains(g.Reason, "instrument: the correctness model "+trained+", sha256 ")
		if (g.Gate == GateParity || g.Gate == GateGreedy) != named {
			t.Errorf("%s reason %q: instrument named %v", g.Gate, g.Reason, named)
		}
	}
}

// The activation-quantization class scales its top-1 exemption with the
// error measured at the position (random-weight qwen3-0.6b on the H200:
// flips at margins 0.15-0.47 with rel L2 0.028, arms A and B alike): a flip
// that diffuse error of that size explains is exempt; the same flip with the
// error concentrated on the two flipped logits fails, and so does a flip
// whose margin is beyond 4 RMS.
func TestParityClass_ActQuantFlipExemptWithinFourRMSOfDiffuseErrorFailsWhenConcentrated(t *testing.T) {
	const positions, vocab = 3, 8192
	ref := synthLogits(positions, vocab)
	actq := ChooseGraphClass("cuda", "--device cuda", "cpu", []string{"Q8_0:169"}, "F32:121 Q8_0:169", nil, 0.5, 0.1)
	top := (0*37 + 11) % vocab
	const j = 5 // pos 0's runner-up, margin m below the top
	flip := func(m float32, noise float64) (Comparison, float64) {
		r := append([]float32(nil), ref...)
		r[j] = r[top] - m
		y := withNoise(r, noise)
		y[top], y[j] = r[top], r[top]+0.01
		c := CompareLogits("A vs CPU ref", r, y, vocab, 0.1)
		c.judgeClass(actq)
		return c, float64(c.PerPos[0].RMSDiff)
	}
	// Diffuse error: rel L2 ~0.028 of logits with std ~8 (RMS ~0.22): a flip at 0.47 is within 4 RMS.
	c, rms := flip(0.47, 0.028*8)
	if rms < 0.2 || rms > 0.25 || !c.Pass || !c.PerPos[0].Exempt || !strings.Contains(c.Why, "exempt") {
		t.Fatalf("diffuse: RMS %.3f, pass %v, exempt %v: %s", rms, c.Pass, c.PerPos[0].Exempt, c.Why)
	}
	// The same flip beyond 4 RMS (margin 1.5 > 4 x 0.22) fails.
	if c, _ = flip(1.5, 0.028*8); c.Pass || !strings.Contains(c.Why, "top-1 differs at pos 0") || !strings.Contains(c.Why, "> bar") {
		t.Errorf("flip beyond 4 RMS passed: %s", c.Why)
	}
	// Concentrated: almost no diffuse error, the same 0.47 flip fails.
	if c, rms = flip(0.47, 0.001); rms > 0.01 || c.Pass || !strings.Contains(c.Why, "top-1 differs at pos 0") {
		t.Errorf("concentrated flip (RMS %.4f) passed: %s", rms, c.Why)
	}
	// The absolute class keeps its fixed margin: the diffuse 0.47 flip fails there.
	abs := ChooseGraphClass("cpu", "--device cpu", "cpu", nil, "F32:290", nil, 2, 0.1)
	r := append([]float32(nil), ref...)
	r[j] = r[top] - 0.47
	y := withNoise(r, 0.028*8)
	y[top], y[j] = r[top], r[top]+0.01
	c = CompareLogits("A vs CPU ref", r, y, vocab, 0.1)
	c.judgeClass(abs)
	if c.Pass || c.PerPos[0].Exempt {
		t.Errorf("absolute class exempted a 0.47 flip: %s", c.Why)
	}
}
