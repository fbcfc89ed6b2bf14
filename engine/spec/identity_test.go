package spec_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quantize"
	"github.com/minfer-go/minfer/engine/sample"
	"github.com/minfer-go/minfer/engine/spec"
)

// The greedy-identity gate of speculative decoding (GATES.md gate 2): on
// the trained tiny-code model, greedy decoding with a draft gives exactly
// the token ids of plain greedy decoding, for every drafter: the model
// itself (every draft accepted), its Q8_0 and Q4_0 copies (real, partial
// acceptance) and prompt lookup. A mismatch is a FAIL, never a tolerance.

const realModel = "../../../shared/models/tiny-code-f16.gguf"

// identityPrompts are code prompts, one of them long (a few hundred
// tokens, with the repetition prompt lookup feeds on).
func identityPrompts() []string {
	long := strings.Repeat(`class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.pop()

`, 6) + "class Queue:\n    def __init__(self):\n"
	return []string{
		"class Config:\n    def __init__(self",
		"def fibonacci(n):\n",
		"import os\nimport sys\n\n\ndef main(",
		long,
	}
}

const identityN = 32

func loadReal(t *testing.T, path string) *model.Engine {
	t.Helper()
	e, err := model.Load(path, model.Options{Device: "cpu", NCtx: 512, Levers: levers.Default()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// realPair is the target and its drafters: the model itself, its Q8_0
// and Q4_0 copies, and lookup.
func realPair(t *testing.T) (*model.Engine, map[string]spec.Drafter) {
	t.Helper()
	if _, err := os.Stat(realModel); err != nil {
		t.Skipf("real model absent (%s): %v", realModel, err)
	}
	target := loadReal(t, realModel)
	drafters := map[string]spec.Drafter{
		"f16-self": spec.NewModel(loadReal(t, realModel), "f16-self"),
		"lookup":   spec.DefaultLookup(),
	}
	dir := t.TempDir()
	for _, typ := range []string{"Q8_0", "Q4_0"} {
		p := filepath.Join(dir, typ+".gguf")
		if err := quantize.File(realModel, p, typ, quantize.Options{}); err != nil {
			t.Fatal(err)
		}
		drafters[strings.ToLower(typ)] = spec.NewModel(loadReal(t, p), strings.ToLower(typ))
	}
	return target, drafters
}

// greedy is `minfer generate --greedy --repeat-penalty 1.0 -n n` of prompt
// on target: one token a forward (dec nil) or through dec's steps.
func greedy(target *model.Engine, dec *spec.Decoder, prompt []int32, n int) ([]int32, error) {
	target.Reset()
	smp := sample.New(sample.Params{Greedy: true, RepeatPenalty: 1})
	logits, err := target.Forward(prompt, false)
	if err != nil {
		return nil, err
	}
	hist := append([]int32(nil), prompt...)
	hist = append(hist, smp.Sample(logits, hist))
	for len(hist)-len(prompt) < n {
		if dec == nil {
			if logits, err = target.Forward(hist[len(hist)-1:], false); err != nil {
				return nil, err
			}
			hist = append(hist, smp.Sample(logits, hist))
			continue
		}
		err := dec.Step(hist, n-(len(hist)-len(prompt)),
			func(row []float32) int32 { return smp.Sample(row, hist) },
			func(id int32) (bool, error) {
				hist = append(hist, id)
				return len(hist)-len(prompt) < n, nil
			})
		if err != nil {
			return nil, err
		}
	}
	return hist[len(prompt):], nil
}

// firstMismatch says where drafted decoding left plain decoding ("": it
// never did).
func firstMismatch(plain, drafted []int32) string {
	for i := range max(len(plain), len(drafted)) {
		if i >= len(plain) || i >= len(drafted) || plain[i] != drafted[i] {
			at := func(g []int32) string {
				if i < len(g) {
					return fmt.Sprint(g[i])
				}
				return "nothing"
			}
			return fmt.Sprintf("step %d: plain %s, drafted %s", i, at(plain), at(drafted))
		}
	}
	return ""
}

// identity runs the gate with opts (K = 4) for each drafter on the
// prompts it names (indexes into identityPrompts); it returns the
// mismatches and logs each pair's acceptance.
func identity(t *testing.T, target *model.Engine, drafters map[string]spec.Drafter, opts spec.Options, runs map[string][]int) []string {
	t.Helper()
	tok := target.Tokenizer()
	opts.NVocab = target.HParams().NVocab
	prompts := identityPrompts()
	plain := map[int][]int32{}
	var bad []string
	for _, name := range slices.Sorted(maps.Keys(runs)) {
		for _, pi := range runs[name] {
			prompt := tok.Encode(prompts[pi], false)
			if plain[pi] == nil {
				ids, err := greedy(target, nil, prompt, identityN)
				if err != nil {
					t.Fatal(err)
				}
				plain[pi] = ids
			}
			dec, err := spec.New(target, drafters[name], opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := greedy(target, dec, prompt, identityN)
			if err != nil {
				t.Fatalf("prompt %d, draft %s: %v", pi, name, err)
			}
			st := dec.Stats()
			t.Logf("prompt %d (%d tokens), draft %-8s: accepted %3d of %3d (%.2f), %.2f tokens per target forward",
				pi, len(prompt), name, st.Accepted, st.Drafted, st.AcceptanceRate(), st.TokensPerForward())
			if m := firstMismatch(plain[pi], got); m != "" {
				bad = append(bad, fmt.Sprintf("prompt %d, draft %s: %s", pi, name, m))
			}
		}
	}
	return bad
}

// TestGreedyIdentity_DraftedDecodingGivesThePlainTokenIDs is the gate; its
// planted-defect subtest shows that it can fail: a draft check that
// accepts one wrong token (spec.Options.AcceptWrongDraft) turns it red.
// (The CPU runs this model at ~12 tok/s on two cores: the model drafters
// run on three prompts, the model itself on one, where it can only agree.)
func TestGreedyIdentity_DraftedDecodingGivesThePlainTokenIDs(t *testing.T) {
	target, drafters := realPair(t)
	t.Run("identity", func(t *testing.T) {
		runs := map[string][]int{"f16-self": {0}, "q8_0": {0, 1, 3}, "q4_0": {0, 1, 3}, "lookup": {0, 1, 2, 3}}
		for _, m := range identity(t, target, drafters, spec.Options{K: 4}, runs) {
			t.Error(m)
		}
	})
	t.Run("planted-defect", func(t *testing.T) {
		runs := map[string][]int{"q4_0": {0}, "lookup": {0}}
		bad := identity(t, target, drafters, spec.Options{K: 4, AcceptWrongDraft: true}, runs)
		for _, m := range bad {
			t.Logf("caught: %s", m)
		}
		if len(bad) != 2 {
			t.Fatalf("the identity gate caught %d of the 2 runs with a draft check that accepts a wrong token", len(bad))
		}
	})
}
