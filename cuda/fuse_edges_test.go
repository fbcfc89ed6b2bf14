package cuda

// Tests of the fold at the top edge of the layer stack (session 30):
// MINFER_FUSE_NORM_Q8 folds the output norm into the decode lm head's
// matmul (normQ8Route, opMatMul), and the launches of a decoded token the
// decode fusions leave, counted on the plan. The device test of the fold
// is FUSE_NORM_Q8's (fuse_normq8_test.go).

import (
	"fmt"
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

// TestFuseEdges_RouteOffersTheLMHeadOnlyOnADecodeRow: the backend offers
// FuseNormQ8 for the output norm before a one-row lm head on a decode
// MMVQ route (repacked Q8_0, GGUF Q6_K), not over two rows or an
// f32-activation weight (F16).
func TestFuseEdges_RouteOffersTheLMHeadOnlyOnADecodeRow(t *testing.T) {
	const n, vocab = 896, 1000
	mm := MatMulOptions{MMQ: true, MMVQNT: true, ActQ8: 0x3000, ActQ8Bytes: 1 << 20}
	ws := map[string]*devWeight{
		"norm":     {typ: quant.F32, rowLen: n, rows: 1, vector: true, ptr: 0x2000},
		"lm8r":     {typ: quant.Q8_0, rowLen: n, rows: vocab, ptr: 0x10000, rp: 0x80000},
		"lm6":      {typ: quant.Q6_K, rowLen: 1024, rows: vocab, ptr: 0x10000},
		"lm16":     {typ: quant.F16, rowLen: n, rows: vocab, ptr: 0x10000},
		"norm1024": {typ: quant.F32, rowLen: 1024, rows: 1, vector: true, ptr: 0x2000},
	}
	b := &Backend{mm: mm, weights: ws}
	onorm := func(rows, width int) *graph.Node {
		return &graph.Node{Op: graph.OpRmsNorm, Shape: graph.Sh(width, rows), Weight: "norm"}
	}
	lm := func(w string, rows int) *graph.Node {
		return &graph.Node{ID: 9, Op: graph.OpMatMul, Inputs: []int{7}, Weight: w, Shape: graph.Sh(vocab, rows)}
	}
	for _, c := range []struct {
		name    string
		norm, c *graph.Node
		want    bool
	}{
		{"repacked Q8_0 lm head", onorm(1, n), lm("lm8r", 1), true},
		{"GGUF Q6_K lm head", &graph.Node{Op: graph.OpRmsNorm, Shape: graph.Sh(1024, 1), Weight: "norm1024"}, lm("lm6", 1), true},
		{"two rows", onorm(2, n), lm("lm8r", 2), false},
		{"an f16 lm head (f32 activations)", onorm(1, n), lm("lm16", 1), false},
	} {
		if got := b.SupportsFused(graph.FuseNormQ8, c.norm, c.c); got != c.want {
			t.Errorf("FuseNormQ8 %s: SupportsFused %v, want %v", c.name, got, c.want)
		}
	}
}

// planLaunches counts the kernel launches of one decode step of g, fused
// on the plan backend b (planFuseOn), node by node as the op handlers
// issue them on the one-warp decode MMVQ routes: a gather, a norm, the
// q/k/v tail, an attention, a quantization (with a folded norm, the
// norm's), each matvec (a fused q/k/v's as qkvDecodePlan says) and the FFN
// kernel one each. A matmul off the decode routes fails the test (no
// model for it here).
func planLaunches(t *testing.T, b *Backend, g *graph.Graph) int {
	t.Helper()
	const row = 1 // the Q8_1 row's launch
	plans := func(names ...string) []matmulPlan {
		var ms []matmulPlan
		for _, w := range names {
			ms = append(ms, matmulPlan{w: b.weights[w]})
		}
		if !b.allDecode(1, ms) {
			t.Fatalf("weights %v: not all on a decode MMVQ route", names)
		}
		return ms
	}
	// rowOf: a fused node whose normed kernel norms the row itself
	// (MINFER_FUSE_NORM_MMVQ) has no row launch.
	rowOf := func(n *graph.Node) int {
		if name, _ := b.normMMVQNode(n, 1, plans(n.Weights...)); name != "" {
			return 0
		}
		return row
	}
	total := 0
	for _, n := range g.Nodes {
		switch n.Op {
		case graph.OpInput, graph.OpView, graph.OpReshape:
		case graph.OpFusedQKV:
			total += rowOf(n) + b.qkvDecodePlan(1, plans(n.Weights...)).matvecs()
		case graph.OpFusedQKVRopeStore:
			if name, _, _, why := b.qkvRopeLayout(plans(n.Weights...)); name == "" {
				t.Fatalf("%s: no fused rope/store launch: %s", n.Name, why)
			}
			total += rowOf(n) + 1 // the q/k/v matvec that ropes and stores
		case graph.OpFusedFFN:
			if same, _ := b.decodeGroup(1, plans(n.Weights...)); !same {
				t.Fatalf("%s: gate and up of two types", n.Name)
			}
			total += rowOf(n) + 1
		case graph.OpMatMul, graph.OpMatMulAdd:
			plans(n.Weight)
			total += row + 1
		case graph.OpAttnMatMulAdd:
			plans(n.Weight)
			total += 2 // the attention writes the Q8_1 row, the o-projection
		default:
			total++
		}
	}
	return total
}

// noLMHeadFold asks the plan backend about every fusion but the edge
// fold, which it declines as the backend did before it: the output norm
// into the lm head.
type noLMHeadFold struct{ planBackend }

func (e noLMHeadFold) SupportsFused(k graph.FuseKind, chain ...*graph.Node) bool {
	if k == graph.FuseNormQ8 && chain[1].Op == graph.OpMatMul {
		return false
	}
	return e.planBackend.SupportsFused(k, chain...)
}

// TestFusePlan_LaunchesATokenTheLMHeadFoldSavesOne: the launches of a
// decoded token on the real type mixes, counted on the plan (planLaunches)
// with the lm head fold and without it (noLMHeadFold). At the defaults
// (FUSE_NORM_Q8, MMVQ_QKV_MIXED and FUSE_ATTN_Q8 on) a layer is nine
// launches (the norm's Q8_1 row, q/k/v, their bias/rope/store, the
// attention, the o-projection, the FFN's norm row, the FFN, the
// quantization of its output, the down projection) and the edges three
// (the gather, the lm head's norm row and matvec): qwen2-0.5b Q4_K_M
// 24 x 9 + 3 = 219, qwen2-7b Q4_K_M 28 x 9 + 3 = 255; MMVQ_QKV_MIXED=0
// gives the 0.5b's mixed q/k/v one launch a matrix (+2 x 12 layers: 243).
// The lm head fold saves one everywhere FUSE_NORM_Q8 is on (the output
// norm and its quantization are one launch); with FUSE_NORM_Q8=0 nothing
// changes (268: two launches a layer and one a token more).
// FUSE_QKV_ROPE takes the bias/rope/store, one a layer (0.5b 219 -> 195,
// 7B 255 -> 227).
func TestFusePlan_LaunchesATokenTheLMHeadFoldSavesOne(t *testing.T) {
	all := []string{"MINFER_FUSE_NORM_Q8=1", "MINFER_MMVQ_QKV_MIXED=1"}
	for _, c := range []struct {
		shape, typ    string
		env           []string
		before, after int
	}{
		{"qwen2-0.5b", "Q4_K_M", all, 220, 219},
		{"qwen2-0.5b", "Q4_K_M", nil, 220, 219},
		{"qwen2-0.5b", "Q4_K_M", []string{"MINFER_MMVQ_QKV_MIXED=0"}, 244, 243},
		{"qwen2-0.5b", "Q4_K_M", []string{"MINFER_FUSE_NORM_Q8=0", "MINFER_MMVQ_QKV_MIXED=1"}, 268, 268},
		{"qwen2-0.5b", "Q8_0", all, 220, 219},
		{"qwen2-7b", "Q4_K_M", all, 256, 255},
		{"qwen2-7b", "Q4_K_M", nil, 256, 255},
		// MINFER_FUSE_QKV_ROPE: the rope/store goes into the q/k/v matvec,
		// one a layer (0.5b -24, 7B -28).
		{"qwen2-0.5b", "Q4_K_M", []string{"MINFER_FUSE_QKV_ROPE=1"}, 196, 195},
		{"qwen2-0.5b", "Q4_K_M", append([]string{"MINFER_FUSE_QKV_ROPE=1"}, all...), 196, 195},
		{"qwen2-0.5b", "Q8_0", append([]string{"MINFER_FUSE_QKV_ROPE=1"}, all...), 196, 195},
		{"qwen2-7b", "Q4_K_M", []string{"MINFER_FUSE_QKV_ROPE=1"}, 228, 227},
		{"qwen2-7b", "Q4_K_M", append([]string{"MINFER_FUSE_QKV_ROPE=1"}, all...), 228, 227},
		// MINFER_FUSE_NORM_MMVQ: the q/k/v and gate/up matvecs norm their
		// row themselves, two launches a layer fewer (0.5b -48: 195 -> 147
		// with the rope/store folded, 219 -> 171 without); the lm head keeps
		// its norm launch. The 7B's row of 3584 is declined (unchanged).
		{"qwen2-0.5b", "Q4_K_M", []string{"MINFER_FUSE_QKV_ROPE=1", "MINFER_FUSE_NORM_MMVQ=1"}, 148, 147},
		{"qwen2-0.5b", "Q4_K_M", []string{"MINFER_FUSE_NORM_MMVQ=1"}, 172, 171},
		{"qwen2-0.5b", "Q8_0", []string{"MINFER_FUSE_QKV_ROPE=1", "MINFER_FUSE_NORM_MMVQ=1"}, 148, 147},
		{"qwen2-7b", "Q4_K_M", []string{"MINFER_FUSE_QKV_ROPE=1", "MINFER_FUSE_NORM_MMVQ=1"}, 228, 227},
	} {
		name := fmt.Sprintf("%s %s %v", c.shape, c.typ, c.env)
		gb, bb := planFuseOn(t, c.shape, c.typ, func(b *Backend) graph.Backend { return noLMHeadFold{planBackend{b: b}} }, c.env...)
		ga, ba := planFuseOn(t, c.shape, c.typ, func(b *Backend) graph.Backend { return planBackend{b: b} }, c.env...)
		before, after := planLaunches(t, bb, gb), planLaunches(t, ba, ga)
		t.Logf("%s: %d launches a token without the lm head fold, %d with it", name, before, after)
		if before != c.before || after != c.after {
			t.Errorf("%s: %d -> %d launches a token, want %d -> %d", name, before, after, c.before, c.after)
		}
	}
}

// planFuseOn is the decode graph of a synthesized qwen2 shape and type (a
// mix such as Q4_K_M allowed; no file written) fused as the CUDA backend
// would decide under the levers env: a Backend with the plan's weights
// (types, dims, a repacked copy where registerWeight would make one; no
// device memory), from which be makes the backend the fuse pass asks;
// every op is placed on it. It returns the plan's CUDA backend too.
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
