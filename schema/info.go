package schema

import (
	"fmt"
	"slices"
	"strings"
)

// Info is the document of `minfer info --json`.
type Info struct {
	Path          string         `json:"path"`
	GGUFVersion   uint32         `json:"gguf_version"`
	FileSize      int64          `json:"file_size"`
	Architecture  string         `json:"architecture"`
	FileType      string         `json:"file_type,omitempty"` // general.file_type by name; absent when the file does not say
	HParams       HParams        `json:"hparams"`
	Params        uint64         `json:"params"`
	Tensors       int            `json:"tensors"`
	TypeHistogram map[string]int `json:"type_histogram"` // tensor type -> tensors of that type
	Tokenizer     Tokenizer      `json:"tokenizer"`
	// DecodeRead is what one decode step reads (abtest perf's GB/s).
	DecodeRead DecodeRead `json:"decode_read"`
	// MemoryPlan is the plan of info --device (absent without it).
	MemoryPlan *MemoryPlan `json:"memory_plan,omitempty"`
}

// HParams are the model's hyper-parameters. Their keys are the engine's
// Go field names (engine/model.HParams had no tags when the document was
// first written); cmd/minfer's tests hold the two field sets equal.
type HParams struct {
	Arch       string  `json:"Arch"`
	Name       string  `json:"Name"`
	NVocab     int     `json:"NVocab"`
	NCtxTrain  int     `json:"NCtxTrain"`
	NEmbd      int     `json:"NEmbd"`
	NLayer     int     `json:"NLayer"`
	NHead      int     `json:"NHead"`
	NHeadKV    int     `json:"NHeadKV"`
	HeadDim    int     `json:"HeadDim"`
	NFF        int     `json:"NFF"`
	RopeTheta  float32 `json:"RopeTheta"`
	RmsEps     float32 `json:"RmsEps"`
	RopeNeox   bool    `json:"RopeNeox"`
	QKNorm     bool    `json:"QKNorm"`
	QKVBias    bool    `json:"QKVBias"`
	TiedOutput bool    `json:"TiedOutput"`
}

// Tokenizer describes the model's vocabulary.
type Tokenizer struct {
	Model    string `json:"model"` // tokenizer.ggml.model (gpt2)
	Pre      string `json:"pre"`   // pre-tokenizer (qwen2)
	NVocab   int    `json:"n_vocab"`
	BOS      int32  `json:"bos"`
	EOS      int32  `json:"eos"`
	NSpecial int    `json:"n_special"` // control and user-defined tokens
}

// DecodeRead is what one decode step reads, as the engine counts it from
// the tensor table (engine/model.DecodeReadOf).
type DecodeRead struct {
	WeightBytes   int64  `json:"weight_bytes_per_token"`
	Method        string `json:"method"`
	KVElemsPerPos int64  `json:"kv_elems_per_pos"` // K and V elements of one cached position, all layers
}

// unquantized are the tensor types a device reads as they are (no
// activation quantization on the CPU reference either).
var unquantized = map[string]bool{"F32": true, "F16": true, "BF16": true, "F64": true, "I8": true, "I16": true, "I32": true, "I64": true}

// QuantizedTypes lists the histogram's quantized tensor types with their
// counts, sorted ("Q8_0:169"); empty for an all-float model.
func (i Info) QuantizedTypes() []string {
	var out []string
	for t, n := range i.TypeHistogram {
		if !unquantized[strings.ToUpper(t)] && n > 0 {
			out = append(out, fmt.Sprintf("%s:%d", t, n))
		}
	}
	slices.Sort(out)
	return out
}

// Histogram renders the type histogram ("F32:121 Q8_0:169").
func (i Info) Histogram() string {
	var out []string
	for t, n := range i.TypeHistogram {
		out = append(out, fmt.Sprintf("%s:%d", t, n))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
