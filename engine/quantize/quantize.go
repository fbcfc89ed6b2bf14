package quantize

import (
	"fmt"
	"io"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quant"
)

// QuantizationVersion is the value of general.quantization_version written
// with every file (ggml's GGML_QNT_VERSION).
const QuantizationVersion = 2

// Options tune File.
type Options struct {
	// Workers is the number of rows quantized at once (0: GOMAXPROCS).
	Workers int
	// Pure gives every quantizable tensor the base type (the reference
	// tool's --pure): no per-tensor rules, only the row-length fallbacks.
	Pure bool
	// Progress, when set, is called before each tensor is written.
	Progress func(i, n int, name string, from, to quant.Type)
	// Untie writes a tied model's token embedding a second time, last, as
	// an output.weight of its own, both at the tied embedding's type: the
	// same function, a different layout. A correctness gate needs it for a path
	// that runs only on untied models (MINFER_EMBED_HOST), since the trained
	// test models are tied. An untied input is refused.
	Untie bool
}

// outputName is the output matrix's tensor; embedName the token embedding's.
const outputName, embedName = "output.weight", "token_embd.weight"

// Plan is the type File gives one tensor.
type Plan struct {
	Name     string
	Dims     []uint64
	From, To quant.Type
}

// PlanFile returns the type File would give every tensor of f, in file
// order.
func PlanFile(f *gguf.File, ftype string, opts Options) ([]Plan, error) {
	ft, err := ParseFType(ftype)
	if err != nil {
		return nil, err
	}
	hp, err := model.ReadHParams(f)
	if err != nil {
		return nil, err
	}
	return plan(f, ft, hp, opts)
}

func plan(f *gguf.File, ft FType, hp model.HParams, opts Options) ([]Plan, error) {
	out := make([]Plan, len(f.Tensors), len(f.Tensors)+1)
	emb := -1
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		p := Plan{Name: ti.Name, Dims: ti.Dims, From: ti.Type, To: ti.Type}
		if Quantizable(ti.Name, ti.Dims) {
			var err error
			if opts.Pure {
				p.To, err = Fallback(ti.Name, ti.Dims[0], ft.Base)
			} else {
				p.To, err = ft.TypeFor(ti.Name, ti.Dims, hp, LayerOf(ti.Name))
			}
			if err != nil {
				return nil, err
			}
		}
		if ti.Name == embedName {
			emb = i
		}
		out[i] = p
	}
	if opts.Untie {
		if _, err := untiedSource(f, hp); err != nil {
			return nil, err
		}
		// The embedding's tied type for both copies, so the untied file
		// computes what the tied one does.
		p := out[emb]
		p.Name = outputName
		out = append(out, p)
	}
	return out, nil
}

// untiedSource is the token embedding Options.Untie writes again as the
// output matrix, or why f cannot be untied.
func untiedSource(f *gguf.File, hp model.HParams) (*gguf.TensorInfo, error) {
	if !hp.TiedOutput {
		return nil, fmt.Errorf("quantize: --untie: the model has an output matrix of its own (%s) already", outputName)
	}
	for i := range f.Tensors {
		if f.Tensors[i].Name == embedName {
			return &f.Tensors[i], nil
		}
	}
	return nil, fmt.Errorf("quantize: --untie: the model has no %s", embedName)
}

