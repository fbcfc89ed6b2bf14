package cuda

// Tests of MINFER_FUSE_FFN_Q8 with MINFER_FUSE_RES_NORM_Q8: an
// FFNMatMulAdd whose FFN reads the Q8_1 row the o-projection's last block
// wrote (Q8In) and whose down projection, reading the FFN's Q8_1 output,
// writes the next norm's Q8_1 row into the scratch (OutNorm). The device
// test skips with a message when no device answers; the others need none.
// The kernels' bytes over two buffers are checked on the CPU by
// scripts/kernel-emu/resn-emu.sh (kernels/emu_test.go).

import (
	"fmt"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/model/qwen2"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/synth"
)

// TestFuseFFNQ8ResNormQ8_RouteOffersTheFFNDownProjectionAndTheFFNAsReader:
// the backend offers FuseResNormQ8 with an FFNMatMulAdd as the producer
// (its down projection, GGUF Q4_K or repacked Q6_K, on a one-warp decode
// route with a resn kernel) before a normed fused q/k/v or FFNMatMulAdd,
// and as the reader (its FFN's norm folded) after an o-projection; it
// declines an f16 down projection, two rows, the split form, and an
// FFNMatMulAdd reader whose norm was not folded.
func TestFuseFFNQ8ResNormQ8_RouteOffersTheFFNDownProjectionAndTheFFNAsReader(t *testing.T) {
	const n = 896
	w := func(typ quant.Type, rowLen, rows int, rp driver.DevicePtr) *devWeight {
		return &devWeight{typ: typ, rowLen: rowLen, rows: rows, ptr: 0x1000, rp: rp}
	}
	mm := MatMulOptions{MMQ: true, MMVQNT: true, ActQ8: 0x3000, ActQ8Bytes: 1 << 20}
	b := &Backend{mm: mm, weights: map[string]*devWeight{
		"norm": {typ: quant.F32, rowLen: n, rows: 1, vector: true, ptr: 0x2000},
		"d4k":  w(quant.Q4_K, 4864, n, 0), "d6kr": w(quant.Q6_K, 4864, n, 0x8000), "df16": w(quant.F16, 4864, n, 0),
		"o50": w(quant.Q5_0, n, n, 0),
	}}
	ffn := func(down string, rows int, norm string) *graph.Node {
		return &graph.Node{ID: 7, Op: graph.OpFFNMatMulAdd, Inputs: []int{6, 6}, Weight: down, Shape: graph.Sh(n, rows),
			Weights: []string{"g", "u"}, Norm: norm}
	}
	qkv := &graph.Node{Op: graph.OpFusedQKV, Inputs: []int{7}, Norm: "norm", Weights: []string{"x", "y", "z"}}
	oproj := &graph.Node{ID: 6, Op: graph.OpAttnMatMulAdd, Weight: "o50", Shape: graph.Sh(n, 1)}
	for _, c := range []struct {
		name string
		m, c *graph.Node
		want bool
	}{
		{"FFN + Q4_K down -> q/k/v", ffn("d4k", 1, "norm"), qkv, true},
		{"FFN + repacked Q6_K down -> q/k/v", ffn("d6kr", 1, "norm"), qkv, true},
		{"o-projection -> FFN + down", oproj, ffn("d4k", 1, "norm"), true},
		{"FFN + down -> FFN + down", ffn("d4k", 1, ""), &graph.Node{Op: graph.OpFFNMatMulAdd, Inputs: []int{7, 7}, Norm: "norm"}, true},
		{"FFN + f16 down", ffn("df16", 1, "norm"), qkv, false},
		{"two rows", ffn("d4k", 2, "norm"), qkv, false},
		{"an FFN reader without a folded norm", oproj, ffn("d4k", 1, ""), false},
	} {
		if got := b.SupportsFused(graph.FuseResNormQ8, c.m, c.c); got != c.want {
			t.Errorf("%s: SupportsFused %v, want %v", c.name, got, c.want)
		}
	}
	split := &Backend{mm: mm, weights: b.weights}
	split.mm.MMVQSplit = true
	if split.SupportsFused(graph.FuseResNormQ8, ffn("d4k", 1, "norm"), qkv) {
		t.Error("offered with MINFER_MMVQ_SPLIT on: the split form has no resn kernel")
	}
}

