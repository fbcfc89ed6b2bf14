package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/synth"
	"github.com/minfer-go/minfer/schema"
)

// minfer runs the CLI in-process and returns stdout, stderr and the error.
func minfer(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := newRoot(&app{})
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errb.String(), err
}

func TestInfo_JSONRoundTripsEveryHParamsFieldOfSynthOutput(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ shape, typ string }{{"qwen2-tiny", "F16"}, {"qwen3-tiny", "Q4_K_M"}} {
		path := filepath.Join(dir, c.shape+".gguf")
		if _, _, err := minfer(t, "synth", "--shape", c.shape, "--type", c.typ, "--seed", "9", "-o", path); err != nil {
			t.Fatalf("synth: %v", err)
		}
		out, _, err := minfer(t, "info", "-m", path, "--json")
		if err != nil {
			t.Fatalf("info: %v", err)
		}
		var got schema.Info
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("info --json: %v\n%s", err, out)
		}
		sh, _ := synth.ShapeByName(c.shape)
		if want := hparamsDoc(sh.HParams()); got.HParams != want {
			t.Errorf("%s: hparams\n got %+v\nwant %+v", c.shape, got.HParams, want)
		}
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		hp, err := model.ReadHParams(f)
		f.Close()
		if err != nil || hparamsDoc(hp) != got.HParams {
			t.Errorf("%s: ReadHParams %+v, %v; info %+v", c.shape, hp, err, got.HParams)
		}
		if got.GGUFVersion != 3 || got.FileSize <= 0 || got.Tensors != len(sh.HParams().Tensors()) || got.FileType != c.typ {
			t.Errorf("%s: info %+v", c.shape, got)
		}
		if got.Tokenizer.Model != "gpt2" || got.Tokenizer.Pre != "qwen2" || got.Tokenizer.NVocab != 512 || got.Tokenizer.NSpecial != 3 {
			t.Errorf("%s: tokenizer %+v", c.shape, got.Tokenizer)
		}
		text, _, err := minfer(t, "info", "-m", path)
		if err != nil || !strings.Contains(text, "architecture   "+string(sh.Arch)) {
			t.Errorf("%s: text info: %v\n%s", c.shape, err, text)
		}
	}
}

func TestInfo_UnknownArchitectureRefusedByName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llama.gguf")
	w := gguf.NewWriter()
	w.AddString("general.architecture", "llama")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	_, _, err := minfer(t, "info", "-m", path)
	if err == nil || !strings.Contains(err.Error(), `"llama"`) {
		t.Fatalf("error %v, want a refusal naming llama", err)
	}
	if code := run([]string{"info", "--model", path}); code == 0 {
		t.Error("exit status 0 for an unknown architecture")
	}
}

func TestQuantizeAndSynth_UsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"quantize", "a.gguf", "b.gguf"},
		{"quantize", "a.gguf", "b.gguf", "Q3_K_M"},
		{"synth", "--shape", "nope", "-o", filepath.Join(t.TempDir(), "x.gguf")},
		{"synth", "--type", "Q9", "-o", filepath.Join(t.TempDir(), "x.gguf")},
		{"synth"},
	} {
		if code := run(args); code != 2 {
			t.Errorf("minfer %v: exit %d, want 2", args, code)
		}
	}
}

// Cobra's own refusals (unknown command, extra or missing positional
// arguments) are usage errors too: exit 2 and one line.
func TestCobraArgumentRefusals_AreUsageErrorsExit2(t *testing.T) {
	cfg := testConfig(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"levers", "extra"}, `unknown command "extra"`},
		{[]string{"generate"}, "give a prompt"},
		{[]string{"generate", "a", "b"}, "accepts at most 1 arg"},
		{[]string{"info", "a.gguf", "b.gguf"}, "accepts at most 1 arg"},
		{[]string{"synth", "--threads", "-3", "-o", filepath.Join(t.TempDir(), "x.gguf")}, "--threads -3"},
	} {
		stdout, stderr, code := runCLI(t, cfg, c.args...)
		wantOneLineFailure(t, stdout, stderr, code, 2, c.want)
		if code := run(c.args); code != 2 {
			t.Errorf("run(%q): exit %d, want 2", c.args, code)
		}
	}
}

// The document's hyper-parameters are the engine's, field for field: the
// same JSON, byte for byte, for a value with every field set (a field added
// to model.HParams fails here until schema.HParams and hparamsDoc carry it).
func TestHParamsDoc_HasEveryFieldOfTheEngines(t *testing.T) {
	var hp model.HParams
	v := reflect.ValueOf(&hp).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.String:
			f.SetString("s" + strconv.Itoa(i))
		case reflect.Int:
			f.SetInt(int64(100 + i))
		case reflect.Float32:
			f.SetFloat(float64(i) + 0.5)
		case reflect.Bool:
			f.SetBool(true)
		default:
			t.Fatalf("model.HParams.%s is a %s: teach this test and schema.HParams", v.Type().Field(i).Name, f.Kind())
		}
	}
	engine, err := json.Marshal(hp)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := json.Marshal(hparamsDoc(hp))
	if err != nil {
		t.Fatal(err)
	}
	if string(engine) != string(doc) {
		t.Errorf("schema.HParams writes\n%s\nthe engine's HParams\n%s", doc, engine)
	}
}
