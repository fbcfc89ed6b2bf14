package synth

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/model/arch"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/quantize"
)

// Options select what Write produces.
type Options struct {
	Shape string // a name of Shapes()
	// Type is the type of every matrix (pure; row lengths that do not fit a
	// K-quant fall back as the reference quantizer does). 1-D tensors are
	// always F32. The zero value is F32.
	Type quant.Type
	// Mix, when set, is a file type of the reference quantize tool
	// ("Q4_K_M", "Q5_K_M", "Q8_0", ...) whose per-tensor rules choose the
	// types instead of Type.
	Mix  string
	Seed uint64
	// VocabFrom is a GGUF whose tokenizer block is copied (padded to the
	// shape's n_vocab) instead of the synthetic byte-level vocabulary.
	VocabFrom string
	// Workers is the number of rows generated at once (0: GOMAXPROCS).
	Workers int
}

// GeneratorVersion changes whenever the same options would produce other
// bytes; a cached default model of another version is regenerated.
const GeneratorVersion = 1

// LogitStd is the standard deviation of the logits of a synthetic model at
// a unit-RMS final hidden state: large enough that greedy decoding has a
// top-2 margin that survives 4-bit quantization on most steps.
const LogitStd = 8

// ParseType splits a --type argument into Options.Type or Options.Mix:
// "Q4_K_M"/"Q5_K_M"/"Q4_K_S"/"Q5_K_S" and "MIX" are mixes, any weight type
// name is pure.
func ParseType(s string) (t quant.Type, mix string, err error) {
	u := strings.ToUpper(s)
	if strings.HasSuffix(u, "_K_M") || strings.HasSuffix(u, "_K_S") || u == "MIX" {
		ft, err := quantize.ParseFType(u)
		if err != nil {
			return 0, "", err
		}
		return ft.Base, ft.Name, nil
	}
	t, err = quant.ParseType(s)
	if err != nil || !slices.Contains(quant.WeightTypes(), t) {
		return 0, "", fmt.Errorf("synth: unknown type %q (want a weight type such as F16, Q8_0, Q4_K, or a mix Q4_K_M / Q5_K_M / MIX)", s)
	}
	return t, "", nil
}

// pureFileType is general.file_type of a file whose matrices are all t.
var pureFileType = map[quant.Type]uint32{
	quant.F32: 0, quant.F16: 1, quant.Q4_0: 2, quant.Q4_1: 3, quant.Q8_0: 7, quant.Q5_0: 8,
	quant.Q5_1: 9, quant.Q4_K: 14, quant.Q5_K: 16, quant.Q6_K: 18, quant.BF16: 32,
}

// tensor is one tensor of a synthetic file.
type tensor struct {
	name string
	dims []uint64
	typ  quant.Type
	d    dist
}

// plan is everything Write writes except the weight values.
type plan struct {
	shape   Shape
	hp      model.HParams
	kvs     []gguf.KV
	tensors []tensor
}

