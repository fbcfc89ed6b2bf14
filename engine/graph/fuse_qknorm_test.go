package graph_test

import (
	"fmt"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model/qwen2"
	"github.com/minfer-go/minfer/engine/model/qwen3"
)

func qwen3Params(nt int) graph.Params {
	p := params(nt)
	p.Arch, p.QKNorm, p.QKVBias, p.TiedOutput = "qwen3", true, false, false
	p.FuseQKNorm = true
	return p
}

// except accepts every op and every fusion but one (the CPU's answer for
// FuseQkNormRopeStore).
type except struct {
	yes
	k graph.FuseKind
}

func (e except) SupportsFused(k graph.FuseKind, _ ...*graph.Node) bool { return k != e.k }

// qknFused builds qwen3 at nt, lets edit change it, assigns to be and fuses.
func qknFused(t *testing.T, nt int, be graph.Backend, edit func(g *graph.Graph)) *graph.Graph {
	t.Helper()
	g, err := qwen3.Build(qwen3Params(nt))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(g)
	}
	bes := []graph.Backend{be}
	if err := graph.Assign(g, bes); err != nil {
		t.Fatal(err)
	}
	if _, err := graph.Fuse(g, bes); err != nil {
		t.Fatal(err)
	}
	for _, nd := range g.Nodes {
		for _, in := range nd.Inputs {
			if in >= nd.ID {
				t.Fatalf("node %s reads later node %d", nd.Name, in)
			}
		}
	}
	return g
}

func qknNode(t *testing.T, g *graph.Graph, name string) *graph.Node {
	t.Helper()
	for _, n := range g.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s:\n%s", name, g.Dump())
	return nil
}

// qknCounts is the live count of the ops of the QKV tail.
func qknCounts(g *graph.Graph) [4]int {
	return [4]int{g.Count(graph.OpQkNorm), g.Count(graph.OpRope), g.Count(graph.OpKvcacheStore), g.Count(graph.OpQkvBiasRopeStore)}
}

// TestFuse_Qwen3QkNormRopeStoreIsOneNodePerLayerWithTheNormWeights: with
// FuseQkNormRopeStore offered, every qwen3 layer's q_norm, k_norm, two
// ropes and two KV stores become one OpQkvBiasRopeStore that carries both
// norm weights and the eps and reads the q and k projections' reshapes
// (decode and prefill shapes alike).
func TestFuse_Qwen3QkNormRopeStoreIsOneNodePerLayerWithTheNormWeights(t *testing.T) {
	p := qwen3Params(1)
	for _, nt := range []int{1, 5} {
		g := qknFused(t, nt, yes{}, nil)
		if c := qknCounts(g); c != [4]int{0, 0, 0, p.NLayer} {
			t.Fatalf("nt=%d: qk_norm, rope, kv_store, fused counts %v, want [0 0 0 %d]:\n%s", nt, c, p.NLayer, g.Dump())
		}
		for l := 0; l < p.NLayer; l++ {
			f := qknNode(t, g, fmt.Sprintf("blk.%d.qkv_norm_rope_store", l))
			want := []string{fmt.Sprintf("blk.%d.attn_q_norm.weight", l), fmt.Sprintf("blk.%d.attn_k_norm.weight", l)}
			if len(f.Weights) != 2 || f.Weights[0] != want[0] || f.Weights[1] != want[1] || f.P.Eps != p.RmsEps {
				t.Errorf("nt=%d layer %d: weights %v eps %g, want %v eps %g", nt, l, f.Weights, f.P.Eps, want, p.RmsEps)
			}
			if f.P.Layer != l || f.P.HeadDim != p.HeadDim || f.P.NHead != p.NHead || f.P.NHeadKV != p.NHeadKV || f.Shape != graph.Sh(p.HeadDim, p.NHead, nt) {
				t.Errorf("nt=%d layer %d: params %+v shape %v", nt, l, f.P, f.Shape)
			}
			for i, suf := range []string{"attn_q_heads", "attn_k_heads", "attn_v"} {
				if in := g.Nodes[f.Inputs[i]]; in.Name != fmt.Sprintf("blk.%d.%s", l, suf) {
					t.Errorf("nt=%d layer %d: input %d is %s, want blk.%d.%s", nt, l, i, in.Name, l, suf)
				}
			}
			for _, b := range f.Biases {
				if b != "" {
					t.Errorf("nt=%d layer %d: bias %q on a bias-less model", nt, l, b)
				}
			}
		}
	}
}

