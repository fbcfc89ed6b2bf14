// Package tokenizer implements the byte-level BPE tokenizer of GPT-2 style
// vocabularies (tokenizer.ggml.model "gpt2") as stored in GGUF metadata, with
// the Qwen2 pre-tokenizer (used by Qwen2 and Qwen3) and special tokens.
//
// Encode is: special-token partition (optional) -> NFC -> pre-tokenizer split
// -> byte-level BPE per piece (merges by rank, cached per piece). A Tokenizer
// is immutable after New except for its piece cache, and is safe for
// concurrent use.
package tokenizer

import (
	"fmt"
	"slices"
	"strings"
)

// Token types of the GGUF vocabulary (tokenizer.ggml.token_type).
const (
	TypeNormal      = 1
	TypeUnknown     = 2
	TypeControl     = 3
	TypeUserDefined = 4
	TypeUnused      = 5
	TypeByte        = 6
)

// Vocab is the tokenizer description as GGUF metadata stores it.
type Vocab struct {
	Model  string   // tokenizer.ggml.model; must be "gpt2" (byte-level BPE)
	Pre    string   // tokenizer.ggml.pre: "qwen2", or "gpt2"/"default" (GPT-2 regex)
	Tokens []string // in the byte-level alphabet
	Types  []int32  // one per token; nil means all normal
	Merges []string // "left right", in rank order

	BOS, EOS, PAD  int32 // -1 when absent
	AddBOS, AddEOS bool

	// EOG lists further end-of-generation ids (tokenizer.ggml.eot_token_id,
	// eom_token_id); EOS and the well-known end-of-turn tokens are added by New.
	EOG []int32
}

// Tokenizer encodes text to token ids and decodes them back.
type Tokenizer struct {
	model, pre string
	split      func(string, int) int
	nfc        bool

	tokens []string
	types  []int32
	ids    map[string]int32 // vocabulary string -> id

	// Raw bytes of every token: tokBytes[tokOff[i]:tokOff[i+1]].
	tokBytes []byte
	tokOff   []uint32

	byteTok [256]int32 // the single-byte token of each byte, -1 if absent
	merges  mergeTable

	// Special tokens (control and user-defined) by first byte, longest first.
	special [256][]int32

	bos, eos, pad  int32
	addBOS, addEOS bool
	eog            []int32

	cache pieceCache
}

// eogTexts are end-of-turn tokens that stop generation wherever they appear
// as control or user-defined tokens (the set llama.cpp recognises by text).
var eogTexts = []string{
	"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>",
	"<|end_of_text|>", "<EOT>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
}

// New builds a Tokenizer from a vocabulary. It copies what it keeps, so v may
// refer to memory that goes away afterwards (a closed GGUF mapping).
func New(v Vocab) (*Tokenizer, error) {
	if v.Model != "gpt2" {
		return nil, fmt.Errorf("tokenizer: model %q is not supported (only byte-level BPE \"gpt2\")", v.Model)
	}
	t := &Tokenizer{model: v.Model, pre: v.Pre}
	switch v.Pre {
	case "qwen2":
		t.split, t.nfc = splitQwen2, true
	case "gpt2", "default":
		t.split = splitGPT2
	default:
		return nil, fmt.Errorf("tokenizer: pre-tokenizer %q is not supported (qwen2, gpt2, default)", v.Pre)
	}
	n := len(v.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("tokenizer: empty vocabulary")
	}
	if n >= 1<<31-1 {
		return nil, fmt.Errorf("tokenizer: vocabulary of %d tokens is too large", n)
	}
	if v.Types != nil && len(v.Types) != n {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens", len(v.Types), n)
	}
	for _, x := range []struct {
		name string
		id   int32
	}{{"bos", v.BOS}, {"eos", v.EOS}, {"padding", v.PAD}} {
		if x.id < -1 || int(x.id) >= n {
			return nil, fmt.Errorf("tokenizer: %s token id %d out of range [0,%d)", x.name, x.id, n)
		}
	}

	// One backing string for all tokens.
	size := 0
	for _, s := range v.Tokens {
		size += len(s)
	}
	var sb strings.Builder
	sb.Grow(size)
	for _, s := range v.Tokens {
		sb.WriteString(s)
	}
	all := sb.String()
	t.tokens = make([]string, n)
	t.types = make([]int32, n)
	t.ids = make(map[string]int32, n)
	t.tokOff = make([]uint32, n+1)
	t.tokBytes = make([]byte, 0, size)
	for i := range t.byteTok {
		t.byteTok[i] = -1
	}
	off := 0
	for i, s := range v.Tokens {
		tok := all[off : off+len(s)]
		off += len(s)
		t.tokens[i] = tok
		typ := int32(TypeNormal)
		if v.Types != nil {
			typ = v.Types[i]
		}
		t.types[i] = typ
		if _, dup := t.ids[tok]; !dup {
			t.ids[tok] = int32(i)
		}
		switch typ {
		case TypeControl, TypeUserDefined, TypeUnknown:
			t.tokBytes = append(t.tokBytes, tok...)
		default:
			t.tokBytes = byteLevelDecode(t.tokBytes, tok)
		}
		t.tokOff[i+1] = uint32(len(t.tokBytes))
		if (typ == TypeControl || typ == TypeUserDefined) && tok != "" {
			t.special[tok[0]] = append(t.special[tok[0]], int32(i))
		}
	}
	for b := range 256 {
		if id, ok := t.ids[string(byteToRune[b])]; ok {
			t.byteTok[b] = id
		}
	}
	for b := range t.special {
		slices.SortStableFunc(t.special[b], func(x, y int32) int { return len(t.tokens[y]) - len(t.tokens[x]) })
	}
	var err error
	if t.merges, err = buildMerges(v.Merges, t.ids); err != nil {
		return nil, err
	}

	t.bos, t.eos, t.pad = v.BOS, v.EOS, v.PAD
	t.addBOS, t.addEOS = v.AddBOS, v.AddEOS
	addEOG := func(id int32) {
		if id >= 0 && int(id) < n && !slices.Contains(t.eog, id) {
			t.eog = append(t.eog, id)
		}
	}
	addEOG(v.EOS)
	for _, id := range v.EOG {
		addEOG(id)
	}
	for _, s := range eogTexts {
		if id, ok := t.ids[s]; ok && (t.types[id] == TypeControl || t.types[id] == TypeUserDefined) {
			addEOG(id)
		}
	}
	t.cache.init()
	return t, nil
}

