package oracle

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tinyCode is the trained test model, relative to this package.
var tinyCode = filepath.Join("..", "..", "..", "..", "shared", "models", "tiny-code-f16.gguf")

func tinyCodePath(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(tinyCode); err != nil {
		t.Skipf("test model absent (%v): ../shared/models/tiny-code-f16.gguf is needed", err)
	}
	return tinyCode
}

// Bar: the logits of a prefix do not depend on what follows it (causal
// attention), bitwise, since the oracle evaluates each position the same way.
func TestForward_PrefixLogitsAreCausalBitwise(t *testing.T) {
	for _, s := range []synthSpec{synthQwen2, synthQwen3} {
		m, err := Load(writeSynth(t, t.TempDir(), s))
		if err != nil {
			t.Fatal(err)
		}
		toks := []int32{1, 200, 17, 256, 3, 99, 42}
		full, err := m.Forward(toks)
		if err != nil {
			t.Fatal(err)
		}
		pre, err := m.Forward(toks[:4])
		if err != nil {
			t.Fatal(err)
		}
		for p := range pre {
			for i := range pre[p] {
				if pre[p][i] != full[p][i] || math.IsNaN(full[p][i]) {
					t.Fatalf("%s: pos %d logit %d: prefix %g, full %g", s.arch, p, i, pre[p][i], full[p][i])
				}
			}
		}
		if len(full) != len(toks) || len(full[0]) != m.HParams().NVocab {
			t.Fatalf("%s: logits %d x %d, want %d x %d", s.arch, len(full), len(full[0]), len(toks), m.HParams().NVocab)
		}
	}
}

func TestForward_RejectsBadTokensAndLoadRejectsBadFiles(t *testing.T) {
	m, err := Load(writeSynth(t, t.TempDir(), synthQwen2))
	if err != nil {
		t.Fatal(err)
	}
	for _, toks := range [][]int32{nil, {1, -1}, {int32(m.HParams().NVocab)}} {
		if _, err := m.Forward(toks); err == nil {
			t.Errorf("Forward(%v): no error", toks)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.gguf")); err == nil {
		t.Error("Load of a missing file: no error")
	}
	bad := filepath.Join(t.TempDir(), "bad.gguf")
	if err := os.WriteFile(bad, []byte("GGUF not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "oracle") {
		t.Errorf("Load of a bad file: %v", err)
	}
}

// Bar: on a 1-token context attention returns v exactly, so position 0 does
// not depend on rope or on q/k at all; Greedy agrees with Forward's argmax.
func TestGreedy_MatchesForwardArgmax(t *testing.T) {
	m, err := Load(writeSynth(t, t.TempDir(), synthQwen3))
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int32{5, 6, 7}
	got, err := m.Greedy(prompt, 4)
	if err != nil {
		t.Fatal(err)
	}
	seq := append([]int32(nil), prompt...)
	for i := 0; i < 4; i++ {
		l, err := m.Forward(seq)
		if err != nil {
			t.Fatal(err)
		}
		last := l[len(l)-1]
		best := 0
		for j := range last {
			if last[j] > last[best] {
				best = j
			}
		}
		if got[i] != int32(best) {
			t.Fatalf("step %d: Greedy %d, Forward argmax %d", i, got[i], best)
		}
		seq = append(seq, int32(best))
	}
}
