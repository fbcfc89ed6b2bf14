package model

import (
	"fmt"

	"github.com/minfer-go/minfer/engine/gguf"
)

// DecodeRead is what one decode step reads from memory besides activations:
// the figure behind "achieved GB/s" and "share of the HBM floor".
type DecodeRead struct {
	// WeightBytes: every tensor in full (matmul weights, norms, biases)
	// except the token embedding, of which a step reads one row - unless the
	// output is tied to it, when the logits matmul reads it in full too.
	WeightBytes uint64 `json:"weight_bytes_per_token"`
	Method      string `json:"method"`
	// KVElemsPerPos: K and V elements one cached position holds over all
	// layers (2 * n_layer * n_head_kv * head_dim); times the KV format's
	// bytes per element and the positions attended, it is the KV read.
	KVElemsPerPos int `json:"kv_elems_per_pos"`
}

// DecodeReadOf computes DecodeRead from a model's tensor table.
func DecodeReadOf(f *gguf.File, h HParams) (DecodeRead, error) {
	emb, ok := f.Tensor("token_embd.weight")
	if !ok {
		return DecodeRead{}, fmt.Errorf("model: no token_embd.weight")
	}
	var sum uint64
	for i := range f.Tensors {
		if t := &f.Tensors[i]; t.Name != emb.Name {
			sum += t.Size
		}
	}
	var row uint64
	if rows := emb.Rows(); rows > 0 {
		row = emb.Size / rows
	}
	d := DecodeRead{KVElemsPerPos: 2 * h.NLayer * h.NHeadKV * h.HeadDim}
	if h.TiedOutput {
		d.WeightBytes = sum + emb.Size + row
		d.Method = fmt.Sprintf("all %d tensors in full, token_embd in full as the tied output (%d bytes) plus one row for the embedding", len(f.Tensors), emb.Size)
	} else {
		d.WeightBytes = sum + row
		d.Method = fmt.Sprintf("all %d tensors in full, token_embd one row (%d of its %d bytes; output.weight is separate)", len(f.Tensors), row, emb.Size)
	}
	return d, nil
}
