package quantize

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quant"
)

const (
	tinyCode  = "../../../shared/models/tiny-code-f16.gguf"
	mixesJSON = "../../../shared/testdata/quant/mixes.json"
)

func openTinyCode(t *testing.T) (*gguf.File, model.HParams) {
	t.Helper()
	f, err := gguf.Open(tinyCode)
	if err != nil {
		t.Skipf("tiny-code model not available: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	hp, err := model.ReadHParams(f)
	if err != nil {
		t.Fatal(err)
	}
	return f, hp
}

func loadMixes(t *testing.T) map[string]map[string]string {
	t.Helper()
	b, err := os.ReadFile(mixesJSON)
	if err != nil {
		t.Skipf("mixes.json not available: %v", err)
	}
	var doc struct {
		PerTensorType map[string]map[string]string `json:"per_tensor_type"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.PerTensorType
}

func TestTypeFor_MatchesReferenceToolOnEveryTensorOfMixesJSON(t *testing.T) {
	f, hp := openTinyCode(t)
	mixes := loadMixes(t)
	if len(mixes) == 0 {
		t.Fatal("mixes.json lists no mixes")
	}
	for ftype, want := range mixes {
		if len(want) != len(f.Tensors) {
			t.Errorf("%s: mixes.json has %d tensors, the model %d", ftype, len(want), len(f.Tensors))
		}
		plans, err := PlanFile(f, ftype, Options{})
		if err != nil {
			t.Fatalf("%s: %v", ftype, err)
		}
		for _, p := range plans {
			w, ok := want[p.Name]
			if !ok {
				t.Errorf("%s: %s not in mixes.json", ftype, p.Name)
				continue
			}
			if p.To.String() != w {
				t.Errorf("%s: %s -> %s, reference %s", ftype, p.Name, p.To, w)
			}
			// TypeFor agrees with the plan for the tensors it converts.
			if Quantizable(p.Name, p.Dims) {
				got, err := TypeFor(p.Name, p.Dims, ftype, hp, LayerOf(p.Name))
				if err != nil || got != p.To {
					t.Errorf("%s: TypeFor(%s) = %s, %v; plan %s", ftype, p.Name, got, err, p.To)
				}
			}
		}
	}
}

func TestTypeFor_RulesBeyondTheReferenceFile(t *testing.T) {
	hp := model.HParams{NLayer: 24, TiedOutput: false}
	cases := []struct {
		name  string
		dims  []uint64
		ftype string
		layer int
		want  quant.Type
	}{
		{"output.weight", []uint64{896, 1000}, "Q4_K_M", -1, quant.Q8_0}, // 896 % 256 != 0
		{"output.weight", []uint64{1024, 1000}, "Q4_0", -1, quant.Q6_K},
		{"output.weight", []uint64{1024, 1000}, "Q8_0", -1, quant.Q8_0},
		{"token_embd.weight", []uint64{1024, 1000}, "Q4_K_M", -1, quant.Q4_K}, // untied
		{"blk.0.attn_v.weight", []uint64{1024, 128}, "Q4_K_M", 0, quant.Q6_K}, // first eighth
		{"blk.3.attn_v.weight", []uint64{1024, 128}, "Q4_K_M", 3, quant.Q4_K},
		{"blk.5.ffn_down.weight", []uint64{3072, 1024}, "Q5_K_M", 5, quant.Q6_K}, // (5-3)%3 == 2
		{"blk.23.ffn_down.weight", []uint64{3072, 1024}, "Q4_K_M", 23, quant.Q6_K},
		{"blk.2.attn_v.weight", []uint64{1024, 128}, "Q4_K_S", 2, quant.Q5_K},
		{"blk.2.ffn_down.weight", []uint64{3072, 1024}, "Q4_K_S", 2, quant.Q5_K},
		{"blk.3.ffn_down.weight", []uint64{3072, 1024}, "Q4_K_S", 3, quant.Q4_K},
		{"blk.0.attn_q.weight", []uint64{896, 896}, "Q5_K_M", 0, quant.Q5_1},
		{"blk.0.attn_q.weight", []uint64{896, 896}, "F16", 0, quant.F16},
		{"blk.0.attn_q.bias", []uint64{896}, "Q4_K_M", 0, quant.F32},
		{"blk.0.attn_q_norm.weight", []uint64{128}, "Q4_K_M", 0, quant.F32},
		{"blk.0.attn_q.weight", []uint64{1024, 896}, "Q4_K", 0, quant.Q4_K}, // alias of Q4_K_M
	}
	for _, c := range cases {
		got, err := TypeFor(c.name, c.dims, c.ftype, hp, c.layer)
		if err != nil || got != c.want {
			t.Errorf("TypeFor(%s %v %s) = %s, %v; want %s", c.name, c.dims, c.ftype, got, err, c.want)
		}
	}
	if _, err := TypeFor("blk.0.attn_q.weight", []uint64{100, 4}, "Q4_0", hp, 0); err == nil {
		t.Error("a 100-value row was given Q4_0")
	}
	if _, err := TypeFor("blk.0.attn_q.weight", []uint64{256, 4}, "Q3_K_M", hp, 0); err == nil {
		t.Error("unknown ftype accepted")
	}
}

func TestUseMoreBits_LayerPattern(t *testing.T) {
	// 4 layers: the layers the reference gives Q6_K on attn_v / ffn_down.
	var got []int
	for i := 0; i < 4; i++ {
		if useMoreBits(i, 4) {
			got = append(got, i)
		}
	}
	if len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Errorf("use_more_bits(., 4) = %v, want [2 3]", got)
	}
	got = got[:0]
	for i := 0; i < 24; i++ {
		if useMoreBits(i, 24) {
			got = append(got, i)
		}
	}
	want := []int{0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23}
	if len(got) != len(want) {
		t.Fatalf("use_more_bits(., 24) = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("use_more_bits(., 24) = %v, want %v", got, want)
		}
	}
}

// errBound is the largest relative RMS error ||deq - x|| / ||x|| accepted per
// tensor for each output type (the F16 source is exact in F16).
var errBound = map[quant.Type]float64{
	quant.F16:  1e-6,
	quant.F32:  0,
	quant.Q8_0: 0.01,
	quant.Q6_K: 0.03,
	quant.Q5_0: 0.06,
	quant.Q5_1: 0.06,
	quant.Q5_K: 0.05,
	quant.Q4_0: 0.12,
	quant.Q4_1: 0.12,
	quant.Q4_K: 0.10,
}

func TestFile_TinyCodeMixesMatchReferenceTypesAndErrorBounds(t *testing.T) {
	src, _ := openTinyCode(t)
	mixes := loadMixes(t)
	for _, ftype := range []string{"Q4_K_M", "Q8_0", "Q4_0"} {
		t.Run(ftype, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.gguf")
			if err := File(tinyCode, out, ftype, Options{}); err != nil {
				t.Fatalf("File: %v", err)
			}
			f, err := gguf.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ft, _ := ParseFType(ftype)
			if id, err := f.Uint("general.file_type"); err != nil || id != uint64(ft.ID) {
				t.Errorf("general.file_type = %d, %v; want %d", id, err, ft.ID)
			}
			if v, err := f.Uint("general.quantization_version"); err != nil || v != 2 {
				t.Errorf("general.quantization_version = %d, %v", v, err)
			}
			if len(f.KVs) != len(src.KVs) {
				t.Errorf("%d metadata keys, input has %d", len(f.KVs), len(src.KVs))
			}
			for _, kv := range src.KVs {
				if kv.Key == "general.file_type" {
					continue
				}
				got, ok := f.Value(kv.Key)
				if !ok || !got.Equal(kv.Value) {
					t.Errorf("metadata %s not copied", kv.Key)
				}
			}
			if len(f.Tensors) != len(src.Tensors) {
				t.Fatalf("%d tensors, input has %d", len(f.Tensors), len(src.Tensors))
			}
			for i := range f.Tensors {
				q, o := &f.Tensors[i], &src.Tensors[i]
				if q.Name != o.Name {
					t.Fatalf("tensor %d is %s, input order has %s", i, q.Name, o.Name)
				}
				if want := mixes[ftype][q.Name]; q.Type.String() != want {
					t.Errorf("%s: %s, reference %s", q.Name, q.Type, want)
				}
				// Every row of the layer tensors; about 2^20 values of the
				// 39M-value embedding (rows at a fixed stride) to keep the test fast.
				ncols := int(o.Dims[0])
				nrows := int(o.Rows())
				stride := max(1, nrows*ncols/(1<<20))
				ib, _ := o.Type.RowBytes(ncols)
				qb, err := q.Type.RowBytes(ncols)
				if err != nil {
					t.Fatal(err)
				}
				x := make([]float32, ncols)
				y := make([]float32, ncols)
				var num, den float64
				for r := 0; r < nrows; r += stride {
					if err := quant.Dequantize(o.Type, src.Data(o)[r*ib:], x); err != nil {
						t.Fatal(err)
					}
					if err := quant.Dequantize(q.Type, f.Data(q)[r*qb:], y); err != nil {
						t.Fatalf("%s: %v", q.Name, err)
					}
					for j := range x {
						d := float64(y[j]) - float64(x[j])
						num += d * d
						den += float64(x[j]) * float64(x[j])
					}
				}
				rel := math.Sqrt(num / max(den, 1e-30))
				bound, ok := errBound[q.Type]
				if !ok {
					t.Fatalf("%s: no error bound for %s", q.Name, q.Type)
				}
				if rel > bound {
					t.Errorf("%s (%s): relative RMS error %.4f > %.4f", q.Name, q.Type, rel, bound)
				}
			}
		})
	}
}

func TestFile_BadInputIsOneError(t *testing.T) {
	dir := t.TempDir()
	if err := File(filepath.Join(dir, "absent.gguf"), filepath.Join(dir, "o.gguf"), "Q8_0", Options{}); err == nil {
		t.Error("absent input accepted")
	}
	junk := filepath.Join(dir, "junk.gguf")
	os.WriteFile(junk, []byte("GGUF not really"), 0o644)
	if err := File(junk, filepath.Join(dir, "o.gguf"), "Q8_0", Options{}); err == nil {
		t.Error("junk input accepted")
	}
	if err := File(tinyCode, filepath.Join(dir, "o.gguf"), "Q3_K_M", Options{}); err == nil {
		t.Error("unsupported ftype accepted")
	}
	if _, err := os.Stat(filepath.Join(dir, "o.gguf")); err == nil {
		t.Error("a failed quantize left an output file")
	}
}

// MIX is a coverage workload: over the blocks of a model every weight type
// minfer runs must appear (the cycle), with the row-length fallback applied,
// and the tensors outside the blocks keep the base type's rules.
func TestTypeFor_MixCyclesEveryWeightTypeOverTheBlocks(t *testing.T) {
	hp := model.HParams{NLayer: 28}
	seen := map[quant.Type]bool{}
	for layer := range hp.NLayer {
		name := fmt.Sprintf("blk.%d.ffn_down.weight", layer)
		got, err := TypeFor(name, []uint64{3072, 1024}, "MIX", hp, layer)
		if err != nil {
			t.Fatal(err)
		}
		if want := mixTypes[layer%len(mixTypes)]; got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
		seen[got] = true
	}
	for _, wt := range quant.WeightTypes() {
		if !seen[wt] {
			t.Errorf("MIX over 28 blocks never gives %s", wt)
		}
	}
	// A 896-value row cannot hold a K-quant: block 5 (Q4_K) falls back to Q5_0.
	if got, err := TypeFor("blk.5.attn_q.weight", []uint64{896, 896}, "MIX", hp, 5); err != nil || got != quant.Q5_0 {
		t.Errorf("blk.5.attn_q of 896: %s, %v; want Q5_0", got, err)
	}
	if got, err := TypeFor("output.weight", []uint64{1024, 1000}, "MIX", hp, -1); err != nil || got != quant.Q8_0 {
		t.Errorf("MIX output: %s, %v; want Q8_0", got, err)
	}
	if ft, err := ParseFType("mix"); err != nil || FTypeName(ft.ID) != "MIX" {
		t.Errorf("ParseFType(mix) = %+v, %v", ft, err)
	}
}
