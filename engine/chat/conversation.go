package chat

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/minfer-go/minfer/engine/sample"
	"github.com/minfer-go/minfer/engine/spec"
	"github.com/minfer-go/minfer/engine/tokenizer"
)

// LM is what a conversation needs of an engine (model.Engine).
type LM interface {
	// ForwardInto appends tokens to the context and returns the logits of
	// the last position (every position with allLogits), written into dst
	// when it holds them (an answer's steps reuse one row).
	ForwardInto(dst []float32, tokens []int32, allLogits bool) ([]float32, error)
	Tokenizer() *tokenizer.Tokenizer
	// Tokens are the ids in the KV cache (a copy), Pos their number, NCtx
	// its size.
	Tokens() []int32
	Pos() int
	NCtx() int
}

// ErrContextFull is the error of a turn or an answer that does not fit the
// context: nothing is cut to make room.
var ErrContextFull = errors.New("the context is full")

// Conversation is a chat on one engine. The KV cache holds the whole
// conversation; each turn forwards only its own tokens (the end of the
// previous answer, the user's message and the generation prompt) and the
// answer is decoded one token at a time after them. The last token sampled
// is not forwarded until the next turn needs it (it may be the end of the
// turn), exactly as a generation leaves it.
//
// A Conversation is not safe for concurrent use.
type Conversation struct {
	lm     LM
	tok    *tokenizer.Tokenizer
	tmpl   Template
	smp    *sample.Sampler
	system string
	imEnd  int32

	// IgnoreEOG masks the end-of-generation tokens before sampling, so an
	// answer always runs to its token limit (benchmarks: the same work in
	// every repetition and every arm; the gate: answers long enough to
	// compare). The logits Ask and Next return are not masked.
	IgnoreEOG bool

	// Chunks are the forward shapes a turn's tokens are prefilled in,
	// largest first (nil: one forward of the whole turn). New sets
	// DefaultChunks on an engine that captures graphs (CUDA), nil
	// elsewhere: the CPU captures nothing and prefills a turn faster in
	// one forward.
	// A turn of L tokens forwards as many chunks of the largest size as
	// fit, then of the next, and the rest one token at a time through the
	// decode graph. So a conversation compiles a fixed set of graphs
	// whatever its turns' lengths, and on a backend that captures graphs
	// no new shape (a new compiled graph, a scratch that grows) moves the
	// device pool between turns and throws the captured decode graph away.
	Chunks []int
	warmed bool

	pending []int32   // sampled, not forwarded (at most one token)
	answer  []int32   // the current answer's tokens, its end-of-turn included
	row     []float32 // Next's logits, reused step to step
	masked  []float32 // the IgnoreEOG copy of a step's logits, reused
	msgs    []Message // the transcript of the turns run here
	// restored: the context held a conversation before the first turn.
	restored bool

	// draft decodes the answers speculatively (draft.go; nil: one token
	// a forward); draftWarmed: its verify shape was warmed.
	draft       *spec.Decoder
	draftWarmed bool

	// defect plants a fault for the tests that show the gate catches it
	// (conversation_test.go); "" in every real run.
	defect string
}

// New starts a conversation on lm with template t and sampler smp. The
// engine's context may already hold one (a restored session, whose last
// sampled token, never forwarded, is pending): the first turn then
// appends to it, and system must be "". Otherwise system is the system
// message ("": the template's default, if any).
func New(lm LM, t Template, smp *sample.Sampler, system string, pending []int32) (*Conversation, error) {
	tok := lm.Tokenizer()
	c := &Conversation{lm: lm, tok: tok, tmpl: t, smp: smp, system: system, pending: slices.Clone(pending)}
	if g, ok := lm.(GraphCapturer); ok && g.CapturesGraphs() {
		c.Chunks = DefaultChunks
	}
	c.restored = c.started()
	for _, s := range []string{IMStart, IMEnd} {
		id, ok := tok.ID(s)
		if !ok || tok.Type(id) != tokenizer.TypeControl && tok.Type(id) != tokenizer.TypeUserDefined {
			return nil, fmt.Errorf("chat: the vocabulary has no control token %s: no ChatML conversation with this model", s)
		}
		c.imEnd = id
	}
	if system != "" && c.started() {
		return nil, errors.New("chat: a system message starts a conversation: the context already holds one")
	}
	return c, nil
}