// TestFuse_Qwen3QkNormChainDoesNotFuseWhenItMustNot: a layer keeps its
// unfused chain (and the other layer still fuses) when the backend does
// not offer FuseQkNormRopeStore (the CPU), when the q norm's output has a
// second reader, when q and k norms differ in eps, or when only q is
// normed.
func TestFuse_Qwen3QkNormChainDoesNotFuseWhenItMustNot(t *testing.T) {
	p := qwen3Params(1)
	nl := p.NLayer
	g := qknFused(t, 1, except{k: graph.FuseQkNormRopeStore}, nil)
	if c := qknCounts(g); c != [4]int{2 * nl, 2 * nl, 2 * nl, 0} {
		t.Errorf("without FuseQkNormRopeStore: counts %v, want [%d %d %d 0]", c, 2*nl, 2*nl, 2*nl)
	}
	// Params.FuseQKNorm off (MINFER_FUSE_QKNORM=0) with every kind offered:
	// the same unfused tails.
	off, err := qwen3.Build(func() graph.Params { p := qwen3Params(1); p.FuseQKNorm = false; return p }())
	if err != nil {
		t.Fatal(err)
	}
	bes := []graph.Backend{yes{}}
	if err := graph.Assign(off, bes); err != nil {
		t.Fatal(err)
	}
	if _, err := graph.Fuse(off, bes); err != nil {
		t.Fatal(err)
	}
	if c := qknCounts(off); c != [4]int{2 * nl, 2 * nl, 2 * nl, 0} {
		t.Errorf("Params.FuseQKNorm off: counts %v, want [%d %d %d 0]", c, 2*nl, 2*nl, 2*nl)
	}
	find := func(g *graph.Graph, name string) *graph.Node { return qknNode(t, g, name) }
	for _, c := range []struct {
		name string
		edit func(g *graph.Graph)
	}{
		{"q norm read twice", func(g *graph.Graph) {
			qn := find(g, "blk.0.attn_q_norm")
			g.Nodes = append(g.Nodes, &graph.Node{ID: len(g.Nodes), Op: graph.OpScale, Inputs: []int{qn.ID}, Shape: qn.Shape,
				P: graph.OpParams{Scale: 2}, Name: "blk.0.extra_reader", Slot: -1, Alias: -1})
		}},
		{"k norm read twice", func(g *graph.Graph) {
			kn := find(g, "blk.0.attn_k_norm")
			g.Nodes = append(g.Nodes, &graph.Node{ID: len(g.Nodes), Op: graph.OpScale, Inputs: []int{kn.ID}, Shape: kn.Shape,
				P: graph.OpParams{Scale: 2}, Name: "blk.0.extra_reader", Slot: -1, Alias: -1})
		}},
		{"eps differs", func(g *graph.Graph) { find(g, "blk.0.attn_k_norm").P.Eps = 1e-5 }},
		{"only q normed", func(g *graph.Graph) {
			kn, rk := find(g, "blk.0.attn_k_norm"), find(g, "blk.0.attn_k_rope")
			rk.Inputs[0] = kn.Inputs[0]
		}},
	} {
		g := qknFused(t, 1, yes{}, c.edit)
		fused := g.Count(graph.OpQkvBiasRopeStore)
		ropes, stores := g.Count(graph.OpRope), g.Count(graph.OpKvcacheStore)
		if fused != nl-1 || ropes != 2 || stores != 2 {
			t.Errorf("%s: %d fused nodes, %d ropes, %d KV stores; want layer 0 unfused: %d, 2, 2:\n%s", c.name, fused, ropes, stores, nl-1, g.Dump())
		}
		for _, n := range g.Nodes {
			if n.Op == graph.OpQkvBiasRopeStore && n.P.Layer == 0 {
				t.Errorf("%s: layer 0 fused: %s", c.name, n)
			}
		}
	}
}

// TestFuse_Qwen2GraphsUnchangedByTheQkNormFusion: qwen2 has no q/k norm, so
// whether FuseQkNormRopeStore is offered changes nothing: the same fused
// graph node for node, and its QKV tails carry no norm weights.
func TestFuse_Qwen2GraphsUnchangedByTheQkNormFusion(t *testing.T) {
	for _, nt := range []int{1, 4} {
		build := func(be graph.Backend) *graph.Graph {
			g, err := qwen2.Build(params(nt))
			if err != nil {
				t.Fatal(err)
			}
			bes := []graph.Backend{be}
			if err := graph.Assign(g, bes); err != nil {
				t.Fatal(err)
			}
			if _, err := graph.Fuse(g, bes); err != nil {
				t.Fatal(err)
			}
			return g
		}
		with, without := build(yes{}), build(except{k: graph.FuseQkNormRopeStore})
		if with.Dump() != without.Dump() {
			t.Errorf("nt=%d: qwen2 graphs differ with FuseQkNormRopeStore offered:\n%s\nvs\n%s", nt, with.Dump(), without.Dump())
		}
		if n := with.Count(graph.OpQkvBiasRopeStore); n != params(nt).NLayer {
			t.Errorf("nt=%d: %d fused QKV tails, want %d", nt, n, params(nt).NLayer)
		}
		for _, n := range with.Nodes {
			if n.Op == graph.OpQkvBiasRopeStore && (len(n.Weights) != 0 || n.P.Eps != 0) {
				t.Errorf("nt=%d: %s carries norm weights %v eps %g", nt, n.Name, n.Weights, n.P.Eps)
			}
		}
	}
}
