package cuda

// Device tests of the tensor-core decode attention (MINFER_ATTN_DECODE_TC,
// attn_prefill2.cu's minfer_attn_decode_tc_* and their combine): the
// kernels against engine/cpu's attention for every KV format, and the
// combine's Q8_1 row (MINFER_FUSE_ATTN_Q8) against a separate
// quantization of the f32 row, through the whole model. Skip without a
// device.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/synth"
)

// adDecodeTC is the tensor-core decode kernel for the shared adShape
// helpers: its partials in the prefill kernels' scratch, no counters, the
// f16 tile bar.
var adDecodeTC = adKernel{name: "attn_decode_tc",
	scratchBytes: func(p AttnParams, f kv.Format) (int, error) { return AttnPrefillTCScratchBytes(p.HeadDim, 132), nil },
	launch: func(k *Kernels, s *driver.Stream, out, q, kr, vr driver.DevicePtr, f kv.Format, win, scr driver.DevicePtr, scrB int, p AttnParams) error {
		if err := k.PrepareAttnPrefillTC(); err != nil {
			return err
		}
		if need := AttnPrefillTCScratchBytes(p.HeadDim, k.dev.Attr.SMCount); scrB < need {
			return fmt.Errorf("the test's scratch of %d bytes is short of %d on this device", scrB, need)
		}
		return k.AttentionDecodeTC(s, out, 0, 0, q, kr, vr, f, win, scr, scrB, p)
	},
	counterBytes: func(AttnParams, kv.Format) uint64 { return 0 },
	bar:          1e-2}

// TestAttnDecodeTCDevice_EveryFormatShapeWindowMatchesCPUWithinF16Bar: the
// tensor-core decode kernel and its combine against engine/cpu's attention
// over the lean kernel's sweep (every KV format, head_dim 64 and 128, G 1
// / 4 / 7 / 8, nt 1..8, windows, KV lengths 1 .. 4160: one split's worth
// to all of them), within the prefill kernels' f16 bar; a repeated launch
// is bitwise equal.
func TestAttnDecodeTCDevice_EveryFormatShapeWindowMatchesCPUWithinF16Bar(t *testing.T) {
	ms := mmtOpen(t)
	r := rand.New(rand.NewPCG(81, 82))
	const nkv, nCtx = 2, 4160
	lengths := []int{1, 2, 31, 63, 64, 65, 129, 600, 1000, 2047, 4096 + 37, nCtx}
	adSweepFormats(t, ms, r, adDecodeTC, nkv, nCtx, lengths, []int{0, 100, 300})
}

// TestAttnDecodeTCDevice_Q8RowBitwiseAndTheKernelsRun: synthetic
// qwen2-tiny and qwen2-0.5b Q4_K_M, prefill then 6 decode steps, CUDA
// graphs on and off, the tensor-core decode pinned on over an f16 cache
// (the small models' auto cache is f32, which stays lean): the combine's Q8_1
// row (MINFER_FUSE_ATTN_Q8=1) gives bitwise the logits of the f32 row and a
// separate quantization (=0). Census: minfer_attn_decode_tc_* and its
// combine run once a layer a step in both arms, the lean kernels never,
// and the arm with the Q8_1 row has one quantization a layer fewer.
func TestAttnDecodeTCDevice_Q8RowBitwiseAndTheKernelsRun(t *testing.T) {
	dsNeedDevice(t)
	models := []dsModel{{"qwen2-tiny", "Q4_K_M"}, {"qwen2-0.5b", "Q4_K_M"}}
	// FROM=0: the tensor cores at every step (the route by depth would keep
	// these short contexts on the lean kernels).
	pin := append([]string{"MINFER_ATTN_DECODE_TC=1", "MINFER_ATTN_DECODE_TC_FROM=0", "MINFER_CACHE_TYPE=f16", "MINFER_FUSE_RESIDUAL=1"}, dsMMVQ...)
	dsLeverDecodeOn(t, "MINFER_FUSE_ATTN_Q8", models, pin, func(t *testing.T, _ dsModel, sh synth.Shape, _ string, cOff, cOn map[string]int64, _ *Backend) {
		want := int64(sh.NLayer * frSteps)
		for arm, c := range map[string]map[string]int64{"off": cOff, "on": cOn} {
			k, names := rpMatching(c, "minfer_attn_decode_tc_hd*")
			comb, _ := rpMatching(c, "minfer_attn_decode_tc_combine")
			lean, _ := rpMatching(c, "minfer_attn_decode2*")
			t.Logf("%s: %d tensor-core decode launches %v, %d combines, %d lean", arm, k, names, comb, lean)
			if k != want || comb != want || lean != 0 {
				t.Errorf("MINFER_FUSE_ATTN_Q8 %s: %d kernel and %d combine launches (want %d each), %d lean (want 0)", arm, k, comb, want, lean)
			}
		}
		qOff, _ := rpMatching(cOff, "minfer_quantize_q8_1*")
		qOn, _ := rpMatching(cOn, "minfer_quantize_q8_1*")
		if qOff-qOn != want {
			t.Errorf("quantizations off %d, on %d: want %d fewer with the Q8_1 row", qOff, qOn, want)
		}
	})
}

