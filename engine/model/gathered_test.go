package model_test

import (
	"path/filepath"
	"testing"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/synth"
)

// TestGraphWeights_OnlyTheUntiedEmbeddingIsGathered: the registration rule
// marks token_embd.weight as gathered only (graph.Weight.Gathered, and the
// plan's memplan.Tensor.Gathered) when the model has an output matrix of
// its own (qwen3-tiny); with a tied output (qwen2-tiny) the logits matmul
// reads it, so nothing is gathered only.
func TestGraphWeights_OnlyTheUntiedEmbeddingIsGathered(t *testing.T) {
	for shape, want := range map[string]bool{"qwen3-tiny": true, "qwen2-tiny": false} {
		p := filepath.Join(t.TempDir(), shape+".gguf")
		if err := synth.Write(p, synth.Options{Shape: shape, Type: quant.Q8_0, Seed: 1}); err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		h, err := model.ReadHParams(f)
		if err != nil {
			t.Fatal(err)
		}
		ws, err := model.GraphWeights(f, h)
		if err != nil {
			t.Fatal(err)
		}
		ts, err := model.MemoryTensors(f, h)
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range ws {
			wantW := want && w.Name == "token_embd.weight"
			if w.Gathered != wantW || ts[i].Gathered != wantW || ts[i].Name != w.Name {
				t.Errorf("%s %s: gathered %v (plan %s %v), want %v", shape, w.Name, w.Gathered, ts[i].Name, ts[i].Gathered, wantW)
			}
		}
		f.Close()
	}
}
