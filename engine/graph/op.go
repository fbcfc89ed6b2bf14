// Package graph is the declarative compute graph of minfer: ops and nodes, the
// builder, the passes (assign -> fuse -> alloc), the scheduler and the Backend
// interface a device implements.
//
// Topology is a pure function of Params: token ids, positions and the KV
// window are input data, never structure, so a device can capture a graph once
// and replay it for every decode step (key: Graph.UID and the split range).
package graph

import "fmt"

// Op is the kind of a node.
type Op int

// The ops. Shapes are [ne0, ne1, ne2, ne3] with ne0 innermost (contiguous).
const (
	// OpInput is data written by the engine before a run: token ids
	// (i32 [nt]), positions (i32 [nt]) or the KV window (i32 [2] = {start
	// cell, kv length}).
	OpInput Op = iota
	// OpGetRows gathers rows of a weight (the embedding) by i32 ids: in[0]
	// ids [nt] -> [rowLen, nt]. Any weight type.
	OpGetRows
	// OpRmsNorm: in[0] [n, ...] normalised per row, times weight [n].
	OpRmsNorm
	// OpQkNorm: per-head RMS norm: in[0] [hd, nh, nt] times weight [hd].
	OpQkNorm
	// OpMatMul: in[0] [k, nt] times weight [k, m] (+ bias [m]) -> [m, nt].
	// With Norm set (FuseNormQ8, a decode graph's lm head) in[0] is
	// RMS-normed by that weight first.
	OpMatMul
	// OpAdd, OpMul: element-wise; in[1] is the same shape or one row
	// broadcast over the rows of in[0].
	OpAdd
	OpMul
	// OpSilu: x * sigmoid(x).
	OpSilu
	// OpSwiGLU: silu(in[0]) * in[1].
	OpSwiGLU
	// OpRope: rotary embedding of in[0] [hd, nh, nt] at positions in[1].
	OpRope
	// OpAttn: causal GQA attention of q in[0] [hd, nh, nt] over the layer's
	// KV region; in[1] is the KV window input {start, kvLen}; the remaining
	// inputs are ordering dependencies (the KV stores). -> [hd*nh, nt].
	OpAttn
	// OpKvcacheStore writes in[0] [rowLen, nt] into the layer's K or V
	// region at cells start..start+nt-1 (in[1] the KV window). No output.
	OpKvcacheStore
	// OpKvcacheLoad reads cells [0, kvLen) of the layer's K or V region as
	// f32 [rowLen, NCtx] (rows beyond kvLen are left as they were).
	OpKvcacheLoad
	// OpView: a window of in[0] starting at element P.Offset (an alias, no copy).
	OpView
	// OpReshape: in[0] with another shape of the same size (an alias).
	OpReshape
	// OpPermute: a copy of in[0] with axes permuted: out axis i is in axis P.Perm[i].
	OpPermute
	// OpScale: in[0] * P.Scale.
	OpScale
	// OpSoftmax: softmax of each row of in[0] scaled by P.Scale (max-subtracted).
	OpSoftmax
	// OpFusedQKV: the q, k, v matmuls of one input: weights Weights[0..2],
	// biases Biases[0..2] (may be empty strings); the output holds q [nq, nt]
	// then k [nkv, nt] then v [nkv, nt], read through three views. With
	// Norm set (FuseNormQ8) in[0] is RMS-normed by that weight first.
	OpFusedQKV
	// OpQkvBiasRopeStore: in = q, k, v (bias-less matmul outputs), positions,
	// KV window; adds Biases[0..2], ropes q and k, stores k and v in the
	// layer's KV regions; the output is the roped q [hd, nh, nt]. With
	// Weights = {q norm, k norm} (qwen3, FuseQkNormRopeStore) q and k are
	// also RMS-normed per head (eps P.Eps) after the bias, before rope.
	OpQkvBiasRopeStore
	// OpFusedFFN: silu(x*gate) * (x*up) with Weights = {gate, up} -> [nff, nt];
	// with Norm set (FuseNormQ8) x is in[0] RMS-normed by that weight.
	OpFusedFFN
	// OpMatMulAdd: in[1] + (in[0] times Weight (+ Bias)): a matmul whose
	// only reader was an add of an operand of its shape (the residual),
	// folded into that add (FuseMatMulAdd). in[1] has the output's shape.
	OpMatMulAdd
	// OpAttnMatMulAdd: in[2] + (Attn(in[0], in[1]) times Weight (+ Bias)):
	// the attention (P: its params; in[3:] its ordering dependencies)
	// whose only reader was the o-projection's OpMatMulAdd, folded into
	// it (FuseAttnQ8). in[2] has the output's shape.
	OpAttnMatMulAdd
	// OpFusedQKVRopeStore: the decode FusedQKV of in[0] (Weights = {q, k,
	// v}; with Norm set, in[0] RMS-normed by that weight, eps P.Eps, first)
	// whose only reader was an OpQkvBiasRopeStore without norm weights,
	// folded into it (FuseQKVRopeStore): in[1] positions, in[2] the KV
	// window; adds Biases[0..2], ropes q and k, stores k and v in the
	// layer's KV regions (the rope/store's params); the output is the roped
	// q [hd, nh, nt]. The raw q/k/v rows are not an output.
	OpFusedQKVRopeStore
	numOps
)

var opNames = [...]string{
	"input", "get_rows", "rms_norm", "qk_norm", "mul_mat", "add", "mul", "silu", "swiglu",
	"rope", "attn", "kvcache_store", "kvcache_load", "view", "reshape", "permute", "scale",
	"softmax", "fused_qkv", "qkv_bias_rope_store", "fused_ffn", "mul_mat_add", "attn_mul_mat_add",
	"fused_qkv_rope_store",
}

