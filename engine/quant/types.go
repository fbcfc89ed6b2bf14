// Package quant holds the weight and activation block formats of GGUF files:
// their sizes, dequantizers, reference-identical quantizers and the CPU dot
// products against quantized activations.
package quant

import "fmt"

// Type is a ggml tensor type id as stored in GGUF tensor infos.
type Type uint32

// The ggml type ids. Only the ones minfer reads or writes have a layout below;
// the others are named so that errors can say what a file holds.
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q4_1 Type = 3
	Q5_0 Type = 6
	Q5_1 Type = 7
	Q8_0 Type = 8
	Q8_1 Type = 9
	Q2_K Type = 10
	Q3_K Type = 11
	Q4_K Type = 12
	Q5_K Type = 13
	Q6_K Type = 14
	Q8_K Type = 15
	I8   Type = 24
	I16  Type = 25
	I32  Type = 26
	I64  Type = 27
	F64  Type = 28
	BF16 Type = 30
)

// QK is the block length of the 32-value formats; QKK of the K-quants.
const (
	QK  = 32
	QKK = 256
)

type layout struct {
	name       string
	blockSize  int // values per block
	blockBytes int // bytes per block
	supported  bool
}

var layouts = map[Type]layout{
	F32:  {"F32", 1, 4, true},
	F16:  {"F16", 1, 2, true},
	BF16: {"BF16", 1, 2, true},
	Q4_0: {"Q4_0", QK, 2 + QK/2, true},
	Q4_1: {"Q4_1", QK, 4 + QK/2, true},
	Q5_0: {"Q5_0", QK, 2 + 4 + QK/2, true},
	Q5_1: {"Q5_1", QK, 4 + 4 + QK/2, true},
	Q8_0: {"Q8_0", QK, 2 + QK, true},
	Q8_1: {"Q8_1", QK, 4 + QK, true},
	Q2_K: {"Q2_K", QKK, QKK/16 + QKK/4 + 4, false},
	Q3_K: {"Q3_K", QKK, QKK/8 + QKK/4 + 12 + 2, false},
	Q4_K: {"Q4_K", QKK, 4 + 12 + QKK/2, true},
	Q5_K: {"Q5_K", QKK, 4 + 12 + QKK/8 + QKK/2, true},
	Q6_K: {"Q6_K", QKK, QKK/2 + QKK/4 + QKK/16 + 2, true},
	Q8_K: {"Q8_K", QKK, 4 + QKK + QKK/16*2, true},
	I8:   {"I8", 1, 1, false},
	I16:  {"I16", 1, 2, false},
	I32:  {"I32", 1, 4, false},
	I64:  {"I64", 1, 8, false},
	F64:  {"F64", 1, 8, false},
}

// Known reports whether t is a ggml type id with a known byte layout.
func (t Type) Known() bool { _, ok := layouts[t]; return ok }

// Supported reports whether minfer can dequantize and compute with t.
func (t Type) Supported() bool { return layouts[t].supported }

func (t Type) String() string {
	if l, ok := layouts[t]; ok {
		return l.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize is the number of values in one block (1 for plain types).
func (t Type) BlockSize() int { return layouts[t].blockSize }

// BlockBytes is the byte size of one block.
func (t Type) BlockBytes() int { return layouts[t].blockBytes }

// RowBytes returns the bytes of n values of type t; n must be a whole number
// of blocks.
func (t Type) RowBytes(n int) (int, error) {
	l, ok := layouts[t]
	if !ok {
		return 0, fmt.Errorf("quant: unknown type %s", t)
	}
	if n < 0 || n%l.blockSize != 0 {
		return 0, fmt.Errorf("quant: %d values of %s is not a whole number of %d-value blocks", n, t, l.blockSize)
	}
	return n / l.blockSize * l.blockBytes, nil
}

// ParseType maps a type name such as "Q4_K" or "f16" (any case) to its Type.
func ParseType(s string) (Type, error) {
	for t, l := range layouts {
		if equalFold(l.name, s) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("quant: unknown type %q", s)
}

// WeightTypes lists the types minfer accepts as model weights, in id order.
func WeightTypes() []Type {
	return []Type{F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16}
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
