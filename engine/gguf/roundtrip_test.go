package gguf

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/minfer-go/minfer/engine/quant"
)

func checkModel(t *testing.T, f *File) {
	t.Helper()
	want := append([]KV{{"general.architecture", StringValue("qwen2")}}, allValues(t)...)
	if len(f.KVs) != len(want) {
		t.Fatalf("%d KVs, want %d", len(f.KVs), len(want))
	}
	for i, kv := range want {
		got := f.KVs[i]
		if got.Key != kv.Key || !got.Value.Equal(kv.Value) {
			t.Errorf("KV %d: got %s=%s (%s), want %s=%s (%s)", i, got.Key, got.Value, got.Value.Type(), kv.Key, kv.Value, kv.Value.Type())
		}
		if v, ok := f.Value(kv.Key); !ok || !v.Equal(kv.Value) {
			t.Errorf("Value(%q) = %v, %v", kv.Key, v, ok)
		}
	}
	ts := testTensors()
	if len(f.Tensors) != len(ts) {
		t.Fatalf("%d tensors, want %d", len(f.Tensors), len(ts))
	}
	for i, tt := range ts {
		ti := &f.Tensors[i]
		if ti.Name != tt.name || ti.Type != tt.typ || !equalDims(ti.Dims, tt.dims) || ti.Size != uint64(len(tt.data)) {
			t.Errorf("tensor %d: got %s size %d, want %s %s %v size %d", i, ti, ti.Size, tt.name, tt.typ, tt.dims, len(tt.data))
		}
		if ti.Offset%f.Alignment != 0 {
			t.Errorf("tensor %s: offset %d not aligned to %d", ti.Name, ti.Offset, f.Alignment)
		}
		got, err := f.TensorData(tt.name)
		if err != nil || !bytes.Equal(got, tt.data) {
			t.Errorf("tensor %s: data differs (err %v)", tt.name, err)
		}
	}
}