// started reports whether the context holds anything.
func (c *Conversation) started() bool { return len(c.pending) > 0 || len(c.lm.Tokens()) > 0 }

// Pending is the token sampled last and not forwarded yet (a session saves
// it with the context).
func (c *Conversation) Pending() []int32 { return slices.Clone(c.pending) }

// Transcript is the conversation of the turns run here: the system message
// when one was given, then each user message and answer (its ids as
// generated, the end-of-turn token left out, as the template renders an
// answer). A context restored from a session is not in it.
func (c *Conversation) Transcript() []Message { return slices.Clone(c.msgs) }

// Replay is what a fresh engine prefills to stand where this conversation
// stands after its last Ask: BOS when the vocabulary asks for it, then the
// template's rendering of the transcript with the generation prompt. It is
// the conversation-reuse gate's reference (a conversation restored from a
// session has no transcript of the restored part: an error).
func (c *Conversation) Replay() ([]int32, error) {
	if len(c.msgs) == 0 || c.restored {
		return nil, errors.New("chat: no transcript to replay (no turn yet, or a restored context)")
	}
	ids, err := c.tmpl.Render(c.msgs, true).Encode(c.tok)
	if err != nil {
		return nil, err
	}
	if c.tok.AddBOS() {
		ids = append([]int32{c.tok.BOS()}, ids...)
	}
	return ids, nil
}

// Answer is the current answer's tokens so far.
func (c *Conversation) Answer() []int32 { return slices.Clone(c.answer) }

// answerOpen reports whether the context ends inside a message (the last
// ChatML control token in it is <|im_start|>): an answer cut at its token
// limit, which the next turn closes with <|im_end|>.
func (c *Conversation) answerOpen(ctx []int32) bool {
	imStart, _ := c.tok.ID(IMStart)
	for i := len(ctx) - 1; i >= 0; i-- {
		switch ctx[i] {
		case imStart:
			return true
		case c.imEnd:
			return false
		}
	}
	return false
}

// turnTokens are the tokens a turn with the user's message forwards.
func (c *Conversation) turnTokens(user string) ([]int32, error) {
	if !c.started() {
		ids, err := c.tmpl.Opening(c.system, user).Encode(c.tok)
		if err != nil {
			return nil, err
		}
		if c.tok.AddBOS() {
			ids = append([]int32{c.tok.BOS()}, ids...)
		}
		return ids, nil
	}
	ctx := append(c.lm.Tokens(), c.pending...)
	open := c.answerOpen(ctx)
	feed := slices.Clone(c.pending)
	if open && len(feed) > 0 && c.tok.IsEOG(feed[len(feed)-1]) && feed[len(feed)-1] != c.imEnd {
		// Another end token (<|endoftext|>) ended the answer: the
		// template ends every answer with <|im_end|> instead.
		feed = feed[:len(feed)-1]
	}
	if open && len(feed) > 0 && feed[len(feed)-1] == c.imEnd {
		open = false // the answer's own <|im_end|> closes it
	}
	if c.defect == DefectDropPending {
		feed = nil
	}
	ids, err := c.tmpl.Next(open, user).Encode(c.tok)
	if err != nil {
		return nil, err
	}
	return append(feed, ids...), nil
}

// Ask appends the user's turn to the context and samples the first token
// of the answer. It returns the token, the logits it was drawn from and how
// many tokens the turn forwarded. A turn that does not fit the context is
// ErrContextFull and changes nothing.
func (c *Conversation) Ask(user string) (id int32, logits []float32, fed int, err error) {
	feed, err := c.turnTokens(user)
	if err != nil {
		return 0, nil, 0, err
	}
	if c.defect == DefectDropAnswer && len(c.answer) > 0 {
		if t, ok := c.lm.(interface{ Truncate(int) error }); ok {
			if err := t.Truncate(len(c.lm.Tokens()) - (len(c.answer) - 1)); err != nil {
				return 0, nil, 0, err
			}
		}
	}
	first := !c.started()
	held := len(c.lm.Tokens())
	if held+len(feed) > c.lm.NCtx() {
		return 0, nil, 0, fmt.Errorf("chat: the turn's %d tokens after the conversation's %d do not fit the context of %d: %w",
			len(feed), held+len(c.pending), c.lm.NCtx(), ErrContextFull)
	}
	if c.defect == DefectRecompile {
		if d, ok := c.lm.(interface{ DropGraphs() error }); ok {
			if err := d.DropGraphs(); err != nil {
				return 0, nil, 0, err
			}
		}
	}
	if err := c.warm(); err != nil {
		return 0, nil, 0, err
	}
	logits, err = c.prefill(feed)
	if err != nil {
		return 0, nil, 0, err
	}
	if c.answer != nil {
		c.msgs = append(c.msgs, Message{Role: "assistant", IDs: c.answerIDs()})
	}
	if first && c.system != "" {
		c.msgs = append(c.msgs, Message{Role: "system", Content: c.system})
	}
	c.msgs = append(c.msgs, Message{Role: "user", Content: user})
	c.pending, c.answer = nil, []int32{}
	id = c.sample(logits)
	return id, logits, len(feed), nil
}

