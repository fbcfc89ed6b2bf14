package cuda

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model/qwen2"
	"github.com/minfer-go/minfer/engine/quant"
)

// Host tests of the MINFER_FUSE_RESIDUAL plan rule (fuse_resid.go).

// residFusions allocates g (which sets Node.Readers) and walks its executed
// nodes as the backend sees them, one Execute each, with every matmul on a
// fusable path: it returns the names of the adds that the rule fuses into
// the matmul executed just before them.
func residFusions(t *testing.T, g *graph.Graph, on bool) []string {
	t.Helper()
	if _, err := graph.Alloc(g); err != nil {
		t.Fatal(err)
	}
	ten := func(id int) graph.Tensor { return graph.Tensor{Buf: graph.Buffer(id), Len: g.Nodes[id].Shape.N()} }
	var fused []string
	var pending *graph.Node
	for _, n := range g.Nodes {
		if n.Op == graph.OpInput || n.Op.IsAlias() {
			continue
		}
		if pending != nil {
			in := make([]graph.Tensor, len(n.Inputs))
			for i, id := range n.Inputs {
				in[i] = ten(id)
			}
			p := pending
			pending = nil
			if _, ok := residPair(p, ten(p.ID), n, in, ten(n.ID)); ok {
				fused = append(fused, n.Name)
				continue
			}
		}
		if n.Op == graph.OpMatMul && residEligible(on, n.Shape.Rows(), n.Readers, true) {
			pending = n
		}
	}
	return fused
}

