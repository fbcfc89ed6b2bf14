// Package model holds what the architectures share: the hyper-parameters
// read from GGUF metadata and the check that a file carries every tensor
// its architecture's table lists, at the right shape and a usable type.
package model

import (
	"errors"
	"fmt"
	"slices"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model/arch"
	"github.com/minfer-go/minfer/engine/quant"
)

// Arch is a GGUF general.architecture value minfer runs.
type Arch string

// The architectures minfer runs.
const (
	Qwen2 Arch = "qwen2"
	Qwen3 Arch = "qwen3"
)

// Archs lists the supported architectures: those registered in engine/model/arch.
func Archs() []Arch {
	var out []Arch
	for _, n := range arch.Names() {
		out = append(out, Arch(n))
	}
	return out
}

// HParams are the hyper-parameters of a Qwen2/Qwen3 model.
type HParams struct {
	Arch      Arch
	Name      string // general.name, may be empty
	NVocab    int    // rows of token_embd.weight
	NCtxTrain int    // <arch>.context_length
	NEmbd     int    // <arch>.embedding_length
	NLayer    int    // <arch>.block_count
	NHead     int    // <arch>.attention.head_count
	NHeadKV   int    // <arch>.attention.head_count_kv
	HeadDim   int    // <arch>.attention.key_length, default NEmbd/NHead
	NFF       int    // <arch>.feed_forward_length
	RopeTheta float32
	RmsEps    float32
	RopeNeox  bool // rotary pairs are (i, i+HeadDim/2): true for both Qwen archs
	QKNorm    bool // per-head RMS norm of q and k (blk.N.attn_q_norm.weight)
	QKVBias   bool // q, k, v projections carry biases (blk.N.attn_q.bias)
	// TiedOutput: no output.weight; the logits use token_embd.weight.
	TiedOutput bool
}

// NQ is the width of the query projection (NHead*HeadDim).
func (h HParams) NQ() int { return h.NHead * h.HeadDim }

// NKV is the width of the key and value projections (NHeadKV*HeadDim).
func (h HParams) NKV() int { return h.NHeadKV * h.HeadDim }

// maxDim bounds every dimension so products of two stay far from overflow.
const maxDim = 1 << 24

// ReadHParams reads the hyper-parameters of f and checks that every tensor
// the architecture needs is present with the right shape and a supported
// weight type. Each failure names the key or tensor and the reason.
func ReadHParams(f *gguf.File) (HParams, error) {
	var h HParams
	archName, err := f.String("general.architecture")
	if err != nil {
		return h, fmt.Errorf("model: general.architecture: %w", err)
	}
	a, err := arch.Lookup(archName)
	if err != nil {
		return h, fmt.Errorf("model: %w", err)
	}
	h.Arch = Arch(archName)
	if name, err := f.String("general.name"); err == nil {
		h.Name = name
	}

	p := archName + "."
	ints := []struct {
		key string
		dst *int
	}{
		{p + "context_length", &h.NCtxTrain},
		{p + "embedding_length", &h.NEmbd},
		{p + "block_count", &h.NLayer},
		{p + "feed_forward_length", &h.NFF},
		{p + "attention.head_count", &h.NHead},
		{p + "attention.head_count_kv", &h.NHeadKV},
	}
	for _, k := range ints {
		v, err := readDim(f, k.key)
		if err != nil {
			return h, err
		}
		*k.dst = v
	}
	h.HeadDim = h.NEmbd / h.NHead
	if _, err := f.Uint(p + "attention.key_length"); err == nil {
		if h.HeadDim, err = readDim(f, p+"attention.key_length"); err != nil {
			return h, err
		}
	} else if !errors.Is(err, gguf.ErrNotFound) {
		return h, fmt.Errorf("model: %sattention.key_length: %w", p, err)
	} else if h.NEmbd%h.NHead != 0 {
		return h, fmt.Errorf("model: embedding_length %d is not a multiple of head_count %d and attention.key_length is absent", h.NEmbd, h.NHead)
	}
	if vl, err := f.Uint(p + "attention.value_length"); err == nil && int(vl) != h.HeadDim {
		return h, fmt.Errorf("model: %sattention.value_length %d differs from key_length %d (unsupported)", p, vl, h.HeadDim)
	} else if err != nil && !errors.Is(err, gguf.ErrNotFound) {
		return h, fmt.Errorf("model: %sattention.value_length: %w", p, err) // present but not a count
	}

	h.RopeTheta = 10000
	if v, err := f.Float(p + "rope.freq_base"); err == nil {
		h.RopeTheta = float32(v)
	} else if !errors.Is(err, gguf.ErrNotFound) {
		return h, fmt.Errorf("model: %srope.freq_base: %w", p, err)
	}
	eps, err := f.Float(p + "attention.layer_norm_rms_epsilon")
	if err != nil {
		return h, fmt.Errorf("model: %sattention.layer_norm_rms_epsilon: %w", p, err)
	}
	h.RmsEps = float32(eps)
	h.RopeNeox = true

	if !(h.RopeTheta > 0) {
		return h, fmt.Errorf("model: %srope.freq_base %g is not positive", p, h.RopeTheta)
	}
	if !(h.RmsEps > 0) || h.RmsEps > 1 {
		return h, fmt.Errorf("model: %sattention.layer_norm_rms_epsilon %g is not in (0, 1]", p, h.RmsEps)
	}
	if h.NHead%h.NHeadKV != 0 {
		return h, fmt.Errorf("model: attention.head_count %d is not a multiple of head_count_kv %d", h.NHead, h.NHeadKV)
	}
	if h.HeadDim%2 != 0 {
		return h, fmt.Errorf("model: head dimension %d is odd (rope needs pairs)", h.HeadDim)
	}
	if h.NQ() > maxDim || h.NKV() > maxDim {
		return h, fmt.Errorf("model: head_count %d x head dimension %d is too large", h.NHead, h.HeadDim)
	}

	tensors := make(map[string]*gguf.TensorInfo, len(f.Tensors))
	for i := range f.Tensors {
		tensors[f.Tensors[i].Name] = &f.Tensors[i]
	}
	// n_vocab is the row count of the embedding.
	embd := a.First(arch.Embedding).Name
	emb, ok := tensors[embd]
	if !ok {
		return h, fmt.Errorf("model: tensor %s is missing", embd)
	}
	if len(emb.Dims) != 2 || emb.Dims[1] == 0 || emb.Dims[1] > maxDim {
		return h, fmt.Errorf("model: tensor %s has shape %v, want [%d, n_vocab]", embd, emb.Dims, h.NEmbd)
	}
	h.NVocab = int(emb.Dims[1])
	// An option is on when block 0 (or the file) has its first tensor.
	has := func(f arch.Feature) bool {
		t := a.Telltale(f)
		return t != nil && tensors[t.At(0)] != nil
	}
	h.QKVBias, h.QKNorm, h.TiedOutput = has(arch.QKVBias), has(arch.QKNorm), !has(arch.Untied)
	if a.Needs != 0 && !has(a.Needs) {
		return h, fmt.Errorf("model: tensor %s is missing (%s needs %s)", a.Telltale(a.Needs).At(0), a.Name, a.Needs)
	}

	for _, want := range h.Tensors() {
		if err := checkTensor(tensors[want.Name], want); err != nil {
			return h, err
		}
	}
	return h, nil
}

