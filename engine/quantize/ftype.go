// Package quantize converts a whole GGUF model to another weight type, with
// the per-tensor type choices of the reference quantize tool (llama.cpp's
// llama_tensor_get_type), streaming tensor by tensor and quantizing rows in
// parallel.
package quantize

import (
	"fmt"
	"strings"

	"github.com/minfer-go/minfer/engine/quant"
)

// FType is a file type of the reference tool: the type most weights get
// (Base), its llama_ftype number (stored as general.file_type) and whether
// the per-tensor rules apply (they do for every quantized base type).
type FType struct {
	Name string
	ID   uint32
	Base quant.Type
}

// The llama_ftype numbers (llama.h, LLAMA_FTYPE_*).
var ftypes = []FType{
	{"F32", 0, quant.F32},
	{"F16", 1, quant.F16},
	{"Q4_0", 2, quant.Q4_0},
	{"Q4_1", 3, quant.Q4_1},
	{"Q8_0", 7, quant.Q8_0},
	{"Q5_0", 8, quant.Q5_0},
	{"Q5_1", 9, quant.Q5_1},
	{"Q4_K_S", 14, quant.Q4_K},
	{"Q4_K_M", 15, quant.Q4_K},
	{"Q5_K_S", 16, quant.Q5_K},
	{"Q5_K_M", 17, quant.Q5_K},
	{"Q6_K", 18, quant.Q6_K},
	{"BF16", 32, quant.BF16},
	// MIX is minfer's own: no reference file type. Its blocks cycle through
	// every weight type minfer runs (mixTypes), so one workload reaches every
	// kernel family (issue 25's nvcc-against-NVRTC A/Bs). The number is
	// outside the reference's range (its LLAMA_FTYPE_GUESSED is 1024).
	{"MIX", 2048, quant.Q8_0},
}

// mixTypes is the cycle of MIX: block N's matrices get mixTypes[N %
// len(mixTypes)] (then Fallback where the row length does not fit).
var mixTypes = []quant.Type{
	quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q8_0,
	quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.F16, quant.BF16, quant.F32,
}

// aliases of the reference tool's command line.
var aliases = map[string]string{"Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}

// FTypes lists the file types File and synth accept.
func FTypes() []FType { return append([]FType(nil), ftypes...) }

// ParseFType maps a name such as "Q4_K_M", "q8_0" or "Q4_K" (alias of
// Q4_K_M) to its FType ("MIX": every weight type, cycled by block).
func ParseFType(s string) (FType, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	if a, ok := aliases[u]; ok {
		u = a
	}
	for _, ft := range ftypes {
		if ft.Name == u {
			return ft, nil
		}
	}
	names := make([]string, len(ftypes))
	for i, ft := range ftypes {
		names[i] = ft.Name
	}
	return FType{}, fmt.Errorf("quantize: unknown type %q (want one of %s, or Q4_K / Q5_K)", s, strings.Join(names, ", "))
}

// FTypeName returns the name of a general.file_type number, or "" when it is
// not one minfer writes.
func FTypeName(id uint32) string {
	for _, ft := range ftypes {
		if ft.ID == id {
			return ft.Name
		}
	}
	return ""
}

// quantized reports whether the base type is a block format (the rules of
// llama_tensor_get_type apply only then).
func (ft FType) quantized() bool {
	return ft.Base != quant.F32 && ft.Base != quant.F16 && ft.Base != quant.BF16
}