// TestAttnDecodeTCRoute_CrossingRecapturesAndSwitchesKernels: the route by
// depth through its threshold with CUDA graphs on. Synthetic qwen2-tiny
// Q4_K_M over an f16 cache, MINFER_ATTN_DECODE_TC=1 and
// MINFER_ATTN_DECODE_TC_FROM=48: a 40-token prefill, then decode steps at
// kv_len 41..47 (the decode graph captured at the 3rd, replayed after) and
// 48..57. Census, step by step: minfer_attn_decode2* and no
// minfer_attn_decode_tc_* below 48, the reverse from 48. Capture stats: the
// decode graph is dropped once, for the route (RouteInvalidations 1), and
// captured once more; the pool generation does not move at the crossing
// (both families' scratch was held from the first decode step). Logits
// from 48: bitwise those of an engine with FROM=0 (the same kernels) and
// within the f16-attention-tile class (max|diff| <= 0.5, top-1 equal
// where the top-2 margin is above 0.1) of one with the lever off, both
// restored from the routed engine's session at 47 cells, so all three
// read the same KV cells.
func TestAttnDecodeTCRoute_CrossingRecapturesAndSwitchesKernels(t *testing.T) {
	dsNeedDevice(t)
	const from, nPrompt, after, nCtx = 48, 40, 10, 128
	path := dsSynth(t, "qwen2-tiny", "Q4_K_M")
	pin := slices.Concat([]string{"MINFER_LAUNCH_CENSUS=1", "MINFER_CACHE_TYPE=f16", "MINFER_FUSE_RESIDUAL=1", "MINFER_ATTN_DECODE_TC=1"}, dsMMVQ, dsGraphsOn)
	e := dsEngine(t, path, "cuda", nCtx, append(slices.Clone(pin), "MINFER_ATTN_DECODE_TC_FROM="+strconv.Itoa(from))...)
	b := dsDeviceBackend(t, e)
	prompt := make([]int32, nPrompt)
	for i := range prompt {
		prompt[i] = int32(11 + 13*i%487) // ids below the tiny vocabulary (512)
	}
	if _, err := e.Forward(prompt, false); err != nil {
		t.Fatal(err)
	}
	tok := func(kvLen int) int32 { return int32(100 + 7*kvLen%400) }
	step := func(e *model.Engine, b *Backend, kvLen int) ([]float32, map[string]int64) {
		t.Helper()
		if e.Pos() != kvLen-1 {
			t.Fatalf("engine at %d cells, the step wants %d", e.Pos(), kvLen-1)
		}
		var l []float32
		c := mfCensusDelta(b, func() {
			var err error
			if l, err = e.Forward([]int32{tok(kvLen)}, false); err != nil {
				t.Fatal(err)
			}
		})
		return l, c
	}
	kernels := func(c map[string]int64) (lean, tc int64) {
		lean, _ = rpMatching(c, "minfer_attn_decode2*")
		tc, _ = rpMatching(c, "minfer_attn_decode_tc_*")
		return lean, tc
	}
	for n := nPrompt + 1; n < from; n++ {
		_, c := step(e, b, n)
		if lean, tc := kernels(c); lean == 0 || tc != 0 {
			t.Errorf("kv_len %d (< %d): %d lean and %d tensor-core attention launches, want lean only", n, from, lean, tc)
		}
	}
	st0, gen0 := b.CaptureStats(), b.PoolGeneration()
	if st0.DecodeCaptures < 1 || st0.DecodeReplays < 1 || st0.RouteInvalidations != 0 {
		t.Fatalf("before the crossing: %+v, want the decode graph captured and replayed", st0)
	}
	sess := filepath.Join(t.TempDir(), "at47.session")
	if err := e.SaveSession(sess, model.Session{}); err != nil {
		t.Fatal(err)
	}
	var routed [][]float32
	for n := from; n < from+after; n++ {
		l, c := step(e, b, n)
		routed = append(routed, l)
		if lean, tc := kernels(c); lean != 0 || tc == 0 {
			t.Errorf("kv_len %d (>= %d): %d lean and %d tensor-core attention launches, want tensor cores only", n, from, lean, tc)
		}
	}
	st := b.CaptureStats()
	t.Logf("capture stats before the crossing %+v, after %+v", st0, st)
	if st.RouteInvalidations != 1 || st.Invalidations-st0.Invalidations != 1 || st.DecodeCaptures-st0.DecodeCaptures != 1 ||
		st.DecodeReplays-st0.DecodeReplays < after-4 || st.Disabled || st.Aborts != 0 || st.Fallbacks != 0 {
		t.Errorf("across the crossing: %d route invalidations (want 1), %d invalidations and %d decode captures more (want 1 and 1), %d replays more (want >= %d)",
			st.RouteInvalidations, st.Invalidations-st0.Invalidations, st.DecodeCaptures-st0.DecodeCaptures, st.DecodeReplays-st0.DecodeReplays, after-4)
	}
	if g := b.PoolGeneration(); g != gen0 {
		t.Errorf("pool generation %d before the crossing, %d after: the crossing allocated", gen0, g)
	}
	restored := func(extra string) [][]float32 {
		t.Helper()
		x := dsEngine(t, path, "cuda", nCtx, append(slices.Clone(pin), extra)...)
		if _, err := x.LoadSession(sess); err != nil {
			t.Fatal(err)
		}
		xb := dsDeviceBackend(t, x)
		var out [][]float32
		for n := from; n < from+after; n++ {
			l, _ := step(x, xb, n)
			out = append(out, l)
		}
		return out
	}
	always := restored("MINFER_ATTN_DECODE_TC_FROM=0")
	lean := restored("MINFER_ATTN_DECODE_TC=0")
	for i := range routed {
		n := from + i
		for j := range routed[i] {
			if math.Float32bits(routed[i][j]) != math.Float32bits(always[i][j]) {
				t.Fatalf("kv_len %d logit %d: routed %v, FROM=0 %v (want bitwise: the same kernels)", n, j, routed[i][j], always[i][j])
			}
		}
		worst := 0.0
		for j := range routed[i] {
			worst = max(worst, math.Abs(float64(routed[i][j])-float64(lean[i][j])))
		}
		top, leanTop, margin := dsArgmax(routed[i]), dsArgmax(lean[i]), dsTop2Margin(lean[i])
		t.Logf("kv_len %d: routed vs lean max|diff| %.3g, top-1 %d / %d (lean margin %.3g)", n, worst, top, leanTop, margin)
		if worst > 0.5 || (top != leanTop && margin > 0.1) {
			t.Errorf("kv_len %d: routed vs lean max|diff| %.3g (bar 0.5), top-1 %d vs %d at margin %.3g (f16-attention-tile)", n, worst, top, leanTop, margin)
		}
	}
}
