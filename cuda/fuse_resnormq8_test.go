package cuda

// Tests of MINFER_FUSE_RES_NORM_Q8 (graph.FuseResNormQ8: the decode
// residual matvec whose last block writes the next norm's Q8_1 row,
// mmvq_resn.go, cuda/kernels/mmvq_resn.cu). The device test skips with a
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

// TestFuseResNormQ8_RouteOnlyAOneWarpDecodeRowWithAResnKernel: the backend
// offers the fusion for a one-row MatMulAdd or AttnMatMulAdd whose weight
// takes a one-warp decode MMVQ route (GGUF Q4_K, Q5_0; repacked Q6_K) read
// by a fused q/k/v or gate/up node that carries a folded norm; it declines
// two rows, the split form (MINFER_MMVQ_SPLIT), an f32-activation weight
// (F16), a consumer without a folded norm, an unregistered norm weight, a
// plain add and a row that is not whole Q8_1 blocks. The launcher refuses
// bad norms, Q8_1 rows and counters by name.
func TestFuseResNormQ8_RouteOnlyAOneWarpDecodeRowWithAResnKernel(t *testing.T) {
	const n = 896
	w := func(typ quant.Type, rows int, rp driver.DevicePtr) *devWeight {
		return &devWeight{typ: typ, rowLen: 4864, rows: rows, ptr: 0x1000, rp: rp}
	}
	mm := MatMulOptions{MMQ: true, MMVQNT: true, ActQ8: 0x3000, ActQ8Bytes: 1 << 20}
	b := &Backend{mm: mm, weights: map[string]*devWeight{
		"norm": {typ: quant.F32, rowLen: n, rows: 1, vector: true, ptr: 0x2000},
		"q4k":  w(quant.Q4_K, n, 0), "q50": w(quant.Q5_0, n, 0), "q6kr": w(quant.Q6_K, n, 0x8000), "f16": w(quant.F16, n, 0),
		"odd": w(quant.Q5_0, 880, 0),
	}}
	madd := func(op graph.Op, weight string, rows, width int) *graph.Node {
		return &graph.Node{ID: 7, Op: op, Weight: weight, Shape: graph.Sh(width, rows)}
	}
	cons := func(op graph.Op, norm string) *graph.Node {
		return &graph.Node{Op: op, Inputs: []int{7}, Norm: norm, Weights: []string{"x", "y", "z"}}
	}
	for _, c := range []struct {
		name string
		m, c *graph.Node
		want bool
	}{
		{"down Q4_K -> q/k/v", madd(graph.OpMatMulAdd, "q4k", 1, n), cons(graph.OpFusedQKV, "norm"), true},
		{"o-proj Q5_0 after the attention -> gate/up", madd(graph.OpAttnMatMulAdd, "q50", 1, n), cons(graph.OpFusedFFN, "norm"), true},
		{"down repacked Q6_K", madd(graph.OpMatMulAdd, "q6kr", 1, n), cons(graph.OpFusedQKV, "norm"), true},
		{"two rows", madd(graph.OpMatMulAdd, "q4k", 2, n), cons(graph.OpFusedQKV, "norm"), false},
		{"an f16 weight", madd(graph.OpMatMulAdd, "f16", 1, n), cons(graph.OpFusedQKV, "norm"), false},
		{"no folded norm", madd(graph.OpMatMulAdd, "q4k", 1, n), cons(graph.OpFusedQKV, ""), false},
		{"an unregistered norm", madd(graph.OpMatMulAdd, "q4k", 1, n), cons(graph.OpFusedQKV, "gone"), false},
		{"a plain add", madd(graph.OpAdd, "q4k", 1, n), cons(graph.OpFusedQKV, "norm"), false},
		{"a row of 880", madd(graph.OpMatMulAdd, "odd", 1, 880), cons(graph.OpFusedQKV, "norm"), false},
	} {
		if got := b.SupportsFused(graph.FuseResNormQ8, c.m, c.c); got != c.want {
			t.Errorf("%s: SupportsFused %v, want %v", c.name, got, c.want)
		}
	}
	split := &Backend{mm: mm, weights: b.weights}
	split.mm.MMVQSplit = true
	if split.SupportsFused(graph.FuseResNormQ8, madd(graph.OpMatMulAdd, "q4k", 1, n), cons(graph.OpFusedQKV, "norm")) {
		t.Error("offered with MINFER_MMVQ_SPLIT on: the split form has no resn kernel")
	}
	if resnKernel(quant.Q4_K, false) != "minfer_mmvq_resn_q4_k" || resnKernel(quant.Q6_K, true) != "minfer_mmvqr_resn_q6_k" || resnKernel(quant.Q4_K, true) != "" {
		t.Errorf("resn kernel names: %q %q %q", resnKernel(quant.Q4_K, false), resnKernel(quant.Q6_K, true), resnKernel(quant.Q4_K, true))
	}
	k := &Kernels{dev: &driver.Device{Attr: driver.Attributes{SMCount: 132}}}
	const wp, out, res, xq = driver.DevicePtr(0x10000), driver.DevicePtr(0x20000), driver.DevicePtr(0x30000), driver.DevicePtr(0x40000)
	good := ResNorm{W: 0x50000, Eps: 1e-6, Q8: xq, Q8Bytes: 1 << 20, Counter: 0x60000}
	for _, c := range []struct {
		name string
		n    int
		nrm  func(r *ResNorm)
	}{
		{"row of 880", 880, func(*ResNorm) {}},
		{"negative eps", n, func(r *ResNorm) { r.Eps = -1 }},
		{"no counter", n, func(r *ResNorm) { r.Counter = 0 }},
		{"a short Q8_1 row", n, func(r *ResNorm) { r.Q8Bytes = 100 }},
		{"a Q8_1 row over the output", n, func(r *ResNorm) { r.Q8 = out }},
	} {
		r := good
		c.nrm(&r)
		err := k.MatMulQ8_1ResNorm(nil, out, xq, 1<<20, wp, quant.Q5_0, 0, res, 4864, c.n, r, false)
		if err == nil || !strings.Contains(err.Error(), "matmul_q8_1_resn") {
			t.Errorf("%s: %v, want a refusal naming the op", c.name, err)
		}
	}
}

