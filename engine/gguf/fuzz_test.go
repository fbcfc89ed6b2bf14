package gguf

import (
	"bytes"
	"testing"
)

// FuzzParse: Parse never panics, and whatever it accepts is self-consistent
// and survives a Writer round trip.
func FuzzParse(f *testing.F) {
	f.Add(buildImage(f))
	small := NewWriter()
	small.AddString("general.architecture", "qwen2")
	small.AddStrings("tokenizer.ggml.tokens", []string{"a", "b"})
	small.AddTensor("w", 0, []uint64{2, 2}, make([]byte, 16))
	var buf bytes.Buffer
	if _, err := small.WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	for _, c := range badCases(f) {
		f.Add(c.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Parse("fuzz.gguf", data)
		if err != nil {
			return
		}
		w := NewWriter()
		if err := w.SetAlignment(uint32(g.Alignment)); err != nil && g.Alignment <= 1<<31 {
			t.Fatalf("accepted alignment %d refused by the writer: %v", g.Alignment, err)
		}
		for i := range g.Tensors {
			ti := &g.Tensors[i]
			d := g.Data(ti)
			if uint64(len(d)) != ti.Size {
				t.Fatalf("tensor %s: %d bytes of data, size %d", ti.Name, len(d), ti.Size)
			}
			if err := w.AddTensor(ti.Name, ti.Type, ti.Dims, d); err != nil {
				t.Fatalf("accepted tensor refused by the writer: %v", err)
			}
		}
		for _, kv := range g.KVs {
			_ = kv.Value.String()
			if kv.Key == KeyAlignment {
				continue
			}
			if err := w.Add(kv.Key, kv.Value); err != nil {
				t.Fatalf("accepted KV refused by the writer: %v", err)
			}
		}
		if g.Size() > 1<<20 || g.Alignment > 1<<12 {
			return
		}
		var out bytes.Buffer
		if _, err := w.WriteTo(&out); err != nil {
			t.Fatal(err)
		}
		h, err := Parse("rewritten.gguf", out.Bytes())
		if err != nil {
			t.Fatalf("re-written file does not parse: %v", err)
		}
		if len(h.KVs) != len(g.KVs) && len(h.KVs) != len(g.KVs)+1 || len(h.Tensors) != len(g.Tensors) {
			t.Fatalf("round trip changed counts: %d/%d KVs, %d/%d tensors", len(h.KVs), len(g.KVs), len(h.Tensors), len(g.Tensors))
		}
	})
}