func (o Op) String() string {
	if o >= 0 && o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// IsAlias reports whether the op reads its input's buffer in place
// (View, Reshape): such a node owns no buffer and is never executed.
func (o Op) IsAlias() bool { return o == OpView || o == OpReshape }

// InputKind says which engine data an OpInput node carries.
type InputKind int

// The input kinds.
const (
	InputTokens    InputKind = iota // i32 [nt] token ids
	InputPositions                  // i32 [nt] rope positions
	InputKVWindow                   // i32 [2] {start cell, kv length}
)

// RopeStyle is the pairing of rotary dimensions.
type RopeStyle int

// The rope styles.
const (
	// RopeNeox pairs (i, i+hd/2): the non-interleaved layout of Qwen.
	RopeNeox RopeStyle = iota
	// RopeInterleaved pairs (2i, 2i+1).
	RopeInterleaved
)

// KVSide selects the K or V region of a layer.
type KVSide int

// The KV sides.
const (
	SideK KVSide = iota
	SideV
)

// FuseKind names a fused rewrite a backend may support.
type FuseKind int

// The fused rewrites.
const (
	FuseQKV              FuseKind = iota // three matmuls of one input -> OpFusedQKV
	FuseQkvBiasRopeStore                 // bias + rope + KV store -> OpQkvBiasRopeStore
	FuseFFN                              // gate, up, swiglu -> OpFusedFFN
	// FuseQkNormRopeStore: bias + per-head q/k RMS norm + rope + KV store
	// -> OpQkvBiasRopeStore with the norm weights in Weights (qwen3).
	FuseQkNormRopeStore
	// FuseMatMulAdd: Add(MatMul(x), r) with the matmul read by the add
	// alone -> OpMatMulAdd (the residual adds of every layer).
	FuseMatMulAdd
	// FuseNormQ8: FusedQKV(RmsNorm(x)) or FusedFFN(RmsNorm(x)), or in a
	// decode graph MatMul(RmsNorm(x)) (the lm head), the norm read by that
	// node alone -> the node with Norm set (chain: norm, node). A
	// backend offers it where it can take the normed row straight to the
	// matmuls' quantized activation (the decode row: one launch, not two).
	FuseNormQ8
	// FuseAttnQ8: MatMulAdd(Attn(q), r), the attention read by the
	// o-projection alone -> OpAttnMatMulAdd (chain: attn, matmul-add). A
	// backend offers it where the attention can write the matmul's
	// quantized activation itself (the decode row: one launch fewer).
	FuseAttnQ8
	// FuseQKVRopeStore: QkvBiasRopeStore(views of FusedQKV(x)) in a decode
	// graph, without q/k norms, the FusedQKV read by the rope/store alone
	// -> OpFusedQKVRopeStore (chain: rope/store, fused QKV, its views and
	// reshapes). A backend offers it where the q/k/v matvec can rope and
	// store its own rows (the decode row: one launch fewer).
	FuseQKVRopeStore
)

func (k FuseKind) String() string {
	switch k {
	case FuseQKV:
		return "fused_qkv"
	case FuseQkvBiasRopeStore:
		return "qkv_bias_rope_store"
	case FuseFFN:
		return "fused_ffn"
	case FuseQkNormRopeStore:
		return "qkv_norm_rope_store"
	case FuseMatMulAdd:
		return "mul_mat_add"
	case FuseNormQ8:
		return "norm_q8"
	case FuseAttnQ8:
		return "attn_q8"
	case FuseQKVRopeStore:
		return "qkv_rope_store"
	}
	return fmt.Sprintf("fuse(%d)", int(k))
}

// OpParams are the scalar parameters of a node; each op reads the fields its
// comment names.
type OpParams struct {
	Input   InputKind // OpInput
	Eps     float32   // RmsNorm, QkNorm, QkvBiasRopeStore with norm weights, nodes with Norm
	Theta   float32   // Rope, QkvBiasRopeStore
	Rope    RopeStyle // Rope, QkvBiasRopeStore
	Layer   int       // Attn, AttnMatMulAdd, KvcacheStore, KvcacheLoad, QkvBiasRopeStore
	Side    KVSide    // KvcacheStore, KvcacheLoad
	NHead   int       // Attn, AttnMatMulAdd, QkvBiasRopeStore: query heads
	NHeadKV int       // Attn, AttnMatMulAdd, QkvBiasRopeStore: KV heads
	HeadDim int       // Attn, AttnMatMulAdd, QkvBiasRopeStore, Rope, QkNorm
	Window  int       // Attn, AttnMatMulAdd: attend to at most the last Window cells (0: all)
	Scale   float32   // Attn, AttnMatMulAdd (0: 1/sqrt(hd)), Scale, Softmax (0: 1)
	Offset  int       // View: element offset into the input
	Perm    [4]int    // Permute
}

// Shape is [ne0, ne1, ne2, ne3], ne0 innermost; unused axes are 1.
type Shape [4]int

// N is the number of elements.
func (s Shape) N() int { return s[0] * s[1] * s[2] * s[3] }

// Rows is the number of ne0-rows.
func (s Shape) Rows() int { return s[1] * s[2] * s[3] }

func (s Shape) String() string {
	return fmt.Sprintf("[%d %d %d %d]", s[0], s[1], s[2], s[3])
}

// Sh builds a Shape from up to four dims; missing ones are 1.
func Sh(dims ...int) Shape {
	s := Shape{1, 1, 1, 1}
	copy(s[:], dims)
	return s
}
