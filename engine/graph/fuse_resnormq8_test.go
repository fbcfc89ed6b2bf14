package graph_test

import (
	"slices"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model/qwen2"
)

type resNormOffer struct {
	yes
	offer bool
}

func (o resNormOffer) SupportsFused(k graph.FuseKind, _ ...*graph.Node) bool {
	return k != graph.FuseResNormQ8 || o.offer
}

// resNormParams: the qwen2 test params with the residual, attention,
// norm and res-norm fusions as given.
func resNormParams(resid, attnQ8, normQ8, resNorm bool) graph.Params {
	p := params(1)
	p.FuseResidual, p.FuseAttnQ8, p.FuseNormQ8, p.FuseResNormQ8 = resid, attnQ8, normQ8, resNorm
	return p
}

// resNormFused compiles a qwen2 graph of p on a backend answering
// FuseResNormQ8 with offer, and returns its producers of a normed Q8_1 row
// as op=norm, its Q8In consumers by name, and how many RMS norms are left.
func resNormFused(t *testing.T, p graph.Params, offer bool) (producers, q8in []string, norms int) {
	t.Helper()
	g, err := qwen2.Build(p)
	if err != nil {
		t.Fatal(err)
	}
	fused(t, g, resNormOffer{offer: offer})
	return resNormFolds(t, g)
}

// resNormFolds returns g's producers of a normed Q8_1 row (nodes with an
// OutNorm) as op=norm, its Q8In readers by name and how many RMS norms
// are left, after checking that each producer's eps is the norm's and
// that its reader of that norm runs right after it.
func resNormFolds(t *testing.T, g *graph.Graph) (producers, q8in []string, norms int) {
	t.Helper()
	for i, n := range g.Nodes {
		if n.OutNorm != "" {
			if n.P.OutEps != g.Params.RmsEps {
				t.Errorf("%s: eps %g, want the norm's %g", n.Name, n.P.OutEps, g.Params.RmsEps)
			}
			producers = append(producers, n.Op.String()+"="+n.OutNorm)
			if i+1 >= len(g.Nodes) || !g.Nodes[i+1].Q8In || g.Nodes[i+1].Norm != n.OutNorm || g.Nodes[i+1].Inputs[0] != n.ID {
				t.Errorf("%s: the next node is not the Q8In reader of its row", n.Name)
			}
		}
		if n.Q8In {
			q8in = append(q8in, n.Name)
		}
	}
	return producers, q8in, g.Count(graph.OpRmsNorm)
}

// TestFuseResNormQ8_EveryNormAfterAResidualMatvecOnlyWithTheParamsAndTheBackend:
// with MINFER_FUSE_RES_NORM_Q8 (and the residual, attention and norm
// fusions it builds on) every norm that FuseNormQ8 folded and that reads a
// residual matvec's row goes on into that matvec: layer 0's ffn_norm into
// its o-projection (AttnMatMulAdd), layer 1's attn_norm into layer 0's down
// projection (MatMulAdd), layer 1's ffn_norm into its o-projection; the
// first layer's attn_norm (after the embedding) stays in the fused q/k/v
// and the output norm stays a node. Each reader runs right after its
// producer (the Q8_1 scratch handoff).
func TestFuseResNormQ8_EveryNormAfterAResidualMatvecOnlyWithTheParamsAndTheBackend(t *testing.T) {
	want := []string{"attn_mul_mat_add=blk.0.ffn_norm.weight", "attn_mul_mat_add=blk.1.ffn_norm.weight", "mul_mat_add=blk.1.attn_norm.weight"}
	wantQ8 := []string{"blk.0.ffn_gate_up", "blk.1.attn_qkv", "blk.1.ffn_gate_up"}
	prod, q8, norms := resNormFused(t, resNormParams(true, true, true, true), true)
	slices.Sort(prod)
	slices.Sort(q8)
	if !slices.Equal(prod, want) || !slices.Equal(q8, wantQ8) || norms != 1 {
		t.Errorf("producers %v, Q8In %v, %d norms left; want %v, %v and 1 (output_norm)", prod, q8, norms, want, wantQ8)
	}
	// The o-projection folds as a plain MatMulAdd too (attention Q8 off).
	prod, _, _ = resNormFused(t, resNormParams(true, false, true, true), true)
	slices.Sort(prod)
	if want := []string{"mul_mat_add=blk.0.ffn_norm.weight", "mul_mat_add=blk.1.attn_norm.weight", "mul_mat_add=blk.1.ffn_norm.weight"}; !slices.Equal(prod, want) {
		t.Errorf("attention Q8 off: producers %v, want %v", prod, want)
	}
	for _, c := range []struct {
		name  string
		p     graph.Params
		offer bool
	}{
		{"param off", resNormParams(true, true, true, false), true},
		{"norm Q8 off", resNormParams(true, true, false, true), true},
		{"residual off", resNormParams(false, true, true, true), true},
		{"backend declines", resNormParams(true, true, true, true), false},
	} {
		if prod, q8, _ := resNormFused(t, c.p, c.offer); len(prod) != 0 || len(q8) != 0 {
			t.Errorf("%s: producers %v, Q8In %v, want none", c.name, prod, q8)
		}
	}
}

// TestFuseResNormQ8_OfferedTheMatVecAndItsReader: the backend is asked with
// the chain (matmul-add, consumer), the consumer carrying its folded norm;
// with FuseFFNQ8 too, about the FFNMatMulAdd nodes as they will run (the
// FFN folded first).
func TestFuseResNormQ8_OfferedTheMatVecAndItsReader(t *testing.T) {
	for _, ffnQ8 := range []bool{false, true} {
		p := resNormParams(true, true, true, true)
		p.FuseFFNQ8 = ffnQ8
		g, err := qwen2.Build(p)
		if err != nil {
			t.Fatal(err)
		}
		var asked, ffn int
		fused(t, g, chainSpy{check: func(k graph.FuseKind, chain []*graph.Node) {
			if k != graph.FuseResNormQ8 {
				return
			}
			asked++
			m, c := chain[0], chain[1]
			if m.Op == graph.OpFFNMatMulAdd || c.Op == graph.OpFFNMatMulAdd {
				ffn++
			}
			if len(chain) != 2 || (m.Op != graph.OpMatMulAdd && m.Op != graph.OpAttnMatMulAdd && m.Op != graph.OpFFNMatMulAdd) || c.Norm == "" || c.Inputs[0] != m.ID {
				t.Errorf("asked with %v", chain)
			}
		}})
		if wantFFN := map[bool]int{false: 0, true: 3}[ffnQ8]; asked != 3 || ffn != wantFFN {
			t.Errorf("FuseFFNQ8 %v: asked %d times, %d about an FFNMatMulAdd; want 3 and %d", ffnQ8, asked, ffn, wantFFN)
		}
	}
}

type chainSpy struct {
	yes
	check func(graph.FuseKind, []*graph.Node)
}

func (s chainSpy) SupportsFused(k graph.FuseKind, chain ...*graph.Node) bool {
	s.check(k, chain)
	return true
}