func equalDims(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRoundTrip_WriterParse_EveryKVTypeAndTensorIdentical(t *testing.T) {
	data := buildImage(t)
	f, err := Parse("mem.gguf", data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 3 || f.Alignment != DefaultAlignment {
		t.Errorf("version %d alignment %d, want 3 and %d", f.Version, f.Alignment, DefaultAlignment)
	}
	checkModel(t, f)
	if f.Size() != int64(len(data)) {
		t.Errorf("Size %d, want %d", f.Size(), len(data))
	}

	// Copying every KV and tensor of a read file reproduces it byte for byte.
	w := NewWriter()
	for _, kv := range f.KVs {
		if err := w.Add(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		if err := w.AddTensor(ti.Name, ti.Type, ti.Dims, f.Data(ti)); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), data) {
		t.Error("re-written file differs from the original")
	}
}

func TestRoundTrip_WriteFileOpen_DataIsZeroCopyIntoMapping(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.gguf")
	w := buildWriter(t)
	if err := w.SetAlignment(64); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Alignment != 64 {
		t.Errorf("alignment %d, want 64", f.Alignment)
	}
	if a, err := f.Uint(KeyAlignment); err != nil || a != 64 {
		t.Errorf("%s = %d, %v", KeyAlignment, a, err)
	}
	// general.alignment was appended last; drop it for the KV comparison.
	f.KVs = f.KVs[:len(f.KVs)-1]
	checkModel(t, f)

	m := f.parts[0].data
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
	hi := lo + uintptr(len(m))
	for i := range f.Tensors {
		d := f.Data(&f.Tensors[i])
		p := uintptr(unsafe.Pointer(unsafe.SliceData(d)))
		if p < lo || p+uintptr(len(d)) > hi {
			t.Errorf("tensor %s: data at %#x is not inside the mapping [%#x,%#x)", f.Tensors[i].Name, p, lo, hi)
		}
		if cap(d) != len(d) {
			t.Errorf("tensor %s: cap %d > len %d lets appends write into the mapping", f.Tensors[i].Name, cap(d), len(d))
		}
	}
	st, _ := os.Stat(path)
	if f.Size() != st.Size() {
		t.Errorf("Size %d, file is %d", f.Size(), st.Size())
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if d := f.Data(&f.Tensors[0]); d != nil {
		t.Error("Data after Close is not nil")
	}
}

func TestFileAccessors_TypedLookupsConvertAndNameKeyOnMismatch(t *testing.T) {
	f, err := Parse("mem.gguf", buildImage(t))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := f.String("general.architecture"); err != nil || s != "qwen2" {
		t.Errorf("String = %q, %v", s, err)
	}
	if x, err := f.Uint("t.u16"); err != nil || x != 60000 {
		t.Errorf("Uint(u16) = %d, %v", x, err)
	}
	if x, err := f.Int("t.i8"); err != nil || x != -100 {
		t.Errorf("Int(i8) = %d, %v", x, err)
	}
	if x, err := f.Float("t.f32"); err != nil || float32(x) != 1e-6 {
		t.Errorf("Float(f32) = %g, %v", x, err)
	}
	if x, err := f.Float("t.u32"); err != nil || x != 4e9 {
		t.Errorf("Float(u32) = %g, %v", x, err)
	}
	if x, err := f.Bool("t.bool"); err != nil || !x {
		t.Errorf("Bool = %v, %v", x, err)
	}
	if x, err := f.Strings("a.string"); err != nil || len(x) != 3 || x[2] != "<|im_end|>" {
		t.Errorf("Strings = %q, %v", x, err)
	}
	if x, err := f.Int32s("a.u8"); err != nil || len(x) != 3 || x[2] != 255 {
		t.Errorf("Int32s(u8) = %v, %v", x, err)
	}
	if x, err := f.Float32s("a.f32"); err != nil || len(x) != 3 || x[0] != 1.5 {
		t.Errorf("Float32s = %v, %v", x, err)
	}

	errCases := []struct {
		name string
		call func() error
		want []string
	}{
		{"absent", func() error { _, err := f.String("no.such"); return err }, []string{`"no.such"`, "key not found"}},
		{"string as uint", func() error { _, err := f.Uint("general.architecture"); return err }, []string{`"general.architecture"`, "is string"}},
		{"negative as uint", func() error { _, err := f.Uint("t.i8"); return err }, []string{`"t.i8"`, "negative"}},
		{"u64 overflows int", func() error { _, err := f.Int("t.u64"); return err }, []string{`"t.u64"`, "overflows int64"}},
		{"int array as strings", func() error { _, err := f.Strings("a.i32"); return err }, []string{`"a.i32"`, "int32 array"}},
		{"u32 array out of int32", func() error { _, err := f.Int32s("a.u32"); return err }, []string{`"a.u32"`, "out of int32 range"}},
		{"bool as float", func() error { _, err := f.Float("t.bool"); return err }, []string{`"t.bool"`, "is bool"}},
		{"tensor absent", func() error { _, err := f.TensorData("nope"); return err }, []string{`"nope"`, "tensor not found"}},
	}
	for _, c := range errCases {
		err := c.call()
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", c.name, err, w)
			}
		}
	}
	if _, err := f.Int("missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("absent key error %v does not wrap ErrNotFound", err)
	}
}

func TestValueString_ArraysAbbreviated(t *testing.T) {
	v := Int32sValue([]int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	if got, want := v.String(), "[0, 1, 2, 3, 4, 5, 6, 7, ... (10 int32)]"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got := StringsValue([]string{"a"}).String(); got != `["a"]` {
		t.Errorf("String = %q", got)
	}
	if v.Len() != 10 || v.ElemType() != TypeInt32 || v.Type() != TypeArray {
		t.Errorf("Len/ElemType/Type = %d %s %s", v.Len(), v.ElemType(), v.Type())
	}
}

func TestWriter_DuplicateKeyAndBadTensorsAreErrors(t *testing.T) {
	w := NewWriter()
	w.AddString("a", "x")
	if err := w.Add("a", Uint32Value(1)); err == nil || !strings.Contains(err.Error(), `duplicate key "a"`) {
		t.Errorf("duplicate Add: %v", err)
	}
	w.AddUint32("a", 1) // shorthand: reported at write time
	if _, err := w.WriteTo(io.Discard); err == nil || !strings.Contains(err.Error(), "duplicate key") {
		t.Errorf("WriteTo after duplicate shorthand: %v", err)
	}

	w = NewWriter()
	cases := []struct {
		err  error
		want string
	}{
		{w.AddTensor("x", quant.F32, []uint64{4}, make([]byte, 15)), "15 bytes of data"},
		{w.AddTensor("x", quant.Q8_0, []uint64{16}, make([]byte, 18)), "not a multiple of the Q8_0 block size 32"},
		{w.AddTensor("x", quant.Type(99), []uint64{4}, nil), "unknown tensor type id 99"},
		{w.AddTensor("x", quant.F32, []uint64{1, 1, 1, 1, 1}, make([]byte, 4)), "n_dims 5"},
		{w.AddTensor("\xff", quant.F32, []uint64{1}, make([]byte, 4)), "not valid UTF-8"},
		{w.SetAlignment(24), "not a power of two"},
		{w.Add(KeyAlignment, Uint32Value(0)), "not a power of two"},
	}
	for i, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("case %d: error %v, want it to contain %q", i, c.err, c.want)
		}
	}
	if err := w.AddTensor("x", quant.F32, []uint64{1}, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("x", quant.F32, []uint64{1}, make([]byte, 4)); err == nil || !strings.Contains(err.Error(), `duplicate tensor name "x"`) {
		t.Errorf("duplicate tensor: %v", err)
	}
}

func TestWriteFile_StreamedTensorWrongSize_LeavesNothingBehind(t *testing.T) {
	for _, n := range []int{3, 5} { // short and long
		dir := t.TempDir()
		path := filepath.Join(dir, "out.gguf")
		w := NewWriter()
		w.AddString("general.architecture", "qwen2")
		if err := w.AddTensorFunc("w", quant.F32, []uint64{1}, func(out io.Writer) error {
			_, err := out.Write(make([]byte, n))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		err := w.WriteFile(path)
		if err == nil || !strings.Contains(err.Error(), `tensor "w"`) {
			t.Fatalf("n=%d: error %v, want one naming the tensor", n, err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("n=%d: failed write left %v", n, ents)
		}
	}
}

func TestOpen_RealModel_Qwen2TokenizerAndEmbedding(t *testing.T) {
	const path = "../../../shared/models/tiny-code-f16.gguf"
	if _, err := os.Stat(path); err != nil {
		t.Skipf("real model absent (%v)", err)
	}
	start := time.Now()
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	t.Logf("Open of %d bytes took %v", f.Size(), time.Since(start))
	if arch, err := f.String("general.architecture"); err != nil || arch != "qwen2" {
		t.Errorf("architecture %q, %v", arch, err)
	}
	toks, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil || len(toks) != 151936 {
		t.Errorf("%d tokens, %v; want 151936", len(toks), err)
	}
	te, ok := f.Tensor("token_embd.weight")
	if !ok {
		t.Fatal("no token_embd.weight")
	}
	if te.Type != quant.F16 || !equalDims(te.Dims, []uint64{256, 151936}) {
		t.Errorf("token_embd.weight is %s %v, want F16 [256 151936]", te.Type, te.Dims)
	}
	if d := f.Data(te); uint64(len(d)) != 256*151936*2 {
		t.Errorf("token_embd.weight data is %d bytes", len(d))
	}
}

func BenchmarkOpen_RealModel(b *testing.B) {
	const path = "../../../shared/models/tiny-code-f16.gguf"
	if _, err := os.Stat(path); err != nil {
		b.Skipf("real model absent (%v)", err)
	}
	for b.Loop() {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
