package quant

import "fmt"

// Traits are the CPU routines of one weight type.
type Traits struct {
	Type Type
	// VecDot is the activation format Dot reads: Q8_0 for the 32-value
	// block types, Q8_K for the K-quants, F32 for F32/F16/BF16.
	VecDot Type
	// Dequantize expands whole blocks of src into dst (len(dst) values).
	Dequantize func(src []byte, dst []float32)
	// Quantize writes len(src) values as whole blocks into dst,
	// byte-identical to the ggml reference quantizer.
	Quantize func(src []float32, dst []byte)
	// Dot returns the dot product of n values: a weight row w in Type and an
	// activation row act in VecDot, with f32 accumulation in a fixed order.
	Dot func(n int, w, act []byte) float32
}

// TraitsOf returns the routines of t, or an error naming the type when minfer
// has none.
func TraitsOf(t Type) (*Traits, error) {
	if tr, ok := blockTraits[t]; ok {
		return tr, nil
	}
	if tr, ok := kTraits[t]; ok {
		return tr, nil
	}
	return nil, fmt.Errorf("quant: no CPU routines for weight type %s", t)
}

// Dequantize expands n = len(dst) values of type t from src.
func Dequantize(t Type, src []byte, dst []float32) error {
	tr, err := TraitsOf(t)
	if err != nil {
		return err
	}
	nb, err := t.RowBytes(len(dst))
	if err != nil {
		return err
	}
	if len(src) < nb {
		return fmt.Errorf("quant: dequantize %d %s values needs %d bytes, have %d", len(dst), t, nb, len(src))
	}
	tr.Dequantize(src[:nb], dst)
	return nil
}

// Quantize writes src as type t into dst.
func Quantize(t Type, src []float32, dst []byte) error {
	tr, err := TraitsOf(t)
	if err != nil {
		return err
	}
	if tr.Quantize == nil {
		return fmt.Errorf("quant: %s has no quantizer", t)
	}
	nb, err := t.RowBytes(len(src))
	if err != nil {
		return err
	}
	if len(dst) < nb {
		return fmt.Errorf("quant: quantize %d values to %s needs %d bytes, have %d", len(src), t, nb, len(dst))
	}
	tr.Quantize(src, dst[:nb])
	return nil
}
