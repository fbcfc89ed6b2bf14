package gguf

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"testing"

	"github.com/minfer-go/minfer/engine/quant"
)

// img crafts raw GGUF bytes for malformed-input tests.
type img struct{ b []byte }

func header(version uint32, nTensors, nKV uint64) *img {
	m := &img{b: []byte(Magic)}
	return m.u32(version).u64(nTensors).u64(nKV)
}

func (m *img) u8(x uint8) *img   { m.b = append(m.b, x); return m }
func (m *img) u32(x uint32) *img { m.b = binary.LittleEndian.AppendUint32(m.b, x); return m }
func (m *img) u64(x uint64) *img { m.b = binary.LittleEndian.AppendUint64(m.b, x); return m }
func (m *img) raw(s string) *img { m.b = append(m.b, s...); return m }
func (m *img) str(s string) *img { return m.u64(uint64(len(s))).raw(s) }
func (m *img) zeros(n int) *img  { m.b = append(m.b, make([]byte, n)...); return m }

func (m *img) kvU32(key string, x uint32) *img {
	return m.str(key).u32(uint32(TypeUint32)).u32(x)
}

func (m *img) tensor(name string, dims []uint64, typ quant.Type, off uint64) *img {
	m.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		m.u64(d)
	}
	return m.u32(uint32(typ)).u64(off)
}

// align pads with zeros to a multiple of a.
func (m *img) align(a int) *img {
	for len(m.b)%a != 0 {
		m.b = append(m.b, 0)
	}
	return m
}

// allValues is one metadata value of every type, arrays of every element
// type (empty ones too) and nested arrays.
func allValues(t testing.TB) []KV {
	// Inner arrays of a nested array may differ in element type.
	nested, err := ArrayValue(TypeArray, []Value{Int32sValue([]int32{1, 2}), Int32sValue(nil), StringsValue([]string{"x", ""})})
	if err != nil {
		t.Fatal(err)
	}
	deep, err := ArrayValue(TypeArray, []Value{nested, nested})
	if err != nil {
		t.Fatal(err)
	}
	return []KV{
		{"t.u8", Uint8Value(200)},
		{"t.i8", Int8Value(-100)},
		{"t.u16", Uint16Value(60000)},
		{"t.i16", Int16Value(-30000)},
		{"t.u32", Uint32Value(4000000000)},
		{"t.i32", Int32Value(-2000000000)},
		{"t.f32", Float32Value(1e-6)},
		{"t.bool", BoolValue(true)},
		{"t.string", StringValue("héllo\x00world")},
		{"t.emptystring", StringValue("")},
		{"t.u64", Uint64Value(math.MaxUint64)},
		{"t.i64", Int64Value(math.MinInt64)},
		{"t.f64", Float64Value(math.Pi)},
		{"a.u8", Uint8sValue([]uint8{0, 1, 255})},
		{"a.i8", Int8sValue([]int8{-128, 0, 127})},
		{"a.u16", Uint16sValue([]uint16{0, 65535})},
		{"a.i16", Int16sValue([]int16{-32768, 32767})},
		{"a.u32", Uint32sValue([]uint32{0, math.MaxUint32})},
		{"a.i32", Int32sValue([]int32{math.MinInt32, -1, 0, math.MaxInt32})},
		{"a.f32", Float32sValue([]float32{1.5, float32(math.Inf(-1)), 0})},
		{"a.bool", BoolsValue([]bool{true, false, true})},
		{"a.string", StringsValue([]string{"Ġ Ġ", "", "<|im_end|>"})},
		{"a.u64", Uint64sValue([]uint64{math.MaxUint64})},
		{"a.i64", Int64sValue([]int64{math.MinInt64, math.MaxInt64})},
		{"a.f64", Float64sValue([]float64{math.E, -0.0})},
		{"a.empty", Float32sValue(nil)},
		{"a.emptystrings", StringsValue(nil)},
		{"a.nested", nested},
		{"a.deep", deep},
	}
}

type testTensor struct {
	name string
	typ  quant.Type
	dims []uint64
	data []byte
}

func testTensors() []testTensor {
	mk := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i*7)
		}
		return b
	}
	return []testTensor{
		{"token_embd.weight", quant.F32, []uint64{4, 3}, mk(4*3*4, 1)},
		{"blk.0.attn_q.weight", quant.Q8_0, []uint64{64, 2}, mk(2*2*34, 2)},
		{"blk.0.attn_norm.weight", quant.F16, []uint64{5}, mk(10, 3)},
		{"blk.0.ffn_down.weight", quant.Q4_K, []uint64{256, 1, 1, 2}, mk(2*144, 4)},
	}
}

// buildWriter holds every KV type and the test tensors (the last one
// streamed through AddTensorFunc).
func buildWriter(t testing.TB) *Writer {
	w := NewWriter()
	w.AddString("general.architecture", "qwen2")
	for _, kv := range allValues(t) {
		if err := w.Add(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	ts := testTensors()
	for i, tt := range ts {
		var err error
		if i == len(ts)-1 {
			data := tt.data
			err = w.AddTensorFunc(tt.name, tt.typ, tt.dims, func(out io.Writer) error {
				for len(data) > 0 { // in small pieces, like a quantizer would
					n := min(len(data), 50)
					if _, err := out.Write(data[:n]); err != nil {
						return err
					}
					data = data[n:]
				}
				return nil
			})
		} else {
			err = w.AddTensor(tt.name, tt.typ, tt.dims, tt.data)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func buildImage(t testing.TB) []byte {
	var buf bytes.Buffer
	n, err := buildWriter(t).WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d", n, buf.Len())
	}
	return buf.Bytes()
}
