package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/synth"
	"github.com/minfer-go/minfer/schema"
)

// runCLI runs minfer with args under cfg, as main's run does, and returns
// stdout, stderr and the exit code.
func runCLI(t *testing.T, cfg levers.Config, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runApp(t, &app{cfg: cfg}, args...)
}

// runApp is runCLI with the app given (its instrumentation is read after).
func runApp(t *testing.T, a *app, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRoot(a)
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		errb.WriteString("minfer: " + err.Error() + "\n")
		code = exitCode(err)
	}
	return out.String(), errb.String(), code
}

// testConfig is the lever config of the tests: no bench warmup budget.
func testConfig(t *testing.T) levers.Config {
	t.Helper()
	cfg, err := levers.Parse([]string{"MINFER_BENCH_WARMUP_MS=0"})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// synthModel writes the default synthetic model shape (qwen2-tiny, F16) to
// a temporary directory.
func synthModel(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qwen2-tiny-f16.gguf")
	if err := synth.Write(path, synth.Options{Shape: "qwen2-tiny", Type: quant.F16, Seed: 1, Workers: 1}); err != nil {
		t.Fatal(err)
	}
	return path
}

// wantOneLineFailure checks a failing run: the code, nothing on stdout and
// exactly one line on stderr containing want.
func wantOneLineFailure(t *testing.T, stdout, stderr string, code, wantCode int, want string) {
	t.Helper()
	if code != wantCode {
		t.Errorf("exit code %d, want %d (stderr %q)", code, wantCode, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout %q, want nothing", stdout)
	}
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Errorf("stderr is not one line: %q", stderr)
	}
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr %q does not mention %q", stderr, want)
	}
}

