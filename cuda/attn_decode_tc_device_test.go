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
			// Either tile form (a suite gate may set MINFER_ATTN_DECODE_TC_NARROW=1).
			k, names := rpMatching(c, "minfer_attn_decode_tc*_hd*")
			comb, _ := rpMatching(c, "minfer_attn_decode_tc*_combine")
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
		tc, _ = rpMatching(c, "minfer_attn_decode_tc*") // either tile form (MINFER_ATTN_DECODE_TC_NARROW)
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

// TestAttnDecodeTCNarrowDevice_MatchesCPUAndTheWideFormWithinF16Bar: the
// narrow form (MINFER_ATTN_DECODE_TC_NARROW: minfer_attn_decode_tc32_*,
// launched by a Kernels loaded with DecodeTCNarrow, as New loads it) over
// an f16 cache at the 7B's heads (28 / 4, head_dim 128) and qwen2-0.5b's
// (14 / 2, 64): KV lengths 1 (depth 0), 33 (a second, partial tile), 4113
// (past many tiles, a partial last one) and 20000 (625 tiles: on 132 SMs
// 157 active splits of the 7B's 198, more than the 64-cell form's combine
// holds), nt 1 and 8. Each launch is within 1e-2 of engine/cpu's attention
// and of the 64-cell form (minfer_attn_decode_tc_*, the f16 tiles both),
// and a repeated launch gives the same bits; the census shows the narrow
// kernels and their combine ran once a launch, the 64-cell ones never.
func TestAttnDecodeTCNarrowDevice_MatchesCPUAndTheWideFormWithinF16Bar(t *testing.T) {
	ms := mmtOpen(t)
	kc := mmtLoadKernels(t, ms, KernelsOptions{Census: true, DecodeTCNarrow: true}, false)
	t.Cleanup(func() { _ = ms.dev.Do(kc.Close) })
	narrow := adDecodeTC
	narrow.name = "attn_decode_tc32"
	narrow.launch = func(_ *Kernels, s *driver.Stream, out, q, kr, vr driver.DevicePtr, f kv.Format, win, scr driver.DevicePtr, scrB int, p AttnParams) error {
		if err := kc.PrepareAttnPrefillTC(); err != nil {
			return err
		}
		if need := AttnPrefillTCScratchBytes(p.HeadDim, kc.dev.Attr.SMCount); scrB < need {
			return fmt.Errorf("the test's scratch of %d bytes is short of %d on this device", scrB, need)
		}
		return kc.AttentionDecodeTC(s, out, 0, 0, q, kr, vr, f, win, scr, scrB, p)
	}
	r := rand.New(rand.NewPCG(85, 86))
	const nCtx = 20000
	launches := map[int]int64{} // head_dim -> narrow launches
	for _, h := range [][3]int{{28, 4, 128}, {14, 2, 64}} {
		nh, nkv, hd := h[0], h[1], h[2]
		rl := nkv * hd
		k, v := adFill(r, kv.F16, nCtx, rl), adFill(r, kv.F16, nCtx, rl)
		adUpload(t, ms, &k, &v)
		shN := adOpenKernelShape(t, ms, narrow, kv.F16, k, v, nh, nkv, hd, nCtx)
		shW := adOpenKernelShape(t, ms, adDecodeTC, kv.F16, k, v, nh, nkv, hd, nCtx)
		worst, worstW := 0.0, 0.0
		for _, L := range []int{1, 33, 4113, nCtx} {
			for _, nt := range []int{1, AttnDecodeMaxNT} {
				start := max(L-nt, 0)
				q := dsRand(r, hd*nh*nt, 1+2*r.Float64())
				p := shN.p
				p.NT = nt
				got := shN.run(t, q, nt, start, 0)
				want := adRef(q, k.f32, v.f32, rl, hd, nh, nkv, nt, start, 0, attnScale(p))
				wide := shW.run(t, q, nt, start, 0)
				again := shN.run(t, q, nt, start, 0)
				launches[hd] += 2
				d, at := adWorst(got, want)
				dw, atw := adWorst(got, wide)
				worst, worstW = max(worst, d), max(worstW, dw)
				name := fmt.Sprintf("hd%d %d/%d heads nt%d start%d", hd, nh, nkv, nt, start)
				if d > 1e-2 || dw > 1e-2 {
					t.Errorf("%s: max|diff| %g against the CPU (at %d: %v vs %v), %g against the 64-cell form (at %d: %v vs %v); bar 1e-2",
						name, d, at, got[at], want[at], dw, atw, got[atw], wide[atw])
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(again[i]) {
						t.Errorf("%s: a repeated launch differs at %d: %v then %v", name, i, got[i], again[i])
						break
					}
				}
			}
		}
		t.Logf("hd %d heads %d/%d: %d splits; worst max|diff| %g against the CPU, %g against the 64-cell form", hd, nh, nkv,
			attnDecodeTCNarrow.splits(shN.p, kc.dev.Attr.SMCount), worst, worstW)
	}
	c := kc.Census()
	var all int64
	for hd, n := range launches {
		all += n
		if got := c[attnDecodeTCNarrow.name(hd)]; got != n {
			t.Errorf("census: %s ran %d times, want %d", attnDecodeTCNarrow.name(hd), got, n)
		}
	}
	wideRan, names := rpMatching(c, "minfer_attn_decode_tc_*")
	if c[attnDecodeTCNarrow.combine()] != all || wideRan != 0 {
		t.Errorf("census: %s ran %d times (want %d), the 64-cell kernels %d (want 0: %v)", attnDecodeTCNarrow.combine(), c[attnDecodeTCNarrow.combine()], all, wideRan, names)
	}
}