// TestFuseFFNQ8ResNormQ8_TailWritesTheScratchApartFromTheFFNRowItReads:
// what an FFNMatMulAdd with an OutNorm writes after its down projection
// (resNormOf): the OutNorm's weight and OutEps, not its FFN's Norm and
// Eps, into the Q8_1 scratch (the next Q8In node reads it there), which
// is not the FFN's Q8_1 output the down projection reads; a node without
// an OutNorm writes none. The resn launcher refuses a Q8_1 row that
// starts inside the activation it reads (only the row itself or one apart
// from it is safe), by name.
func TestFuseFFNQ8ResNormQ8_TailWritesTheScratchApartFromTheFFNRowItReads(t *testing.T) {
	const n, nff = 896, 4864
	mm := MatMulOptions{MMQ: true, MMVQNT: true, ActQ8: 0x3000, ActQ8Bytes: ActQ8Bytes(nff, 1)}
	b := &Backend{mm: mm, resnCtr: 0x9000, ffnQ8: 0x100000, ffnQ8Len: nff, weights: map[string]*devWeight{
		"ffn_norm":  {typ: quant.F32, rowLen: n, rows: 1, vector: true, ptr: 0x2000},
		"attn_norm": {typ: quant.F32, rowLen: n, rows: 1, vector: true, ptr: 0x2800},
		"down":      {typ: quant.Q4_K, rowLen: nff, rows: n, ptr: 0x10000},
	}}
	node := &graph.Node{Op: graph.OpFFNMatMulAdd, Weight: "down", Weights: []string{"g", "u"}, Shape: graph.Sh(n, 1),
		Norm: "ffn_norm", Q8In: true, OutNorm: "attn_norm", P: graph.OpParams{Eps: 1e-5, OutEps: 1e-6}}
	d := matmulPlan{w: b.weights["down"]}
	nrm, err := b.resNormOf(node, d)
	if err != nil {
		t.Fatal(err)
	}
	q, err := b.ensureFFNQ8(nff) // allocated already: no device call
	if err != nil {
		t.Fatal(err)
	}
	if nrm.W != 0x2800 || nrm.Eps != 1e-6 || nrm.Q8 != mm.ActQ8 || nrm.Q8Bytes != mm.ActQ8Bytes || nrm.Counter != 0x9000 {
		t.Errorf("resNormOf: %+v; want the attn norm's weight 0x2800, eps 1e-6, the scratch %v (%d bytes) and the counter 0x9000",
			nrm, mm.ActQ8, mm.ActQ8Bytes)
	}
	if overlapBytes(nrm.Q8, ActQ8Bytes(n, 1), q.Q8, q.Q8Bytes) {
		t.Errorf("the tail's Q8_1 row %v overlaps the FFN's Q8_1 output %v the down projection reads", nrm.Q8, q.Q8)
	}
	node.OutNorm = ""
	if nrm, err := b.resNormOf(node, d); err != nil || nrm != (ResNorm{}) {
		t.Errorf("no OutNorm: %+v, %v; want no norm written", nrm, err)
	}

	k := &Kernels{dev: &driver.Device{Attr: driver.Attributes{SMCount: 132}}}
	const xq, out, res = driver.DevicePtr(0x40000), driver.DevicePtr(0x20000), driver.DevicePtr(0x30000)
	xqb := ActQ8Bytes(nff, 1)
	r := ResNorm{W: 0x50000, Eps: 1e-6, Q8: xq.Add(36 * 8), Q8Bytes: ActQ8Bytes(n, 1), Counter: 0x60000}
	err = k.MatMulQ8_1ResNorm(nil, out, xq, xqb, 0x10000, quant.Q4_K, 0, res, nff, n, r, false)
	if err == nil || !strings.Contains(err.Error(), "matmul_q8_1_resn") || !strings.Contains(err.Error(), "partly overlaps") {
		t.Errorf("a Q8_1 row 8 blocks into the activation: %v, want a refusal naming the op and the overlap", err)
	}
}

// TestFuseFFNQ8ResNormQ8_MemoryPlanCountsBothAllocations: with both levers
// the memory plan's scratch holds the FFN's Q8_1 output and counters and
// the resn counter, each once (nothing else is allocated for the pair).
func TestFuseFFNQ8ResNormQ8_MemoryPlanCountsBothAllocations(t *testing.T) {
	p := graph.Params{NHead: 14, NHeadKV: 2, HeadDim: 64, NFF: 4864, NCtx: 256}
	off, on := levers.Default(), levers.Default()
	on.FuseFFNQ8, on.FuseResNormQ8 = true, true
	if d, want := MemoryRules(on, 132).Scratch(p, nil, 1)-MemoryRules(off, 132).Scratch(p, nil, 1), FFNQ8OutBytes(4864)+ResnCounterBytes; d != want {
		t.Errorf("the memory plan's scratch grows by %d bytes with both levers, want FFNQ8OutBytes(4864) + the resn counter = %d", d, want)
	}
}