// File quantizes the GGUF model in to ftype (a name of FTypes, e.g.
// "Q4_K_M") and writes it atomically to out. Every metadata entry of in is
// copied; general.file_type and general.quantization_version are set.
// Tensors keep their order; each is dequantized from its input type and
// quantized row by row, in parallel, while the file is written. With
// opts.Untie the token embedding is written again, last, as output.weight.
func File(in, out string, ftype string, opts Options) error {
	ft, err := ParseFType(ftype)
	if err != nil {
		return err
	}
	f, err := gguf.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	hp, err := model.ReadHParams(f)
	if err != nil {
		return fmt.Errorf("quantize: %s: %w", in, err)
	}
	plans, err := plan(f, ft, hp, opts)
	if err != nil {
		return err
	}

	w := gguf.NewWriter()
	set := map[string]gguf.Value{
		"general.file_type":            gguf.Uint32Value(ft.ID),
		"general.quantization_version": gguf.Uint32Value(QuantizationVersion),
	}
	for _, kv := range f.KVs {
		v := kv.Value
		if nv, ok := set[kv.Key]; ok {
			v = nv
			delete(set, kv.Key)
		}
		if err := w.Add(kv.Key, v); err != nil {
			return fmt.Errorf("quantize: metadata %s: %w", kv.Key, err)
		}
	}
	for _, k := range []string{"general.file_type", "general.quantization_version"} {
		if v, ok := set[k]; ok {
			if err := w.Add(k, v); err != nil {
				return fmt.Errorf("quantize: metadata %s: %w", k, err)
			}
		}
	}

	for i, p := range plans {
		var ti *gguf.TensorInfo
		if i < len(f.Tensors) {
			ti = &f.Tensors[i]
		} else if ti, err = untiedSource(f, hp); err != nil { // the output matrix Options.Untie adds
			return err
		}
		if opts.Progress != nil {
			opts.Progress(i, len(plans), p.Name, p.From, p.To)
		}
		if p.To == p.From {
			if err := w.AddTensor(p.Name, p.To, p.Dims, f.Data(ti)); err != nil {
				return err
			}
			continue
		}
		if err := w.AddTensorFunc(p.Name, p.To, p.Dims, convertRows(f, ti, p.To, opts.Workers)); err != nil {
			return err
		}
	}
	if err := w.WriteFile(out); err != nil {
		return fmt.Errorf("quantize: %w", err)
	}
	return nil
}

// convertRows streams tensor ti of f converted to type to.
func convertRows(f *gguf.File, ti *gguf.TensorInfo, to quant.Type, workers int) func(io.Writer) error {
	return func(w io.Writer) error {
		ncols := int(ti.Dims[0])
		nrows := int(ti.Rows())
		inRow, err := ti.Type.RowBytes(ncols)
		if err != nil {
			return fmt.Errorf("quantize: tensor %s: %w", ti.Name, err)
		}
		outRow, err := to.RowBytes(ncols)
		if err != nil {
			return fmt.Errorf("quantize: tensor %s: %w", ti.Name, err)
		}
		data := f.Data(ti)
		if len(data) < nrows*inRow {
			return fmt.Errorf("quantize: tensor %s: %d data bytes, want %d", ti.Name, len(data), nrows*inRow)
		}
		return StreamRows(w, nrows, outRow, workers, func(first, n int, dst []byte) error {
			row := make([]float32, ncols)
			for r := 0; r < n; r++ {
				src := data[(first+r)*inRow : (first+r+1)*inRow]
				if err := quant.Dequantize(ti.Type, src, row); err != nil {
					return fmt.Errorf("quantize: tensor %s row %d: %w", ti.Name, first+r, err)
				}
				if err := Row(to, row, dst[r*outRow:(r+1)*outRow]); err != nil {
					return fmt.Errorf("quantize: tensor %s row %d: %w", ti.Name, first+r, err)
				}
			}
			return nil
		})
	}
}

// Row writes one row of f32 values as type t into dst (t.RowBytes(len(src))
// bytes). F32, F16 and BF16 are converted directly; block types go through
// quant.Quantize.
func Row(t quant.Type, src []float32, dst []byte) error {
	return quant.Quantize(t, src, dst)
}

// Fallback applies the reference tool's row-length fallback to t.
func Fallback(name string, nx uint64, t quant.Type) (quant.Type, error) {
	if nx%uint64(t.BlockSize()) == 0 {
		return t, nil
	}
	switch t {
	case quant.Q4_K:
		t = quant.Q5_0
	case quant.Q5_K:
		t = quant.Q5_1
	case quant.Q6_K:
		t = quant.Q8_0
	default:
		return 0, fmt.Errorf("quantize: tensor %s: row length %d is not a multiple of the %s block (%d)", name, nx, t, t.BlockSize())
	}
	if nx%uint64(t.BlockSize()) != 0 {
		t = quant.F16
	}
	return t, nil
}
