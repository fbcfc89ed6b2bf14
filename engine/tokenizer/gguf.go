package tokenizer

import (
	"errors"
	"fmt"
	"math"

	"github.com/minfer-go/minfer/engine/gguf"
)

// GGUF metadata keys of the tokenizer.
const (
	keyModel  = "tokenizer.ggml.model"
	keyPre    = "tokenizer.ggml.pre"
	keyTokens = "tokenizer.ggml.tokens"
	keyTypes  = "tokenizer.ggml.token_type"
	keyMerges = "tokenizer.ggml.merges"
	keyBOS    = "tokenizer.ggml.bos_token_id"
	keyEOS    = "tokenizer.ggml.eos_token_id"
	keyPAD    = "tokenizer.ggml.padding_token_id"
	keyEOT    = "tokenizer.ggml.eot_token_id"
	keyEOM    = "tokenizer.ggml.eom_token_id"
	keyAddBOS = "tokenizer.ggml.add_bos_token"
	keyAddEOS = "tokenizer.ggml.add_eos_token"
)

// FromGGUF builds the Tokenizer described by a GGUF file's tokenizer.ggml.*
// metadata. A missing tokenizer.ggml.pre means "default" (as llama.cpp reads
// it); missing token types mean all normal; missing special ids are -1.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	v, err := VocabFromGGUF(f)
	if err != nil {
		return nil, err
	}
	return New(v)
}

// VocabFromGGUF reads the tokenizer metadata without building a Tokenizer.
func VocabFromGGUF(f *gguf.File) (Vocab, error) {
	var v Vocab
	var err error
	if v.Model, err = f.String(keyModel); err != nil {
		return v, fmt.Errorf("tokenizer: %w", err)
	}
	if v.Pre, err = optional(f.String(keyPre)); err != nil {
		return v, err
	}
	if _, ok := f.Value(keyPre); !ok {
		v.Pre = "default"
	}
	if v.Tokens, err = f.Strings(keyTokens); err != nil {
		return v, fmt.Errorf("tokenizer: %w", err)
	}
	if v.Types, err = optional(f.Int32s(keyTypes)); err != nil {
		return v, err
	}
	if v.Merges, err = optional(f.Strings(keyMerges)); err != nil {
		return v, err
	}
	ids := map[string]*int32{keyBOS: &v.BOS, keyEOS: &v.EOS, keyPAD: &v.PAD}
	for key, dst := range ids {
		if *dst, err = tokenID(f, key); err != nil {
			return v, err
		}
	}
	for _, key := range []string{keyEOT, keyEOM} {
		id, err := tokenID(f, key)
		if err != nil {
			return v, err
		}
		if id >= 0 {
			v.EOG = append(v.EOG, id)
		}
	}
	if v.AddBOS, err = optional(f.Bool(keyAddBOS)); err != nil {
		return v, err
	}
	if v.AddEOS, err = optional(f.Bool(keyAddEOS)); err != nil {
		return v, err
	}
	return v, nil
}

// optional turns an absent key into the zero value; other errors stay.
func optional[T any](x T, err error) (T, error) {
	if errors.Is(err, gguf.ErrNotFound) {
		var zero T
		return zero, nil
	}
	if err != nil {
		return x, fmt.Errorf("tokenizer: %w", err)
	}
	return x, nil
}

// tokenID reads an optional token id; -1 when absent.
func tokenID(f *gguf.File, key string) (int32, error) {
	u, err := f.Uint(key)
	if errors.Is(err, gguf.ErrNotFound) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("tokenizer: %w", err)
	}
	if u > math.MaxInt32 {
		return -1, fmt.Errorf("tokenizer: %s = %d is out of range", key, u)
	}
	return int32(u), nil
}
