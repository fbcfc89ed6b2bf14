// Package qwen3 builds the compute graph of a Qwen3 model: Qwen2's layout
// without q/k/v biases, with a per-head RMS norm of q and k before rope and
// the head dimension taken from the metadata (key_length):
//
//	embed -> N x [ rms_norm -> q,k,v -> q_norm,k_norm -> rope -> kv store
//	               -> attn (GQA) -> attn_output -> +residual
//	               -> rms_norm -> gate, up -> swiglu -> down -> +residual ]
//	      -> output_norm -> output (token_embd when tied)
package qwen3

import (
	"fmt"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model/qwen2"
)

// Build returns the unfused graph of p (the fuse pass rewrites it later).
func Build(p graph.Params) (*graph.Graph, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("qwen3: %w", err)
	}
	if !p.QKNorm {
		return nil, fmt.Errorf("qwen3: the model has no q/k norms")
	}
	b := graph.NewBuilder(p)
	tokens := b.Input(graph.InputTokens, "tokens")
	pos := b.Input(graph.InputPositions, "positions")
	kvw := b.Input(graph.InputKVWindow, "kv_window")

	x := b.GetRows("token_embd", "token_embd.weight", p.NEmbd, tokens)
	for i := 0; i < p.NLayer; i++ {
		x = Block(b, i, x, pos, kvw)
	}
	qwen2.Head(b, x)
	return b.Finish()
}

// Block appends transformer layer i and returns the residual stream after it.
func Block(b *graph.Builder, i int, x, pos, kvw int) int {
	p := b.Params()
	n := fmt.Sprintf("blk.%d.", i)
	w := func(s string) string { return n + s }
	nt := p.NT
	style := graph.RopeNeox
	if !p.RopeNeox {
		style = graph.RopeInterleaved
	}

	// attention
	h := b.RmsNorm(w("attn_norm"), x, w("attn_norm.weight"), p.RmsEps)
	q := b.MatMul(w("attn_q"), h, w("attn_q.weight"), "", p.NQ())
	k := b.MatMul(w("attn_k"), h, w("attn_k.weight"), "", p.NKV())
	v := b.MatMul(w("attn_v"), h, w("attn_v.weight"), "", p.NKV())
	q = b.Reshape(w("attn_q_heads"), q, graph.Sh(p.HeadDim, p.NHead, nt))
	k = b.Reshape(w("attn_k_heads"), k, graph.Sh(p.HeadDim, p.NHeadKV, nt))
	q = b.QkNorm(w("attn_q_norm"), q, w("attn_q_norm.weight"), p.RmsEps)
	k = b.QkNorm(w("attn_k_norm"), k, w("attn_k_norm.weight"), p.RmsEps)
	q = b.Rope(w("attn_q_rope"), q, pos, p.RopeTheta, style)
	k = b.Rope(w("attn_k_rope"), k, pos, p.RopeTheta, style)
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
