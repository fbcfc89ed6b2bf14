package graph_test

import (
	"slices"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model/qwen2"
	"github.com/minfer-go/minfer/engine/model/qwen3"
)

// qkvRopeFused compiles g on be and returns its FusedQKVRopeStore nodes
// and how many rope/store and fused QKV nodes are left.
func qkvRopeFused(t *testing.T, g *graph.Graph, be graph.Backend) (folded []*graph.Node, rs, qkv int) {
	t.Helper()
	fused(t, g, be)
	for _, n := range g.Nodes {
		if n.Op == graph.OpFusedQKVRopeStore {
			folded = append(folded, n)
		}
	}
	return folded, g.Count(graph.OpQkvBiasRopeStore), g.Count(graph.OpFusedQKV)
}

// TestFuseQKVRope_EveryLayerOnlyAtDecodeWithTheParamsAndTheBackend: a qwen2
// decode graph with Params.FuseQKVRope (MINFER_FUSE_QKV_ROPE) and the QKV
// fusion folds every layer's fused q/k/v into its rope/store: inputs the
// normed row (with FuseNormQ8 the un-normed one, the norm's weight and eps
// carried), positions and the KV window; the q/k/v weights, the biases,
// the rope/store's params and output; no view of a raw q/k/v row is left
// and the attention reads the folded node. Without the param, the QKV
// fusion, at nt 5, or where the backend declines, none; qwen3's rope/store
// with q/k norms is not a candidate.
func TestFuseQKVRope_EveryLayerOnlyAtDecodeWithTheParamsAndTheBackend(t *testing.T) {
	for _, normQ8 := range []bool{false, true} {
		p := params(1)
		p.FuseQKVRope, p.FuseNormQ8 = true, normQ8
		g, err := qwen2.Build(p)
		if err != nil {
			t.Fatal(err)
		}
		folded, rs, qkv := qkvRopeFused(t, g, yes{})
		if len(folded) != p.NLayer || rs != 0 || qkv != 0 || g.Count(graph.OpView) != 0 {
			t.Fatalf("norm_q8 %v: %d folded, %d rope/store, %d fused QKV, %d views left: want %d, 0, 0, 0:\n%s",
				normQ8, len(folded), rs, qkv, g.Count(graph.OpView), p.NLayer, g.Dump())
		}
		for _, n := range folded {
			l := n.Name[:len("blk.0.")]
			w := []string{l + "attn_q.weight", l + "attn_k.weight", l + "attn_v.weight"}
			b := []string{l + "attn_q.bias", l + "attn_k.bias", l + "attn_v.bias"}
			if !slices.Equal(n.Weights, w) || !slices.Equal(n.Biases, b) || n.Shape != graph.Sh(p.HeadDim, p.NHead, 1) ||
				n.P.Theta != p.RopeTheta || n.P.Rope != graph.RopeNeox || n.P.NHead != p.NHead || n.P.NHeadKV != p.NHeadKV ||
				n.P.HeadDim != p.HeadDim || n.Name != l+"attn_qkv_rope_store" {
				t.Errorf("%s: weights %v, biases %v, shape %s, params %+v", n.Name, n.Weights, n.Biases, n.Shape, n.P)
			}
			if len(n.Inputs) != 3 {
				t.Fatalf("%s: inputs %v, want x, positions, KV window", n.Name, n.Inputs)
			}
			x, pos, kvw := g.Nodes[n.Inputs[0]], g.Nodes[n.Inputs[1]], g.Nodes[n.Inputs[2]]
			wantNorm := ""
			if normQ8 {
				wantNorm = l + "attn_norm.weight"
			}
			if xIsNorm := x.Op == graph.OpRmsNorm; xIsNorm == normQ8 || n.Norm != wantNorm || (normQ8 && n.P.Eps != p.RmsEps) ||
				pos.Op != graph.OpInput || pos.P.Input != graph.InputPositions || kvw.Op != graph.OpInput || kvw.P.Input != graph.InputKVWindow {
				t.Errorf("%s reads %s (%s), %s, %s with norm %q eps %g: want the %s row, positions and the KV window",
					n.Name, x.Name, x.Op, pos.Name, kvw.Name, n.Norm, n.P.Eps, map[bool]string{false: "normed", true: "un-normed"}[normQ8])
			}
		}
		for _, a := range g.Nodes {
			if (a.Op == graph.OpAttn || a.Op == graph.OpAttnMatMulAdd) && g.Nodes[a.Inputs[0]].Op != graph.OpFusedQKVRopeStore {
				t.Errorf("%s reads q from %s (%s)", a.Name, g.Nodes[a.Inputs[0]].Name, g.Nodes[a.Inputs[0]].Op)
			}
		}
	}
	for _, c := range []struct {
		name                string
		nt                  int
		fuseQKV, param, yes bool
		rs, qkv             int
	}{
		{"param off", 1, true, false, true, 2, 2},
		{"QKV fusion off", 1, false, true, true, 0, 0},
		{"prefill of 5", 5, true, true, true, 2, 2},
		{"backend declines", 1, true, true, false, 2, 2},
	} {
		p := params(c.nt)
		p.FuseQKV, p.FuseQKVRope = c.fuseQKV, c.param
		g, err := qwen2.Build(p)
		if err != nil {
			t.Fatal(err)
		}
		var be graph.Backend = yes{}
		if !c.yes {
			be = except{k: graph.FuseQKVRopeStore}
		}
		if folded, rs, qkv := qkvRopeFused(t, g, be); len(folded) != 0 || rs != c.rs || qkv != c.qkv {
			t.Errorf("%s: %d folded, %d rope/store and %d fused QKV left, want 0, %d, %d", c.name, len(folded), rs, qkv, c.rs, c.qkv)
		}
	}
	p := qwen3Params(1)
	p.FuseQKVRope = true
	g, err := qwen3.Build(p)
	if err != nil {
		t.Fatal(err)
	}
	if folded, rs, qkv := qkvRopeFused(t, g, yes{}); len(folded) != 0 || rs != 2 || qkv != 2 {
		t.Errorf("qwen3 with q/k norms: %d folded, %d rope/store and %d fused QKV left, want 0, 2, 2", len(folded), rs, qkv)
	}
}