// TestFuseResNormQ8_MemoryPlanCountsTheCounter: the lever's one device
// allocation beyond the graph's buffers, the resn counter, is in the
// memory plan's scratch with the lever on and not without it.
func TestFuseResNormQ8_MemoryPlanCountsTheCounter(t *testing.T) {
	p := graph.Params{NHead: 14, NHeadKV: 2, HeadDim: 64, NFF: 4864, NCtx: 256}
	off, on := levers.Default(), levers.Default()
	on.FuseResNormQ8 = true
	if d := MemoryRules(on, 132).Scratch(p, nil, 1) - MemoryRules(off, 132).Scratch(p, nil, 1); d != ResnCounterBytes {
		t.Errorf("the memory plan's scratch grows by %d bytes with the lever, want the counter's %d", d, ResnCounterBytes)
	}
}

// TestFuseResNormQ8Device_LogitsBitwiseAndTwoLaunchesFewerALayer: synthetic
// qwen2-tiny Q8_0 and Q4_K_M, qwen3-tiny Q4_K_M and qwen2-0.5b Q4_K_M,
// prefill then 6 decode steps, CUDA graphs on and off, both arms with
// MINFER_FUSE_NORM_Q8=1 and the one-warp decode matvecs:
// MINFER_FUSE_RES_NORM_Q8=1 gives bitwise the logits of =0 at every step.
// Census of the decode steps: minfer_mmvq*_resn_* runs only with the lever
// on, and each of its launches replaces one minfer_mmvq*_res_* and one
// minfer_rms_norm_q8_1; the embedding gather's _q8_1 twin runs once a step
// instead of the plain gather and replaces layer 0's attn norm; all
// launches drop by the resn launches and the gathers. On Q8_0 (every norm
// folds) that is 2 a layer a step (the last down projection writes the
// output norm's row for the lm head) and the gather's one.
func TestFuseResNormQ8Device_LogitsBitwiseAndTwoLaunchesFewerALayer(t *testing.T) {
	dsNeedDevice(t)
	models := []dsModel{{"qwen2-tiny", "Q8_0"}, {"qwen2-tiny", "Q4_K_M"}, {"qwen3-tiny", "Q4_K_M"}, {"qwen2-0.5b", "Q4_K_M"}}
	pin := append([]string{"MINFER_FUSE_NORM_Q8=1", "MINFER_FUSE_RESIDUAL=1"}, dsOneWarpDecode...)
	dsLeverDecodeOn(t, "MINFER_FUSE_RES_NORM_Q8", models, pin, func(t *testing.T, m dsModel, sh synth.Shape, _ string, cOff, cOn map[string]int64, _ *Backend) {
		fused, _ := rpMatching(cOn, "minfer_mmvq*_resn_*")
		fusedOff, _ := rpMatching(cOff, "minfer_mmvq*_resn_*")
		resOff, _ := rpMatching(cOff, "minfer_mmvq*_res_*")
		resOn, _ := rpMatching(cOn, "minfer_mmvq*_res_*")
		gq8, gq8Off, gOff, gOn := dsGathers(cOn, cOff)
		nOff, nOn := cOff[normQ8Kernel], cOn[normQ8Kernel]
		allOff, allOn := dsAll(cOff), dsAll(cOn)
		t.Logf("decode launches over %d steps: resn on %d, off %d; res off %d, on %d; gathers _q8_1 on %d, off %d, all off %d, on %d; "+
			"%s off %d, on %d; all off %d, on %d", frSteps, fused, fusedOff, resOff, resOn, gq8, gq8Off, gOff, gOn, normQ8Kernel, nOff, nOn, allOff, allOn)
		if fused == 0 || fusedOff != 0 || resOff-resOn != fused || gq8 != frSteps || gq8Off != 0 || gOff != gOn ||
			nOff-nOn != fused+gq8 || allOff-allOn != fused+gq8 {
			t.Errorf("resn on %d, off %d; res dropped by %d; gathers _q8_1 on %d, off %d (all %d -> %d); norms dropped by %d, all launches by %d: "+
				"want resn on > 0, off 0, the res drop equal to it, one _q8_1 gather a step in place of the plain one, the norm and all drops resn + gathers",
				fused, fusedOff, resOff-resOn, gq8, gq8Off, gOff, gOn, nOff-nOn, allOff-allOn)
		}
		if want := int64(2 * sh.NLayer * frSteps); m.typ == "Q8_0" && fused != want {
			t.Errorf("resn launches %d, want 2 x %d layers x %d steps = %d", fused, sh.NLayer, frSteps, want)
		}
	})
}

