package cuda

// Tests of MINFER_FUSE_NORM_Q8 (graph.FuseNormQ8: the decode norm written
// as the fused q/k/v or gate/up node's Q8_1 activation, norm.go
// RmsNormQ8_1, matmul.go decodeQuantize). The device test skips with a
// message when no device answers; the others need none.

import (
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/synth"
)

// TestFuseNormQ8_OnByDefaultOffWithZero: the fusion is on with the lever
// unset (reports/MINFER_FUSE_NORM_Q8, session 30's five-gate PASS) and off
// with MINFER_FUSE_NORM_Q8=0, in the levers and in the graph's params.
func TestFuseNormQ8_OnByDefaultOffWithZero(t *testing.T) {
	if !levers.Default().FuseNormQ8 {
		t.Error("MINFER_FUSE_NORM_Q8 unset: the fusion must be on (reports/MINFER_FUSE_NORM_Q8)")
	}
	lv, err := levers.Parse([]string{"MINFER_FUSE_NORM_Q8=0"})
	if err != nil || lv.FuseNormQ8 {
		t.Errorf("MINFER_FUSE_NORM_Q8=0: fusion %v, err %v: want it off", lv.FuseNormQ8, err)
	}
}

// TestFuseNormQ8_RouteOnlyADecodeRowOnMMVQ: the backend offers the fusion
// for a one-row norm read by a fused q/k/v or gate/up node whose weights
// all take a decode MMVQ route (one type or mixed: qwen2-0.5b Q4_K_M's
// q/k Q5_0 with v Q8_0) or a plain matmul on one (the decode lm head), with
// a norm weight and a row the kernel holds; it declines more rows, an
// f32-activation route (F16, in a fused node or a plain matmul), a missing
// norm weight and rows that are not whole Q8_1 blocks or are too long. The
// launcher refuses the same rows by name.
func TestFuseNormQ8_RouteOnlyADecodeRowOnMMVQ(t *testing.T) {
	const n = 896
	w := func(typ quant.Type, rowLen int) *devWeight {
		return &devWeight{typ: typ, rowLen: rowLen, rows: 128, ptr: 0x1000}
	}
	b := &Backend{mm: MatMulOptions{MMQ: true, MMVQNT: true, ActQ8: 0x3000, ActQ8Bytes: 1 << 20}, weights: map[string]*devWeight{
		"norm": {typ: quant.F32, rowLen: n, rows: 1, vector: true, ptr: 0x2000},
		"q":    w(quant.Q8_0, n), "k": w(quant.Q8_0, n), "v": w(quant.Q8_0, n), "v6": w(quant.Q6_K, n), "f16": w(quant.F16, n),
		"long": w(quant.Q8_0, 5120), "odd": w(quant.Q8_0, 880),
	}}
	norm := func(rows, width int, weight string) *graph.Node {
		return &graph.Node{Op: graph.OpRmsNorm, Shape: graph.Sh(width, rows), Weight: weight}
	}
	qkv := func(ws ...string) *graph.Node { return &graph.Node{Op: graph.OpFusedQKV, Weights: ws} }
	for _, c := range []struct {
		name string
		norm *graph.Node
		c    *graph.Node
		want bool
	}{
		{"decode q/k/v", norm(1, n, "norm"), qkv("q", "k", "v"), true},
		{"decode gate/up", norm(1, n, "norm"), &graph.Node{Op: graph.OpFusedFFN, Weights: []string{"q", "k"}}, true},
		{"two rows", norm(2, n, "norm"), qkv("q", "k", "v"), false},
		{"mixed MMVQ types", norm(1, n, "norm"), qkv("q", "k", "v6"), true},
		{"an f16 weight", norm(1, n, "norm"), qkv("q", "k", "f16"), false},
		{"a plain matmul (the lm head)", norm(1, n, "norm"), &graph.Node{Op: graph.OpMatMul, Weight: "q"}, true},
		{"a plain f16 matmul", norm(1, n, "norm"), &graph.Node{Op: graph.OpMatMul, Weight: "f16"}, false},
		{"no norm weight", norm(1, n, ""), qkv("q", "k", "v"), false},
		{"an unregistered norm weight", norm(1, n, "gone"), qkv("q", "k", "v"), false},
		{"a row of 880", norm(1, 880, "norm"), qkv("odd", "odd", "odd"), false},
		{"a row of 5120 (over 16 values a thread)", norm(1, 5120, "norm"), qkv("long", "long", "long"), false},
	} {
		if got := b.SupportsFused(graph.FuseNormQ8, c.norm, c.c); got != c.want {
			t.Errorf("%s: SupportsFused %v, want %v", c.name, got, c.want)
		}
	}
	k := &Kernels{dev: &driver.Device{Attr: driver.Attributes{SMCount: 132}}}
	const p = driver.DevicePtr(0x1000)
	for _, c := range []struct {
		n   int
		eps float32
	}{{880, 1e-6}, {5120, 1e-6}, {0, 1e-6}, {896, -1}} {
		if err := k.RmsNormQ8_1(nil, p, p, p, c.n, c.eps); err == nil || !strings.Contains(err.Error(), "rms_norm_q8_1") {
			t.Errorf("RmsNormQ8_1 n=%d eps=%g: %v, want a refusal naming the op", c.n, c.eps, err)
		}
	}
}

