package graph_test

import (
	"slices"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model/qwen2"
)

type ffnQ8Offer struct {
	yes
	offer bool
}

func (o ffnQ8Offer) SupportsFused(k graph.FuseKind, _ ...*graph.Node) bool {
	return k != graph.FuseFFNQ8 || o.offer
}

// ffnQ8Fused compiles g on a backend that answers FuseFFNQ8 with offer
// (every other fusion yes) and returns its FFNMatMulAdd nodes as
// name=down weight, and how many FusedFFN nodes are left.
func ffnQ8Fused(t *testing.T, g *graph.Graph, offer bool) (folded []string, ffns int) {
	t.Helper()
	fused(t, g, ffnQ8Offer{offer: offer})
	for _, n := range g.Nodes {
		if n.Op == graph.OpFFNMatMulAdd {
			folded = append(folded, n.Name+"="+n.Weight)
		}
	}
	return folded, g.Count(graph.OpFusedFFN)
}

// TestFuseFFNQ8_EveryLayersFFNOnlyWithTheParamsAndTheBackend: a qwen2
// graph with Params.FuseFFNQ8 (MINFER_FUSE_FFN_Q8), the residual and the
// FFN fusions folds every layer's fused gate/up + SwiGLU into its down
// projection's matmul-add: inputs the normed row (with FuseNormQ8 the
// un-normed one and the norm's weight and eps) and the residual, weights
// gate and up, weight ffn_down. Without any of the three params, or where
// the backend does not offer it, none.
func TestFuseFFNQ8_EveryLayersFFNOnlyWithTheParamsAndTheBackend(t *testing.T) {
	for _, normQ8 := range []bool{false, true} {
		p := params(1)
		p.FuseResidual, p.FuseFFNQ8, p.FuseNormQ8 = true, true, normQ8
		g, err := qwen2.Build(p)
		if err != nil {
			t.Fatal(err)
		}
		got, ffns := ffnQ8Fused(t, g, true)
		slices.Sort(got)
		if !slices.Equal(got, []string{"blk.0.ffn_residual=blk.0.ffn_down.weight", "blk.1.ffn_residual=blk.1.ffn_down.weight"}) || ffns != 0 {
			t.Fatalf("norm_q8 %v: fused %v with %d fused FFN nodes left, want one a layer (ffn_down) and none:\n%s", normQ8, got, ffns, g.Dump())
		}
		for _, n := range g.Nodes {
			if n.Op != graph.OpFFNMatMulAdd {
				continue
			}
			l := n.Name[:len("blk.0.")]
			if !slices.Equal(n.Weights, []string{l + "ffn_gate.weight", l + "ffn_up.weight"}) || len(n.Inputs) != 2 || n.Bias != "" {
				t.Errorf("%s: weights %v, bias %q, inputs %v: want gate and up, no bias, the FFN's row and the residual", n.Name, n.Weights, n.Bias, n.Inputs)
				continue
			}
			x, r := g.Nodes[n.Inputs[0]], g.Nodes[n.Inputs[1]]
			wantNorm := ""
			if normQ8 {
				wantNorm = l + "ffn_norm.weight"
			}
			if n.Norm != wantNorm || (normQ8 && n.P.Eps != p.RmsEps) {
				t.Errorf("%s: norm %q eps %g, want %q (eps %g when folded)", n.Name, n.Norm, n.P.Eps, wantNorm, p.RmsEps)
			}
			if xIsNorm := x.Op == graph.OpRmsNorm; xIsNorm == normQ8 || x.Shape.N() != p.NEmbd || r.Shape != n.Shape {
				t.Errorf("%s reads %s (%s) and %s: want the %s row of %d and the residual", n.Name, x.Name, x.Op, r.Name,
					map[bool]string{false: "normed", true: "un-normed"}[normQ8], p.NEmbd)
			}
		}
	}
	for _, c := range []struct {
		name                      string
		resid, ffn, param, offers bool
	}{
		{"param off", true, true, false, true}, {"residual fusion off", false, true, true, true},
		{"FFN fusion off", true, false, true, true}, {"backend declines", true, true, true, false},
	} {
		p := params(1)
		p.FuseResidual, p.FuseFFN, p.FuseFFNQ8 = c.resid, c.ffn, c.param
		g, err := qwen2.Build(p)
		if err != nil {
			t.Fatal(err)
		}
		wantFFNs := 2
		if !c.ffn {
			wantFFNs = 0
		}
		if got, ffns := ffnQ8Fused(t, g, c.offers); len(got) != 0 || ffns != wantFFNs {
			t.Errorf("%s: fused %v, %d fused FFN nodes left, want none and %d", c.name, got, ffns, wantFFNs)
		}
	}
}

// TestFuseFFNQ8_RefusesAnFFNWithASecondReader: a fused FFN whose output
// another node reads too stays a node (the fused node writes no f32 row
// of it), and an FFN under a plain matmul (no residual) is not a
// candidate; the control chain folds.
func TestFuseFFNQ8_RefusesAnFFNWithASecondReader(t *testing.T) {
	b := graph.NewBuilder(graph.Params{NT: 1, FuseFFN: true, FuseResidual: true, FuseFFNQ8: true, RmsEps: 1e-5})
	tok := b.Input(graph.InputTokens, "tokens")
	x := b.GetRows("x", "emb", 8, tok)
	ffn := func(l string, in int) int {
		return b.SwiGLU(l+".ffn_swiglu", b.MatMul(l+".ffn_gate", in, l+".ffn_gate.weight", "", 64),
			b.MatMul(l+".ffn_up", in, l+".ffn_up.weight", "", 64))
	}
	s := ffn("shared", x)
	x1 := b.Add("shared.ffn_residual", x, b.MatMul("shared.ffn_down", s, "shared.ffn_down.weight", "", 8))
	second := b.MatMul("second_reader", b.Scale("second_scale", s, 2), "second.weight", "", 8)
	x1 = b.Add("mix", x1, second)
	c := ffn("control", x1)
	x2 := b.Add("control.ffn_residual", x1, b.MatMul("control.ffn_down", c, "control.ffn_down.weight", "", 8))
	pl := ffn("plain", x2)
	b.Output(b.MatMul("plain.ffn_down", pl, "plain.ffn_down.weight", "", 8))
	g, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	got, ffns := ffnQ8Fused(t, g, true)
	if !slices.Equal(got, []string{"control.ffn_residual=control.ffn_down.weight"}) || ffns != 2 {
		t.Errorf("fused %v with %d fused FFN nodes left, want [control.ffn_residual=control.ffn_down.weight] and 2:\n%s", got, ffns, g.Dump())
	}
}
