// Package spec is speculative decoding: a drafter proposes the next few
// tokens, the target model checks all of them in one multi-token forward
// (the logits of every position), the longest prefix that equals the
// target's own choices is kept together with the target's next token, and
// the KV cells of the rejected tokens are cut off again (Truncate).
//
// The output is the target's, token for token: every token emitted is the
// one the caller's sampler drew from the target's logits at that position,
// with the same history, exactly as plain one-token decoding draws it; a
// draft only decides how many positions one forward covers. So greedy
// output (and a seeded sampler's) is identical to plain decoding whenever
// the verify forward's rows give the logits a one-token forward gives at
// the same position (bitwise on the CPU backend, engine/model's
// TestForward_PrefillEqualsStepwiseDecodeWithin1e5).
//
// Drafters: Model (a smaller model of the same vocabulary, greedy) and
// Lookup (n-grams of the context so far: prompt-lookup decoding).
package spec

import (
	"errors"
	"fmt"
)

// Target is the model whose output speculative decoding reproduces
// (model.Engine).
type Target interface {
	// ForwardInto appends tokens to the context and returns the logits of
	// the last position or, with allLogits, of every position
	// (token-major), written into dst when it holds them (the decoder
	// reuses one buffer: a row of Qwen's vocabulary is 600 KB a step).
	ForwardInto(dst []float32, tokens []int32, allLogits bool) ([]float32, error)
	// Truncate cuts the context back to its first n tokens.
	Truncate(n int) error
	// Pos is the number of tokens the context holds, NCtx its size.
	Pos() int
	NCtx() int
}

// Drafter proposes the tokens that follow a context.
type Drafter interface {
	// Draft proposes at most k tokens to follow ctx (every token of the
	// sequence so far). k == 0 only brings the drafter up to ctx (a
	// model drafter prefills it) and proposes nothing.
	Draft(ctx []int32, k int) ([]int32, error)
	// Name says what drafts: "lookup" or the draft model's file.
	Name() string
}

// Stats count what the decoder did.
type Stats struct {
	// Forwards are the target's forwards (one per Step: a verify forward
	// of the drafts, or a plain one-token decode when there was none).
	Forwards int
	// Drafted are the tokens the drafter proposed and the target checked;
	// Accepted those the target agreed with.
	Drafted, Accepted int
	// Emitted are the tokens the steps handed to commit.
	Emitted int
}

// AcceptanceRate is Accepted / Drafted (0 when nothing was drafted).
func (s Stats) AcceptanceRate() float64 {
	if s.Drafted == 0 {
		return 0
	}
	return float64(s.Accepted) / float64(s.Drafted)
}

// TokensPerForward is Emitted / Forwards (0 before the first step).
func (s Stats) TokensPerForward() float64 {
	if s.Forwards == 0 {
		return 0
	}
	return float64(s.Emitted) / float64(s.Forwards)
}

// Options configure a Decoder.
type Options struct {
	// K is the number of tokens drafted per step (>= 1).
	K int
	// NVocab is the target's vocabulary size: a drafted id at or above
	// it (a draft model with a larger padded vocabulary) ends the draft.
	NVocab int
	// FixedShape pads every verify forward to 1+K tokens (fewer only at
	// the end of the context), so that a backend that captures graphs
	// (CUDA) compiles and captures one verify graph; its padding rows cost
	// what real ones cost. Without it a verify forward is 1+len(drafts)
	// tokens: the CPU, where every row's logits cost their share.
	FixedShape bool
	// AcceptWrongDraft plants the identity gate's defect (tests and the
	// MINFER_TEST_MUTATE=accept_wrong_draft seam): the first draft token
	// the target disagrees with is accepted and emitted anyway, once.
	AcceptWrongDraft bool
}

// Decoder runs speculative steps on a target. It is not safe for
// concurrent use.
type Decoder struct {
	target Target
	draft  Drafter
	opts   Options
	stats  Stats
	// planted: AcceptWrongDraft has accepted its one wrong token.
	planted bool
	batch   []int32
	logits  []float32 // the verify forwards' logits, reused step to step
}

// New is a decoder of target with drafter d.
func New(target Target, d Drafter, opts Options) (*Decoder, error) {
	if target == nil || d == nil {
		return nil, errors.New("spec: a decoder needs a target and a drafter")
	}
	if opts.K < 1 {
		return nil, fmt.Errorf("spec: %d draft tokens per step: want at least 1", opts.K)
	}
	if opts.NVocab < 1 {
		return nil, fmt.Errorf("spec: target vocabulary of %d tokens", opts.NVocab)
	}
	return &Decoder{target: target, draft: d, opts: opts}, nil
}

// Stats are the counts so far.
func (d *Decoder) Stats() Stats { return d.stats }

// ResetStats zeroes the counts (a benchmark's repetitions count apart).
func (d *Decoder) ResetStats() { d.stats = Stats{} }

