package cuda

// Tests of MINFER_FUSE_ATTN_Q8 (graph.FuseAttnQ8: the decode attention
// writes the o-projection's Q8_1 activation, attention.go attnQ8Route and
// opAttnMatMulAdd, attn_decode2.go AttentionDecode2Q8). The device test
// skips with a message when no device answers; the route test needs none.
// The kernels' bytes are checked on the CPU by
// scripts/kernel-emu/adec2-emu.sh --q8 (kernels/emu_test.go).

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/synth"
)

// TestFuseAttnQ8_RouteOnlyTheLeanDecodeRowBeforeAnMMVQProjection: the
// backend offers the fusion for one decode token's attention at head_dim
// 64 or 128 on the lean split-K kernel, read by a matmul-add whose weight
// takes a decode MMVQ route; it declines two tokens, head_dim 80, the
// plain kernel (MINFER_NO_SPLITK_ATTN), an f32-activation weight, a weight
// of another row length and a plain matmul. The launcher refuses what the
// route declines, by name.
func TestFuseAttnQ8_RouteOnlyTheLeanDecodeRowBeforeAnMMVQProjection(t *testing.T) {
	w := func(typ quant.Type, rowLen int) *devWeight {
		return &devWeight{typ: typ, rowLen: rowLen, rows: 896, ptr: 0x1000}
	}
	lean := levers.Config{FAPrefillTC: true}
	b := &Backend{lv: lean, mm: MatMulOptions{MMQ: true, MMVQNT: true, ActQ8: 0x3000, ActQ8Bytes: 1 << 20}, weights: map[string]*devWeight{
		"o64": w(quant.Q8_0, 14*64), "o128": w(quant.Q4_K, 8*128), "o80": w(quant.Q8_0, 8*80), "f16": w(quant.F16, 14*64),
	}}
	attn := func(hd, nh, nt int) *graph.Node {
		return &graph.Node{Op: graph.OpAttn, Shape: graph.Sh(hd*nh, nt), P: graph.OpParams{NHead: nh, NHeadKV: 2, HeadDim: hd}}
	}
	proj := func(weight string, nt int) *graph.Node {
		return &graph.Node{Op: graph.OpMatMulAdd, Shape: graph.Sh(896, nt), Weight: weight}
	}
	for _, c := range []struct {
		name string
		lv   levers.Config
		a, m *graph.Node
		want bool
	}{
		{"head_dim 64, Q8_0", lean, attn(64, 14, 1), proj("o64", 1), true},
		{"head_dim 128, Q4_K", lean, attn(128, 8, 1), proj("o128", 1), true},
		{"two tokens", lean, attn(64, 14, 2), proj("o64", 2), false},
		{"head_dim 80", lean, attn(80, 8, 1), proj("o80", 1), false},
		{"the plain kernel", levers.Config{NoSplitKAttn: true}, attn(64, 14, 1), proj("o64", 1), false},
		{"an f16 projection", lean, attn(64, 14, 1), proj("f16", 1), false},
		{"a projection of another row length", lean, attn(64, 14, 1), proj("o128", 1), false},
		{"a plain matmul", lean, attn(64, 14, 1), &graph.Node{Op: graph.OpMatMul, Shape: graph.Sh(896, 1), Weight: "o64"}, false},
	} {
		b.lv = c.lv
		if got := b.SupportsFused(graph.FuseAttnQ8, c.a, c.m); got != c.want {
			t.Errorf("%s: SupportsFused %v, want %v", c.name, got, c.want)
		}
	}
	k := &Kernels{dev: &driver.Device{Attr: driver.Attributes{SMCount: 132}}}
	const p = driver.DevicePtr(0x1000)
	ok := AttnParams{NT: 1, NHead: 14, NHeadKV: 2, HeadDim: 64, NCtx: 256}
	for _, c := range []struct {
		name    string
		p       AttnParams
		q8      driver.DevicePtr
		q8Bytes uint64
	}{
		{"head_dim 80", AttnParams{NT: 1, NHead: 8, NHeadKV: 2, HeadDim: 80, NCtx: 256}, p, 1 << 20},
		{"no Q8_1 buffer", ok, 0, 1 << 20},
		{"a Q8_1 buffer 2 bytes off", ok, p + 2, 1 << 20},
		{"a Q8_1 buffer one block short", ok, p, ActQ8Bytes(14*64, 1) - 36},
	} {
		err := k.AttentionDecode2Q8(nil, 0, c.q8, c.q8Bytes, p, p, p, kv.F32, p, p, 1<<20, c.p)
		if err == nil || !strings.Contains(err.Error(), "attn_decode2") {
			t.Errorf("%s: %v, want a refusal naming attn_decode2", c.name, err)
		}
	}
}

