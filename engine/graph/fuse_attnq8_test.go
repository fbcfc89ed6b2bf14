package graph_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model/qwen2"
)

type attnQ8Offer struct {
	yes
	offer bool
}

func (o attnQ8Offer) SupportsFused(k graph.FuseKind, _ ...*graph.Node) bool {
	return k != graph.FuseAttnQ8 || o.offer
}

// attnQ8Fused compiles g on a backend that answers FuseAttnQ8 with offer
// (every other fusion yes) and returns its AttnMatMulAdd nodes as
// name=weight, and how many attention nodes are left.
func attnQ8Fused(t *testing.T, g *graph.Graph, offer bool) (folded []string, attns int) {
	t.Helper()
	fused(t, g, attnQ8Offer{offer: offer})
	for _, n := range g.Nodes {
		if n.Op == graph.OpAttnMatMulAdd {
			folded = append(folded, n.Name+"="+n.Weight)
		}
	}
	return folded, g.Count(graph.OpAttn)
}

// TestFuseAttnQ8_EveryLayersAttentionOnlyWithTheParamsAndTheBackend: a
// qwen2 graph with Params.FuseAttnQ8 (MINFER_FUSE_ATTN_Q8) and the residual
// fusion folds every layer's attention into its o-projection's matmul-add:
// inputs q, the KV window, the residual; the attention's params. Without
// either param, or where the backend does not offer it, none.
func TestFuseAttnQ8_EveryLayersAttentionOnlyWithTheParamsAndTheBackend(t *testing.T) {
	p := params(1)
	p.FuseResidual, p.FuseAttnQ8 = true, true
	g, err := qwen2.Build(p)
	if err != nil {
		t.Fatal(err)
	}
	got, attns := attnQ8Fused(t, g, true)
	slices.Sort(got)
	if len(got) != 2 || attns != 0 {
		t.Fatalf("fused %v with %d attention nodes left, want one a layer and none:\n%s", got, attns, g.Dump())
	}
	for i, w := range []string{"blk.0.attn_output.weight", "blk.1.attn_output.weight"} {
		if !strings.HasSuffix(got[i], "="+w) {
			t.Errorf("fused node %d carries %s, want weight %s", i, got[i], w)
		}
	}
	for i, n := range g.Nodes {
		if n.Op != graph.OpAttnMatMulAdd {
			continue
		}
		if n.P.NHead != p.NHead || n.P.NHeadKV != p.NHeadKV || n.P.HeadDim != p.HeadDim || len(n.Inputs) < 3 {
			t.Errorf("%s: params %+v, inputs %v: want the attention's heads and q, window, residual", n.Name, n.P, n.Inputs)
			continue
		}
		q, win, r := g.Nodes[n.Inputs[0]], g.Nodes[n.Inputs[1]], g.Nodes[n.Inputs[2]]
		if q.Op != graph.OpQkvBiasRopeStore || win.Op != graph.OpInput || win.P.Input != graph.InputKVWindow || r.Shape != n.Shape {
			t.Errorf("node %d %s reads %s, %s, %s: want the roped q, the KV window and the residual", i, n.Name, q.Op, win.Op, r.Name)
		}
	}
	for _, c := range []struct {
		name                 string
		resid, param, offers bool
	}{{"param off", true, false, true}, {"residual fusion off", false, true, true}, {"backend declines", true, true, false}} {
		p := params(1)
		p.FuseResidual, p.FuseAttnQ8 = c.resid, c.param
		g, _ := qwen2.Build(p)
		if got, attns := attnQ8Fused(t, g, c.offers); len(got) != 0 || attns != 2 {
			t.Errorf("%s: fused %v, %d attention nodes left, want none and 2", c.name, got, attns)
		}
	}
}
