package model_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/synth"
)

// q8 is the Q8_0 size of n elements: 34 bytes per 32.
func q8(n uint64) uint64 { return n / 32 * 34 }

func decodeReadOf(t *testing.T, shape string) model.DecodeRead {
	t.Helper()
	ty, mix, err := synth.ParseType("Q8_0")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), shape+".gguf")
	if err := synth.Write(p, synth.Options{Shape: shape, Type: ty, Mix: mix, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := model.ReadHParams(f)
	if err != nil {
		t.Fatal(err)
	}
	d, err := model.DecodeReadOf(f, h)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The hand count, tensor by tensor (DEVICE.md's "weight bytes per token").
func TestDecodeRead_HandCountedTiedAndUntiedQ8_0(t *testing.T) {
	// qwen2-tiny (tied): E 256, 2 layers, 4 heads of 64, 2 KV heads, FFN 512,
	// vocab 512, q/k/v biases: q 256x256 + k, v 256x128 + o 256x256 + gate,
	// up, down 256x512 per layer, plus F32 norms and biases.
	layer := q8(256*256+256*128+256*128+256*256+3*256*512) + 4*(256+256+256+128+128)
	want := 2*layer + 4*256 + q8(512*256) + q8(256) // output_norm, tied output, one embedding row
	if d := decodeReadOf(t, "qwen2-tiny"); d.WeightBytes != want || !strings.Contains(d.Method, "tied output") || d.KVElemsPerPos != 2*2*2*64 {
		t.Fatalf("qwen2-tiny: %+v, want %d bytes", d, want)
	}
	// qwen3-tiny (untied): 4 heads of 128, 2 KV heads, FFN 768, QK norms, no
	// biases; output.weight 256x512 read in full, token_embd one row.
	layer = q8(256*512+256*256+256*256+512*256+3*256*768) + 4*(256+256+128+128)
	want = 2*layer + 4*256 + q8(256*512) + q8(256)
	if d := decodeReadOf(t, "qwen3-tiny"); d.WeightBytes != want || !strings.Contains(d.Method, "token_embd one row") || d.KVElemsPerPos != 2*2*2*128 {
		t.Fatalf("qwen3-tiny: %+v, want %d bytes", d, want)
	}
}