// TestFuseAttnQ8_OnByDefaultYieldsToItsRequiresRefusedSetBesideThem: the
// fusion is on with the lever unset (reports/MINFER_FUSE_ATTN_Q8); unset,
// it yields to each setting its Requires exclude (New does not refuse),
// and set to 1 beside one, New refuses the pair by name.
func TestFuseAttnQ8_OnByDefaultYieldsToItsRequiresRefusedSetBesideThem(t *testing.T) {
	checkDefaultYieldsRefusedSet(t, "MINFER_FUSE_ATTN_Q8", []string{"MINFER_FUSE_RESIDUAL=0", "MINFER_NO_SPLITK_ATTN=1"},
		func(c levers.Config) bool { return c.FuseAttnQ8 })
}

// checkDefaultYieldsRefusedSet: the default-on lever is on with nothing
// set (its DefaultSince report); with each of sets (settings its Requires
// exclude) and the lever unset it is off and New does not refuse it (New
// opens the device where there is one, else fails for want of a driver
// only); set to 1 beside each, New refuses the pair by name.
func checkDefaultYieldsRefusedSet(t *testing.T, lever string, sets []string, on func(levers.Config) bool) {
	t.Helper()
	if !on(levers.Default()) {
		t.Errorf("%s unset: its path must be on (reports/%s)", lever, lever)
	}
	for _, set := range sets {
		lv, err := levers.Parse([]string{set})
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(Options{Levers: lv})
		if b != nil {
			b.Close()
		}
		if on(lv) || err != nil && strings.Contains(err.Error(), lever+"=") {
			t.Errorf("%s with %s unset: on %v, New %v: want it off and no refusal", set, lever, on(lv), err)
		}
		if lv, err = levers.Parse([]string{set, lever + "=1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := New(Options{Levers: lv}); err == nil || !strings.Contains(err.Error(), lever+"=1") {
			t.Errorf("%s with %s=1: New %v, want the refusal", set, lever, err)
		}
	}
}

// TestFuseAttnQ8Device_LogitsBitwiseAndOneLaunchFewer: synthetic
// qwen2-tiny Q8_0 and Q4_K_M (head_dim 64), qwen3-tiny Q4_K_M (128) and
// qwen2-0.5b Q4_K_M, prefill then 6 decode steps, CUDA graphs on and off:
// MINFER_FUSE_ATTN_Q8=1 gives bitwise the logits of =0 at every step.
// Census of the decode steps: minfer_attn_decode2q_* runs only with the
// lever on, once a layer a step, and each launch replaces one lean
// attention launch and one quantization. The MMVQ path is pinned on
// (dsMMVQ).
func TestFuseAttnQ8Device_LogitsBitwiseAndOneLaunchFewer(t *testing.T) {
	dsNeedDevice(t)
	models := []dsModel{{"qwen2-tiny", "Q8_0"}, {"qwen2-tiny", "Q4_K_M"}, {"qwen3-tiny", "Q4_K_M"}, {"qwen2-0.5b", "Q4_K_M"}}
	// The lean kernels pinned (an A/B's arm B may set MINFER_ATTN_DECODE_TC=1).
	dsLeverDecodeOn(t, "MINFER_FUSE_ATTN_Q8", models, append([]string{"MINFER_ATTN_DECODE_TC=0"}, dsMMVQ...), func(t *testing.T, m dsModel, sh synth.Shape, _ string, cOff, cOn map[string]int64, _ *Backend) {
		fused, _ := rpMatching(cOn, "minfer_attn_decode2q_*")
		fusedOff, _ := rpMatching(cOff, "minfer_attn_decode2q_*")
		lOff, _ := rpMatching(cOff, "minfer_attn_decode2l_*")
		lOn, _ := rpMatching(cOn, "minfer_attn_decode2l_*")
		qOff, _ := rpMatching(cOff, "minfer_quantize_q8_1*")
		qOn, _ := rpMatching(cOn, "minfer_quantize_q8_1*")
		t.Logf("decode launches over %d steps: minfer_attn_decode2q_* on %d, off %d; lean attention off %d, on %d; quantizations off %d, on %d",
			frSteps, fused, fusedOff, lOff, lOn, qOff, qOn)
		if want := int64(sh.NLayer * frSteps); fused != want || fusedOff != 0 || lOff-lOn != fused || qOff-qOn != fused {
			t.Errorf("minfer_attn_decode2q_* on %d (want %d layers x %d steps = %d), off %d; lean attention dropped by %d, quantizations by %d: want both drops equal to on",
				fused, sh.NLayer, frSteps, want, fusedOff, lOff-lOn, qOff-qOn)
		}
	})
}
