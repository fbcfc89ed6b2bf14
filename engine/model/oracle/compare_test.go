package oracle

import (
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/minfer-go/minfer/engine/model"
)

// fibPrompt is the ~40-token Python prompt of the logits comparison.
const fibPrompt = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci("

// greedyPins are the first 32 greedy tokens of tiny-code-f16 after each
// prompt, recorded from the oracle's greedy decode (smallest top-2 margin on
// the way: 0.123 and 0.035), with the prompt ids the Qwen2 tokenizer gives.
var greedyPins = []struct {
	prompt    string
	promptIDs []int32
	ids       []int32
}{
	{
		"class Config:\n    def __init__(self",
		[]int32{1040, 5532, 510, 262, 707, 1304, 2327, 3804, 721},
		[]int32{11, 829, 25, 607, 11, 897, 25, 5765, 8, 1464, 2240, 510, 286, 656, 1436, 606, 284, 897, 271, 286, 656, 1436, 957, 284, 897, 271, 262, 707, 1304, 9588, 2991, 3804},
	},
	{
		"import os\nimport sys\n\n\ndef main(",
		[]int32{474, 2643, 198, 474, 5708, 1406, 750, 1887, 7},
		[]int32{16, 11, 220, 17, 982, 262, 4210, 2271, 429, 279, 1887, 6337, 374, 264, 4285, 6337, 382, 262, 1096, 729, 374, 2598, 389, 279, 1887, 6337, 11, 714, 582, 646, 198, 262},
	},
}

// tinyOracle is the oracle of tiny-code, loaded once per test binary (its
// load takes seconds); tests only read it.
var tinyOracle struct {
	once sync.Once
	m    *Model
	err  error
}

// loadBoth loads path into the oracle and into the engine on the CPU.
func loadBoth(t *testing.T, path string) (*Model, *model.Engine) {
	t.Helper()
	var o *Model
	var err error
	if path == tinyCode {
		if testing.Short() {
			t.Skip("-short: the tiny-code comparison takes ~15 s")
		}
		tinyOracle.once.Do(func() { tinyOracle.m, tinyOracle.err = Load(path) })
		o, err = tinyOracle.m, tinyOracle.err
	} else {
		o, err = Load(path)
	}
	if err != nil {
		t.Fatal(err)
	}
	e, err := model.Load(path, model.Options{Device: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return o, e
}

func argmax64(x []float64) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

func argmax32(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// compareLogits runs tokens through both from an empty context and checks
// max |engine - oracle| < 1e-3 and equal argmax at every position.
func compareLogits(t *testing.T, o *Model, e *model.Engine, tokens []int32) {
	t.Helper()
	want, err := o.Forward(tokens)
	if err != nil {
		t.Fatal(err)
	}
	e.Reset()
	got, err := e.Forward(tokens, true)
	if err != nil {
		t.Fatal(err)
	}
	nv := o.HParams().NVocab
	if len(got) != len(tokens)*nv {
		t.Fatalf("engine returned %d logits for %d positions of %d", len(got), len(tokens), nv)
	}
	worst := 0.0
	for p := range tokens {
		row := got[p*nv : (p+1)*nv]
		d := 0.0
		for i, w := range want[p] {
			d = math.Max(d, math.Abs(float64(row[i])-w))
		}
		worst = math.Max(worst, d)
		if !(d < 1e-3) {
			t.Errorf("position %d: max |engine - oracle| = %g, want < 1e-3", p, d)
		}
		if a, b := argmax32(row), argmax64(want[p]); a != b {
			t.Errorf("position %d: engine argmax %d, oracle %d", p, a, b)
		}
	}
	t.Logf("%d positions, max |diff| %.3g", len(tokens), worst)
}

func TestEngineLogits_TinyCodeMatchOracleWithin1e3(t *testing.T) {
	path := tinyCodePath(t)
	o, e := loadBoth(t, path)
	ids := e.Tokenizer().Encode(fibPrompt, false)
	if len(ids) < 30 {
		t.Fatalf("the prompt encodes to %d tokens, want ~40", len(ids))
	}
	compareLogits(t, o, e, ids)
}

func TestEngineLogits_SyntheticQwen2AndQwen3MatchOracleWithin1e3(t *testing.T) {
	for _, s := range []synthSpec{synthQwen2, synthQwen3} {
		t.Run(s.arch, func(t *testing.T) {
			o, e := loadBoth(t, writeSynth(t, t.TempDir(), s))
			tokens := make([]int32, 40)
			for i := range tokens {
				tokens[i] = int32((i*97 + 13) % o.HParams().NVocab)
			}
			compareLogits(t, o, e, tokens)
		})
	}
}

// Bar: the engine's greedy decode (prefill, then one token per step) and the
// oracle's (every step from an empty context, checked by teacher forcing:
// the argmax of each position of one causal forward over prompt+pins is the
// next pin) both give the pinned 32 ids.
func TestGreedy_TinyCodeFirst32TokensPinnedForEngineAndOracle(t *testing.T) {
	path := tinyCodePath(t)
	o, e := loadBoth(t, path)
	for _, pin := range greedyPins {
		ids := e.Tokenizer().Encode(pin.prompt, false)
		if !slices.Equal(ids, pin.promptIDs) {
			t.Fatalf("%q encodes to %v, pinned %v", pin.prompt, ids, pin.promptIDs)
		}

		// The oracle.
		seq := append(slices.Clone(ids), pin.ids...)
		all, err := o.Forward(seq[:len(seq)-1])
		if err != nil {
			t.Fatal(err)
		}
		var oracleIDs []int32
		for p := len(ids) - 1; p < len(seq)-1; p++ {
			oracleIDs = append(oracleIDs, argmax64(all[p]))
		}
		if !slices.Equal(oracleIDs, pin.ids) {
			t.Errorf("%q: oracle greedy %v, pinned %v", pin.prompt, oracleIDs, pin.ids)
		}

		// The engine.
		e.Reset()
		logits, err := e.Forward(ids, false)
		if err != nil {
			t.Fatal(err)
		}
		var engineIDs []int32
		for len(engineIDs) < len(pin.ids) {
			id := argmax32(logits)
			engineIDs = append(engineIDs, id)
			if logits, err = e.Forward([]int32{id}, false); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(engineIDs, pin.ids) {
			t.Errorf("%q: engine greedy %v, pinned %v", pin.prompt, engineIDs, pin.ids)
		}
	}
}