// DefaultChunks are the prefill shapes of a turn (Chunks).
var DefaultChunks = []int{256, 32}

// GraphCapturer is the optional interface of an engine whose backend
// captures graphs (model.Engine): such an engine is warmed before the
// first turn (warm).
type GraphCapturer interface {
	CapturesGraphs() bool
	Truncate(n int) error
}

// chunks are the shapes a turn of n tokens forwards in, in order.
func (c *Conversation) chunks(n int) []int {
	var out []int
	for _, size := range c.Chunks {
		for size > 1 && n >= size {
			out = append(out, size)
			n -= size
		}
	}
	for ; n > 0; n-- {
		out = append(out, 1)
	}
	if len(c.Chunks) == 0 && len(out) > 0 {
		out = []int{len(out)}
	}
	return out
}

// prefill forwards a turn's tokens in its chunks and returns the logits of
// the last.
func (c *Conversation) prefill(feed []int32) ([]float32, error) {
	var logits []float32
	at := 0
	for _, n := range c.chunks(len(feed)) {
		var err error
		if logits, err = c.lm.ForwardInto(nil, feed[at:at+n], false); err != nil {
			return nil, fmt.Errorf("chat: prefill of the turn's tokens %d..%d of %d: %w", at, at+n, len(feed), err)
		}
		at += n
	}
	return logits, nil
}

// Warm warms the engine before the first turn (Ask does it otherwise):
// benchmarks call it before their timer.
func (c *Conversation) Warm() error { return c.warm() }

// warm runs every chunk shape once, before the first turn, on an engine
// that captures graphs: each compiles its graph and grows the device's
// scratch for its shape now, so that no later turn moves the device pool
// (which would invalidate the captured decode graph). The warm-up forwards
// dummy tokens after the context and cuts them off again (Truncate): the
// cells they wrote lie past the context, and the next forward overwrites
// them. A shape that does not fit the context is not warmed, and not used.
func (c *Conversation) warm() error {
	if c.warmed {
		return nil
	}
	c.warmed = true
	g, ok := c.lm.(GraphCapturer)
	if !ok || !g.CapturesGraphs() {
		return nil
	}
	held := len(c.lm.Tokens())
	var fit []int
	for _, n := range append(slices.Clone(c.Chunks), 1) {
		if held+n > c.lm.NCtx() {
			continue
		}
		if n > 1 {
			fit = append(fit, n)
		}
		if _, err := c.lm.ForwardInto(nil, slices.Repeat([]int32{c.imEnd}, n), false); err != nil {
			return fmt.Errorf("chat: warm-up forward of %d tokens: %w", n, err)
		}
		if err := g.Truncate(held); err != nil {
			return fmt.Errorf("chat: warm-up: %w", err)
		}
	}
	if len(c.Chunks) > 0 {
		c.Chunks = fit
	}
	return nil
}

// Next forwards the answer's last token and samples the next one. The
// logits are the conversation's buffer: valid until the next Ask or Next
// (a caller that keeps them clones them). An answer that reaches the end of
// the context is ErrContextFull: the answer so far stays, nothing is cut.
func (c *Conversation) Next() (id int32, logits []float32, err error) {
	if len(c.pending) != 1 || c.answer == nil {
		return 0, nil, errors.New("chat: Next before Ask")
	}
	if n := c.lm.Pos(); n+1 > c.lm.NCtx() {
		return 0, nil, fmt.Errorf("chat: the answer reached the end of the context of %d tokens after %d tokens: %w", c.lm.NCtx(), len(c.answer), ErrContextFull)
	}
	logits, err = c.lm.ForwardInto(c.row, c.pending, false)
	if err != nil {
		return 0, nil, fmt.Errorf("chat: decode step %d of the answer: %w", len(c.answer), err)
	}
	c.row = logits
	c.pending = nil
	return c.sample(logits), logits, nil
}

