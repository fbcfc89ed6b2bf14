// Package chat runs a conversation on an engine: the chat template of the
// model's GGUF, recognized and rendered natively (no Jinja), and a
// Conversation that keeps the KV cache across turns and appends each turn's
// tokens instead of prefilling the conversation again.
//
// Templates. A GGUF carries its chat template as Jinja source
// (tokenizer.chat_template). minfer runs no Jinja: it recognizes the ChatML
// family the Qwen2 and Qwen3 models use and renders it in Go. A template is
// recognized when, with whitespace removed, adjacent string literals joined
// and message['x'] read as message.x, it renders every message as
//
//	'<|im_start|>'+message.role+'\n'+message.content+'<|im_end|>\n'
//
// and its generation prompt is '<|im_start|>assistant\n'. A literal system
// message the template puts first when the conversation has none ("You are a
// helpful assistant." in Qwen2, "You are Qwen, created by Alibaba Cloud. ..."
// in Qwen2.5) is read from the source and rendered the same way. Any other
// template is refused in one line naming it (Recognize); Forced renders plain
// ChatML for a model whose template is not recognized or absent, only when
// the user asks for it (minfer chat --template chatml).
//
// Answers stay in the context as they were generated. Qwen3's template, when
// it renders a whole conversation again, drops the <think> block of the
// answers before the last user message; minfer never re-renders, so an answer
// that thought keeps its block (as llama.cpp's interactive mode does). For
// answers without one the tokens are those of the template.
package chat

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/tokenizer"
)

// TemplateKey is the GGUF metadata key of the chat template.
const TemplateKey = "tokenizer.chat_template"

// The ChatML control tokens.
const (
	IMStart = "<|im_start|>"
	IMEnd   = "<|im_end|>"
)

// Template is a recognized chat template of the ChatML family.
type Template struct {
	// Family names the variant: "qwen2" and "qwen2.5" (a literal default
	// system message), "qwen3" (think-aware), "chatml" (neither) or
	// "chatml (forced)".
	Family string
	// DefaultSystem is the system message rendered when the conversation
	// gives none ("": no system message then).
	DefaultSystem string
}

// ErrUnrecognized is the error of a template minfer does not render.
var ErrUnrecognized = errors.New("chat template not recognized")

// Forced is plain ChatML, for a model whose template is absent or not
// recognized, when the user asks for it.
func Forced() Template { return Template{Family: "chatml (forced)"} }

var (
	spaceRE  = regexp.MustCompile(`\s+`)
	accessRE = regexp.MustCompile(`message\[['"](role|content)['"]\]`)
	// messageLine is the ChatML rendering of one message, normalized.
	messageLine = `'<|im_start|>'+message.role+'\n'+message.content+'<|im_end|>\n'`
	genPrompt   = `<|im_start|>assistant\n'`
	// defaultSystemRE finds a literal system message (in the source).
	defaultSystemRE = regexp.MustCompile(`'<\|im_start\|>system\\n([^'<\\]+)<\|im_end\|>\\n'`)
)

// normalize is the template source with whitespace removed, adjacent
// string literals joined and message['x'] written message.x.
func normalize(src string) string {
	s := spaceRE.ReplaceAllString(src, "")
	s = strings.ReplaceAll(s, `'+'`, "")
	return accessRE.ReplaceAllString(s, "message.$1")
}

// Recognize reads a chat template's Jinja source. A template outside the
// ChatML family, or none, is an error wrapping ErrUnrecognized that names
// it: its size, the start of its sha256 and its first characters.
func Recognize(src string) (Template, error) {
	if strings.TrimSpace(src) == "" {
		return Template{}, fmt.Errorf("%w: the model has no %s", ErrUnrecognized, TemplateKey)
	}
	n := normalize(src)
	if !strings.Contains(n, messageLine) || !strings.Contains(n, genPrompt) {
		return Template{}, fmt.Errorf("%w: %s", ErrUnrecognized, describe(src))
	}
	t := Template{Family: "chatml"}
	if m := defaultSystemRE.FindStringSubmatch(src); m != nil {
		t.DefaultSystem = m[1]
		t.Family = "qwen2"
		if strings.Contains(m[1], "Qwen") {
			t.Family = "qwen2.5"
		}
	} else if strings.Contains(src, "<think>") {
		t.Family = "qwen3"
	}
	return t, nil
}

