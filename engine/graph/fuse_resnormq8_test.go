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
// fusions it builds on) every norm that FuseNormQ8 folded goes on into
// the node that wrote its row: layer 0's attn_norm into the embedding
// gather, layer 0's ffn_norm into its o-projection (AttnMatMulAdd), layer
// 1's attn_norm into layer 0's down projection (MatMulAdd), layer 1's
// ffn_norm into its o-projection, and the output norm (folded into the lm
// head at decode) into layer 1's down projection: no norm node is left.
// Each reader runs right after its producer (the Q8_1 scratch handoff).
func TestFuseResNormQ8_EveryNormAfterAResidualMatvecOnlyWithTheParamsAndTheBackend(t *testing.T) {
	want := []string{"attn_mul_mat_add=blk.0.ffn_norm.weight", "attn_mul_mat_add=blk.1.ffn_norm.weight", "get_rows=blk.0.attn_norm.weight",
		"mul_mat_add=blk.1.attn_norm.weight", "mul_mat_add=output_norm.weight"}
	wantQ8 := []string{"blk.0.attn_qkv", "blk.0.ffn_gate_up", "blk.1.attn_qkv", "blk.1.ffn_gate_up", "output"}
	prod, q8, norms := resNormFused(t, resNormParams(true, true, true, true), true)
	slices.Sort(prod)
	slices.Sort(q8)
	if !slices.Equal(prod, want) || !slices.Equal(q8, wantQ8) || norms != 0 {
		t.Errorf("producers %v, Q8In %v, %d norms left; want %v, %v and 0", prod, q8, norms, want, wantQ8)
	}
	// The o-projection folds as a plain MatMulAdd too (attention Q8 off).
	prod, _, _ = resNormFused(t, resNormParams(true, false, true, true), true)
	slices.Sort(prod)
	if want := []string{"get_rows=blk.0.attn_norm.weight", "mul_mat_add=blk.0.ffn_norm.weight", "mul_mat_add=blk.1.attn_norm.weight",
		"mul_mat_add=blk.1.ffn_norm.weight", "mul_mat_add=output_norm.weight"}; !slices.Equal(prod, want) {
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

// oneRowOffer offers FuseNormQ8 and FuseResNormQ8 on chains of one-row
// nodes only (as the CUDA backend: a decode row), every other fusion
// always.
type oneRowOffer struct{ yes }

func (oneRowOffer) SupportsFused(k graph.FuseKind, chain ...*graph.Node) bool {
	if k != graph.FuseNormQ8 && k != graph.FuseResNormQ8 {
		return true
	}
	for _, n := range chain {
		if n.Shape.Rows() != 1 {
			return false
		}
	}
	return true
}

// TestFuseResNormQ8_TheEdgesFoldOnlyOnTheDecodeRowOfTheirOneNormedReader:
// the embedding gather and the output norm fold only where a decode row
// runs them. A prefill graph of the qwen2 stack on a backend offering the
// one-row chains keeps every norm: the embedding's rows and the layers'
// are four, and the lm head's row (the last token's view), which such a
// backend would take, is not folded in a prefill graph, nor with every
// position's logits. An embedding whose norm another node reads too, and
// an output norm with a second reader, stay nodes: neither edge folds.
func TestFuseResNormQ8_TheEdgesFoldOnlyOnTheDecodeRowOfTheirOneNormedReader(t *testing.T) {
	for _, all := range []bool{false, true} {
		p := resNormParams(true, true, true, true)
		p.NT, p.AllLogits = 4, all
		g, err := qwen2.Build(p)
		if err != nil {
			t.Fatal(err)
		}
		fused(t, g, oneRowOffer{})
		prod, q8, norms := resNormFolds(t, g)
		if len(prod) != 0 || len(q8) != 0 || norms != 5 {
			t.Errorf("prefill (all logits %v): producers %v, Q8In %v, %d norms left; want none and 5:\n%s", all, prod, q8, norms, g.Dump())
		}
	}
	b := graph.NewBuilder(graph.Params{NT: 1, FuseQKV: true, FuseResidual: true, FuseNormQ8: true, FuseResNormQ8: true, RmsEps: 1e-5})
	x := b.GetRows("x", "emb", 8, b.Input(graph.InputTokens, "tokens"))
	n0 := b.RmsNorm("l0.attn_norm", x, "n0", 1e-5)
	b.MatMul("l0.attn_q", n0, "l0.attn_q.weight", "", 8)
	b.MatMul("l0.attn_k", n0, "l0.attn_k.weight", "", 8)
	v := b.MatMul("l0.attn_v", n0, "l0.attn_v.weight", "", 8)
	side := b.Scale("side", n0, 2) // a second reader of the embedding's norm
	r := b.Add("l0.residual", x, b.MatMul("l0.out", b.Add("mix", v, side), "l0.out.weight", "", 8))
	on := b.RmsNorm("output_norm", r, "output_norm.weight", 1e-5)
	b.Output(b.Add("logits_and_more", b.MatMul("output", on, "lm.weight", "", 8), b.Scale("side2", on, 3)))
	g, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	fused(t, g, oneRowOffer{})
	prod, q8, norms := resNormFolds(t, g)
	if len(prod) != 0 || len(q8) != 0 || norms != 2 {
		t.Errorf("norms with second readers: producers %v, Q8In %v, %d norms left; want none and 2:\n%s", prod, q8, norms, g.Dump())
	}
}

// TestFuseResNormQ8_OfferedTheMatVecAndItsReader: the backend is asked with
// the chain (matmul-add or gather, consumer), the consumer carrying its
// folded norm;
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
			producer := m.Op == graph.OpMatMulAdd || m.Op == graph.OpAttnMatMulAdd || m.Op == graph.OpFFNMatMulAdd || m.Op == graph.OpGetRows
			if len(chain) != 2 || !producer || c.Norm == "" || c.Inputs[0] != m.ID {
				t.Errorf("asked with %v", chain)
			}
		}})
		// The gather before layer 0, two o-projections, two down
		// projections (the last one's reader the lm head).
		if wantFFN := map[bool]int{false: 0, true: 4}[ffnQ8]; asked != 5 || ffn != wantFFN {
			t.Errorf("FuseFFNQ8 %v: asked %d times, %d about an FFNMatMulAdd; want 5 and %d", ffnQ8, asked, ffn, wantFFN)
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