// TestFuseFFNQ8ResNormQ8_SetTogetherIsNotRefused: the registry takes the
// two levers together (the pair composes), while each keeps its own
// Requires: RES_NORM_Q8 without FUSE_NORM_Q8 or with the split matvec,
// FFN_Q8 with the FFN fusion off, are still refused by name.
func TestFuseFFNQ8ResNormQ8_SetTogetherIsNotRefused(t *testing.T) {
	both := []string{"MINFER_FUSE_FFN_Q8=1", "MINFER_FUSE_RES_NORM_Q8=1", "MINFER_FUSE_NORM_Q8=1"}
	for _, c := range []struct {
		env         []string
		lever, want string
	}{
		{both, "MINFER_FUSE_RES_NORM_Q8", ""},
		{both, "MINFER_FUSE_FFN_Q8", ""},
		{[]string{"MINFER_FUSE_FFN_Q8=1", "MINFER_FUSE_RES_NORM_Q8=1"}, "MINFER_FUSE_RES_NORM_Q8", ""}, // FUSE_NORM_Q8 is on by default
		{[]string{"MINFER_FUSE_FFN_Q8=1", "MINFER_FUSE_RES_NORM_Q8=1", "MINFER_FUSE_NORM_Q8=0"}, "MINFER_FUSE_RES_NORM_Q8", "MINFER_FUSE_NORM_Q8=0"},
		{append(append([]string{}, both...), "MINFER_MMVQ_SPLIT=1"), "MINFER_FUSE_RES_NORM_Q8", "MINFER_MMVQ_SPLIT=1"},
		{append(append([]string{}, both...), "MINFER_NO_FUSE_FFN=1"), "MINFER_FUSE_FFN_Q8", "MINFER_NO_FUSE_FFN=1"},
	} {
		lv, err := levers.Parse(c.env)
		if err != nil {
			t.Fatal(err)
		}
		err = optInConflict(lv, c.lever)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%v, %s: %v, want a refusal naming %q (none when empty)", c.env, c.lever, err, c.want)
		}
	}
}

