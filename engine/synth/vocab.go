package synth

import (
	"fmt"
	"strings"

	"github.com/minfer-go/minfer/engine/gguf"
)

// Token types of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
const (
	TokenNormal      = 1
	TokenControl     = 3
	TokenUserDefined = 4
	TokenUnused      = 5
)

// tinyVocab is the vocabulary size of the tiny shapes.
const tinyVocab = 512

// The Qwen special tokens every synthetic vocabulary carries, in Qwen's order.
var specialTokens = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

// ChatTemplate is the ChatML template of the synthetic vocabularies.
const ChatTemplate = "{%- for message in messages %}" +
	"{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}" +
	"{%- endfor %}" +
	"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"

// mergeWords are spelled out by left-to-right merges so the byte-level
// vocabulary has some multi-byte tokens (a leading space is "Ġ").
var mergeWords = []string{
	" the", " and", " of", " to", " in", " is", " that", " for", " it", " with",
	" as", " on", " be", " at", " by", " this", " from", " or", " an", " are",
	" def", " return", " self", " import", " class", " if", " else", " None",
	" print", " range", " len", " True", " False", " not", " while", " value",
	"ing", "ion", "er", "ed", "es", "ly", "ent", "self", "()", "):", "    ", "        ",
	"\n\n", "\n    ", " =", " ==", " +=", " (", " [", " {", "\"\"\"", "name", "data",
	"Hello", " world", " model", " token", " hello", " World",
}

// byteToUnicode is GPT-2's reversible map from bytes to printable runes.
func byteToUnicode() [256]rune {
	var m [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}

// byteOrder is the order of the 256 byte tokens in the Qwen (GPT-2) vocab:
// the printable bytes first, then the remapped ones.
func byteOrder() []int {
	var printable, other []int
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			printable = append(printable, b)
		} else {
			other = append(other, b)
		}
	}
	return append(printable, other...)
}

// Vocab is a tokenizer block: tokens, their types and the BPE merges.
type Vocab struct {
	Tokens  []string
	Types   []int32
	Merges  []string
	Special map[string]int // id of each special token
}

// ByteVocab builds the synthetic byte-level vocabulary of n tokens: the 256
// byte tokens, the merged tokens of mergeWords, the Qwen special tokens
// (CONTROL) and [PAD{id}] tokens (UNUSED, as the converter pads) up to n.
func ByteVocab(n int) (*Vocab, error) {
	b2u := byteToUnicode()
	v := &Vocab{Special: map[string]int{}}
	seen := map[string]bool{}
	add := func(tok string, typ int32) {
		seen[tok] = true
		v.Tokens = append(v.Tokens, tok)
		v.Types = append(v.Types, typ)
	}
	for _, b := range byteOrder() {
		add(string(b2u[b]), TokenNormal)
	}
	room := n - len(v.Tokens) - len(specialTokens)
	if room < 0 {
		return nil, fmt.Errorf("synth: a vocabulary of %d tokens cannot hold the 256 byte tokens and %d special tokens", n, len(specialTokens))
	}
	for _, w := range mergeWords {
		var sym []string
		for _, c := range []byte(w) {
			sym = append(sym, string(b2u[c]))
		}
		cur := sym[0]
		for _, s := range sym[1:] {
			next := cur + s
			if !seen[next] {
				if room == 0 {
					break
				}
				v.Merges = append(v.Merges, cur+" "+s)
				add(next, TokenNormal)
				room--
			}
			cur = next
		}
	}
	for _, s := range specialTokens {
		v.Special[s] = len(v.Tokens)
		add(s, TokenControl)
	}
	for len(v.Tokens) < n {
		add(fmt.Sprintf("[PAD%d]", len(v.Tokens)), TokenUnused)
	}
	return v, nil
}

// kvs returns the tokenizer metadata of v in the converter's order.
func (v *Vocab) kvs() []gguf.KV {
	eot, imEnd := v.Special["<|endoftext|>"], v.Special["<|im_end|>"]
	return []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: gguf.StringValue("gpt2")},
		{Key: "tokenizer.ggml.pre", Value: gguf.StringValue("qwen2")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.StringsValue(v.Tokens)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.Int32sValue(v.Types)},
		{Key: "tokenizer.ggml.merges", Value: gguf.StringsValue(v.Merges)},
		{Key: "tokenizer.ggml.eos_token_id", Value: gguf.Uint32Value(uint32(imEnd))},
		{Key: "tokenizer.ggml.padding_token_id", Value: gguf.Uint32Value(uint32(eot))},
		{Key: "tokenizer.ggml.bos_token_id", Value: gguf.Uint32Value(uint32(eot))},
		{Key: "tokenizer.ggml.add_bos_token", Value: gguf.BoolValue(false)},
		{Key: "tokenizer.chat_template", Value: gguf.StringValue(ChatTemplate)},
	}
}

// vocabFrom copies the tokenizer block (every "tokenizer." key) of the GGUF
// at path, padding tokens, token types and scores to n entries.
func vocabFrom(path string, n int) ([]gguf.KV, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("synth: --vocab-from: %w", err)
	}
	defer f.Close()
	toks, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil {
		return nil, fmt.Errorf("synth: --vocab-from %s: %w", path, err)
	}
	if len(toks) > n {
		return nil, fmt.Errorf("synth: --vocab-from %s has %d tokens, more than the shape's n_vocab %d", path, len(toks), n)
	}
	var out []gguf.KV
	for _, kv := range f.KVs {
		if !strings.HasPrefix(kv.Key, "tokenizer.") {
			continue
		}
		val := kv.Value
		switch kv.Key {
		case "tokenizer.ggml.tokens":
			padded := append([]string(nil), toks...)
			for len(padded) < n {
				padded = append(padded, fmt.Sprintf("[PAD%d]", len(padded)))
			}
			val = gguf.StringsValue(padded)
		case "tokenizer.ggml.token_type":
			types, err := f.Int32s(kv.Key)
			if err != nil || len(types) != len(toks) {
				return nil, fmt.Errorf("synth: --vocab-from %s: tokenizer.ggml.token_type does not match the %d tokens", path, len(toks))
			}
			for len(types) < n {
				types = append(types, TokenUnused)
			}
			val = gguf.Int32sValue(types)
		case "tokenizer.ggml.scores":
			scores, err := f.Float32s(kv.Key)
			if err != nil || len(scores) != len(toks) {
				return nil, fmt.Errorf("synth: --vocab-from %s: tokenizer.ggml.scores does not match the %d tokens", path, len(toks))
			}
			for len(scores) < n {
				scores = append(scores, 0)
			}
			val = gguf.Float32sValue(scores)
		}
		out = append(out, gguf.KV{Key: kv.Key, Value: val})
	}
	return out, nil
}
