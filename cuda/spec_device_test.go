package cuda

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quantize"
	"github.com/minfer-go/minfer/engine/sample"
	"github.com/minfer-go/minfer/engine/spec"
)

// Speculative decoding on the device (engine/spec): the greedy-identity
// gate of issue 23. The target checks the drafts in one verify forward of
// 1+K tokens with every position's logits (multi-token matmuls, prefill
// attention) where plain decoding runs one token a forward (MMVQ, decode
// attention): the ids must still be the plain ones, a mismatch is a FAIL
// with the step and the target's top-2 margin there. The rollback is the
// engine's Truncate: the KV window is data the kernels read, so the device
// needs no call of its own.

var dsSpecPrompts = []string{
	"class Config:\n    def __init__(self",
	"def fibonacci(n):\n",
	strings.Repeat("    def push(self, item):\n        self.items.append(item)\n\n", 8) + "    def pop(self",
}

// dsSpecGreedy is greedy decoding of n tokens after prompt on e, one token
// a forward (dec nil) or through dec's steps, with the logits each token
// was drawn from.
func dsSpecGreedy(t *testing.T, e *model.Engine, dec *spec.Decoder, prompt []int32, n int) ([]int32, [][]float32) {
	t.Helper()
	e.Reset()
	logits, err := e.Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	hist := append(slices.Clone(prompt), sample.Argmax(logits))
	rows := [][]float32{logits}
	for len(hist)-len(prompt) < n {
		if dec == nil {
			if logits, err = e.Forward(hist[len(hist)-1:], false); err != nil {
				t.Fatal(err)
			}
			hist = append(hist, sample.Argmax(logits))
			rows = append(rows, logits)
			continue
		}
		err := dec.Step(hist, n-(len(hist)-len(prompt)),
			func(row []float32) int32 { rows = append(rows, slices.Clone(row)); return sample.Argmax(row) }, // valid until the next step
			func(id int32) (bool, error) {
				hist = append(hist, id)
				return len(hist)-len(prompt) < n, nil
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	return hist[len(prompt):], rows
}

func TestSpeculative_DeviceGreedyIdentityWithEveryDrafter(t *testing.T) {
	dsNeedDevice(t)
	path := dsTinyCode(t)
	target := dsEngine(t, path, "cuda", 512)
	drafters := map[string]spec.Drafter{
		"itself": spec.NewModel(dsEngine(t, path, "cuda", 512), "itself"),
		"lookup": spec.DefaultLookup(),
	}
	if strings.HasSuffix(path, "f16.gguf") { // quantized copies: real, partial acceptance
		for _, typ := range []string{"Q8_0", "Q4_0"} {
			p := filepath.Join(t.TempDir(), typ+".gguf")
			if err := quantize.File(path, p, typ, quantize.Options{}); err != nil {
				t.Fatal(err)
			}
			drafters[typ] = spec.NewModel(dsEngine(t, p, "cuda", 512), typ)
		}
	}
	tok := target.Tokenizer()
	for pi, text := range dsSpecPrompts {
		prompt := tok.Encode(text, false)
		plain, plainRows := dsSpecGreedy(t, target, nil, prompt, 32)
		for _, name := range slices.Sorted(maps.Keys(drafters)) {
			dec, err := spec.New(target, drafters[name], spec.Options{K: 4, NVocab: target.HParams().NVocab, FixedShape: true})
			if err != nil {
				t.Fatal(err)
			}
			got, _ := dsSpecGreedy(t, target, dec, prompt, 32)
			st := dec.Stats()
			t.Logf("prompt %d, draft %s: accepted %d of %d (%.2f), %.2f tokens per forward", pi, name, st.Accepted, st.Drafted, st.AcceptanceRate(), st.TokensPerForward())
			if i := dsFirstDiff(plain, got); i >= 0 {
				t.Errorf("prompt %d, draft %s: step %d: plain %d, drafted %s (plain top-2 margin there %.4f)",
					pi, name, i, plain[i], dsAt(got, i), dsTop2Margin(plainRows[i]))
			}
		}
	}
}

func dsFirstDiff(a, b []int32) int {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	return -1
}

func dsAt(g []int32, i int) string {
	if i < len(g) {
		return fmt.Sprint(g[i])
	}
	return "nothing"
}