// TestFuseQKVRope_RefusesARawRowWithASecondReader: where another node reads
// layer 0's raw v row (or k's), the fused QKV stays (the folded node writes
// no raw row) and so does that layer's rope/store; layer 1 folds.
func TestFuseQKVRope_RefusesARawRowWithASecondReader(t *testing.T) {
	for _, raw := range []string{"blk.0.attn_v", "blk.0.attn_k"} {
		p := params(1)
		p.FuseQKVRope = true
		g, err := qwen2.Build(p)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(g.Nodes, func(n *graph.Node) bool { return n.Name == raw })
		if i < 0 {
			t.Fatalf("no node %s", raw)
		}
		m := g.Nodes[i]
		g.Nodes = append(g.Nodes, &graph.Node{ID: len(g.Nodes), Op: graph.OpScale, Inputs: []int{m.ID}, Shape: m.Shape,
			Name: "second_reader", P: graph.OpParams{Scale: 2}, Slot: -1, Alias: -1})
		folded, rs, qkv := qkvRopeFused(t, g, yes{})
		if len(folded) != 1 || folded[0].Name != "blk.1.attn_qkv_rope_store" || rs != 1 || qkv != 1 {
			names := []string{}
			for _, n := range folded {
				names = append(names, n.Name)
			}
			t.Errorf("%s read twice: folded %v, %d rope/store and %d fused QKV left, want [blk.1.attn_qkv_rope_store], 1, 1:\n%s",
				raw, names, rs, qkv, g.Dump())
		}
	}
}
