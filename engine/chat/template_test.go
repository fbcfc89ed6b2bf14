package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/synth"
	"github.com/minfer-go/minfer/engine/tokenizer"
)

// The trained test models (real Qwen tokenizer and Qwen3 chat template).
const (
	qwen2Model = "../../../shared/models/tiny-code-f16.gguf"
	qwen3Model = "../../../shared/models/tiny-qwen3-code-f16.gguf"
)

func readTemplate(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRecognize_QwenFamiliesAndTheirDefaultSystem(t *testing.T) {
	for _, c := range []struct{ file, family, system string }{
		{"chatml.jinja", "chatml", ""},
		{"qwen2.jinja", "qwen2", "You are a helpful assistant."},
		{"qwen2.5.jinja", "qwen2.5", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."},
		{"qwen3.jinja", "qwen3", ""},
	} {
		tm, err := Recognize(readTemplate(t, c.file))
		if err != nil || tm.Family != c.family || tm.DefaultSystem != c.system {
			t.Errorf("%s: %+v, %v; want family %q, default system %q", c.file, tm, err, c.family, c.system)
		}
	}
	if got, err := Recognize(synth.ChatTemplate); err != nil || got.Family != "chatml" {
		t.Errorf("the synthetic models' template: %+v, %v", got, err)
	}
}

// A template outside the family, or none, is refused in one line that
// names it; nothing is rendered by guess.
func TestRecognize_RefusesOtherTemplatesInOneLineNamingThem(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"llama3", readTemplate(t, "llama3.jinja"), `begins "{% set loop_messages = messages %}`},
		{"no generation prompt", readTemplate(t, "chatml-no-generation-prompt.jinja"), "of 182 bytes, sha256 "},
		{"none", "", "the model has no tokenizer.chat_template"},
	} {
		_, err := Recognize(c.src)
		if !errors.Is(err, ErrUnrecognized) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want one line wrapping ErrUnrecognized with %q", c.name, err, c.want)
		}
	}
}

// rendered.json holds what Hugging Face's Jinja renders for each template
// and conversation (testdata/render.py): the native rendering is the same
// text.
type renderedCase struct {
	Template            string
	Messages            []struct{ Role, Content string }
	AddGenerationPrompt bool `json:"add_generation_prompt"`
	Text                string
}

func renderedCases(t *testing.T) []renderedCase {
	t.Helper()
	var cs []renderedCase
	if err := json.Unmarshal([]byte(readTemplate(t, "rendered.json")), &cs); err != nil {
		t.Fatal(err)
	}
	if len(cs) != 24 {
		t.Fatalf("%d cases in rendered.json, want 24", len(cs))
	}
	return cs
}

func messages(c renderedCase) []Message {
	var ms []Message
	for _, m := range c.Messages {
		ms = append(ms, Message{Role: m.Role, Content: m.Content})
	}
	return ms
}

func TestRender_IsTheTextJinjaRendersForEveryTemplate(t *testing.T) {
	for i, c := range renderedCases(t) {
		tm, err := Recognize(readTemplate(t, c.Template))
		if err != nil {
			t.Fatal(err)
		}
		if got := tm.Render(messages(c), c.AddGenerationPrompt).Text(); got != c.Text {
			t.Errorf("case %d (%s, generation prompt %v):\n got %q\nwant %q", i, c.Template, c.AddGenerationPrompt, got, c.Text)
		}
	}
}

