package schema

// Logits is the document of `minfer logits --json`: the top logits of
// every position of the ids, evaluated from an empty context.
type Logits struct {
	NVocab    int         `json:"n_vocab"`
	Positions []LogitsPos `json:"positions"`
}

// LogitsPos is one position of Logits.
type LogitsPos struct {
	Pos int        `json:"pos"`
	Top []TopLogit `json:"top"` // largest first, ties to the lower id
	// Top2Margin is the largest logit minus the second (0 where it would be
	// Inf or NaN: JSON has neither).
	Top2Margin float32 `json:"top2_margin"`
}

// TopLogit is one ranked logit.
type TopLogit struct {
	ID    int32   `json:"id"`
	Logit float32 `json:"logit"`
}

// Generate is the document of `minfer generate --json`.
type Generate struct {
	Model       string            `json:"model"`
	Prompt      string            `json:"prompt"` // "" when the prompt was given as --ids
	PromptIDs   []int32           `json:"prompt_ids"`
	IDs         []int32           `json:"ids"` // generated, the end-of-generation token included
	Text        string            `json:"text"`
	NPrompt     int               `json:"n_prompt"`
	NGen        int               `json:"n_gen"`
	PrefillMS   float64           `json:"prefill_ms"`
	DecodeMS    float64           `json:"decode_ms"`
	PrefillTokS float64           `json:"prefill_tok_s"`
	DecodeTokS  float64           `json:"decode_tok_s"`
	Backend     string            `json:"backend"`
	KVFormat    string            `json:"kv_format"`
	Levers      map[string]string `json:"levers"`
	// Session is there with --session: what was restored and saved.
	Session *GenerateSession `json:"session,omitempty"`
	// Speculative is there with --draft.
	Speculative *Speculative `json:"speculative,omitempty"`
}

// GenerateSession is what `minfer generate --session FILE` did with FILE.
// With a restored session the prefill forwards the session's pending token
// (the last one sampled before it was saved) and then the prompt, so
// prefill_tok_s counts both.
type GenerateSession struct {
	Path           string  `json:"path"`
	RestoredTokens int     `json:"restored_tokens"` // the context read from FILE; 0 when FILE did not exist
	RestoreMS      float64 `json:"restore_ms"`      // checking and loading FILE, the model's sha256 included
	SavedTokens    int     `json:"saved_tokens"`    // the context written to FILE; 0 with --session-readonly
	SaveMS         float64 `json:"save_ms"`
}

// Tokens is the document of `minfer tokenize --json`: the ids of the text
// and the vocabulary string of each (byte-level alphabet, e.g. "Ġworld").
type Tokens struct {
	IDs    []int32  `json:"ids"`
	Pieces []string `json:"pieces"`
}