// TensorSpec is one tensor a model needs: its name and shape (Dims[0] =
// row length) and its declaration in the architecture's table.
type TensorSpec = arch.Spec

// Tensors lists every tensor the model described by h needs, in the order
// of its architecture's table (token_embd, per-layer blocks, output_norm,
// output); none for an architecture that is not registered.
func (h HParams) Tensors() []TensorSpec {
	a, err := arch.Lookup(string(h.Arch))
	if err != nil {
		return nil
	}
	return a.Specs(h.modelParams())
}

// modelParams are the graph.Params that the model alone sets: what the
// tensors' shapes and presence depend on.
func (h HParams) modelParams() graph.Params {
	return graph.Params{
		Arch: string(h.Arch), NVocab: h.NVocab, NEmbd: h.NEmbd, NLayer: h.NLayer, NHead: h.NHead,
		NHeadKV: h.NHeadKV, HeadDim: h.HeadDim, NFF: h.NFF,
		RopeTheta: h.RopeTheta, RmsEps: h.RmsEps, RopeNeox: h.RopeNeox, QKNorm: h.QKNorm,
		QKVBias: h.QKVBias, TiedOutput: h.TiedOutput,
	}
}

func checkTensor(ti *gguf.TensorInfo, want TensorSpec) error {
	if ti == nil {
		return fmt.Errorf("model: tensor %s is missing", want.Name)
	}
	dims := ti.Dims
	for len(dims) > len(want.Dims) && dims[len(dims)-1] == 1 {
		dims = dims[:len(dims)-1]
	}
	if !slices.Equal(dims, want.Dims) {
		return fmt.Errorf("model: tensor %s has shape %v, want %v", want.Name, ti.Dims, want.Dims)
	}
	t := quant.Type(ti.Type)
	if !t.Supported() {
		return fmt.Errorf("model: tensor %s has unsupported type %s", want.Name, t)
	}
	if len(want.Dims) == 1 && t != quant.F32 && t != quant.F16 && t != quant.BF16 {
		return fmt.Errorf("model: tensor %s is 1-D but has quantized type %s (want F32)", want.Name, t)
	}
	if _, err := t.RowBytes(int(want.Dims[0])); err != nil {
		return fmt.Errorf("model: tensor %s: row of %d values does not fit type %s (block of %d)", want.Name, want.Dims[0], t, t.BlockSize())
	}
	return nil
}

func readDim(f *gguf.File, key string) (int, error) {
	v, err := f.Uint(key)
	if err != nil {
		return 0, fmt.Errorf("model: %s: %w", key, err)
	}
	if v == 0 || v > maxDim {
		return 0, fmt.Errorf("model: %s = %d is out of range (1..%d)", key, v, maxDim)
	}
	return int(v), nil
}
