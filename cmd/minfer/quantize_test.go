package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/gguf"
)

// TestQuantize_UntieWritesTheEmbeddingAsOutputAndKeepsTheLogits: `quantize
// --untie` of the trained (tied) model writes output.weight with the token
// embedding's bytes, the file reads as untied, and its CPU logits are the
// tied file's bit for bit (so a correctness gate on it judges the same
// model). An untied input is refused in one line.
func TestQuantize_UntieWritesTheEmbeddingAsOutputAndKeepsTheLogits(t *testing.T) {
	in := "../../../shared/models/tiny-code-f16.gguf"
	if !fileExists(in) {
		t.Skip("../shared/models/tiny-code-f16.gguf not available")
	}
	cfg := testConfig(t)
	dir := t.TempDir()
	tied, untied := filepath.Join(dir, "tied.gguf"), filepath.Join(dir, "untied.gguf")
	for _, args := range [][]string{{"quantize", in, tied, "Q4_K_M"}, {"quantize", "--untie", in, untied, "Q4_K_M"}} {
		if _, stderr, code := runCLI(t, cfg, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
	}
	f, err := gguf.Open(untied)
	if err != nil {
		t.Fatal(err)
	}
	emb, okE := f.Tensor("token_embd.weight")
	out, okO := f.Tensor("output.weight")
	if !okE || !okO {
		f.Close()
		t.Fatalf("untied file: token_embd %v, output %v", okE, okO)
	}
	if emb.Type != out.Type || !bytes.Equal(f.Data(emb), f.Data(out)) {
		t.Errorf("output.weight (%s) is not the embedding's bytes (%s)", out.Type, emb.Type)
	}
	f.Close()
	for path, want := range map[string]string{tied: "tied output    true", untied: "tied output    false"} {
		stdout, stderr, code := runCLI(t, cfg, "info", "--model", path)
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("info %s: exit %d, want %q in:\n%s%s", filepath.Base(path), code, want, stdout, stderr)
		}
	}
	var rows [2][]byte
	for i, m := range []string{tied, untied} {
		o := filepath.Join(dir, filepath.Base(m)+".f32")
		if _, stderr, code := runCLI(t, cfg, "logits", "--model", m, "--device", "cpu", "--ids", "785,1809,220,16", "-o", o); code != 0 {
			t.Fatalf("logits %s: exit %d: %s", m, code, stderr)
		}
		if rows[i], err = os.ReadFile(o); err != nil {
			t.Fatal(err)
		}
	}
	if len(rows[0]) == 0 || !bytes.Equal(rows[0], rows[1]) {
		t.Errorf("logits differ between the tied and the untied file (%d and %d bytes)", len(rows[0]), len(rows[1]))
	}
	_, stderr, code := runCLI(t, cfg, "quantize", "--untie", untied, filepath.Join(dir, "again.gguf"), "Q8_0")
	if code == 0 || !strings.Contains(stderr, "has an output matrix of its own") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
		t.Errorf("--untie of an untied file: exit %d, stderr %q", code, stderr)
	}
}
