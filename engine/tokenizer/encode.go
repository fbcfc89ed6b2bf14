package tokenizer

import (
	"slices"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Encode tokenizes text. With parseSpecial, control tokens written in the
// text (e.g. "<|im_start|>") become their ids; without it they are plain
// text. User-defined tokens (e.g. "<think>") are matched either way, as the
// reference tokenizers do, so ids agree with llama.cpp and HF. The longest
// token at the leftmost position wins. No BOS/EOS is added: see AddBOS and
// AddEOS.
func (t *Tokenizer) Encode(text string, parseSpecial bool) []int32 {
	out := make([]int32, 0, len(text)/3+1)
	start := 0
	for i := 0; i < len(text); i++ {
		cands := t.special[text[i]]
		for _, id := range cands {
			if !parseSpecial && t.types[id] != TypeUserDefined {
				continue
			}
			if tok := t.tokens[id]; strings.HasPrefix(text[i:], tok) {
				out = t.encodeText(out, text[start:i])
				out = append(out, id)
				i += len(tok) - 1
				start = i + 1
				break
			}
		}
	}
	return t.encodeText(out, text[start:])
}

// encodeText appends the ids of text that holds no special tokens.
func (t *Tokenizer) encodeText(out []int32, s string) []int32 {
	if t.nfc && !norm.NFC.IsNormalString(s) {
		s = norm.NFC.String(s)
	}
	for i := 0; i < len(s); {
		j := t.split(s, i)
		out = t.encodePiece(out, s[i:j])
		i = j
	}
	return out
}

// encodePiece appends the ids of one pre-tokenized piece, through the cache.
func (t *Tokenizer) encodePiece(out []int32, p string) []int32 {
	if len(p) == 1 {
		if id := t.byteTok[p[0]]; id >= 0 {
			out = append(out, id)
		}
		return out
	}
	if len(p) > maxCachedPiece {
		return t.bpe(out, p)
	}
	if ids, ok := t.cache.get(p); ok {
		return append(out, ids...)
	}
	n := len(out)
	out = t.bpe(out, p)
	t.cache.put(p, slices.Clone(out[n:]))
	return out
}
