// Package synth writes deterministic synthetic Qwen2/Qwen3 models: real
// tensor names, shapes, types and converter-faithful metadata, with weights
// drawn from a seeded generator and scaled so activations stay O(1) and the
// logits are peaky. It also provides the embedded default model.
package synth

import (
	"fmt"
	"strings"

	"github.com/minfer-go/minfer/engine/model"
)

// Shape is one model geometry.
type Shape struct {
	Name      string
	Arch      model.Arch
	NEmbd     int
	NLayer    int
	NHead     int
	NHeadKV   int
	HeadDim   int // 0: NEmbd/NHead and no attention.key_length key
	NFF       int
	NVocab    int
	NCtxTrain int
	RopeTheta float32
	RmsEps    float32
	Tied      bool // no output.weight
	QKVBias   bool
	QKNorm    bool
}

// The tiny shapes keep every row length a multiple of 256 so the K-quants
// apply to every matrix; qwen3-tiny's head dimension (128) differs from
// NEmbd/NHead (64) to exercise attention.key_length, and its output is
// untied to exercise output.weight on the CPU.
var shapes = []Shape{
	{Name: "qwen2-tiny", Arch: model.Qwen2, NEmbd: 256, NLayer: 2, NHead: 4, NHeadKV: 2, NFF: 512,
		NVocab: tinyVocab, NCtxTrain: 4096, RopeTheta: 1e6, RmsEps: 1e-6, Tied: true, QKVBias: true},
	{Name: "qwen3-tiny", Arch: model.Qwen3, NEmbd: 256, NLayer: 2, NHead: 4, NHeadKV: 2, HeadDim: 128, NFF: 768,
		NVocab: tinyVocab, NCtxTrain: 4096, RopeTheta: 1e6, RmsEps: 1e-6, QKNorm: true},
	{Name: "qwen2-0.5b", Arch: model.Qwen2, NEmbd: 896, NLayer: 24, NHead: 14, NHeadKV: 2, NFF: 4864,
		NVocab: 151936, NCtxTrain: 32768, RopeTheta: 1e6, RmsEps: 1e-6, Tied: true, QKVBias: true},
	{Name: "qwen3-0.6b", Arch: model.Qwen3, NEmbd: 1024, NLayer: 28, NHead: 16, NHeadKV: 8, HeadDim: 128, NFF: 3072,
		NVocab: 151936, NCtxTrain: 40960, RopeTheta: 1e6, RmsEps: 1e-6, Tied: true, QKNorm: true},
	{Name: "qwen2-7b", Arch: model.Qwen2, NEmbd: 3584, NLayer: 28, NHead: 28, NHeadKV: 4, NFF: 18944,
		NVocab: 152064, NCtxTrain: 32768, RopeTheta: 1e6, RmsEps: 1e-6, QKVBias: true},
}

// Shapes lists the shapes Write knows.
func Shapes() []Shape { return append([]Shape(nil), shapes...) }

// ShapeByName returns the named shape.
func ShapeByName(name string) (Shape, error) {
	for _, s := range shapes {
		if s.Name == name {
			return s, nil
		}
	}
	names := make([]string, len(shapes))
	for i, s := range shapes {
		names[i] = s.Name
	}
	return Shape{}, fmt.Errorf("synth: unknown shape %q (want one of %s)", name, strings.Join(names, ", "))
}

// HParams are the hyper-parameters a file of this shape carries.
func (s Shape) HParams() model.HParams {
	hd := s.HeadDim
	if hd == 0 {
		hd = s.NEmbd / s.NHead
	}
	return model.HParams{
		Arch: s.Arch, Name: s.Name, NVocab: s.NVocab, NCtxTrain: s.NCtxTrain, NEmbd: s.NEmbd,
		NLayer: s.NLayer, NHead: s.NHead, NHeadKV: s.NHeadKV, HeadDim: hd, NFF: s.NFF,
		RopeTheta: s.RopeTheta, RmsEps: s.RmsEps, RopeNeox: true,
		QKNorm: s.QKNorm, QKVBias: s.QKVBias, TiedOutput: s.Tied,
	}
}

// Params is the number of weights of the shape.
func (s Shape) Params() int64 {
	var n int64
	for _, t := range s.HParams().Tensors() {
		m := int64(1)
		for _, d := range t.Dims {
			m *= int64(d)
		}
		n += m
	}
	return n
}

// SizeLabel is general.size_label as the converter writes it ("494M", "7.6B").
func (s Shape) SizeLabel() string {
	n := float64(s.Params())
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1fB", n/1e9)
	case n >= 1e7:
		return fmt.Sprintf("%.0fM", n/1e6)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", n/1e6)
	default:
		return fmt.Sprintf("%.0fK", n/1e3)
	}
}