// sample draws the next answer token (history: the whole conversation, for
// the repeat penalty, copied only when the sampler reads it) and keeps it
// pending.
func (c *Conversation) sample(logits []float32) int32 {
	if c.IgnoreEOG {
		c.masked = maskEOGInto(c.masked, c.tok, logits)
		logits = c.masked
	}
	var hist []int32
	if c.smp.UsesHistory() {
		hist = append(c.lm.Tokens(), c.pending...)
	}
	id := c.smp.Sample(logits, hist)
	c.pending = []int32{id}
	c.answer = append(c.answer, id)
	return id
}

// MaskEOG is a copy of logits with the end-of-generation tokens at -Inf.
func MaskEOG(tok *tokenizer.Tokenizer, logits []float32) []float32 {
	return maskEOGInto(nil, tok, logits)
}

// maskEOGInto is MaskEOG written into dst (grown when short).
func maskEOGInto(dst []float32, tok *tokenizer.Tokenizer, logits []float32) []float32 {
	out := append(dst[:0], logits...)
	for _, e := range tok.EOG() {
		if int(e) < len(out) {
			out[e] = float32(math.Inf(-1))
		}
	}
	return out
}

// answerIDs is the current answer as the template renders it: without its
// end-of-generation token.
func (c *Conversation) answerIDs() []int32 {
	a := slices.Clone(c.answer)
	if n := len(a); n > 0 && c.tok.IsEOG(a[n-1]) {
		a = a[:n-1]
	}
	return a
}

// Stop says why an answer ended.
type Stop string

const (
	StopEOG   Stop = "eog"   // the model ended its turn
	StopLimit Stop = "limit" // the token limit
)

// Reply is one answer of Turn.
type Reply struct {
	IDs    []int32     // the answer, its end-of-turn token included when it came
	Logits [][]float32 // the logits each token was drawn from, when kept
	Fed    int         // tokens the turn forwarded before the answer
	Stop   Stop
	// FirstToken is the time to the first answer token (Ask: the turn's
	// prefill and the first draw); Decode the time of the decode steps
	// after it (Next: DecodeSteps of them), emit's time not included.
	FirstToken, Decode time.Duration
	DecodeSteps        int
}

// Turn asks and decodes the answer until the model ends its turn or max
// tokens were drawn, handing every answer token that is not an
// end-of-generation token to emit (nil: none). With keepLogits each token's
// logits are returned.
func (c *Conversation) Turn(user string, max int, keepLogits bool, emit func(int32) error) (Reply, error) {
	var r Reply
	if max < 1 {
		return r, fmt.Errorf("chat: an answer of at most %d tokens", max)
	}
	t0 := time.Now()
	id, logits, fed, err := c.Ask(user)
	r.FirstToken, r.Fed = time.Since(t0), fed
	if err == nil && c.draft != nil {
		return c.answerDrafted(r, id, logits, max, keepLogits, emit)
	}
	for err == nil {
		r.IDs = append(r.IDs, id)
		if keepLogits {
			r.Logits = append(r.Logits, slices.Clone(logits)) // Next's row is reused
		}
		if c.tok.IsEOG(id) {
			r.Stop = StopEOG
			return r, nil
		}
		if emit != nil {
			if err := emit(id); err != nil {
				return r, err
			}
		}
		if len(r.IDs) == max {
			r.Stop = StopLimit
			return r, nil
		}
		t := time.Now()
		id, logits, err = c.Next()
		r.Decode += time.Since(t)
		r.DecodeSteps++
	}
	return r, err
}

// The defects the tests plant (conversation_test.go shows the gate fails
// on each).
const (
	// DefectDropAnswer cuts the previous answer out of the KV cache before
	// the next turn (the context loses what the model said).
	DefectDropAnswer = "drop_answer"
	// DefectDropPending never forwards the answer's last sampled token
	// (the off-by-one of a turn that forgets the pending token).
	DefectDropPending = "drop_pending"
	// DefectRecompile throws the engine's compiled graphs away before
	// every turn (DropGraphs), so the decode graph is compiled, and on a
	// device captured, again each turn: the answers stay right, the
	// census check fails.
	DefectRecompile = "recompile"
)
