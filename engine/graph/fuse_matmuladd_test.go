package graph_test

import (
	"slices"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model/qwen2"
)

// fused assigns and fuses g on the one backend be.
func fused(t *testing.T, g *graph.Graph, be graph.Backend) {
	t.Helper()
	bes := []graph.Backend{be}
	if err := graph.Assign(g, bes); err != nil {
		t.Fatal(err)
	}
	if _, err := graph.Fuse(g, bes); err != nil {
		t.Fatal(err)
	}
}

// residualFused compiles g on a backend offering every fusion and returns
// the names of its MatMulAdd nodes with the weights they carry.
func residualFused(t *testing.T, g *graph.Graph) []string {
	t.Helper()
	fused(t, g, yes{})
	var got []string
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in >= n.ID {
				t.Fatalf("node %s reads later node %d", n.Name, in)
			}
		}
		if n.Op == graph.OpMatMulAdd {
			got = append(got, n.Name+"="+n.Weight)
		}
	}
	return got
}

// TestFuseMatMulAdd_TwoResidualAddsPerLayerOnlyWithTheParam: a qwen2 graph
// with Params.FuseResidual (MINFER_FUSE_RESIDUAL) folds attn_output into
// attn_residual and ffn_down into ffn_residual in every layer, at decode
// and prefill shapes alike (the backend decides per chain, see the CUDA
// backend's SupportsFused); without the param, none.
func TestFuseMatMulAdd_TwoResidualAddsPerLayerOnlyWithTheParam(t *testing.T) {
	for _, nt := range []int{1, 4} {
		p := params(nt)
		p.FuseResidual = true
		g, err := qwen2.Build(p)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, l := range []string{"0", "1"} {
			want = append(want, "blk."+l+".attn_residual=blk."+l+".attn_output.weight", "blk."+l+".ffn_residual=blk."+l+".ffn_down.weight")
		}
		if got := residualFused(t, g); !slices.Equal(got, want) {
			t.Errorf("nt=%d: fused %v, want %v", nt, got, want)
		}
		if n := g.Count(graph.OpAdd); n != 0 {
			t.Errorf("nt=%d: %d adds left", nt, n)
		}
		g, _ = qwen2.Build(params(nt))
		if got := residualFused(t, g); len(got) != 0 {
			t.Errorf("nt=%d, param off: fused %v", nt, got)
		}
	}
}

// TestFuseMatMulAdd_RefusesSecondReaderSelfAddAndOutput: a matmul read
// again (directly or through a view), x + x of one matmul and a matmul that
// is the graph's output do not fold; an add that is not executed right after its matmul does (the
// rewrite, unlike a deferral in a backend, sees the whole graph), and so
// does the control pair.
func TestFuseMatMulAdd_RefusesSecondReaderSelfAddAndOutput(t *testing.T) {
	b := graph.NewBuilder(graph.Params{NT: 1, FuseResidual: true})
	tok := b.Input(graph.InputTokens, "tokens")
	x := b.GetRows("x", "emb", 8, tok)
	o1 := b.MatMul("o1", x, "w1", "", 8)
	a1 := b.Add("two_readers", x, o1)
	s1 := b.Scale("second_reader", o1, 2)
	o2 := b.MatMul("o2", a1, "w2", "", 8)
	v2 := b.View("o2_view", o2, graph.Sh(8, 1), 0)
	a2 := b.Add("view_reader", s1, o2)
	s2 := b.Scale("reads_view", v2, 3)
	o3 := b.MatMul("o3", a2, "w3", "", 8)
	s3 := b.Scale("gap", s2, 0.5)
	a3 := b.Add("not_next", s3, o3)
	o4 := b.MatMul("o4", a3, "w4", "", 8)
	a4 := b.Add("self_add", o4, o4)
	o5 := b.MatMul("o5", a4, "w5", "", 8)
	a5 := b.Add("control", a4, o5)
	o6 := b.MatMul("o6", a5, "w6", "", 8)
	b.Add("reads_output", a5, o6)
	b.Output(o6)
	g, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if got := residualFused(t, g); !slices.Equal(got, []string{"not_next=w3", "control=w5"}) {
		t.Errorf("fused %v, want [not_next=w3 control=w5]:\n%s", got, g.Dump())
	}
}