func TestGenerate_JSONHasSchemaAndGreedyIsReproducible(t *testing.T) {
	m := synthModel(t)
	cfg := testConfig(t)
	args := []string{"generate", "--model", m, "--device", "cpu", "--greedy", "-n", "8", "--json", "def main():"}
	out1, errs, code := runCLI(t, cfg, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out1), &raw); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out1)
	}
	for _, k := range []string{"model", "prompt", "prompt_ids", "ids", "text", "n_prompt", "n_gen", "prefill_ms",
		"decode_ms", "prefill_tok_s", "decode_tok_s", "backend", "kv_format", "levers"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	var res schema.Generate
	if err := json.Unmarshal([]byte(out1), &res); err != nil {
		t.Fatal(err)
	}
	if res.NGen != len(res.IDs) || res.NGen < 1 || res.NGen > 8 || res.NPrompt != len(res.PromptIDs) || res.NPrompt == 0 {
		t.Errorf("inconsistent counts: n_gen %d ids %d n_prompt %d prompt_ids %d", res.NGen, len(res.IDs), res.NPrompt, len(res.PromptIDs))
	}
	if res.Levers["MINFER_BENCH_WARMUP_MS"] != "0" {
		t.Errorf("levers %v lack the set value", res.Levers)
	}
	out2, _, _ := runCLI(t, cfg, args...)
	var res2 schema.Generate
	if err := json.Unmarshal([]byte(out2), &res2); err != nil {
		t.Fatal(err)
	}
	if !equalIDs(res.IDs, res2.IDs) {
		t.Errorf("greedy runs differ: %v vs %v", res.IDs, res2.IDs)
	}

	// The streamed text is the JSON text plus a final newline.
	stream, errs, code := runCLI(t, cfg, "generate", "--model", m, "--device", "cpu", "--greedy", "-n", "8", "def main():")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if stream != res.Text+"\n" {
		t.Errorf("streamed %q, JSON text %q", stream, res.Text)
	}
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestGenerate_SeededSamplingIsReproducibleAndChatWraps(t *testing.T) {
	m := synthModel(t)
	cfg := testConfig(t)
	args := []string{"generate", "--model", m, "--device", "cpu", "--seed", "7", "--temp", "0.9", "--top-k", "20",
		"--top-p", "0.9", "-n", "6", "--chat", "--json", "hi"}
	out1, errs, code := runCLI(t, cfg, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	out2, _, _ := runCLI(t, cfg, args...)
	var a, b schema.Generate
	if json.Unmarshal([]byte(out1), &a) != nil || json.Unmarshal([]byte(out2), &b) != nil {
		t.Fatalf("bad JSON: %s", out1)
	}
	if !equalIDs(a.IDs, b.IDs) {
		t.Errorf("same seed, different ids: %v vs %v", a.IDs, b.IDs)
	}
	plain, _, _ := runCLI(t, cfg, "generate", "--model", m, "--device", "cpu", "-n", "1", "--json", "hi")
	var p schema.Generate
	if err := json.Unmarshal([]byte(plain), &p); err != nil {
		t.Fatal(err)
	}
	if a.NPrompt <= p.NPrompt {
		t.Errorf("--chat prompt has %d tokens, plain %d: the template was not applied", a.NPrompt, p.NPrompt)
	}
}

func TestGenerate_PromptLongerThanCtxFailsBeforeCompute(t *testing.T) {
	m := synthModel(t)
	stdout, stderr, code := runCLI(t, testConfig(t), "generate", "--model", m, "--device", "cpu", "--ctx", "4",
		"this prompt is certainly longer than four tokens")
	wantOneLineFailure(t, stdout, stderr, code, 1, "does not fit the context of 4")
}

func TestGenerate_UnknownDeviceIsUsageError(t *testing.T) {
	stdout, stderr, code := runCLI(t, testConfig(t), "generate", "--model", "x.gguf", "--device", "tpu", "hello")
	wantOneLineFailure(t, stdout, stderr, code, 2, `--device "tpu"`)
}

func TestGenerate_MissingModelFileFailsWithOneLine(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.gguf")
	stdout, stderr, code := runCLI(t, testConfig(t), "generate", "--model", missing, "hello")
	wantOneLineFailure(t, stdout, stderr, code, 1, "absent.gguf")
}

func TestCompleteUTF8_HoldsBackIncompleteSequences(t *testing.T) {
	euro := "\u20ac"      // 3 bytes
	emoji := "\U0001F600" // 4 bytes
	cases := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"abc", 3},
		{"a" + euro, 4},
		{"a" + euro[:1], 1},
		{"a" + euro[:2], 1},
		{emoji[:3], 0},
		{"x" + emoji, 5},
		{"\xff", 1},  // invalid: flushed, not held
		{"\x80", 1},  // lone continuation byte
		{"é"[:1], 0}, // 2-byte lead alone
	}
	for _, c := range cases {
		if got := completeUTF8([]byte(c.in)); got != c.want {
			t.Errorf("completeUTF8(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestGenerate_WithoutModelUsesTheDefaultModel(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // the default model is written here
	stdout, stderr, code := runCLI(t, testConfig(t), "generate", "--device", "cpu", "--greedy", "-n", "3", "--json", "hi")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res schema.Generate
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, stdout)
	}
	if !strings.Contains(res.Model, "minfer-default-") || res.NGen == 0 {
		t.Errorf("model %q, n_gen %d", res.Model, res.NGen)
	}
}

// A sampler flag with no meaning is refused before the model loads, instead
// of silently running another chain (top-p 2 used to mean "off").
func TestGenerate_BadSamplerFlagsAreUsageErrors(t *testing.T) {
	cfg := testConfig(t)
	for _, c := range []struct {
		flag, value, want string
	}{
		{"--top-p", "2", "top-p 2"},
		{"--top-p", "NaN", "top-p NaN"},
		{"--top-k", "-1", "top-k -1"},
		{"--repeat-penalty", "-1.1", "repeat penalty -1.1"},
		{"--repeat-last-n", "-2", "repeat window -2"},
		{"--temp", "+Inf", "temperature +Inf"},
	} {
		stdout, stderr, code := runCLI(t, cfg, "generate", "--model", "/nonexistent/m.gguf", c.flag, c.value, "hi")
		wantOneLineFailure(t, stdout, stderr, code, 2, c.want)
	}
}