// TestFuseFFNQ8ResNormQ8Device_LogitsBitwiseAndThreeLaunchesFewerALayer:
// synthetic qwen2-tiny Q8_0 and Q4_K_M, qwen3-tiny Q4_K_M and qwen2-0.5b
// Q4_K_M, prefill then 6 decode steps, CUDA graphs on and off, both arms
// with the folded norms, the residual and FFN fusions and the one-warp
// decode matvecs (the levers' Requires): MINFER_FUSE_FFN_Q8=1 with
// MINFER_FUSE_RES_NORM_Q8=1 gives bitwise the logits of both =0 at every
// step. Census of the decode steps: each minfer_mmvq*_ffnq_* launch
// replaces one minfer_mmvq*_ffn_* and one quantization, each
// minfer_mmvq*_resn_* launch one minfer_mmvq*_res_* and one
// minfer_rms_norm_q8_1, the gather's _q8_1 twin (once a step) the plain
// gather and layer 0's attn norm, and all launches drop by their sum; on
// Q8_0 (every norm folds) that is one FFN a layer and two norms a layer
// and the gather's, 3 x layers + 1 a step: the down projections of the
// FFNMatMulAdd nodes all run resn, the last one writing the output norm's
// row for the lm head.
func TestFuseFFNQ8ResNormQ8Device_LogitsBitwiseAndThreeLaunchesFewerALayer(t *testing.T) {
	dsNeedDevice(t)
	models := []dsModel{{"qwen2-tiny", "Q8_0"}, {"qwen2-tiny", "Q4_K_M"}, {"qwen3-tiny", "Q4_K_M"}, {"qwen2-0.5b", "Q4_K_M"}}
	pin := append([]string{"MINFER_FUSE_NORM_Q8=1", "MINFER_FUSE_RESIDUAL=1", "MINFER_NO_FUSE_FFN=0"}, dsOneWarpDecode...)
	levers := []string{"MINFER_FUSE_FFN_Q8", "MINFER_FUSE_RES_NORM_Q8"}
	dsLeversDecodeOn(t, levers, models, pin, func(t *testing.T, m dsModel, sh synth.Shape, _ string, cOff, cOn map[string]int64, _ *Backend) {
		count := func(c map[string]int64, pattern string) int64 { n, _ := rpMatching(c, pattern); return n }
		ffnq, ffnqOff := count(cOn, "minfer_mmvq*_ffnq_*"), count(cOff, "minfer_mmvq*_ffnq_*")
		resn, resnOff := count(cOn, "minfer_mmvq*_resn_*"), count(cOff, "minfer_mmvq*_resn_*")
		gq8, gq8Off, gOff, gOn := dsGathers(cOn, cOff)
		ffnDrop := count(cOff, "minfer_mmvq*_ffn_*") - count(cOn, "minfer_mmvq*_ffn_*")
		qDrop := count(cOff, "minfer_quantize_q8_1*") - count(cOn, "minfer_quantize_q8_1*")
		resDrop := count(cOff, "minfer_mmvq*_res_*") - count(cOn, "minfer_mmvq*_res_*")
		normDrop := cOff[normQ8Kernel] - cOn[normQ8Kernel]
		allOff, allOn := dsAll(cOff), dsAll(cOn)
		t.Logf("decode launches over %d steps: ffnq %d (off %d), resn %d (off %d), gathers _q8_1 %d (off %d); dropped: ffn %d, quantizations %d, res %d, norms %d; "+
			"all off %d, on %d (%.1f and %.1f a token)", frSteps, ffnq, ffnqOff, resn, resnOff, gq8, gq8Off, ffnDrop, qDrop, resDrop, normDrop,
			allOff, allOn, float64(allOff)/frSteps, float64(allOn)/frSteps)
		if ffnq == 0 || resn == 0 || ffnqOff != 0 || resnOff != 0 || gq8 != frSteps || gq8Off != 0 || gOff != gOn || ffnDrop != ffnq ||
			qDrop != ffnq || resDrop != resn || normDrop != resn+gq8 || allOff-allOn != ffnq+resn+gq8 {
			t.Errorf("ffnq %d (off %d), resn %d (off %d), gathers _q8_1 %d (off %d, all %d -> %d); ffn dropped by %d, quantizations by %d, res by %d, "+
				"norms by %d, all launches by %d: want ffnq and resn on > 0 and off 0, one _q8_1 gather a step in place of the plain one, the ffn and "+
				"quantization drops = ffnq, the res drop = resn, the norm drop = resn + gathers, all = ffnq + resn + gathers",
				ffnq, ffnqOff, resn, resnOff, gq8, gq8Off, gOff, gOn, ffnDrop, qDrop, resDrop, normDrop, allOff-allOn)
		}
		if L := int64(sh.NLayer); m.typ == "Q8_0" && (ffnq != L*frSteps || resn != 2*L*frSteps || allOff-allOn != (3*L+1)*frSteps) {
			t.Errorf("ffnq %d, resn %d, all launches dropped by %d: want %d layers x %d steps = %d, 2 x %d x %d = %d and (3 x %d + 1) x %d = %d",
				ffnq, resn, allOff-allOn, L, frSteps, L*frSteps, L, frSteps, 2*L*frSteps, L, frSteps, (3*L+1)*frSteps)
		}
	})
}

// planFuse is the decode graph of a synthesized qwen2 shape and type
// (a mix such as Q4_K_M allowed; no file written) fused as the CUDA
// backend would decide under the levers env: a Backend with the plan's
// weights (types, dims, a repacked copy where registerWeight would make
// one; no device memory) answers SupportsFused, every op is placed on it.
func planFuse(t *testing.T, shape, typ string, env ...string) *graph.Graph {
	t.Helper()
	g, _ := planFuseOn(t, shape, typ, func(b *Backend) graph.Backend { return planBackend{b: b} }, env...)
	return g
}

// planFuseOn is planFuse with the backend the fuse pass asks made by be
// from the plan's CUDA backend, which it returns too.
func planFuseOn(t *testing.T, shape, typ string, be func(*Backend) graph.Backend, env ...string) (*graph.Graph, *Backend) {
	t.Helper()
	qt, mix, err := synth.ParseType(typ)
	if err != nil {
		t.Fatal(err)
	}
	h, ts := planTensorsOf(t, synth.Options{Shape: shape, Type: qt, Mix: mix})
	lv, err := levers.Parse(env)
	if err != nil {
		t.Fatal(err)
	}
	b := &Backend{lv: lv, weights: map[string]*devWeight{}, mm: MatMulOptions{NoPrefillGEMM: lv.NoPrefillGEMM, NoQ80MMVQ: lv.NoQ80MMVQ,
		NoQ40MMVQ: lv.NoQ40MMVQ, NoKQMMVQ: lv.NoKQMMVQ, MMQ: lv.MMQ, MMVQNT: lv.MMVQNT, MMVQSplit: lv.MMVQSplit,
		MMVQQKVMixed: lv.MMVQQKVMixed, ActQ8: 0x1000, ActQ8Bytes: 1 << 20}}
	for i, tn := range ts {
		w := &devWeight{name: tn.Name, typ: tn.Type, dims: tn.Dims, rowLen: tn.Dims[0], rows: tn.Rows(), ptr: driver.DevicePtr(0x100000 * (i + 1))}
		if !tn.Matrix() {
			w.typ, w.vector = quant.F32, true
		} else if b.repackWanted(tn.Type) && !tn.Gathered {
			w.rp = w.ptr + 0x80000
		}
		b.weights[tn.Name] = w
	}
	if h.Arch != model.Qwen2 {
		t.Fatalf("%s: a qwen2 shape, please", shape)
	}
	g, err := qwen2.Build(model.GraphParams(h, 1, 256, false, kv.F16, lv))
	if err != nil {
		t.Fatal(err)
	}
	bes := []graph.Backend{be(b)}
	if err := graph.Assign(g, bes); err != nil {
		t.Fatal(err)
	}
	if _, err := graph.Fuse(g, bes); err != nil {
		t.Fatal(err)
	}
	return g, b
}