// TestFuseNormQ8Device_LogitsBitwiseAndOneLaunchForTwo: synthetic
// qwen2-tiny Q8_0 and Q4_K_M, qwen3-tiny Q4_K_M and qwen2-0.5b Q4_K_M,
// prefill then 6 decode steps, CUDA graphs on and off:
// MINFER_FUSE_NORM_Q8=1 gives bitwise the logits of =0 at every step. Census
// of the decode steps: minfer_rms_norm_q8_1 runs only with the lever on, and
// each of its launches replaces one minfer_rms_norm_f32 and one
// quantization; on Q8_0 (every q/k/v and gate/up node and the lm head on
// MMVQ) that is 2 a layer and the output norm a step (the K-quant mixes
// are counted only by that invariant: a fallback type off MMVQ keeps its
// norm). The MMVQ path is pinned on (dsMMVQ), and the normed matvecs off
// (MINFER_FUSE_NORM_MMVQ=0: an A/B's arm B may set it; they take the
// q/k/v and gate/up norms this test counts).
func TestFuseNormQ8Device_LogitsBitwiseAndOneLaunchForTwo(t *testing.T) {
	dsNeedDevice(t)
	models := []dsModel{{"qwen2-tiny", "Q8_0"}, {"qwen2-tiny", "Q4_K_M"}, {"qwen3-tiny", "Q4_K_M"}, {"qwen2-0.5b", "Q4_K_M"}}
	pin := append(slices.Clone(dsMMVQ), "MINFER_FUSE_NORM_MMVQ=0")
	dsLeverDecodeOn(t, "MINFER_FUSE_NORM_Q8", models, pin, func(t *testing.T, m dsModel, sh synth.Shape, _ string, cOff, cOn map[string]int64, _ *Backend) {
		fused, fusedOff := cOn[normQ8Kernel], cOff[normQ8Kernel]
		qOff, _ := rpMatching(cOff, "minfer_quantize_q8_1*")
		qOn, _ := rpMatching(cOn, "minfer_quantize_q8_1*")
		rOff, rOn := cOff["minfer_rms_norm_f32"], cOn["minfer_rms_norm_f32"]
		t.Logf("decode launches over %d steps: %s on %d, off %d; quantizations off %d, on %d; rms_norm_f32 off %d, on %d",
			frSteps, normQ8Kernel, fused, fusedOff, qOff, qOn, rOff, rOn)
		if fused == 0 || fusedOff != 0 || qOff-qOn != fused || rOff-rOn != fused {
			t.Errorf("%s on %d, off %d; quantizations dropped by %d, f32 norms by %d: want on > 0, off 0, both drops equal to on",
				normQ8Kernel, fused, fusedOff, qOff-qOn, rOff-rOn)
		}
		if want := int64((2*sh.NLayer + 1) * frSteps); m.typ == "Q8_0" && fused != want {
			t.Errorf("%s launches %d, want (2 x %d layers + 1) x %d steps = %d", normQ8Kernel, fused, sh.NLayer, frSteps, want)
		}
	})
}
