package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/sample"
	"github.com/minfer-go/minfer/engine/spec"
	"github.com/minfer-go/minfer/engine/tokenizer"
	"github.com/minfer-go/minfer/schema"
)

// Speculative decoding (engine/spec) on generate, chat and bench:
// --draft MODEL drafts with a second model of the target's vocabulary and
// architecture, --draft lookup with n-grams of the context so far, and
// --draft none decodes plainly through the same loop (bench's baseline).
// The output is the target's own, token for token.

type draftFlags struct {
	draft string
	n     int
}

// register binds --draft and --draft-n; their defaults are the levers
// MINFER_DRAFT and MINFER_DRAFT_N (so abtest can switch drafting in an arm
// process), and a flag given wins.
func (d *draftFlags) register(cmd *cobra.Command, cfg levers.Config) {
	fl := cmd.Flags()
	fl.StringVar(&d.draft, "draft", cfg.Draft, "speculative decoding: a draft GGUF of the model's vocabulary and architecture, lookup (n-grams of the prompt and output so far) or none (plain decoding through the same loop); the output is the model's own, token for token (default: MINFER_DRAFT)")
	fl.IntVar(&d.n, "draft-n", cfg.DraftN, "with --draft: tokens drafted per step (the model checks them and its next token in one forward; default: MINFER_DRAFT_N)")
}

// check validates the flags before anything is loaded.
func (d *draftFlags) check(cmd *cobra.Command) error {
	if d.draft == "" {
		if cmd.Flags().Changed("draft-n") {
			return usagef("--draft-n needs --draft MODEL, lookup or none")
		}
		return nil
	}
	if d.n < 1 {
		return usagef("--draft-n %d: want at least one token per step", d.n)
	}
	return nil
}

// noDraft proposes nothing: every step is a plain one-token decode.
type noDraft struct{}

func (noDraft) Draft([]int32, int) ([]int32, error) { return nil, nil }
func (noDraft) Name() string                        { return "none" }

// openDraft is the decoder --draft asks for on target (loaded from
// targetPath on device with nCtx cells), nil without --draft, and the func
// that closes what it opened. A draft model that cannot draft for the
// target (another architecture or vocabulary) is refused before its
// weights are loaded.
func (a *app) openDraft(f *draftFlags, target lm, targetPath, device string, nCtx int) (*spec.Decoder, func() error, error) {
	nop := func() error { return nil }
	opts := spec.Options{K: f.n, NVocab: target.HParams().NVocab, AcceptWrongDraft: a.cfg.Mutated(levers.MutateAcceptWrongDraft)}
	if g, ok := target.(interface{ CapturesGraphs() bool }); ok && g.CapturesGraphs() {
		opts.FixedShape = true // one verify graph to capture
	}
	var d spec.Drafter
	closeDraft := nop
	switch f.draft {
	case "":
		return nil, nop, nil
	case "none":
		d = noDraft{}
	case "lookup":
		d = spec.DefaultLookup()
	default:
		path, err := resolveModel(f.draft)
		if err != nil {
			return nil, nop, fmt.Errorf("--draft: %w", err)
		}
		if err := checkDraftFile(path, targetPath, target); err != nil {
			return nil, nop, err
		}
		e, err := model.Load(path, a.modelOptions(device, nCtx))
		if err != nil {
			return nil, nop, fmt.Errorf("--draft: %w", err)
		}
		a.dev.noteEngine(e)
		d, closeDraft = spec.NewModel(e, path), e.Close
	}
	tgt, ok := target.(spec.Target)
	if !ok {
		return nil, nop, withClose(fmt.Errorf("--draft: the engine (%T) cannot roll its context back", target), closeDraft())
	}
	dec, err := spec.New(tgt, d, opts)
	if err != nil {
		return nil, nop, withClose(err, closeDraft())
	}
	a.dev.decoders = append(a.dev.decoders, dec)
	return dec, closeDraft, nil
}

// checkDraftFile reads the draft file's header and tokenizer (no weights)
// and says why it cannot draft for target, if it cannot.
func checkDraftFile(path, targetPath string, target lm) error {
	f, err := gguf.Open(path)
	if err != nil {
		return fmt.Errorf("--draft: %w", err)
	}
	defer f.Close()
	hp, err := model.ReadHParams(f)
	if err != nil {
		return fmt.Errorf("--draft %s: %w", path, err)
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return fmt.Errorf("--draft %s: %w", path, err)
	}
	if err := spec.CheckPair(
		spec.Side{Name: targetPath, Arch: string(target.HParams().Arch), Tok: target.Tokenizer()},
		spec.Side{Name: path, Arch: string(hp.Arch), Tok: tok}); err != nil {
		return usageError{fmt.Errorf("--draft: %w", err)} // exit 2, as a refused session file
	}
	return nil
}

// withClose is err, with the error of closing the draft model if any.
func withClose(err, cerr error) error {
	if cerr != nil {
		return fmt.Errorf("%w (and closing the draft model: %v)", err, cerr)
	}
	return err
}

