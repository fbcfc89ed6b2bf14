package graph_test

import (
	"slices"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model/qwen2"
)

// normFused compiles g on backends that answer FuseNormQ8 with offer and
// every other fusion yes, and returns its nodes with a Norm as name=norm,
// and how many RMS norms are left.
func normFused(t *testing.T, g *graph.Graph, offer bool) (folded []string, norms int) {
	t.Helper()
	fused(t, g, normOffer{offer: offer})
	for _, n := range g.Nodes {
		if n.Norm != "" {
			if n.P.Eps != g.Params.RmsEps {
				t.Errorf("%s: eps %g, want the norm's %g", n.Name, n.P.Eps, g.Params.RmsEps)
			}
			folded = append(folded, n.Name+"="+n.Norm)
		}
	}
	return folded, g.Count(graph.OpRmsNorm)
}

type normOffer struct {
	yes
	offer bool
}

func (o normOffer) SupportsFused(k graph.FuseKind, _ ...*graph.Node) bool {
	return k != graph.FuseNormQ8 || o.offer
}

// TestFuseNormQ8_EveryLayersTwoNormsAndTheDecodeOutputNormOnlyWithTheParamAndTheBackend:
// a qwen2 decode graph with Params.FuseNormQ8 (MINFER_FUSE_NORM_Q8) folds
// attn_norm into the fused q/k/v and ffn_norm into the fused gate/up of
// every layer, and output_norm into the lm head's matmul; a prefill graph
// (the lm head reads the last token's row) keeps output_norm a node;
// without the param, or where the backend does not offer the fusion, none.
func TestFuseNormQ8_EveryLayersTwoNormsAndTheDecodeOutputNormOnlyWithTheParamAndTheBackend(t *testing.T) {
	var want []string
	for _, l := range []string{"0", "1"} {
		want = append(want, "blk."+l+".attn_qkv=blk."+l+".attn_norm.weight", "blk."+l+".ffn_gate_up=blk."+l+".ffn_norm.weight")
	}
	for _, c := range []struct {
		nt, norms int
		output    bool
	}{{1, 0, true}, {4, 1, false}} {
		p := params(c.nt)
		p.FuseNormQ8 = true
		g, err := qwen2.Build(p)
		if err != nil {
			t.Fatal(err)
		}
		w := slices.Clone(want)
		if c.output {
			w = append(w, "output=output_norm.weight")
		}
		got, norms := normFused(t, g, true)
		slices.Sort(got)
		if !slices.Equal(got, w) || norms != c.norms {
			t.Errorf("nt=%d: fused %v with %d norms left, want %v and %d", c.nt, got, norms, w, c.norms)
		}
	}
	for _, c := range []struct {
		name          string
		param, offers bool
	}{{"param off", false, true}, {"backend declines", true, false}} {
		p := params(1)
		p.FuseNormQ8 = c.param
		g, _ := qwen2.Build(p)
		if got, norms := normFused(t, g, c.offers); len(got) != 0 || norms != 5 {
			t.Errorf("%s: fused %v, %d norms left, want none and 5", c.name, got, norms)
		}
	}
}

// TestFuseNormQ8_RefusesANormWithASecondReader: a norm whose output another
// node reads too stays a node (the fused node does not write it); the
// control pair folds, and a plain matmul's norm folds at decode (one
// token: the lm head's form), not in a graph of more tokens.
func TestFuseNormQ8_RefusesANormWithASecondReader(t *testing.T) {
	for _, c := range []struct {
		nt    int
		want  []string
		norms int
	}{{1, []string{"c.attn_qkv=n2", "plain=n3"}, 1}, {2, []string{"c.attn_qkv=n2"}, 2}} {
		b := graph.NewBuilder(graph.Params{NT: c.nt, FuseQKV: true, FuseNormQ8: true, RmsEps: 1e-5})
		tok := b.Input(graph.InputTokens, "tokens")
		x := b.GetRows("x", "emb", 8, tok)
		n1 := b.RmsNorm("shared_norm", x, "n1", 1e-5)
		b.MatMul("a.attn_q", n1, "a.attn_q.weight", "", 8)
		b.MatMul("a.attn_k", n1, "a.attn_k.weight", "", 8)
		b.MatMul("a.attn_v", n1, "a.attn_v.weight", "", 8)
		s := b.Scale("second_reader", n1, 2)
		n2 := b.RmsNorm("control_norm", s, "n2", 1e-5)
		b.MatMul("c.attn_q", n2, "c.attn_q.weight", "", 8)
		b.MatMul("c.attn_k", n2, "c.attn_k.weight", "", 8)
		v := b.MatMul("c.attn_v", n2, "c.attn_v.weight", "", 8)
		n3 := b.RmsNorm("plain_norm", v, "n3", 1e-5)
		b.Output(b.MatMul("plain", n3, "w", "", 8))
		g, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		got, norms := normFused(t, g, true)
		if !slices.Equal(got, c.want) || norms != c.norms {
			t.Errorf("nt=%d: fused %v with %d norms left, want %v and %d:\n%s", c.nt, got, norms, c.want, c.norms, g.Dump())
		}
	}
}
