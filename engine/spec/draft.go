package spec

import (
	"errors"
	"fmt"

	"github.com/minfer-go/minfer/engine/sample"
)

// DraftLM is what a model drafter needs of its engine (model.Engine).
type DraftLM interface {
	// ForwardInto is Target's: the logits written into dst when it holds
	// them (the drafter reuses one row).
	ForwardInto(dst []float32, tokens []int32, allLogits bool) ([]float32, error)
	Truncate(n int) error
	Reset()
}

// Model drafts with a second model, greedily. It keeps the tokens its
// engine's context holds and forwards only what a new context adds to
// the part they share (after a step, the target's last token, or the
// last draft and it when every draft was accepted).
type Model struct {
	lm   DraftLM
	name string
	held []int32 // the draft engine's context
	row  []float32
}

// NewModel is a drafter on lm (named name in errors and reports). Its
// context must be empty.
func NewModel(lm DraftLM, name string) *Model {
	lm.Reset()
	return &Model{lm: lm, name: name}
}

// Name is the draft model's name.
func (m *Model) Name() string { return m.name }

// Draft implements Drafter: the greedy continuation of ctx, k tokens.
func (m *Model) Draft(ctx []int32, k int) ([]int32, error) {
	if len(ctx) == 0 {
		return nil, errors.New("draft of an empty context")
	}
	p := 0
	for p < len(m.held) && p < len(ctx)-1 && m.held[p] == ctx[p] {
		p++
	}
	if p < len(m.held) {
		if err := m.lm.Truncate(p); err != nil {
			return nil, fmt.Errorf("draft model: %w", err)
		}
		m.held = m.held[:p]
	}
	logits, err := m.lm.ForwardInto(m.row, ctx[p:], false)
	if err != nil {
		m.resync()
		return nil, fmt.Errorf("draft model: forward of %d tokens at %d: %w", len(ctx)-p, p, err)
	}
	m.held = append(m.held, ctx[p:]...)
	var out []int32
	for i := 0; i < k; i++ {
		t := sample.Argmax(logits)
		out = append(out, t)
		if i == k-1 {
			break
		}
		if logits, err = m.lm.ForwardInto(logits, []int32{t}, false); err != nil {
			m.resync()
			return nil, fmt.Errorf("draft model: forward of draft %d: %w", i+1, err)
		}
		m.held = append(m.held, t)
	}
	m.row = logits
	return out, nil
}

// resync empties the draft context after a failed forward (which changed
// nothing, but the next draft starts from a known state).
func (m *Model) resync() {
	m.lm.Reset()
	m.held = m.held[:0]
}

// Lookup drafts by prompt lookup: it finds the latest earlier occurrence
// of the context's last n tokens (the longest n from MaxN down to MinN
// that occurs) and proposes the tokens that followed it. It pays where the
// output copies its input: code edits, retrieval, quoting.
type Lookup struct {
	MinN, MaxN int
}

// DefaultLookup matches 3-, 2- and 1-grams.
func DefaultLookup() Lookup { return Lookup{MinN: 1, MaxN: 3} }

// Name implements Drafter.
func (Lookup) Name() string { return "lookup" }

// Draft implements Drafter.
func (l Lookup) Draft(ctx []int32, k int) ([]int32, error) {
	if k <= 0 {
		return nil, nil
	}
	lo, hi := max(l.MinN, 1), l.MaxN
	for n := min(hi, len(ctx)-1); n >= lo; n-- {
		key := ctx[len(ctx)-n:]
		for i := len(ctx) - n - 1; i >= 0; i-- {
			if !equal(ctx[i:i+n], key) {
				continue
			}
			next := ctx[i+n : min(i+n+k, len(ctx))]
			return append([]int32(nil), next...), nil
		}
	}
	return nil, nil
}

func equal(a, b []int32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
