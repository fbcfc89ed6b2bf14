package spec

import (
	"fmt"
	"slices"

	"github.com/minfer-go/minfer/engine/tokenizer"
)

// MaxVocabPadding is how many more ids one vocabulary may have than the
// other: converters pad the embedding rows to a multiple (Qwen2-7B has
// 152,064 ids, Qwen2-0.5B 151,936 of the same tokenizer); llama.cpp's
// speculative example allows the same difference.
const MaxVocabPadding = 128

// Side names a model of a pair: its file, architecture and tokenizer.
type Side struct {
	Name string
	Arch string
	Tok  *tokenizer.Tokenizer
}

// CheckPair says why draft cannot draft for target, nil when it can. Only
// token ids pass between the two models, so the draft must number tokens
// exactly as the target does: the same tokenizer model and pre-tokenizer,
// the same special tokens, the same string for every id both have, and at
// most MaxVocabPadding ids more or fewer. The draft must also be of the
// target's architecture (a pairing this engine gates; another one is
// refused rather than run unchecked).
func CheckPair(target, draft Side) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("draft model %s cannot draft for %s: %s", draft.Name, target.Name, fmt.Sprintf(format, args...))
	}
	if draft.Arch != target.Arch {
		return bad("architecture %s, the target's is %s", draft.Arch, target.Arch)
	}
	t, d := target.Tok, draft.Tok
	if t.Model() != d.Model() || t.Pre() != d.Pre() {
		return bad("another vocabulary: tokenizer %s/%s, the target's %s/%s", d.Model(), d.Pre(), t.Model(), t.Pre())
	}
	nt, nd := t.NVocab(), d.NVocab()
	if nt-nd > MaxVocabPadding || nd-nt > MaxVocabPadding {
		return bad("another vocabulary: %d tokens, the target's %d (at most %d apart)", nd, nt, MaxVocabPadding)
	}
	for id := int32(0); int(id) < min(nt, nd); id++ {
		if t.Token(id) != d.Token(id) {
			return bad("another vocabulary: token %d is %q, the target's %q", id, d.Token(id), t.Token(id))
		}
	}
	te, de := t.EOG(), d.EOG()
	slices.Sort(te)
	slices.Sort(de)
	if t.BOS() != d.BOS() || t.EOS() != d.EOS() || !slices.Equal(te, de) {
		return bad("other special tokens: bos %d eos %d eog %v, the target's bos %d eos %d eog %v",
			d.BOS(), d.EOS(), de, t.BOS(), t.EOS(), te)
	}
	return nil
}