// Drafter is the decoder's drafter.
func (d *Decoder) Drafter() Drafter { return d.draft }

// K is the number of tokens drafted per step.
func (d *Decoder) K() int { return d.opts.K }

// Step is one speculative step. ctx is the whole sequence so far: the
// tokens the target's context holds followed by the last sampled token,
// which is not forwarded yet (len(ctx) == target.Pos()+1). want (>= 1) is
// how many tokens the caller may still emit: at most want-1 are drafted.
//
// The target forwards the last token and the drafts in one forward. For
// each position in order, sample draws the target's token from that
// position's logits (with the caller's history, which commit extends) and
// commit emits it; commit returns false to end the generation. The step
// goes on to the next position while the token drawn equals the draft
// there, so it emits between 1 and 1+len(drafts) tokens. Afterwards the
// target holds ctx and every emitted token but the last (the next step's
// last token): the cells of rejected drafts are cut off.
//
// The rows handed to sample are the decoder's buffer: valid until the next
// Step (a caller that keeps one clones it).
//
// With Options.FixedShape the verify forward has one shape, 1+K tokens
// (fewer only at the end of the context): a shorter draft is padded. A
// step without a draft is a plain one-token decode.
func (d *Decoder) Step(ctx []int32, want int, sample func(logits []float32) int32, commit func(id int32) (bool, error)) error {
	pos := d.target.Pos()
	if len(ctx) != pos+1 {
		return fmt.Errorf("spec: a context of %d tokens for a target holding %d (want the target's and the last sampled one)", len(ctx), pos)
	}
	if want < 1 {
		return fmt.Errorf("spec: a step that may emit %d tokens", want)
	}
	room := d.target.NCtx() - pos // tokens one forward may still append
	if room < 1 {
		return fmt.Errorf("spec: the context of %d tokens is full", d.target.NCtx())
	}
	drafts, logits, nv, err := d.verify(ctx, pos, min(d.opts.K, want-1, room-1), room)
	if err != nil {
		return err
	}
	used := 0
	for j := 0; j <= len(drafts); j++ {
		id := sample(logits[j*nv : (j+1)*nv])
		used = j + 1
		accepted := j < len(drafts) && id == drafts[j]
		if !accepted && j < len(drafts) && d.opts.AcceptWrongDraft && !d.planted {
			d.planted, id, accepted = true, drafts[j], true // the planted defect
		}
		d.stats.Emitted++
		more, err := commit(id)
		if err != nil {
			return err
		}
		if accepted {
			d.stats.Accepted++
		}
		if !more || !accepted {
			break
		}
	}
	if err := d.target.Truncate(pos + used); err != nil {
		return fmt.Errorf("spec: roll back the rejected drafts: %w", err)
	}
	return nil
}

// verify asks the drafter for up to k tokens after ctx[:pos+1] (dropping
// any outside the vocabulary and what follows them), forwards ctx[pos] and
// the drafts in one verify forward of the step's shape (padded under
// Options.FixedShape: the padding rows are never read), counts the forward
// and the drafts, and returns the drafts and the logits, nv per position.
func (d *Decoder) verify(ctx []int32, pos, k, room int) (drafts []int32, logits []float32, nv int, err error) {
	if k > 0 {
		if drafts, err = d.draft.Draft(ctx[:pos+1], k); err != nil {
			return nil, nil, 0, fmt.Errorf("spec: draft (%s) at position %d: %w", d.draft.Name(), pos, err)
		}
		if len(drafts) > k {
			return nil, nil, 0, fmt.Errorf("spec: the drafter %s proposed %d tokens, %d asked", d.draft.Name(), len(drafts), k)
		}
		for i, t := range drafts {
			if t < 0 || int(t) >= d.opts.NVocab {
				drafts = drafts[:i]
				break
			}
		}
	}
	shape := 1
	switch {
	case len(drafts) > 0 && d.opts.FixedShape:
		shape = min(1+d.opts.K, room)
	case len(drafts) > 0:
		shape = 1 + len(drafts)
	}
	d.batch = append(append(d.batch[:0], ctx[pos]), drafts...)
	for len(d.batch) < shape {
		d.batch = append(d.batch, d.batch[len(d.batch)-1])
	}
	if logits, err = d.target.ForwardInto(d.logits, d.batch, shape > 1); err != nil {
		return nil, nil, 0, fmt.Errorf("spec: verify forward of %d tokens at position %d: %w", shape, pos, err)
	}
	if len(logits)%shape != 0 {
		return nil, nil, 0, fmt.Errorf("spec: %d logits for %d positions", len(logits), shape)
	}
	d.logits = logits
	d.stats.Forwards++
	d.stats.Drafted += len(drafts)
	return drafts, logits, len(logits) / shape, nil
}
