package quantize

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quant"
)

// LayerOf returns N of a "blk.N." tensor name, or -1.
func LayerOf(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	num, _, ok := strings.Cut(rest, ".")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// Quantizable reports whether the reference tool converts the tensor at all:
// names ending in "weight", at least two dimensions (trailing 1s do not
// count) and not a norm. Other tensors (norms, biases) keep their type.
func Quantizable(name string, dims []uint64) bool {
	return strings.HasSuffix(name, "weight") && nDims(dims) >= 2 && !strings.Contains(name, "_norm.weight")
}

func nDims(dims []uint64) int {
	n := len(dims)
	for n > 1 && dims[n-1] == 1 {
		n--
	}
	return n
}

// useMoreBits is the reference tool's choice of the layers that get more
// bits in the *_M mixes: the first and last eighth, and every third layer
// in between.
func useMoreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}

// TypeFor returns the type the reference quantize tool gives tensor name
// (shape dims, Dims[0] = row length) of the model hp under the file type
// ftype. layer is the tensor's block index (LayerOf(name)), -1 outside the
// blocks. A tensor that Quantizable refuses gets F32 (the caller keeps its
// input type). An error means no type fits the row length.
func TypeFor(name string, dims []uint64, ftype string, hp model.HParams, layer int) (quant.Type, error) {
	ft, err := ParseFType(ftype)
	if err != nil {
		return 0, err
	}
	return ft.TypeFor(name, dims, hp, layer)
}

// TypeFor is TypeFor for a parsed file type.
func (ft FType) TypeFor(name string, dims []uint64, hp model.HParams, layer int) (quant.Type, error) {
	if len(dims) == 0 || dims[0] == 0 {
		return 0, fmt.Errorf("quantize: tensor %s has an empty shape %v", name, dims)
	}
	if !Quantizable(name, dims) {
		return quant.F32, nil
	}
	t := ft.Base
	if !ft.quantized() {
		return t, nil
	}
	nx := dims[0]
	if ft.Name == "MIX" {
		if layer >= 0 {
			t = mixTypes[layer%len(mixTypes)]
		}
		return Fallback(name, nx, t)
	}
	nLayer := hp.NLayer
	isOutput := name == "output.weight" || (hp.TiedOutput && name == "token_embd.weight")
	switch {
	case isOutput:
		if nx%quant.QKK != 0 {
			t = quant.Q8_0
		} else if t != quant.Q8_0 {
			t = quant.Q6_K
		}
	case name == "token_embd.weight":
		// untied embeddings keep the base type for the mixes minfer writes
	case strings.Contains(name, "attn_v.weight"):
		switch {
		case (ft.Name == "Q4_K_M" || ft.Name == "Q5_K_M") && useMoreBits(layer, nLayer):
			t = quant.Q6_K
		case ft.Name == "Q4_K_S" && layer < 4:
			t = quant.Q5_K
		}
	case strings.Contains(name, "ffn_down"):
		switch {
		case (ft.Name == "Q4_K_M" || ft.Name == "Q5_K_M") && useMoreBits(layer, nLayer):
			t = quant.Q6_K
		case ft.Name == "Q4_K_S" && layer < nLayer/8:
			t = quant.Q5_K
		}
	}
	return Fallback(name, nx, t)
}
