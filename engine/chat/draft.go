package chat

import (
	"fmt"
	"slices"
	"time"

	"github.com/minfer-go/minfer/engine/spec"
)

// Speculative decoding of the answers (engine/spec): with a decoder set,
// Turn decodes each answer after its first token through the decoder's
// steps, several tokens per forward of the engine, and the answers are
// the same tokens. Between turns the conversation stands exactly where
// it would without it: the engine holds the context but the last token.

// SetDraft makes Turn decode through dec (nil: one token a forward). dec
// must be a decoder of this conversation's engine.
func (c *Conversation) SetDraft(dec *spec.Decoder) { c.draft = dec }

// answerDrafted is the rest of Turn with a decoder: id is the answer's
// first token (Ask drew it from logits).
func (c *Conversation) answerDrafted(r Reply, id int32, logits []float32, max int, keepLogits bool, emit func(int32) error) (Reply, error) {
	if err := c.warmVerify(); err != nil {
		return r, err
	}
	row := logits // the logits the token being committed was drawn from
	commit := func(id int32) (bool, error) {
		r.IDs = append(r.IDs, id)
		if keepLogits {
			// A drafted step's row is the decoder's buffer, valid until
			// its next step: keep a copy.
			r.Logits = append(r.Logits, slices.Clone(row))
		}
		if c.tok.IsEOG(id) {
			r.Stop = StopEOG
			return false, nil
		}
		if emit != nil {
			if err := emit(id); err != nil {
				return false, err
			}
		}
		if len(r.IDs) == max {
			r.Stop = StopLimit
			return false, nil
		}
		return true, nil
	}
	more, err := commit(id)
	for more && err == nil {
		held := c.lm.Tokens()
		if len(held)+1 > c.lm.NCtx() {
			return r, fmt.Errorf("chat: the answer reached the end of the context of %d tokens after %d tokens: %w", c.lm.NCtx(), len(c.answer), ErrContextFull)
		}
		hist := append(held, c.pending...)
		draw := func(l []float32) int32 {
			row = l
			if c.IgnoreEOG {
				c.masked = maskEOGInto(c.masked, c.tok, l)
				l = c.masked
			}
			return c.smp.Sample(l, hist)
		}
		step := func(id int32) (bool, error) {
			hist = append(hist, id)
			c.pending = []int32{id}
			c.answer = append(c.answer, id)
			more, err = commit(id)
			return more, err
		}
		before := c.draft.Stats().Emitted
		t := time.Now()
		serr := c.draft.Step(slices.Clone(hist), max-len(r.IDs), draw, step)
		r.Decode += time.Since(t)
		r.DecodeSteps += c.draft.Stats().Emitted - before
		if serr != nil {
			return r, fmt.Errorf("chat: drafted decode step %d of the answer: %w", len(c.answer), serr)
		}
	}
	return r, err
}

// warmVerify runs the verify shape (1+K tokens, every position's logits)
// once, after the context, on an engine that captures graphs, before the
// first drafted answer: its graph compiles and the device's scratch grows
// for it now, not between turns (warm does the same for the prefill
// shapes). The cells it wrote are cut off again.
func (c *Conversation) warmVerify() error {
	if c.draftWarmed {
		return nil
	}
	c.draftWarmed = true
	g, ok := c.lm.(GraphCapturer)
	if !ok || !g.CapturesGraphs() {
		return nil
	}
	held := len(c.lm.Tokens())
	n := 1 + c.draft.K()
	if held+n > c.lm.NCtx() {
		return nil
	}
	if _, err := c.lm.ForwardInto(nil, slices.Repeat([]int32{c.imEnd}, n), true); err != nil {
		return fmt.Errorf("chat: warm-up of the verify forward of %d tokens: %w", n, err)
	}
	if err := g.Truncate(held); err != nil {
		return fmt.Errorf("chat: warm-up of the verify forward: %w", err)
	}
	return nil
}
