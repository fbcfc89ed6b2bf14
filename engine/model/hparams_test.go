package model_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/synth"
)

// tmpl is a synthetic model every case starts from.
type tmpl struct {
	kvs     []gguf.KV
	tensors []tensor
}

type tensor struct {
	name string
	typ  quant.Type
	dims []uint64
}

func load(t *testing.T, shape string) tmpl {
	t.Helper()
	path := filepath.Join(t.TempDir(), shape+".gguf")
	if err := synth.Write(path, synth.Options{Shape: shape, Type: quant.F16, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var m tmpl
	m.kvs = append(m.kvs, f.KVs...)
	for _, ti := range f.Tensors {
		m.tensors = append(m.tensors, tensor{ti.Name, ti.Type, append([]uint64(nil), ti.Dims...)})
	}
	return m
}

// write writes m with zero tensor data and opens it.
func (m tmpl) write(t *testing.T) *gguf.File {
	t.Helper()
	w := gguf.NewWriter()
	for _, kv := range m.kvs {
		if err := w.Add(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	for _, ts := range m.tensors {
		n := uint64(1)
		for _, d := range ts.dims[1:] {
			n *= d
		}
		rb, err := ts.typ.RowBytes(int(ts.dims[0]))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensor(ts.name, ts.typ, ts.dims, make([]byte, uint64(rb)*n)); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func (m tmpl) setKV(key string, v gguf.Value) tmpl {
	out := tmpl{tensors: m.tensors}
	found := false
	for _, kv := range m.kvs {
		if kv.Key == key {
			kv.Value, found = v, true
		}
		out.kvs = append(out.kvs, kv)
	}
	if !found {
		out.kvs = append(out.kvs, gguf.KV{Key: key, Value: v})
	}
	return out
}

func (m tmpl) dropKV(key string) tmpl {
	out := tmpl{tensors: m.tensors}
	for _, kv := range m.kvs {
		if kv.Key != key {
			out.kvs = append(out.kvs, kv)
		}
	}
	return out
}

func (m tmpl) editTensor(name string, edit func(*tensor) bool) tmpl {
	out := tmpl{kvs: m.kvs}
	for _, ts := range m.tensors {
		ts.dims = append([]uint64(nil), ts.dims...)
		if ts.name == name && !edit(&ts) {
			continue
		}
		out.tensors = append(out.tensors, ts)
	}
	return out
}

func TestReadHParams_SynthShapesRoundTripEveryField(t *testing.T) {
	for _, shape := range []string{"qwen2-tiny", "qwen3-tiny"} {
		sh, _ := synth.ShapeByName(shape)
		hp, err := model.ReadHParams(load(t, shape).write(t))
		if err != nil {
			t.Fatalf("%s: %v", shape, err)
		}
		if want := sh.HParams(); hp != want {
			t.Errorf("%s:\n got %+v\nwant %+v", shape, hp, want)
		}
	}
}

func TestReadHParams_TinyCodeModel(t *testing.T) {
	f, err := gguf.Open("../../../shared/models/tiny-code-f16.gguf")
	if err != nil {
		t.Skipf("tiny-code model not available: %v", err)
	}
	defer f.Close()
	hp, err := model.ReadHParams(f)
	if err != nil {
		t.Fatal(err)
	}
	want := model.HParams{Arch: "qwen2", Name: "Tinycode", NVocab: 151936, NCtxTrain: 4096, NEmbd: 256, NLayer: 4, NHead: 4,
		NHeadKV: 2, HeadDim: 64, NFF: 704, RopeTheta: 1e6, RmsEps: 1e-6, RopeNeox: true, QKVBias: true, TiedOutput: true}
	if hp != want {
		t.Errorf("\n got %+v\nwant %+v", hp, want)
	}
}

func TestReadHParams_DefaultsForAbsentRopeBase(t *testing.T) {
	hp, err := model.ReadHParams(load(t, "qwen2-tiny").dropKV("qwen2.rope.freq_base").write(t))
	if err != nil {
		t.Fatal(err)
	}
	if hp.RopeTheta != 10000 {
		t.Errorf("rope theta %g, want 10000", hp.RopeTheta)
	}
}

func TestReadHParams_BadInputNamesTheCause(t *testing.T) {
	q2 := load(t, "qwen2-tiny")
	q3 := load(t, "qwen3-tiny")
	cases := []struct {
		name string
		m    tmpl
		want string
	}{
		{"unknown arch", q2.setKV("general.architecture", gguf.StringValue("llama")), `"llama"`},
		{"qwen2moe arch", q2.setKV("general.architecture", gguf.StringValue("qwen2moe")), `"qwen2moe"`},
		{"missing arch", q2.dropKV("general.architecture"), "general.architecture"},
		{"missing block_count", q2.dropKV("qwen2.block_count"), "qwen2.block_count"},
		{"zero heads", q2.setKV("qwen2.attention.head_count", gguf.Uint32Value(0)), "head_count"},
		{"kv not dividing heads", q2.setKV("qwen2.attention.head_count_kv", gguf.Uint32Value(3)), "head_count_kv 3"},
		{"string dim", q2.setKV("qwen2.embedding_length", gguf.StringValue("256")), "embedding_length"},
		{"missing eps", q2.dropKV("qwen2.attention.layer_norm_rms_epsilon"), "layer_norm_rms_epsilon"},
		{"odd head dim", q3.dropKV("qwen3.attention.value_length").setKV("qwen3.attention.key_length", gguf.Uint32Value(127)), "odd"},
		{"missing tensor", q2.editTensor("blk.1.ffn_up.weight", func(*tensor) bool { return false }), "blk.1.ffn_up.weight is missing"},
		{"missing bias", q2.editTensor("blk.1.attn_v.bias", func(*tensor) bool { return false }), "blk.1.attn_v.bias is missing"},
		{"missing token_embd", q2.editTensor("token_embd.weight", func(*tensor) bool { return false }), "token_embd.weight is missing"},
		{"wrong shape", q2.editTensor("blk.0.ffn_down.weight", func(ts *tensor) bool { ts.dims[1] = 128; return true }), "blk.0.ffn_down.weight has shape"},
		{"unsupported type", q2.editTensor("blk.0.attn_q.weight", func(ts *tensor) bool { ts.typ = quant.Q2_K; return true }), "blk.0.attn_q.weight has unsupported type Q2_K"},
		{"quantized norm", q2.editTensor("blk.0.ffn_norm.weight", func(ts *tensor) bool { ts.typ = quant.Q8_0; return true }), "blk.0.ffn_norm.weight is 1-D"},
		{"qwen3 without q norm", q3.editTensor("blk.0.attn_q_norm.weight", func(*tensor) bool { return false }), "attn_q_norm"},
		{"value_length differs", q3.setKV("qwen3.attention.value_length", gguf.Uint32Value(64)), "value_length 64"},
		{"value_length not a count", q3.setKV("qwen3.attention.value_length", gguf.StringValue("128")), "attention.value_length"},
		{"qwen3 key_length mismatch", q3.dropKV("qwen3.attention.value_length").setKV("qwen3.attention.key_length", gguf.Uint32Value(64)), "has shape"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := model.ReadHParams(c.m.write(t))
			if err == nil {
				t.Fatalf("accepted; want an error naming %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not name %q", err, c.want)
			}
		})
	}
}
