// Package qwen2 builds the compute graph of a Qwen2 model, and holds the
// decoder qwen3 shares:
//
//	embed -> N x [ rms_norm -> q,k,v (+bias) (-> q_norm,k_norm) -> rope
//	               -> kv store -> attn (GQA) -> attn_output -> +residual
//	               -> rms_norm -> gate, up -> swiglu -> down -> +residual ]
//	      -> output_norm -> output (token_embd when tied)
package qwen2

import (
	"fmt"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model/arch"
)

// The decoder's tensors. Each architecture's table lists the ones it has;
// the builder reads these and nothing else.
var (
	TokenEmbd  = global("token_embd.weight", "model.embed_tokens.weight", arch.Embedding, 0, arch.Embd, arch.Vocab)
	AttnNorm   = layer("attn_norm.weight", "input_layernorm.weight", arch.Norm, 0, arch.Embd)
	AttnQ      = layer("attn_q.weight", "self_attn.q_proj.weight", arch.Matrix, 0, arch.Embd, arch.NQ)
	AttnQBias  = layer("attn_q.bias", "self_attn.q_proj.bias", arch.Bias, arch.QKVBias, arch.NQ)
	AttnK      = layer("attn_k.weight", "self_attn.k_proj.weight", arch.Matrix, 0, arch.Embd, arch.NKV)
	AttnKBias  = layer("attn_k.bias", "self_attn.k_proj.bias", arch.Bias, arch.QKVBias, arch.NKV)
	AttnV      = layer("attn_v.weight", "self_attn.v_proj.weight", arch.Matrix, 0, arch.Embd, arch.NKV)
	AttnVBias  = layer("attn_v.bias", "self_attn.v_proj.bias", arch.Bias, arch.QKVBias, arch.NKV)
	AttnQNorm  = layer("attn_q_norm.weight", "self_attn.q_norm.weight", arch.Norm, arch.QKNorm, arch.HeadDim)
	AttnKNorm  = layer("attn_k_norm.weight", "self_attn.k_norm.weight", arch.Norm, arch.QKNorm, arch.HeadDim)
	AttnOutput = layer("attn_output.weight", "self_attn.o_proj.weight", arch.Matrix, 0, arch.NQ, arch.Embd)
	FFNNorm    = layer("ffn_norm.weight", "post_attention_layernorm.weight", arch.Norm, 0, arch.Embd)
	FFNGate    = layer("ffn_gate.weight", "mlp.gate_proj.weight", arch.Matrix, 0, arch.Embd, arch.FF)
	FFNUp      = layer("ffn_up.weight", "mlp.up_proj.weight", arch.Matrix, 0, arch.Embd, arch.FF)
	FFNDown    = layer("ffn_down.weight", "mlp.down_proj.weight", arch.Matrix, 0, arch.FF, arch.Embd)
	OutputNorm = global("output_norm.weight", "model.norm.weight", arch.OutputNorm, 0, arch.Embd)
	Output     = global("output.weight", "lm_head.weight", arch.Output, arch.Untied, arch.Embd, arch.Vocab)
)

// Tensors is the table of both architectures: a file's tensors tell which
// options it has (the q/k/v biases, the q/k norms, an untied output), and
// the loader checks and registers whatever it has, even an option the
// architecture's graph leaves unread.
var Tensors = []*arch.Tensor{
	TokenEmbd,
	AttnNorm, AttnQ, AttnQBias, AttnK, AttnKBias, AttnV, AttnVBias, AttnQNorm, AttnKNorm, AttnOutput,
	FFNNorm, FFNGate, FFNUp, FFNDown,
	OutputNorm, Output,
}

func global(name, hf string, r arch.Role, f arch.Feature, dims ...arch.Dim) *arch.Tensor {
	return &arch.Tensor{Name: name, HF: hf, Role: r, If: f, Dims: dims}
}

func layer(name, hf string, r arch.Role, f arch.Feature, dims ...arch.Dim) *arch.Tensor {
	t := global(name, hf, r, f, dims...)
	t.Layer = true
	return t
}

// Arch is qwen2: the decoder with the q/k/v biases the model has.
var Arch = &arch.Arch{Name: "qwen2", Tensors: Tensors}

func init() {
	Arch.Build = Build // set here: Build reads Arch
	arch.Register(Arch)
}

// Build returns the unfused graph of p (the fuse pass rewrites it later).
func Build(p graph.Params) (*graph.Graph, error) {
	return Decoder(Arch, Options{QKVBias: true}, p)
}

// Options are the optional parts of the block an architecture builds when
// the model has their tensors.
type Options struct {
	QKVBias bool // add the q, k, v biases
	QKNorm  bool // norm q and k per head before rope
}

