package graph_test

// FuseFFNQ8 and FuseResNormQ8 together (MINFER_FUSE_FFN_Q8 with
// MINFER_FUSE_RES_NORM_Q8): the down projection of an FFNMatMulAdd reads
// the FFN's Q8_1 row and, its output next read by a folded norm, writes
// that norm's Q8_1 row too (OutNorm), while its FFN reads the row the
// o-projection's last block wrote (Q8In, Norm its FFN's own).

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model/qwen2"
)

// TestFuseFFNQ8ResNormQ8_EveryDownProjectionReadsTheFFNRowAndWritesTheNextNorm:
// the qwen2 graph with both levers (and the residual, attention and norm
// fusions): every layer's FFN folds into its down projection
// (FFNMatMulAdd, gate/up weights, ffn_down, its ffn_norm in Norm) and
// reads the Q8_1 row the o-projection wrote (Q8In, the o-projection's
// OutNorm that ffn_norm); layer 0's down projection writes layer 1's
// attn_norm row (OutNorm) for the fused q/k/v (Q8In), the last layer's
// the output norm's for the lm head (Q8In), and the embedding gather
// layer 0's attn_norm row. Compacted, each Q8In node runs right after its
// producer: a decode layer launches q/k/v, bias/rope/store, attention +
// o-projection, FFN + down projection.
func TestFuseFFNQ8ResNormQ8_EveryDownProjectionReadsTheFFNRowAndWritesTheNextNorm(t *testing.T) {
	p := resNormParams(true, true, true, true)
	p.FuseFFNQ8 = true
	g, err := qwen2.Build(p)
	if err != nil {
		t.Fatal(err)
	}
	fused(t, g, yes{}) // Fuse ran checkQ8In
	prod, q8, norms := resNormFolds(t, g)
	slices.Sort(prod)
	slices.Sort(q8)
	wantProd := []string{"attn_mul_mat_add=blk.0.ffn_norm.weight", "attn_mul_mat_add=blk.1.ffn_norm.weight", "ffn_mul_mat_add=blk.1.attn_norm.weight",
		"ffn_mul_mat_add=output_norm.weight", "get_rows=blk.0.attn_norm.weight"}
	wantQ8 := []string{"blk.0.attn_qkv", "blk.0.ffn_residual", "blk.1.attn_qkv", "blk.1.ffn_residual", "output"}
	if !slices.Equal(prod, wantProd) || !slices.Equal(q8, wantQ8) || norms != 0 {
		t.Errorf("producers %v, Q8In %v, %d norms left; want %v, %v and 0:\n%s", prod, q8, norms, wantProd, wantQ8, g.Dump())
	}
	if n := g.Count(graph.OpFusedFFN) + g.Count(graph.OpMatMulAdd); n != 0 {
		t.Errorf("%d fused FFN / plain matmul-add nodes left, want every FFN folded into its down projection", n)
	}
	for _, n := range g.Nodes {
		if n.Op != graph.OpFFNMatMulAdd {
			continue
		}
		l := n.Name[:len("blk.0.")]
		wantOut := "output_norm.weight"
		if l == "blk.0." {
			wantOut = "blk.1.attn_norm.weight"
		}
		x := g.Nodes[n.Inputs[0]]
		if n.Norm != l+"ffn_norm.weight" || n.P.Eps != p.RmsEps || !n.Q8In || n.OutNorm != wantOut || n.Weight != l+"ffn_down.weight" ||
			!slices.Equal(n.Weights, []string{l + "ffn_gate.weight", l + "ffn_up.weight"}) || x.Op != graph.OpAttnMatMulAdd || n.Inputs[1] != x.ID {
			t.Errorf("%s: %s; want Norm %sffn_norm.weight, Q8In, OutNorm %q, gate/up and ffn_down, in[0] = in[1] = the o-projection", n.Name, n, l, wantOut)
		}
	}
	if got, want := launchOrder(g), []string{
		"blk.0.attn_qkv(q8in)", "blk.0.qkv_bias_rope_store", "blk.0.attn_residual(out)", "blk.0.ffn_residual(q8in,out)",
		"blk.1.attn_qkv(q8in)", "blk.1.qkv_bias_rope_store", "blk.1.attn_residual(out)", "blk.1.ffn_residual(q8in,out)",
	}; !slices.Equal(got, want) {
		t.Errorf("the layers launch %v, want %v", got, want)
	}
}