func residQwen2(t *testing.T, nt, layers int) *graph.Graph {
	t.Helper()
	g, err := qwen2.Build(graph.Params{Arch: "qwen2", NVocab: 64, NEmbd: 32, NLayer: layers, NHead: 4, NHeadKV: 2, HeadDim: 8,
		NFF: 64, NCtx: 16, RopeTheta: 1e4, RmsEps: 1e-6, QKVBias: true, NT: nt})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestFuseResidualPlan_FusesTwoAddsPerLayerAtDecodeOnly: a qwen2 graph of
// 3 layers at nt = 1 with the lever on fuses exactly attn_output ->
// attn_residual and ffn_down -> ffn_residual of every layer (6 adds, the
// lm head is the output and no add reads it); with the lever off, or at
// nt = 4 (prefill), none.
func TestFuseResidualPlan_FusesTwoAddsPerLayerAtDecodeOnly(t *testing.T) {
	got := residFusions(t, residQwen2(t, 1, 3), true)
	var want []string
	for _, l := range []string{"0", "1", "2"} {
		want = append(want, "blk."+l+".attn_residual", "blk."+l+".ffn_residual")
	}
	if !slices.Equal(got, want) {
		t.Errorf("decode, lever on: fused %v, want %v", got, want)
	}
	if got := residFusions(t, residQwen2(t, 1, 3), false); len(got) != 0 {
		t.Errorf("decode, lever off: fused %v, want none", got)
	}
	if got := residFusions(t, residQwen2(t, 4, 3), true); len(got) != 0 {
		t.Errorf("prefill nt=4, lever on: fused %v, want none", got)
	}
}

// TestFuseResidualPlan_RefusesSecondReaderGapAndSelfAdd: a matmul whose
// output has a second reader (directly or through a view), one whose add
// is not the next executed node, and x + x of one matmul do not fuse; the
// control pair in the same graph does.
func TestFuseResidualPlan_RefusesSecondReaderGapAndSelfAdd(t *testing.T) {
	b := graph.NewBuilder(graph.Params{NT: 1})
	tok := b.Input(graph.InputTokens, "tokens")
	x := b.GetRows("x", "emb", 8, tok)
	o1 := b.MatMul("o1", x, "w1", "", 8)
	a1 := b.Add("two_readers", x, o1)
	s1 := b.Scale("second_reader", o1, 2) // o1 is read again after the add
	o2 := b.MatMul("o2", a1, "w2", "", 8)
	v2 := b.View("o2_view", o2, graph.Sh(8, 1), 0)
	a2 := b.Add("view_reader", s1, o2)
	s2 := b.Scale("reads_view", v2, 3)
	o3 := b.MatMul("o3", a2, "w3", "", 8)
	s3 := b.Scale("gap", s2, 0.5) // executed between o3 and its add
	a3 := b.Add("not_next", s3, o3)
	o4 := b.MatMul("o4", a3, "w4", "", 8)
	a4 := b.Add("self_add", o4, o4)
	o5 := b.MatMul("o5", a4, "w5", "", 8)
	a5 := b.Add("control", a4, o5)
	b.Output(a5)
	g, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if got := residFusions(t, g, true); !slices.Equal(got, []string{"control"}) {
		t.Errorf("fused %v, want only [control]", got)
	}
	if r := g.Nodes[o1].Readers; r != 2 {
		t.Errorf("o1 has %d readers, want 2 (the add and the scale)", r)
	}
	if r := g.Nodes[o5].Readers; r != 1 {
		t.Errorf("o5 has %d readers, want 1", r)
	}
	if r := g.Nodes[a5].Readers; r != 1 {
		t.Errorf("the output add has %d readers, want 1 (the host read)", r)
	}
}

// TestFuseResidualPlan_PairChecksShapesAndPointers: the add half refuses an
// operand or output of another length (a broadcast bias add), an input
// tensor that is not the matmul's output, and a residual that overlaps the
// output shifted; it accepts the residual being the output itself.
func TestFuseResidualPlan_PairChecksShapesAndPointers(t *testing.T) {
	mm := &graph.Node{ID: 5, Op: graph.OpMatMul, Shape: graph.Sh(8, 1), Readers: 1}
	mmOut := graph.Tensor{Buf: 1, Len: 8}
	add := &graph.Node{ID: 6, Op: graph.OpAdd, Inputs: []int{2, 5}, Shape: graph.Sh(8, 1)}
	x, out := graph.Tensor{Buf: 2, Len: 8}, graph.Tensor{Buf: 3, Len: 8}
	if r, ok := residPair(mm, mmOut, add, []graph.Tensor{x, mmOut}, out); !ok || r != 0 {
		t.Errorf("plain pair: residual %d ok %v, want 0 true", r, ok)
	}
	swapped := &graph.Node{ID: 6, Op: graph.OpAdd, Inputs: []int{5, 2}, Shape: graph.Sh(8, 1)}
	if r, ok := residPair(mm, mmOut, swapped, []graph.Tensor{mmOut, x}, out); !ok || r != 1 {
		t.Errorf("matmul first: residual %d ok %v, want 1 true", r, ok)
	}
	for what, c := range map[string]struct {
		in  []graph.Tensor
		out graph.Tensor
		mm  *graph.Node
	}{
		"short residual":      {[]graph.Tensor{{Buf: 2, Len: 4}, mmOut}, out, mm},
		"other output length": {[]graph.Tensor{x, mmOut}, graph.Tensor{Buf: 3, Len: 16}, mm},
		"not the mm output":   {[]graph.Tensor{x, {Buf: 1, Off: 8, Len: 8}}, out, mm},
		"two readers":         {[]graph.Tensor{x, mmOut}, out, &graph.Node{ID: 5, Op: graph.OpMatMul, Shape: graph.Sh(8, 1), Readers: 2}},
	} {
		if _, ok := residPair(c.mm, mmOut, add, c.in, c.out); ok {
			t.Errorf("%s: fused, want refused", what)
		}
	}
	mul := &graph.Node{ID: 6, Op: graph.OpMul, Inputs: []int{2, 5}, Shape: graph.Sh(8, 1)}
	if _, ok := residPair(mm, mmOut, mul, []graph.Tensor{x, mmOut}, out); ok {
		t.Error("a mul fused, want refused")
	}
	const p = driver.DevicePtr(1 << 20)
	for _, c := range []struct {
		res, out driver.DevicePtr
		want     bool
	}{{p, p, true}, {p, p + 32, true}, {p + 32, p, true}, {p, p + 4, false}, {p + 28, p, false}} {
		if got := residPtrsOK(c.res, c.out, 8); got != c.want {
			t.Errorf("residual %v, output %v (8 f32): ok %v, want %v", c.res, c.out, got, c.want)
		}
	}
	if residEligible(true, 2, 1, true) || residEligible(true, 1, 1, false) || !residEligible(true, 1, 1, true) {
		t.Error("residEligible: nt = 2 or a non-fusable path fused, or the decode mmvq case did not")
	}
}

// TestFuseResidualKernels_NamedInSource: every mmvq type's _res_ kernel
// name is defined by the kernel macros (mmvq.cu for all, mmvq_repack.cu for
// the repacked types).
func TestFuseResidualKernels_NamedInSource(t *testing.T) {
	for file, def := range map[string]string{"kernels/mmvq.cu": "minfer_mmvq_res_##name(",
		"kernels/mmvq_repack.cu": "minfer_mmvqr_res_##name("} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), def) {
			t.Errorf("%s does not define %s", file, def)
		}
	}
	for wt := range mmvqTable {
		if n := mmvqResKernel(wt); !strings.HasPrefix(n, "minfer_mmvq_res_") {
			t.Errorf("%s: residual kernel %q", wt, n)
		}
	}
	for _, wt := range []quant.Type{quant.Q8_0, quant.Q6_K} {
		if n := mmvqrResKernel(wt); n != "minfer_mmvqr_res_"+mmvqrTypes[wt] {
			t.Errorf("%s: repacked residual kernel %q", wt, n)
		}
	}
	if mmvqResKernel(quant.F16) != "" || mmvqrResKernel(quant.Q4_K) != "" {
		t.Error("a type without the kernel got a residual kernel name")
	}
}
