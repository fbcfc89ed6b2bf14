package cuda

// Tests of the lean decode attention's lean form (MINFER_ATTN_DECODE_LEAN:
// minfer_attn_decode2l_*, adec2::decode<..., LEAN> in
// kernels/attn_decode2.cu). The device tests skip with a message when no
// device answers; the geometry and refusal test needs none.

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
)

// adLeanForm is the lean kernel's lean form (MINFER_ATTN_DECODE_LEAN).
var adLeanForm = adLeanWith("attn_decode2 (lean form)", func(p *AttnParams) { p.Lean = true })

// TestAttnDecodeLeanDevice_EveryFormatShapeWindowMatchesCPUWithin1e3: the
// lean form against engine/cpu's attention over the one-warp kernel's
// sweep (every KV format, head_dim 64 and 128, GQA 1 / 4 / 7 / 8, nt 1..8,
// windows, lengths of one split to all 64), within the same 1e-3; its
// counters come back to 0 and a repeated launch is bitwise equal.
func TestAttnDecodeLeanDevice_EveryFormatShapeWindowMatchesCPUWithin1e3(t *testing.T) {
	ms := mmtOpen(t)
	r := rand.New(rand.NewPCG(73, 74))
	const nkv, nCtx = 2, 4160
	lengths := []int{1, 2, 31, 33, 63, 64, 65, 97, 129, 256, 257, 600, 1000, 2047, 4096 + 37, nCtx}
	adSweepFormats(t, ms, r, adLeanForm, nkv, nCtx, lengths, []int{0, 100, 300})
}

// TestAttnDecodeLean_WholeModelCensus: a whole model decoding at 100+
// cells with the lever on launches minfer_attn_decode2l_* and none of
// minfer_attn_decode2_* (the lever's liveness), graphs on. The attention
// keeps its f32 output (MINFER_FUSE_ATTN_Q8=0: an A/B's arm B may set it,
// and its kernels are minfer_attn_decode2q_*).
func TestAttnDecodeLean_WholeModelCensus(t *testing.T) {
	dsNeedDevice(t)
	set := append([]string{"MINFER_LAUNCH_CENSUS=1", "MINFER_ATTN_DECODE_LEAN=1", "MINFER_NO_SPLITK_ATTN=0", "MINFER_ATTN_DECODE_GQA=0",
		"MINFER_FUSE_ATTN_Q8=0"}, dsGraphsOn...)
	_, b := adBackendRun(t, dsLevers(t, set...), kv.F16, 0)
	if lean, plain := ad2Census(b, "minfer_attn_decode2l_"), ad2Census(b, "minfer_attn_decode2_"); lean == 0 || plain != 0 {
		t.Errorf("%d lean launches (want > 0), %d one-warp (want 0); census %v", lean, plain, b.Kernels().Census())
	}
}

// The lean form keeps the one-warp kernel's grid, block and scratch and
// names minfer_attn_decode2l_* of the same class; beside the grouped
// kernels it is refused by both levers' names; MINFER_ATTN_DECODE_LEAN=1
// with MINFER_NO_SPLITK_ATTN=1 or MINFER_ATTN_DECODE_GQA=1 is refused
// before the device opens (it would switch nothing), unset it is on and
// yields to those, and the device tests' levers drop it for a test that
// sets those.
func TestAttnDecodeLean_GeometryAndRefusals(t *testing.T) {
	p := AttnParams{NT: 3, NHead: 28, NHeadKV: 4, HeadDim: 128, NCtx: 32768}
	plain := attnDecode2Geometry(p, kv.Q8_0)
	p.Lean = true
	l := attnDecode2Geometry(p, kv.Q8_0)
	if l.name != "minfer_attn_decode2l_hd128_q8_0" || l.gridX != plain.gridX || l.threads != plain.threads || l.nsplit != plain.nsplit ||
		l.bytes != plain.bytes || l.mlOff != plain.mlOff || l.accOff != plain.accOff {
		t.Errorf("lean %+v, one-warp %+v", l, plain)
	}
	p.Grouped = true
	if _, err := AttnDecode2ScratchBytes(p, kv.F16); err == nil || !strings.Contains(err.Error(), "MINFER_ATTN_DECODE_LEAN") ||
		!strings.Contains(err.Error(), "MINFER_ATTN_DECODE_GQA") {
		t.Errorf("lean and grouped: %v, want a refusal naming both levers", err)
	}
	for _, c := range []struct {
		set     []string
		refused bool
	}{
		{[]string{"MINFER_ATTN_DECODE_LEAN=1"}, false},
		{[]string{"MINFER_ATTN_DECODE_LEAN=1", "MINFER_NO_SPLITK_ATTN=1"}, true},
		{[]string{"MINFER_ATTN_DECODE_LEAN=1", "MINFER_ATTN_DECODE_GQA=1"}, true},
		{[]string{"MINFER_ATTN_DECODE_GQA=1"}, false},
		{[]string{"MINFER_NO_SPLITK_ATTN=1"}, false},
		{nil, false},
	} {
		lv, err := levers.Parse(c.set)
		if err != nil {
			t.Fatal(err)
		}
		// On by default (reports/MINFER_ATTN_DECODE_LEAN); unset, it yields
		// to the settings its Requires exclude instead of being refused.
		if _, set := lv.Set()["MINFER_ATTN_DECODE_LEAN"]; !set && lv.AttnDecodeLean != lv.RequiresMet("MINFER_ATTN_DECODE_LEAN") {
			t.Errorf("%v: lean form %v, want it on exactly where its Requires hold", c.set, lv.AttnDecodeLean)
		}
		err = optInConflict(lv, "MINFER_ATTN_DECODE_LEAN")
		if (err != nil) != c.refused || err != nil && !strings.Contains(err.Error(), "MINFER_ATTN_DECODE_LEAN") {
			t.Errorf("%v: %v, want refused %v naming the lever", c.set, err, c.refused)
		}
		if !c.refused {
			continue
		}
		if _, err := New(Options{Levers: lv}); err == nil || !strings.Contains(err.Error(), "MINFER_ATTN_DECODE_LEAN") {
			t.Errorf("New with %v: %v, want the refusal", c.set, err)
		}
	}
	t.Setenv("MINFER_ATTN_DECODE_LEAN", "1")
	if lv := dsLevers(t, "MINFER_ATTN_DECODE_GQA=1"); lv.AttnDecodeLean || optInConflict(lv, "MINFER_ATTN_DECODE_LEAN") != nil {
		t.Errorf("a grouped test under MINFER_ATTN_DECODE_LEAN=1: lean %v, conflict %v; want it dropped", lv.AttnDecodeLean,
			optInConflict(lv, "MINFER_ATTN_DECODE_LEAN"))
	}
	if lv := dsLevers(t, "MINFER_LAUNCH_CENSUS=1"); !lv.AttnDecodeLean {
		t.Error("a decode test under MINFER_ATTN_DECODE_LEAN=1 lost the setting")
	}
}