// NVocab is the number of tokens.
func (t *Tokenizer) NVocab() int { return len(t.tokens) }

// Token is the vocabulary string of id (in the byte-level alphabet for
// normal tokens), "" when id is out of range.
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// Type is the GGUF token type of id, 0 when id is out of range.
func (t *Tokenizer) Type(id int32) int32 {
	if id < 0 || int(id) >= len(t.types) {
		return 0
	}
	return t.types[id]
}

// ID looks a token up by its exact vocabulary string (e.g. "<|im_start|>").
func (t *Tokenizer) ID(text string) (int32, bool) {
	id, ok := t.ids[text]
	return id, ok
}

// TokenBytes returns the raw bytes id stands for (a control or user-defined
// token's text as is). The slice is shared: callers must not modify it. It
// is nil when id is out of range.
func (t *Tokenizer) TokenBytes(id int32) []byte {
	if id < 0 || int(id) >= len(t.tokens) {
		return nil
	}
	a, b := t.tokOff[id], t.tokOff[id+1]
	return t.tokBytes[a:b:b]
}

// Decode concatenates the raw bytes of ids. Bytes that are not valid UTF-8
// (a character split across tokens, or byte tokens) are kept as they are.
// Out-of-range ids are skipped.
func (t *Tokenizer) Decode(ids []int32) string {
	n := 0
	for _, id := range ids {
		n += len(t.TokenBytes(id))
	}
	buf := make([]byte, 0, n)
	for _, id := range ids {
		buf = append(buf, t.TokenBytes(id)...)
	}
	return string(buf)
}

// BOS is the beginning-of-sequence id, -1 when absent.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS is the end-of-sequence id, -1 when absent.
func (t *Tokenizer) EOS() int32 { return t.eos }

// PAD is the padding id, -1 when absent.
func (t *Tokenizer) PAD() int32 { return t.pad }

// AddBOS reports whether the caller should put BOS before encoded text.
func (t *Tokenizer) AddBOS() bool { return t.addBOS && t.bos >= 0 }

// AddEOS reports whether the caller should put EOS after encoded text.
func (t *Tokenizer) AddEOS() bool { return t.addEOS && t.eos >= 0 }

// IsEOG reports whether id ends generation: EOS, the end-of-turn /
// end-of-text control tokens (<|endoftext|>, <|im_end|>, ...) and the
// eot/eom ids of the metadata.
func (t *Tokenizer) IsEOG(id int32) bool { return slices.Contains(t.eog, id) }

// EOG returns the end-of-generation ids.
func (t *Tokenizer) EOG() []int32 { return slices.Clone(t.eog) }

// Model is the tokenizer model name ("gpt2").
func (t *Tokenizer) Model() string { return t.model }

// Pre is the pre-tokenizer name ("qwen2", "gpt2" or "default").
func (t *Tokenizer) Pre() string { return t.pre }