// launchOrder lists g's launching nodes of the layers (inputs, alias ops,
// the embedding, the output norm and the lm head left out), in order,
// marked: a norm of their own, Q8In, an OutNorm.
func launchOrder(g *graph.Graph) []string {
	var out []string
	for _, n := range g.Nodes {
		if n.Op == graph.OpInput || n.Op.IsAlias() || !strings.HasPrefix(n.Name, "blk.") {
			continue
		}
		var marks []string
		if n.Norm != "" && !n.Q8In {
			marks = append(marks, "norm")
		}
		if n.Q8In {
			marks = append(marks, "q8in")
		}
		if n.OutNorm != "" {
			marks = append(marks, "out")
		}
		s := n.Name
		if len(marks) > 0 {
			s += "(" + strings.Join(marks, ",") + ")"
		}
		out = append(out, s)
	}
	return out
}

// composedBuilder starts an FFN-only stack with every fusion the composed
// chain needs (rows of 8, n_ff 64).
func composedBuilder() (*graph.Builder, int) {
	b := graph.NewBuilder(graph.Params{NT: 1, FuseFFN: true, FuseResidual: true, FuseNormQ8: true, FuseFFNQ8: true, FuseResNormQ8: true, RmsEps: 1e-5})
	return b, b.GetRows("x", "emb", 8, b.Input(graph.InputTokens, "tokens"))
}

// normFFN appends layer l's norm of x and its gate/up/SwiGLU; down its
// down projection of s plus the residual r.
func normFFN(b *graph.Builder, l string, x int) (norm, s int) {
	norm = b.RmsNorm(l+".ffn_norm", x, l+".ffn_norm.weight", 1e-5)
	return norm, b.SwiGLU(l+".ffn_swiglu", b.MatMul(l+".ffn_gate", norm, l+".ffn_gate.weight", "", 64),
		b.MatMul(l+".ffn_up", norm, l+".ffn_up.weight", "", 64))
}

func down(b *graph.Builder, l string, s, r int) int {
	return b.Add(l+".ffn_residual", r, b.MatMul(l+".ffn_down", s, l+".ffn_down.weight", "", 8))
}

// foldSummary is one line a gather, matmul, matmul-add or fused node of g:
// op, then the layer of its norm (its own or Q8In's), Q8In, and the layer
// of its OutNorm.
func foldSummary(g *graph.Graph) []string {
	layer := func(w string) string { return strings.TrimSuffix(w, ".ffn_norm.weight") }
	var out []string
	for _, n := range g.Nodes {
		switch n.Op {
		case graph.OpGetRows, graph.OpMatMul, graph.OpFusedFFN, graph.OpMatMulAdd, graph.OpFFNMatMulAdd:
			out = append(out, fmt.Sprintf("%s %s norm=%s q8in=%v out=%s", n.Name, n.Op, layer(n.Norm), n.Q8In, layer(n.OutNorm)))
		}
	}
	return out
}

// offerBut is a backend offering every fusion but FuseResNormQ8 on a chain
// whose producer has op not.
type offerBut struct {
	yes
	not graph.Op
}

func (o offerBut) SupportsFused(k graph.FuseKind, chain ...*graph.Node) bool {
	return k != graph.FuseResNormQ8 || chain[0].Op != o.not
}

