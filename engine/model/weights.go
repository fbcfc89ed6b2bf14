package model

import (
	"errors"
	"fmt"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model/arch"
	"github.com/minfer-go/minfer/engine/quant"
)

// GraphWeights returns the tensors of f the graph of h reads, as backend
// weights: every tensor h.Tensors() lists (embedding, per-layer projections,
// norms and biases, output norm, output unless tied), nothing else. This is
// the one registration rule of both architectures: a builder may reference
// exactly these names. Data are zero-copy views of the mmap.
func GraphWeights(f *gguf.File, h HParams) ([]graph.Weight, error) {
	specs := h.Tensors()
	out := make([]graph.Weight, 0, len(specs))
	for _, s := range specs {
		ti, ok := f.Tensor(s.Name)
		if !ok {
			return nil, fmt.Errorf("model: tensor %s is missing", s.Name)
		}
		dims := make([]int, len(s.Dims))
		for i, d := range s.Dims {
			dims[i] = int(d)
		}
		data := f.Data(ti)
		t := quant.Type(ti.Type)
		rb, err := t.RowBytes(dims[0])
		if err != nil {
			return nil, fmt.Errorf("model: tensor %s: %w", s.Name, err)
		}
		rows := 1
		for _, d := range dims[1:] {
			rows *= d
		}
		if len(data) < rb*rows {
			return nil, fmt.Errorf("model: tensor %s: %d bytes of data, shape %v of %s needs %d", s.Name, len(data), dims, t, rb*rows)
		}
		out = append(out, graph.Weight{Name: s.Name, Type: t, Dims: dims, Data: data, Gathered: gathered(s, h)})
	}
	return out, nil
}

// gathered reports whether the graph of h only gathers rows of the tensor
// s: the token embedding when the output has a matrix of its own (tied,
// the logits matmul reads all of it).
func gathered(s TensorSpec, h HParams) bool {
	return s.Tensor != nil && s.Tensor.Role == arch.Embedding && !h.TiedOutput
}

// PlaceWeights applies the model-level placement rule: the first backend (in
// preference order) that accepts every weight gets the whole model; a backend
// that refuses any weight gets none of it, and logf says which weight and why.
// The last backend (the CPU) must accept everything. It returns the index of
// the chosen backend. Only an error wrapping graph.ErrUnsupportedWeight is a
// refusal; any other (out of memory, a failed driver call) is returned as
// it is and no other backend is tried.
func PlaceWeights(ws []graph.Weight, backends []graph.Backend, logf func(string, ...any)) (int, error) {
	if len(backends) == 0 {
		return 0, errors.New("model: no backends")
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	var last error
	for i, b := range backends {
		err := registerAll(ws, b)
		if err == nil {
			if i > 0 {
				logf("model: weights placed on %s", b.Name())
			}
			return i, nil
		}
		if !errors.Is(err, graph.ErrUnsupportedWeight) {
			// Only a refused weight moves the model to the next backend.
			// Out of memory (ARCHITECTURE.md rule 1) or a failed driver
			// call is an error: falling back would hide it.
			return i, fmt.Errorf("model: %s: %w", b.Name(), err)
		}
		last = err
		if i < len(backends)-1 {
			logf("model: %s cannot hold the model (%v); the whole model runs on %s", b.Name(), err, backends[len(backends)-1].Name())
		}
	}
	return 0, fmt.Errorf("model: no backend holds the model: %w", last)
}

func registerAll(ws []graph.Weight, b graph.Backend) error {
	if r, ok := b.(graph.WeightReserver); ok {
		if err := r.ReserveWeights(ws); err != nil {
			return fmt.Errorf("reserve the weights' memory: %w", err)
		}
	}
	for _, w := range ws {
		if err := b.RegisterWeight(w); err != nil {
			return fmt.Errorf("weight %s (type %s): %w", w.Name, w.Type, err)
		}
	}
	return nil
}