// planBackend places every op and asks the CUDA backend about fusions
// (the fuse pass calls nothing else).
type planBackend struct {
	graph.Backend
	b *Backend
}

func (planBackend) Name() string                 { return "cuda-plan" }
func (planBackend) SupportsOp(*graph.Node) error { return nil }
func (p planBackend) SupportsFused(k graph.FuseKind, chain ...*graph.Node) bool {
	return p.b.SupportsFused(k, chain...)
}

// TestFuseFFNQ8ResNormQ8_PlanFoldsEveryLayerOfTheRealTypeMixes: on the
// type mixes of qwen2-0.5b Q4_K_M (Q5_0 gate/up with Q4_K / repacked Q6_K
// down projections) and Q8_0, and of qwen2-7b Q4_K_M, the CUDA backend
// takes the composed fold on every layer at decode: an FFNMatMulAdd a
// layer, each reading the o-projection's normed row (Q8In), every down
// projection writing the next norm's row (the last one the output norm's,
// which FUSE_NORM_Q8 folded into the lm head), and the embedding gather
// layer 0's attn norm row; no norm is left a node. Against FFN_Q8 alone
// that is 2 x layers + 1 norm launches fewer, against RES_NORM_Q8 alone
// one a layer (the FFN's quantization). The launches a token are counted
// in TestFuseResNormQ8_PlanLaunchesATokenTheEdgesSaveThree; the device
// test counts them in the census.
func TestFuseFFNQ8ResNormQ8_PlanFoldsEveryLayerOfTheRealTypeMixes(t *testing.T) {
	base := []string{"MINFER_FUSE_NORM_Q8=1"}
	for _, c := range []struct{ shape, typ string }{{"qwen2-0.5b", "Q4_K_M"}, {"qwen2-0.5b", "Q8_0"}, {"qwen2-7b", "Q4_K_M"}} {
		sh, _ := synth.ShapeByName(c.shape)
		L := sh.NLayer
		for _, arm := range []struct {
			name           string
			env            []string
			ffn, producers int
		}{
			{"both", []string{"MINFER_FUSE_FFN_Q8=1", "MINFER_FUSE_RES_NORM_Q8=1"}, L, 2*L + 1},
			{"FFN_Q8 alone", []string{"MINFER_FUSE_FFN_Q8=1"}, L, 0},
			{"RES_NORM_Q8 alone", []string{"MINFER_FUSE_RES_NORM_Q8=1"}, 0, 2*L + 1},
		} {
			g := planFuse(t, c.shape, c.typ, append(append([]string{}, base...), arm.env...)...)
			var producers, q8in, ffnOut int
			for _, n := range g.Nodes {
				if n.OutNorm != "" {
					producers++
					if n.Op == graph.OpFFNMatMulAdd {
						ffnOut++
					}
				}
				if n.Q8In {
					q8in++
				}
			}
			wantFFNOut := 0
			if arm.ffn > 0 && arm.producers > 0 {
				wantFFNOut = L
			}
			got := fmt.Sprintf("%d FFNMatMulAdd (%d writing the next norm), %d producers, %d Q8In, %d norms",
				g.Count(graph.OpFFNMatMulAdd), ffnOut, producers, q8in, g.Count(graph.OpRmsNorm))
			want := fmt.Sprintf("%d FFNMatMulAdd (%d writing the next norm), %d producers, %d Q8In, %d norms",
				arm.ffn, wantFFNOut, arm.producers, arm.producers, 0)
			if got != want {
				t.Errorf("%s %s %s: %s; want %s", c.shape, c.typ, arm.name, got, want)
			}
		}
	}
}