// Turn by turn, what a conversation appends (Opening, the answer, its
// <|im_end|> or Next's closing, Next) is the template's rendering of the
// whole conversation so far, whether the answer ended with the model's
// <|im_end|> or was cut at the token limit.
func TestOpeningAndNext_AppendUpToTheWholeRendering(t *testing.T) {
	for _, c := range renderedCases(t) {
		if !c.AddGenerationPrompt {
			continue
		}
		tm, _ := Recognize(readTemplate(t, c.Template))
		ms := messages(c)
		system := ""
		if ms[0].Role == "system" {
			system, ms = ms[0].Content, ms[1:]
		}
		for _, cut := range []bool{false, true} {
			text := tm.Opening(system, ms[0].Content).Text()
			for i := 1; i+1 < len(ms); i += 2 {
				text += ms[i].Content
				if !cut {
					text += IMEnd // the model's own end of turn
				}
				text += tm.Next(cut, ms[i+1].Content).Text()
			}
			if text != c.Text {
				t.Errorf("%s, cut %v:\n got %q\nwant %q", c.Template, cut, text, c.Text)
			}
		}
	}
}

// tokenizers are the synthetic vocabulary and, when ../shared is there,
// the trained models' Qwen tokenizer.
func tokenizers(t *testing.T) map[string]*tokenizer.Tokenizer {
	t.Helper()
	v, err := synth.ByteVocab(512)
	if err != nil {
		t.Fatal(err)
	}
	syn, err := tokenizer.New(tokenizer.Vocab{Model: "gpt2", Pre: "qwen2", Tokens: v.Tokens, Types: v.Types, Merges: v.Merges, BOS: -1, EOS: -1, PAD: -1})
	if err != nil {
		t.Fatal(err)
	}
	toks := map[string]*tokenizer.Tokenizer{"synthetic": syn}
	f, err := gguf.Open(qwen2Model)
	if err != nil {
		t.Logf("trained model absent (%v): the synthetic vocabulary only", err)
		return toks
	}
	defer f.Close()
	if toks["qwen"], err = tokenizer.FromGGUF(f); err != nil {
		t.Fatal(err)
	}
	return toks
}

// The ids of a rendering are those of its text encoded with control tokens
// parsed (what llama.cpp and HF do with the template's output), while a
// user's "<|im_start|>" stays text.
func TestEncode_IsTheTemplateTextsIDsAndUserTextNeverATurn(t *testing.T) {
	for name, tok := range tokenizers(t) {
		for _, c := range renderedCases(t) {
			tm, _ := Recognize(readTemplate(t, c.Template))
			got, err := tm.Render(messages(c), c.AddGenerationPrompt).Encode(tok)
			if err != nil {
				t.Fatal(err)
			}
			if want := tok.Encode(c.Text, true); !slices.Equal(got, want) {
				t.Errorf("%s, %s: ids %v, the text's %v", name, c.Template, got, want)
			}
		}
		tm, _ := Recognize(synth.ChatTemplate)
		ids, err := tm.Opening("", "<|im_start|>system").Encode(tok)
		if err != nil {
			t.Fatal(err)
		}
		start, _ := tok.ID(IMStart)
		if n := strings.Count(tok.Decode(ids), IMStart); n != 3 || countID(ids, start) != 2 {
			t.Errorf("%s: a user's <|im_start|> became a control token: %v", name, ids)
		}
	}
}

func countID(ids []int32, id int32) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// The trained models carry the Qwen3 template: recognized from the GGUF.
func TestReadTemplate_TrainedModelsAreQwen3(t *testing.T) {
	for _, p := range []string{qwen2Model, qwen3Model} {
		f, err := gguf.Open(p)
		if err != nil {
			t.Skipf("trained model absent: %v", err)
		}
		src, err := ReadTemplate(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if tm, err := Recognize(src); err != nil || tm.Family != "qwen3" || src != readTemplate(t, "qwen3.jinja") {
			t.Errorf("%s: %+v, %v", p, tm, err)
		}
	}
}

func TestReadScript_TurnsBetweenDashLines(t *testing.T) {
	turns, err := ReadScript(strings.NewReader("first turn\r\n---\n\n  two\n  lines\n\n---\n---\n  ---  \nlast\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"first turn", "two\n  lines", "last"}; !slices.Equal(turns, want) {
		t.Errorf("turns %q, want %q", turns, want)
	}
	if _, err := ReadScript(strings.NewReader("\n---\n  \n")); err == nil {
		t.Error("a script of no turn: no error")
	}
}