func newPlan(opts Options) (*plan, error) {
	sh, err := ShapeByName(opts.Shape)
	if err != nil {
		return nil, err
	}
	hp := sh.HParams()
	typeFor, fileType, err := typeRule(opts, hp)
	if err != nil {
		return nil, err
	}
	p := &plan{shape: sh, hp: hp}

	archName := string(sh.Arch)
	kv := func(k string, v gguf.Value) { p.kvs = append(p.kvs, gguf.KV{Key: k, Value: v}) }
	kv("general.architecture", gguf.StringValue(archName))
	kv("general.type", gguf.StringValue("model"))
	kv("general.name", gguf.StringValue(hp.Name))
	kv("general.size_label", gguf.StringValue(sh.SizeLabel()))
	kv(archName+".block_count", gguf.Uint32Value(uint32(sh.NLayer)))
	kv(archName+".context_length", gguf.Uint32Value(uint32(sh.NCtxTrain)))
	kv(archName+".embedding_length", gguf.Uint32Value(uint32(sh.NEmbd)))
	kv(archName+".feed_forward_length", gguf.Uint32Value(uint32(sh.NFF)))
	kv(archName+".attention.head_count", gguf.Uint32Value(uint32(sh.NHead)))
	kv(archName+".attention.head_count_kv", gguf.Uint32Value(uint32(sh.NHeadKV)))
	kv(archName+".rope.freq_base", gguf.Float32Value(sh.RopeTheta))
	kv(archName+".attention.layer_norm_rms_epsilon", gguf.Float32Value(sh.RmsEps))
	if sh.HeadDim != 0 {
		kv(archName+".attention.key_length", gguf.Uint32Value(uint32(sh.HeadDim)))
		kv(archName+".attention.value_length", gguf.Uint32Value(uint32(sh.HeadDim)))
	}
	kv("general.file_type", gguf.Uint32Value(fileType))
	kv("general.quantization_version", gguf.Uint32Value(quantize.QuantizationVersion))
	kv("minfer.synth.shape", gguf.StringValue(sh.Name))
	kv("minfer.synth.seed", gguf.Uint64Value(opts.Seed))
	kv("minfer.synth.version", gguf.Uint32Value(GeneratorVersion))
	if opts.VocabFrom != "" {
		tk, err := vocabFrom(opts.VocabFrom, sh.NVocab)
		if err != nil {
			return nil, err
		}
		p.kvs = append(p.kvs, tk...)
	} else {
		v, err := ByteVocab(sh.NVocab)
		if err != nil {
			return nil, err
		}
		p.kvs = append(p.kvs, v.kvs()...)
	}

	add := func(name string, d dist, dims ...uint64) error {
		t := quant.F32
		if len(dims) > 1 {
			var err error
			if t, err = typeFor(name, dims); err != nil {
				return err
			}
		}
		p.tensors = append(p.tensors, tensor{name, dims, t, d})
		return nil
	}
	var errs []error
	for _, t := range fileOrder(hp.Tensors()) {
		errs = append(errs, add(t.Name, weightDist(t, hp), t.Dims...))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// fileOrder puts the tensors in the converter's order: the tensors of each
// block sorted by their Hugging Face names (the global ones stay where the
// architecture's table has them).
func fileOrder(specs []model.TensorSpec) []model.TensorSpec {
	out := slices.Clone(specs)
	for i := 0; i < len(out); i++ {
		j := i
		for j < len(out) && out[j].Layer >= 0 {
			j++
		}
		slices.SortStableFunc(out[i:j], func(a, b model.TensorSpec) int {
			return cmp.Or(cmp.Compare(a.Layer, b.Layer), strings.Compare(a.Tensor.HF, b.Tensor.HF))
		})
		i = j
	}
	return out
}

// weightDist is how the values of tensor t are drawn: unit-RMS activations
// through every projection, norms near 1, peaky logits.
func weightDist(t model.TensorSpec, hp model.HParams) dist {
	norm := dist{Mean: 1, Std: 0.05}
	outGain := float32(LogitStd) / float32(math.Sqrt(float64(hp.NEmbd)))
	switch t.Tensor.Role {
	case arch.Embedding:
		return dist{Std: 1}
	case arch.Norm:
		return norm
	case arch.Bias:
		return dist{Std: 0.05}
	case arch.OutputNorm:
		if hp.TiedOutput {
			// With tied embeddings a positive output norm makes every token
			// predict itself (the residual stream holds its own embedding);
			// random signs break that alignment.
			return dist{Mean: outGain, Std: 0.05 * outGain, Signed: true}
		}
		return norm
	case arch.Output:
		return dist{Std: outGain}
	}
	return dist{Std: float32(1 / math.Sqrt(float64(t.Dims[0])))} // a matrix: 1/sqrt(row length)
}

// typeRule returns the type choice for matrices and general.file_type.
func typeRule(opts Options, hp model.HParams) (func(string, []uint64) (quant.Type, error), uint32, error) {
	if opts.Mix != "" {
		ft, err := quantize.ParseFType(opts.Mix)
		if err != nil {
			return nil, 0, err
		}
		return func(name string, dims []uint64) (quant.Type, error) {
			return ft.TypeFor(name, dims, hp, quantize.LayerOf(name))
		}, ft.ID, nil
	}
	id, ok := pureFileType[opts.Type]
	if !ok {
		return nil, 0, fmt.Errorf("synth: type %s is not a weight type minfer writes", opts.Type)
	}
	t := opts.Type
	return func(name string, dims []uint64) (quant.Type, error) {
		return quantize.Fallback(name, dims[0], t)
	}, id, nil
}

// Write writes the synthetic model opts describes to path (atomically).
// Matrices are generated and quantized row by row while the file is
// written, so no model is ever held in memory as a whole.
func Write(path string, opts Options) error {
	p, err := newPlan(opts)
	if err != nil {
		return err
	}
	w := gguf.NewWriter()
	for _, kv := range p.kvs {
		if err := w.Add(kv.Key, kv.Value); err != nil {
			return fmt.Errorf("synth: metadata %s: %w", kv.Key, err)
		}
	}
	for _, t := range p.tensors {
		key := tensorSeed(opts.Seed, t.name)
		if len(t.dims) == 1 {
			v := make([]float32, t.dims[0])
			t.d.fillRow(key, 0, v)
			b := make([]byte, 4*len(v))
			f32Bytes(v, b)
			if err := w.AddTensor(t.name, quant.F32, t.dims, b); err != nil {
				return fmt.Errorf("synth: %w", err)
			}
			continue
		}
		if err := w.AddTensorFunc(t.name, t.typ, t.dims, t.rows(key, opts.Workers)); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
	}
	if err := w.WriteFile(path); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// rows streams the tensor's values, generated and converted row by row.
func (t tensor) rows(key uint64, workers int) func(io.Writer) error {
	return func(w io.Writer) error {
		ncols := int(t.dims[0])
		nrows := 1
		for _, d := range t.dims[1:] {
			nrows *= int(d)
		}
		rowBytes, err := t.typ.RowBytes(ncols)
		if err != nil {
			return fmt.Errorf("synth: tensor %s: %w", t.name, err)
		}
		return quantize.StreamRows(w, nrows, rowBytes, workers, func(first, n int, dst []byte) error {
			row := make([]float32, ncols)
			for r := 0; r < n; r++ {
				t.d.fillRow(key, first+r, row)
				if err := quant.Quantize(t.typ, row, dst[r*rowBytes:(r+1)*rowBytes]); err != nil {
					return fmt.Errorf("synth: tensor %s: %w", t.name, err)
				}
			}
			return nil
		})
	}
}

// The embedded default model: qwen2-tiny in F16 (F16 keeps the CPU
// reference exact: every weight the device reads is the one the CPU reads),
// seed 1.
const (
	DefaultShape = "qwen2-tiny"
	DefaultSeed  = 1
)

// DefaultType is the weight type of the default model.
var DefaultType = quant.F16

// DefaultModelName is the file name of the default model in its cache dir.
func DefaultModelName() string {
	return fmt.Sprintf("minfer-default-%s-%s-seed%d.gguf", DefaultShape, strings.ToLower(DefaultType.String()), DefaultSeed)
}

// DefaultModel returns the path of the default model in cacheDir, writing
// it first when it is absent or does not open as a valid model.
func DefaultModel(cacheDir string) (string, error) {
	return DefaultModelNotify(cacheDir, nil)
}

// DefaultModelNotify is DefaultModel; notify (if not nil) is called with
// the path before the model is (re)generated.
func DefaultModelNotify(cacheDir string, notify func(path string)) (string, error) {
	path := filepath.Join(cacheDir, DefaultModelName())
	if validModel(path) {
		return path, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("synth: default model: %w", err)
	}
	if notify != nil {
		notify(path)
	}
	if err := Write(path, Options{Shape: DefaultShape, Type: DefaultType, Seed: DefaultSeed}); err != nil {
		return "", fmt.Errorf("synth: default model: %w", err)
	}
	return path, nil
}

func validModel(path string) bool {
	if _, err := os.Stat(path); err != nil {
		return false
	}
	f, err := gguf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if v, err := f.Uint("minfer.synth.version"); err != nil || v != GeneratorVersion {
		return false
	}
	_, err = model.ReadHParams(f)
	return err == nil
}

// MatrixTypes returns the architecture and the weight type of every matrix
// (2-D tensor) of the model opts describes, without generating it: what a
// check of a workload's needs (a lever's liveness rule) reads.
func MatrixTypes(opts Options) (arch string, types map[string]quant.Type, err error) {
	p, err := newPlan(opts)
	if err != nil {
		return "", nil, err
	}
	types = map[string]quant.Type{}
	for _, t := range p.tensors {
		if len(t.dims) > 1 {
			types[t.name] = t.typ
		}
	}
	return string(p.shape.Arch), types, nil
}