// dsGathers is the embedding gathers of two decode censuses: the _q8_1
// twins in on and off, and every gather in off and on.
func dsGathers(cOn, cOff map[string]int64) (q8On, q8Off, allOff, allOn int64) {
	q8On, _ = rpMatching(cOn, "minfer_get_rows*_q8_1")
	q8Off, _ = rpMatching(cOff, "minfer_get_rows*_q8_1")
	allOff, _ = rpMatching(cOff, "minfer_get_rows*")
	allOn, _ = rpMatching(cOn, "minfer_get_rows*")
	return q8On, q8Off, allOff, allOn
}

// dsAll is the launches of a census.
func dsAll(c map[string]int64) int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// TestFuseResNormQ8Device_EveryGatherFormBitwiseAndOneLaunchLess: each
// form of the embedding gather folds layer 0's attn norm at decode, its
// logits bitwise those of the lever off: the repacked-only table of a tied
// model (MINFER_ONE_COPY, qwen2-tiny Q8_0: minfer_get_rows_r_q8_1), its
// GGUF bytes on the device (ONE_COPY=0: minfer_get_rows_q8_1), an untied
// model's host-mapped table (MINFER_EMBED_HOST, qwen3-tiny Q4_K_M:
// minfer_get_rows_host_q8_1) and its device copy (EMBED_HOST=0:
// minfer_get_rows_q8_1). Census of the decode steps: that kernel once a
// step with the lever on, never off, in place of its plain twin; the
// norms drop by the resn launches and it; CUDA graphs on and off.
func TestFuseResNormQ8Device_EveryGatherFormBitwiseAndOneLaunchLess(t *testing.T) {
	dsNeedDevice(t)
	base := append([]string{"MINFER_FUSE_NORM_Q8=1", "MINFER_FUSE_RESIDUAL=1"}, dsOneWarpDecode...)
	oneCopy, _ := levers.Lookup("MINFER_ONE_COPY") // its Requires too: the suite gate's arm B may set any
	for _, c := range []struct {
		m            dsModel
		pin          []string
		fused, plain string
	}{
		{dsModel{"qwen2-tiny", "Q8_0"}, append(slices.Clone(oneCopy.Requires), "MINFER_ONE_COPY=1"), getRowsRQ8Kernel, "minfer_get_rows_r"},
		{dsModel{"qwen2-tiny", "Q8_0"}, dsTwoCopies, getRowsQ8Kernel, "minfer_get_rows"},
		{dsModel{"qwen3-tiny", "Q4_K_M"}, []string{"MINFER_EMBED_HOST=1"}, getRowsHostQ8Kernel, "minfer_get_rows_host"},
		{dsModel{"qwen3-tiny", "Q4_K_M"}, []string{"MINFER_EMBED_HOST=0"}, getRowsQ8Kernel, "minfer_get_rows"},
	} {
		pin := append(append([]string{}, base...), c.pin...)
		dsLeverDecodeOn(t, "MINFER_FUSE_RES_NORM_Q8", []dsModel{c.m}, pin, func(t *testing.T, _ dsModel, _ synth.Shape, _ string, cOff, cOn map[string]int64, _ *Backend) {
			resn, _ := rpMatching(cOn, "minfer_mmvq*_resn_*")
			nDrop := cOff[normQ8Kernel] - cOn[normQ8Kernel]
			t.Logf("%v: %s on %d, off %d; %s off %d, on %d; resn %d, norms dropped by %d", c.pin, c.fused, cOn[c.fused], cOff[c.fused],
				c.plain, cOff[c.plain], cOn[c.plain], resn, nDrop)
			if cOn[c.fused] != frSteps || cOff[c.fused] != 0 || cOff[c.plain] != frSteps || cOn[c.plain] != 0 || nDrop != resn+frSteps {
				t.Errorf("%v: %s on %d, off %d; %s off %d, on %d; norms dropped by %d with %d resn: want %d, 0, %d, 0 and resn + %d",
					c.pin, c.fused, cOn[c.fused], cOff[c.fused], c.plain, cOff[c.plain], cOn[c.plain], nDrop, resn, frSteps, frSteps, frSteps)
			}
		})
	}
}

// The resn tail's thread stands in for two of the norm's virtual threads
// (mmvq_resn.cu: t and t + 128), so the norm's block (opsRowBlock, at
// most opsThreads) must be at most twice either matvec family's block: a
// larger opsThreads or a smaller matvec block would leave the rest of the
// row's sums out.
func TestResnTail_NormBlockAtMostTwiceEitherMatvecBlock(t *testing.T) {
	for _, f := range []mmvqFamily{mmvqFam, mmvqrFam} {
		for n := 32; n <= 16*opsThreads; n += 32 {
			if vb := opsRowBlock(n)[0]; vb > 2*f.threads {
				t.Fatalf("n %d: norm block %d threads, the tail's block %d covers %d", n, vb, f.threads, 2*f.threads)
			}
		}
	}
}
