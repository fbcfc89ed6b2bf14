package main

import (
	"encoding/csv"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// The JSON schema of minfer bench, as the gate runner reads it: every key
// of the document, of warmup and of each test.
var (
	benchKeys       = []string{"model", "model_sha256", "backend", "kv_format", "threads", "n_prompt", "n_gen", "reps", "warmup", "tests", "levers", "go_version", "date"}
	benchWarmupKeys = []string{"budget_ms", "iterations", "elapsed_ms"}
	benchTestKeys   = []string{"name", "n_tokens", "samples_ms", "tok_s", "mean_tok_s", "stddev_tok_s"}
)

func hasKeys(t *testing.T, what string, m map[string]any, keys []string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s lacks %q", what, k)
		}
	}
}

func TestBench_JSONFollowsTheDocumentedSchema(t *testing.T) {
	m := synthModel(t)
	stdout, stderr, code := runCLI(t, testConfig(t), "bench", "--model", m, "--device", "cpu", "-p", "16", "-n", "4", "-r", "2", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, stdout)
	}
	hasKeys(t, "bench", doc, benchKeys)
	warm, _ := doc["warmup"].(map[string]any)
	hasKeys(t, "warmup", warm, benchWarmupKeys)
	if it, _ := warm["iterations"].(float64); it < minWarmupIterations {
		t.Errorf("warmup ran %v iterations, want at least %d", warm["iterations"], minWarmupIterations)
	}
	if b, _ := warm["budget_ms"].(float64); b != 0 {
		t.Errorf("warmup budget %v, want the configured 0", warm["budget_ms"])
	}
	if len(doc["model_sha256"].(string)) != 64 {
		t.Errorf("model_sha256 %q", doc["model_sha256"])
	}
	tests, _ := doc["tests"].([]any)
	if len(tests) != 2 {
		t.Fatalf("tests: %v", doc["tests"])
	}
	for i, name := range []string{"pp16", "tg4"} {
		tt, _ := tests[i].(map[string]any)
		hasKeys(t, name, tt, benchTestKeys)
		if tt["name"] != name {
			t.Errorf("test %d is %v, want %s", i, tt["name"], name)
		}
		samples, _ := tt["samples_ms"].([]any)
		toks, _ := tt["tok_s"].([]any)
		if len(samples) != 2 || len(toks) != 2 {
			t.Errorf("%s: %d samples, %d rates, want 2 each", name, len(samples), len(toks))
		}
		for _, s := range toks {
			if v, _ := s.(float64); !(v > 0) {
				t.Errorf("%s: tok/s %v is not positive", name, s)
			}
		}
	}
	var res benchResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	if res.NPrompt != 16 || res.NGen != 4 || res.Reps != 2 || res.Tests[1].NTokens != 4 {
		t.Errorf("sizes: %+v", res)
	}
}

func TestBench_MarkdownAndCSVPrintEveryTest(t *testing.T) {
	m := synthModel(t)
	cfg := testConfig(t)
	md, stderr, code := runCLI(t, cfg, "bench", "--model", m, "--device", "cpu", "-p", "8", "-n", "2", "-r", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(md, "pp8") || !strings.Contains(md, "tg2") || !strings.Contains(md, "±") {
		t.Errorf("markdown:\n%s", md)
	}
	out, stderr, code := runCLI(t, cfg, "bench", "--model", m, "--device", "cpu", "-p", "8", "-n", "0", "-r", "2", "-o", "csv")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) != 2 || rows[1][5] != "pp8" {
		t.Fatalf("csv %v (%v):\n%s", rows, err, out)
	}
}

func TestBench_BadArgumentsFailWithOneLine(t *testing.T) {
	cfg := testConfig(t)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bench", "-o", "xml"}, 2, `-o "xml"`},
		{[]string{"bench", "-r", "0"}, 2, "-r 0"},
		{[]string{"bench", "-p", "0", "-n", "0"}, 2, "not both 0"},
		{[]string{"bench", "--device", "tpu", "--model", "x.gguf"}, 2, "--device"},
		{[]string{"bench", "-p", "64", "--ctx", "32", "--model", "x.gguf"}, 1, "do not fit the context"},
		{[]string{"bench", "--model", "/nonexistent/m.gguf"}, 1, "m.gguf"},
	}
	for _, c := range cases {
		stdout, stderr, code := runCLI(t, cfg, c.args...)
		wantOneLineFailure(t, stdout, stderr, code, c.code, c.want)
	}
}

func TestMeanStddev_MatchesKnownValues(t *testing.T) {
	mean, sd := meanStddev([]float64{2, 4, 4, 4, 5, 5, 7, 9})
	if mean != 5 || math.Abs(sd-math.Sqrt(32.0/7)) > 1e-12 {
		t.Errorf("mean %g sd %g, want 5 and sqrt(32/7)", mean, sd)
	}
	if m, s := meanStddev([]float64{3}); m != 3 || s != 0 {
		t.Errorf("single: %g %g", m, s)
	}
	if m, s := meanStddev(nil); m != 0 || s != 0 {
		t.Errorf("empty: %g %g", m, s)
	}
}