// describe names a template in one line.
func describe(src string) string {
	sum := sha256.Sum256([]byte(src))
	head := strings.Join(strings.Fields(src), " ")
	if r := []rune(head); len(r) > 48 {
		head = string(r[:48]) + "..."
	}
	return fmt.Sprintf("%s of %d bytes, sha256 %s, begins %q", TemplateKey, len(src), hex.EncodeToString(sum[:6]), head)
}

// ReadTemplate reads the chat template source of a GGUF ("" when it has
// none).
func ReadTemplate(f *gguf.File) (string, error) {
	if _, ok := f.Value(TemplateKey); !ok {
		return "", nil
	}
	return f.String(TemplateKey)
}

// Message is one message of a conversation. An assistant message may carry
// the ids it was generated as (IDs): they are used as they are instead of
// encoding Content.
type Message struct {
	Role    string
	Content string
	IDs     []int32
}

// Piece is one part of a rendered conversation: a control token (Special,
// e.g. "<|im_start|>"), text, or ids taken as they are.
type Piece struct {
	Special string
	Text    string
	IDs     []int32
}

// Rendered is a conversation as the template writes it.
type Rendered []Piece

func (r *Rendered) special(s string) { *r = append(*r, Piece{Special: s}) }
func (r *Rendered) text(s string)    { *r = append(*r, Piece{Text: s}) }

// message renders one message: <|im_start|>role\ncontent<|im_end|>\n.
func (r *Rendered) message(m Message) {
	r.special(IMStart)
	r.text(m.Role + "\n")
	if m.IDs != nil {
		*r = append(*r, Piece{IDs: m.IDs})
	} else {
		r.text(m.Content)
	}
	r.special(IMEnd)
	r.text("\n")
}

// header is the generation prompt: <|im_start|>assistant\n.
func (r *Rendered) header() {
	r.special(IMStart)
	r.text("assistant\n")
}

// Render is the whole conversation as the template renders it, with the
// generation prompt when addGeneration is set: the default system message
// first when the conversation does not start with one, then every message.
func (t Template) Render(msgs []Message, addGeneration bool) Rendered {
	var r Rendered
	if t.DefaultSystem != "" && (len(msgs) == 0 || msgs[0].Role != "system") {
		r.message(Message{Role: "system", Content: t.DefaultSystem})
	}
	for _, m := range msgs {
		r.message(m)
	}
	if addGeneration {
		r.header()
	}
	return r
}

// Opening is what the first turn of a conversation appends to an empty
// context: the system message (system, else the default one), the user's
// message and the generation prompt.
func (t Template) Opening(system, user string) Rendered {
	var msgs []Message
	if system != "" {
		msgs = append(msgs, Message{Role: "system", Content: system})
	}
	return t.Render(append(msgs, Message{Role: "user", Content: user}), true)
}

// Next is what a later turn appends after an answer: <|im_end|> when the
// answer is still open (it was cut at the token limit), the newline that
// ends the assistant's message, the user's message and the generation
// prompt.
func (t Template) Next(closeAnswer bool, user string) Rendered {
	var r Rendered
	if closeAnswer {
		r.special(IMEnd)
	}
	r.text("\n")
	r.message(Message{Role: "user", Content: user})
	r.header()
	return r
}

// Text is the rendered conversation as text (ids pieces have none: give
// their messages a Content to compare text).
func (r Rendered) Text() string {
	var b strings.Builder
	for _, p := range r {
		b.WriteString(p.Special)
		b.WriteString(p.Text)
	}
	return b.String()
}

// Encode tokenizes the rendering: control tokens by id, text without
// parsing control tokens (a user who types "<|im_start|>" writes text, not
// a turn), adjacent text pieces as one text so that the pre-tokenizer sees
// what it sees in the template's output. For content that holds no control
// token text the ids are those of the template's output encoded with
// special tokens parsed.
func (r Rendered) Encode(tok *tokenizer.Tokenizer) ([]int32, error) {
	var out []int32
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			out = append(out, tok.Encode(text.String(), false)...)
			text.Reset()
		}
	}
	for _, p := range r {
		switch {
		case p.Special != "":
			id, ok := tok.ID(p.Special)
			if !ok || tok.Type(id) != tokenizer.TypeControl && tok.Type(id) != tokenizer.TypeUserDefined {
				return nil, fmt.Errorf("chat: the vocabulary has no control token %s", p.Special)
			}
			flush()
			out = append(out, id)
		case p.IDs != nil:
			flush()
			out = append(out, p.IDs...)
		default:
			text.WriteString(p.Text)
		}
	}
	flush()
	return out, nil
}