// TestFuseFFNQ8ResNormQ8_FoldsOnlyAChainOfOneReaderRightAfterItsProducer:
// FFN-only stacks with both levers. A chain of FFN layers composes (an
// FFNMatMulAdd reads the row of the one before and writes the next's; the
// first reads the embedding gather's), up to the output norm, folded into
// the lm head (a decode graph). It does not fold: into a producer
// whose next norm has a second reader (FuseNormQ8 left it a node), through
// an FFN with a second reader (FuseFFNQ8 leaves it: the plain FUSE_RES_NORM_Q8
// chain, FusedFFN then MatMulAdd, instead), for the second of two normed
// readers of one row (one OutNorm a producer), nor where the backend
// declines. A launch between a producer and its reader is an error from
// Fuse (checkQ8In), not a silent handoff over a reused scratch.
func TestFuseFFNQ8ResNormQ8_FoldsOnlyAChainOfOneReaderRightAfterItsProducer(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(b *graph.Builder, x int) int
		be    graph.Backend
		want  []string
	}{
		{"a chain up to the output norm", func(b *graph.Builder, x int) int {
			for _, l := range []string{"l0", "l1", "l2"} {
				_, s := normFFN(b, l, x)
				x = down(b, l, s, x)
			}
			return b.MatMul("lm", b.RmsNorm("output_norm", x, "output_norm.weight", 1e-5), "lm.weight", "", 8)
		}, yes{}, []string{
			"x get_rows norm= q8in=false out=l0",
			"l0.ffn_residual ffn_mul_mat_add norm=l0 q8in=true out=l1",
			"l1.ffn_residual ffn_mul_mat_add norm=l1 q8in=true out=l2",
			"l2.ffn_residual ffn_mul_mat_add norm=l2 q8in=true out=output_norm.weight",
			"lm mul_mat norm=output_norm.weight q8in=true out=",
		}},
		{"a next norm with a second reader", func(b *graph.Builder, x int) int {
			_, s := normFFN(b, "l0", x)
			x = down(b, "l0", s, x)
			n1, s := normFFN(b, "l1", x)
			side := b.MatMul("side", b.Scale("side_scale", n1, 2), "side.weight", "", 8)
			return b.Add("mix", down(b, "l1", s, x), side)
		}, yes{}, []string{
			"x get_rows norm= q8in=false out=l0",
			"l0.ffn_residual ffn_mul_mat_add norm=l0 q8in=true out=",
			"l1.ffn_residual ffn_mul_mat_add norm= q8in=false out=",
			"mix mul_mat_add norm= q8in=false out=", // the side matmul's residual fusion
		}},
		{"an FFN with a second reader", func(b *graph.Builder, x int) int {
			_, s := normFFN(b, "l0", x)
			x = down(b, "l0", s, x)
			_, s = normFFN(b, "l1", x)
			side := b.MatMul("side", b.Scale("side_scale", s, 2), "side.weight", "", 8)
			x = down(b, "l1", s, x)
			_, s = normFFN(b, "l2", x)
			return b.Add("mix", down(b, "l2", s, x), side)
		}, yes{}, []string{
			"x get_rows norm= q8in=false out=l0",
			"l0.ffn_residual ffn_mul_mat_add norm=l0 q8in=true out=l1",
			"l1.ffn_gate_up fused_ffn norm=l1 q8in=true out=",
			"l1.ffn_residual mul_mat_add norm= q8in=false out=l2",
			"l2.ffn_residual ffn_mul_mat_add norm=l2 q8in=true out=",
			"mix mul_mat_add norm= q8in=false out=",
		}},
		{"two normed readers of one row", func(b *graph.Builder, x int) int {
			_, s := normFFN(b, "l0", x)
			x = down(b, "l0", s, x)
			_, sa := normFFN(b, "l1a", x)
			xa := down(b, "l1a", sa, x)
			_, sb := normFFN(b, "l1b", x)
			return down(b, "l1b", sb, xa)
		}, yes{}, []string{
			"x get_rows norm= q8in=false out=l0",
			"l0.ffn_residual ffn_mul_mat_add norm=l0 q8in=true out=l1a",
			"l1a.ffn_residual ffn_mul_mat_add norm=l1a q8in=true out=",
			"l1b.ffn_residual ffn_mul_mat_add norm=l1b q8in=false out=",
		}},
		{"the backend declines an FFNMatMulAdd producer", func(b *graph.Builder, x int) int {
			for _, l := range []string{"l0", "l1"} {
				_, s := normFFN(b, l, x)
				x = down(b, l, s, x)
			}
			return x
		}, offerBut{not: graph.OpFFNMatMulAdd}, []string{
			"x get_rows norm= q8in=false out=l0",
			"l0.ffn_residual ffn_mul_mat_add norm=l0 q8in=true out=",
			"l1.ffn_residual ffn_mul_mat_add norm=l1 q8in=false out=",
		}},
	} {
		b, x := composedBuilder()
		b.Output(c.build(b, x))
		g, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		fused(t, g, c.be)
		if got := foldSummary(g); !slices.Equal(got, c.want) {
			t.Errorf("%s: folded\n\t%s\nwant\n\t%s\n%s", c.name, strings.Join(got, "\n\t"), strings.Join(c.want, "\n\t"), g.Dump())
		}
		resNormFolds(t, g) // each reader right after its producer
	}

	// A launch between the producer and its reader: the reader would find
	// the scratch overwritten.
	b, x := composedBuilder()
	_, s := normFFN(b, "l0", x)
	x = down(b, "l0", s, x)
	side := b.MatMul("side", b.Scale("side_scale", x, 2), "side.weight", "", 8)
	_, s = normFFN(b, "l1", x)
	b.Output(b.Add("mix", down(b, "l1", s, x), side))
	g, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	bes := []graph.Backend{yes{}}
	if err := graph.Assign(g, bes); err != nil {
		t.Fatal(err)
	}
	if _, err := graph.Fuse(g, bes); err == nil || !strings.Contains(err.Error(), "another node runs between them") {
		t.Errorf("a launch between l0's down projection and l1's FFN: Fuse %v, want checkQ8In's error", err)
	}
}
