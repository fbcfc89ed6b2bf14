// Package qwen2 builds the compute graph of a Qwen2 model:
//
//	embed -> N x [ rms_norm -> q,k,v (+bias) -> rope -> kv store -> attn (GQA)
//	               -> attn_output -> +residual
//	               -> rms_norm -> gate, up -> swiglu -> down -> +residual ]
//	      -> output_norm -> output (token_embd when tied)
package qwen2

import (
	"fmt"

	"github.com/minfer-go/minfer/engine/graph"
)

// Build returns the unfused graph of p (the fuse pass rewrites it later).
func Build(p graph.Params) (*graph.Graph, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("qwen2: %w", err)
	}
	b := graph.NewBuilder(p)
	tokens := b.Input(graph.InputTokens, "tokens")
	pos := b.Input(graph.InputPositions, "positions")
	kvw := b.Input(graph.InputKVWindow, "kv_window")

	x := b.GetRows("token_embd", "token_embd.weight", p.NEmbd, tokens)
	for i := 0; i < p.NLayer; i++ {
		x = Block(b, i, x, pos, kvw)
	}
	x = Head(b, x)
	return b.Finish()
}

// Block appends transformer layer i and returns the residual stream after it.
func Block(b *graph.Builder, i int, x, pos, kvw int) int {
	p := b.Params()
	n := fmt.Sprintf("blk.%d.", i)
	w := func(s string) string { return n + s }
	bias := func(s string) string {
		if !p.QKVBias {
			return ""
		}
		return n + s + ".bias"
	}
	qBias := bias("attn_q")
	if p.SkipQBias {
		qBias = "" // test seam skip_bias
	}
	nt := p.NT

	// attention
	h := b.RmsNorm(w("attn_norm"), x, w("attn_norm.weight"), p.RmsEps)
	q := b.MatMul(w("attn_q"), h, w("attn_q.weight"), qBias, p.NQ())
	k := b.MatMul(w("attn_k"), h, w("attn_k.weight"), bias("attn_k"), p.NKV())
	v := b.MatMul(w("attn_v"), h, w("attn_v.weight"), bias("attn_v"), p.NKV())
	q = b.Reshape(w("attn_q_heads"), q, graph.Sh(p.HeadDim, p.NHead, nt))
	k = b.Reshape(w("attn_k_heads"), k, graph.Sh(p.HeadDim, p.NHeadKV, nt))
	q = b.Rope(w("attn_q_rope"), q, pos, p.RopeTheta, ropeStyle(p))
	k = b.Rope(w("attn_k_rope"), k, pos, p.RopeTheta, ropeStyle(p))
	sk := b.KvcacheStore(w("cache_k"), k, kvw, i, graph.SideK)
	sv := b.KvcacheStore(w("cache_v"), v, kvw, i, graph.SideV)
	a := b.Attn(w("attn"), q, kvw, i, p.NHeadKV, 0, sk, sv)
	o := b.MatMul(w("attn_output"), a, w("attn_output.weight"), "", p.NEmbd)
	x = b.Add(w("attn_residual"), x, o)

	// feed-forward
	h = b.RmsNorm(w("ffn_norm"), x, w("ffn_norm.weight"), p.RmsEps)
	g := b.MatMul(w("ffn_gate"), h, w("ffn_gate.weight"), "", p.NFF)
	u := b.MatMul(w("ffn_up"), h, w("ffn_up.weight"), "", p.NFF)
	s := b.SwiGLU(w("ffn_swiglu"), g, u)
	d := b.MatMul(w("ffn_down"), s, w("ffn_down.weight"), "", p.NEmbd)
	return b.Add(w("ffn_residual"), x, d)
}

// Head appends the final norm and the output projection (of the last token
// only unless p.AllLogits) and marks the logits as the output.
func Head(b *graph.Builder, x int) int {
	p := b.Params()
	if !p.AllLogits && p.NT > 1 {
		x = b.View("last_token", x, graph.Sh(p.NEmbd, 1), (p.NT-1)*p.NEmbd)
	}
	x = b.RmsNorm("output_norm", x, "output_norm.weight", p.RmsEps)
	out := "output.weight"
	if p.TiedOutput {
		out = "token_embd.weight"
	}
	logits := b.MatMul("output", x, out, "", p.NVocab)
	b.Output(logits)
	return logits
}

func ropeStyle(p graph.Params) graph.RopeStyle {
	if p.RopeNeox {
		return graph.RopeNeox
	}
	return graph.RopeInterleaved
}