// Decoder returns the unfused graph of p for architecture a, whose block
// has the options o.
func Decoder(a *arch.Arch, o Options, p graph.Params) (*graph.Graph, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", a.Name, err)
	}
	if a.Needs != 0 && !a.Needs.In(p) {
		return nil, fmt.Errorf("%s: the model has no %s", a.Name, a.Needs)
	}
	b := graph.NewBuilder(p)
	tokens := b.Input(graph.InputTokens, "tokens")
	pos := b.Input(graph.InputPositions, "positions")
	kvw := b.Input(graph.InputKVWindow, "kv_window")

	x := b.GetRows("token_embd", TokenEmbd.Name, p.NEmbd, tokens)
	for i := 0; i < p.NLayer; i++ {
		x = block(b, o, i, x, pos, kvw)
	}
	head(b, x)
	return b.Finish()
}

// block appends transformer layer i and returns the residual stream after it.
func block(b *graph.Builder, o Options, i int, x, pos, kvw int) int {
	p := b.Params()
	n := func(s string) string { return arch.Prefix(i) + s } // node names
	w := func(t *arch.Tensor) string { return t.At(i) }
	// opt names an optional tensor when the block has the option on and
	// the model has the tensor, else "" (no bias, no norm).
	opt := func(on bool, t *arch.Tensor) string {
		if !on || !t.If.In(p) {
			return ""
		}
		return t.At(i)
	}
	nt, style := p.NT, ropeStyle(p)

	// attention
	h := b.RmsNorm(n("attn_norm"), x, w(AttnNorm), p.RmsEps)
	q := b.MatMul(n("attn_q"), h, w(AttnQ), opt(o.QKVBias, AttnQBias), p.NQ())
	k := b.MatMul(n("attn_k"), h, w(AttnK), opt(o.QKVBias, AttnKBias), p.NKV())
	v := b.MatMul(n("attn_v"), h, w(AttnV), opt(o.QKVBias, AttnVBias), p.NKV())
	q = b.Reshape(n("attn_q_heads"), q, graph.Sh(p.HeadDim, p.NHead, nt))
	k = b.Reshape(n("attn_k_heads"), k, graph.Sh(p.HeadDim, p.NHeadKV, nt))
	if qn, kn := opt(o.QKNorm, AttnQNorm), opt(o.QKNorm, AttnKNorm); qn != "" {
		q = b.QkNorm(n("attn_q_norm"), q, qn, p.RmsEps)
		k = b.QkNorm(n("attn_k_norm"), k, kn, p.RmsEps)
	}
	q = b.Rope(n("attn_q_rope"), q, pos, p.RopeTheta, style)
	k = b.Rope(n("attn_k_rope"), k, pos, p.RopeTheta, style)
	sk := b.KvcacheStore(n("cache_k"), k, kvw, i, graph.SideK)
	sv := b.KvcacheStore(n("cache_v"), v, kvw, i, graph.SideV)
	a := b.Attn(n("attn"), q, kvw, i, p.NHeadKV, 0, sk, sv)
	out := b.MatMul(n("attn_output"), a, w(AttnOutput), "", p.NEmbd)
	x = b.Add(n("attn_residual"), x, out)

	// feed-forward
	h = b.RmsNorm(n("ffn_norm"), x, w(FFNNorm), p.RmsEps)
	g := b.MatMul(n("ffn_gate"), h, w(FFNGate), "", p.NFF)
	u := b.MatMul(n("ffn_up"), h, w(FFNUp), "", p.NFF)
	s := b.SwiGLU(n("ffn_swiglu"), g, u)
	d := b.MatMul(n("ffn_down"), s, w(FFNDown), "", p.NEmbd)
	return b.Add(n("ffn_residual"), x, d)
}

// head appends the final norm and the output projection (of the last token
// only unless p.AllLogits) and marks the logits as the output.
func head(b *graph.Builder, x int) {
	p := b.Params()
	if !p.AllLogits && p.NT > 1 {
		x = b.View("last_token", x, graph.Sh(p.NEmbd, 1), (p.NT-1)*p.NEmbd)
	}
	x = b.RmsNorm("output_norm", x, OutputNorm.Name, p.RmsEps)
	out := TokenEmbd.Name // tied
	if Output.If.In(p) {
		out = Output.Name
	}
	b.Output(b.MatMul("output", x, out, "", p.NVocab))
}

func ropeStyle(p graph.Params) graph.RopeStyle {
	if p.RopeNeox {
		return graph.RopeNeox
	}
	return graph.RopeInterleaved
}
