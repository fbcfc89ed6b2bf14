package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/minfer-go/minfer/schema"
	"github.com/minfer-go/minfer/version"
)

// Every command that reads a model takes -m/--model (quantize's IN.gguf is
// positional by design), and every Short starts lowercase.
func TestCommands_ModelFlagEverywhereAndShortsInOneStyle(t *testing.T) {
	root := newRoot(&app{})
	readsModel := map[string]bool{"bench": true, "chat": true, "generate": true, "info": true, "logits": true, "tokenize": true}
	for _, c := range root.Commands() {
		name := c.Name()
		if c.Hidden {
			continue
		}
		if r := []rune(c.Short); len(r) == 0 || !unicode.IsLower(r[0]) {
			t.Errorf("%s: Short %q does not start lowercase", name, c.Short)
		}
		if !strings.HasPrefix(c.Use, name+" [flags]") && name != "help" {
			t.Errorf("%s: Use %q, want %q first", name, c.Use, name+" [flags]")
		}
		f := c.Flags().Lookup("model")
		if readsModel[name] != (f != nil && f.Shorthand == "m") {
			t.Errorf("%s: -m/--model %v, want %v", name, f != nil, readsModel[name])
		}
	}
}

func TestVersion_PrintsTheVersionPackagesLine(t *testing.T) {
	stdout, stderr, code := runCLI(t, testConfig(t), "--version")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := version.String("minfer") + "\n"; stdout != want {
		t.Errorf("--version printed %q, want %q", stdout, want)
	}
	// -v stays free (quantize -v is --verbose).
	if _, _, code := runCLI(t, testConfig(t), "-v"); code != 2 {
		t.Errorf("-v: exit %d, want 2 (unknown flag)", code)
	}
}

func TestBench_OutputFlagWritesTheFormatToAFile(t *testing.T) {
	m := synthModel(t)
	file := filepath.Join(t.TempDir(), "bench.json")
	stdout, stderr, code := runCLI(t, testConfig(t), "bench", "--model", m, "--device", "cpu", "-p", "8", "-n", "2", "-r", "1",
		"--format", "json", "-o", file)
	if code != 0 || stdout != "" {
		t.Fatalf("exit %d, stdout %q: %s", code, stdout, stderr)
	}
	var b schema.Bench
	data, err := os.ReadFile(file)
	if err != nil || json.Unmarshal(data, &b) != nil || len(b.Tests) != 2 {
		t.Fatalf("-o %s: %v\n%s", file, err, data)
	}
	// --json is --format json.
	stdout, stderr, code = runCLI(t, testConfig(t), "bench", "--model", m, "--device", "cpu", "-p", "8", "-n", "0", "-r", "1", "--json")
	if code != 0 || json.Unmarshal([]byte(stdout), &b) != nil {
		t.Fatalf("--json: exit %d: %s\n%s", code, stderr, stdout)
	}
}

// bench -o json|md|csv was the format before -o meant a file: without
// --format it still selects the format, said on stderr; with --format it is
// a file of that name.
func TestBench_OldOutputFormatSpellingStillSelectsTheFormat(t *testing.T) {
	m := synthModel(t)
	args := []string{"bench", "--model", m, "--device", "cpu", "-p", "8", "-n", "0", "-r", "1"}
	stdout, stderr, code := runCLI(t, testConfig(t), append(args, "-o", "json")...)
	var b schema.Bench
	if code != 0 || json.Unmarshal([]byte(stdout), &b) != nil || !strings.Contains(stderr, "-o json is deprecated") {
		t.Fatalf("-o json: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
	t.Chdir(t.TempDir())
	stdout, stderr, code = runCLI(t, testConfig(t), append(args, "--format", "csv", "-o", "json")...)
	if code != 0 || stdout != "" {
		t.Fatalf("--format csv -o json: exit %d, stdout %q: %s", code, stdout, stderr)
	}
	if data, err := os.ReadFile("json"); err != nil || !strings.HasPrefix(string(data), "model,") {
		t.Fatalf("file json: %v\n%s", err, data)
	}
}

func TestInfo_ModelFlagPositionalAliasAndDefault(t *testing.T) {
	m := synthModel(t)
	infoOf := func(args ...string) (schema.Info, string) {
		t.Helper()
		stdout, stderr, code := runCLI(t, testConfig(t), append([]string{"info", "--json"}, args...)...)
		var in schema.Info
		if code != 0 || json.Unmarshal([]byte(stdout), &in) != nil {
			t.Fatalf("info %v: exit %d: %s\n%s", args, code, stderr, stdout)
		}
		return in, stderr
	}
	if in, stderr := infoOf("-m", m); in.Path != m || stderr != "" {
		t.Errorf("-m: path %q, stderr %q", in.Path, stderr)
	}
	if in, stderr := infoOf(m); in.Path != m || !strings.Contains(stderr, "deprecated") {
		t.Errorf("positional: path %q, stderr %q", in.Path, stderr)
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	if in, _ := infoOf(); !strings.Contains(in.Path, "minfer-default-") {
		t.Errorf("no model: path %q, want the embedded default", in.Path)
	}
	stdout, stderr, code := runCLI(t, testConfig(t), "info", "-m", m, m)
	wantOneLineFailure(t, stdout, stderr, code, 2, "give the model once")
}

func TestTokenize_ModelFlagAndDefault(t *testing.T) {
	m := synthModel(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	var docs []schema.Tokens
	for _, args := range [][]string{{"-m", m}, {"--model", m}, {}} {
		stdout, stderr, code := runCLI(t, testConfig(t), append(append([]string{"tokenize", "--json"}, args...), "hello world")...)
		var tk schema.Tokens
		if code != 0 || json.Unmarshal([]byte(stdout), &tk) != nil || len(tk.IDs) == 0 || len(tk.IDs) != len(tk.Pieces) {
			t.Fatalf("tokenize %v: exit %d: %s\n%s", args, code, stderr, stdout)
		}
		docs = append(docs, tk)
	}
	// The synthetic test model and the default share the generator's vocabulary.
	for _, d := range docs[1:] {
		if strings.Join(d.Pieces, "|") != strings.Join(docs[0].Pieces, "|") {
			t.Errorf("pieces %q, want %q", d.Pieces, docs[0].Pieces)
		}
	}
}