// speculativeDoc is the document's account of what dec did.
func speculativeDoc(dec *spec.Decoder, st spec.Stats) *schema.Speculative {
	return &schema.Speculative{
		Draft: dec.Drafter().Name(), K: dec.K(),
		Drafted: st.Drafted, Accepted: st.Accepted, AcceptanceRate: st.AcceptanceRate(),
		TargetForwards: st.Forwards, TokensPerForward: st.TokensPerForward(),
	}
}

// generateSpec is generateAfter through speculative steps: the same
// tokens, the same stops (end of generation, n tokens, the context full)
// and, at the end, the same context in e (every generated token forwarded
// but the last). decodeSteps counts the tokens the steps emitted, so the
// decode rate is tokens per second.
func generateSpec(e lm, dec *spec.Decoder, past, ids []int32, smp *sample.Sampler, n, nCtx int, emit func(id int32) error) (genRun, error) {
	var r genRun
	logits, history, err := r.prefillAfter(e, past, ids)
	if err != nil {
		return r, err
	}
	tok := e.Tokenizer()
	commit := func(id int32) (bool, error) {
		r.gen = append(r.gen, id)
		history = append(history, id)
		if tok.IsEOG(id) {
			return false, nil
		}
		if emit != nil {
			if err := emit(id); err != nil {
				return false, fmt.Errorf("write: %w", err)
			}
		}
		if len(r.gen) == n {
			return false, nil
		}
		if len(history) >= nCtx {
			r.contextFullNotice = true
			return false, nil
		}
		return true, nil
	}
	if n == 0 {
		return r, nil
	}
	more, err := commit(smp.Sample(logits, history))
	draw := func(row []float32) int32 { return smp.Sample(row, history) }
	step := func(id int32) (bool, error) {
		more, err = commit(id)
		return more, err
	}
	for more && err == nil {
		before := dec.Stats().Emitted
		t := time.Now()
		err = dec.Step(history, n-len(r.gen), draw, step)
		r.decode += time.Since(t)
		r.decodeSteps += dec.Stats().Emitted - before
		if err != nil {
			return r, fmt.Errorf("decode after %d tokens: %w", len(r.gen), err)
		}
	}
	return r, err
}

// benchDraftPrompt is the text bench's tg test continues with --draft
// (--prompt replaces it): code, where drafts pay.
const benchDraftPrompt = `import json
import os


class Config:
    def __init__(self, path):
        self.path = path
        self.values = {}

    def load(self):
        with open(self.path) as f:
            self.values = json.load(f)

    def get(self, key, default=None):
        return self.values.get(key, default)

    def save(self):
        with open(self.path, "w") as f:
            json.dump(self.values, f)


def main():
    config = Config(os.path.join(os.getcwd(), "config.json"))
`

// runTGDraft times a greedy generation of steps tokens through dec's
// speculative steps after the fill, an untimed prefill of prompt and the
// first token drawn from it (tg's one-token prefill): the steps tokens
// after the first are timed, the drafter's prefill of the prompt is not.
// The end-of-generation token does not stop it, so every repetition does
// the same work.
func (b *benchRunner) runTGDraft(dec *spec.Decoder, prompt []int32, steps int) (time.Duration, error) {
	if err := b.fill(b.tgName()); err != nil {
		return 0, err
	}
	logits, err := b.e.Forward(prompt, false)
	if err != nil {
		return 0, fmt.Errorf("%s prompt: %w", b.tgName(), err)
	}
	hist := append(append([]int32(nil), b.fills...), prompt...)
	hist = append(hist, sample.Argmax(logits))
	if _, err := dec.Drafter().Draft(hist, 0); err != nil {
		return 0, fmt.Errorf("%s: draft prefill: %w", b.tgName(), err)
	}
	want := len(hist) + steps
	done := b.timedWindow()
	t := time.Now()
	for len(hist) < want {
		err := dec.Step(hist, want-len(hist), sample.Argmax, func(id int32) (bool, error) {
			hist = append(hist, id)
			return len(hist) < want, nil
		})
		if err != nil {
			return 0, fmt.Errorf("%s at %d: %w", b.tgName(), len(hist), err)
		}
	}
	d := time.Since(t)
	done()
	return d, nil
}

// draftStats is what chat --stats says of the drafts so far ("" without
// --draft).
func draftStats(dec *spec.Decoder) string {
	if dec == nil {
		return ""
	}
	st := dec.Stats()
	return fmt.Sprintf(", drafts (%s) accepted %d of %d (%.2f), %.2f tokens per forward",
		dec.Drafter().Name(), st.Accepted, st.Drafted, st.AcceptanceRate(), st.TokensPerForward())
}

// addStats and subStats add and subtract the counts of two Stats.
func addStats(a, b spec.Stats) spec.Stats {
	return spec.Stats{Forwards: a.Forwards + b.Forwards, Drafted: a.Drafted + b.Drafted, Accepted: a.Accepted + b.Accepted, Emitted: a.Emitted + b.Emitted}
}

func subStats(a, b spec.Stats) spec.Stats {
	return spec.Stats{Forwards: a.Forwards - b.Forwards, Drafted: a.Drafted - b.Drafted, Accepted: a.Accepted - b.Accepted, Emitted: a.Emitted - b.Emitted}
}