// TestAttnDecodeTCNarrowDevice_WholeModelWithinF16ClassAndTheNarrowKernelsRun:
// synthetic qwen2-tiny and qwen2-0.5b Q4_K_M, prefill then 6 decode steps,
// CUDA graphs on and off, the tensor-core decode pinned on at every depth
// over an f16 cache (with the Q8_1 row, MINFER_FUSE_ATTN_Q8's default):
// MINFER_ATTN_DECODE_TC_NARROW=1 against =0, every step's logits within
// the f16-attention-tile class (max|diff| <= 0.5, top-1 equal where the
// top-2 margin is above 0.1). Census: with the lever minfer_attn_decode_tc32_*
// and its combine run once a layer a step and the 64-cell kernels never;
// without it the reverse.
func TestAttnDecodeTCNarrowDevice_WholeModelWithinF16ClassAndTheNarrowKernelsRun(t *testing.T) {
	dsNeedDevice(t)
	pin := append([]string{"MINFER_ATTN_DECODE_TC=1", "MINFER_ATTN_DECODE_TC_FROM=0", "MINFER_CACHE_TYPE=f16", "MINFER_FUSE_RESIDUAL=1"}, dsMMVQ...)
	models := []dsModel{{"qwen2-tiny", "Q4_K_M"}, {"qwen2-0.5b", "Q4_K_M"}}
	within := func(t *testing.T, i int, lN, lW []float32) {
		worst := 0.0
		for j := range lW {
			worst = max(worst, math.Abs(float64(lN[j])-float64(lW[j])))
		}
		top, topW, margin := dsArgmax(lN), dsArgmax(lW), dsTop2Margin(lW)
		if worst > 0.5 || (top != topW && margin > 0.1) {
			t.Errorf("step %d: narrow vs 64-cell max|diff| %.3g (bar 0.5), top-1 %d vs %d at margin %.3g", i, worst, top, topW, margin)
		}
	}
	dsLeverDecodeCmp(t, "MINFER_ATTN_DECODE_TC_NARROW", models, pin, within, func(t *testing.T, _ dsModel, sh synth.Shape, _ string, cW, cN map[string]int64, _ *Backend) {
		want := int64(sh.NLayer * frSteps)
		for arm, c := range map[string]map[string]int64{"narrow": cN, "64-cell": cW} {
			n, nNames := rpMatching(c, "minfer_attn_decode_tc32_hd*")
			nComb, _ := rpMatching(c, "minfer_attn_decode_tc32_combine")
			w, wNames := rpMatching(c, "minfer_attn_decode_tc_hd*")
			wComb, _ := rpMatching(c, "minfer_attn_decode_tc_combine")
			t.Logf("%s: narrow %d %v + %d combines, 64-cell %d %v + %d combines", arm, n, nNames, nComb, w, wNames, wComb)
			if on := arm == "narrow"; (on && (n != want || nComb != want || w+wComb != 0)) || (!on && (w != want || wComb != want || n+nComb != 0)) {
				t.Errorf("%s arm: narrow %d kernel and %d combine launches, 64-cell %d and %d; want %d of its own form's each, none of the other",
					arm, n, nComb, w, wComb, want)
			}
		}
	})
}
