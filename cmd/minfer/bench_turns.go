package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/engine/chat"
	"github.com/minfer-go/minfer/engine/sample"
	"github.com/minfer-go/minfer/engine/spec"
	"github.com/minfer-go/minfer/schema"
)

// minfer bench --turns N times a conversation (engine/chat) instead of the
// pp and tg tests: N user turns (--script FILE, cycled, or benchScript),
// each answered greedily with exactly -n tokens (the end-of-generation
// tokens masked, so every repetition and every arm does the same work).
// Each repetition starts the conversation from an empty context on the
// same engine (its compiled and captured graphs kept, as a chat keeps
// them). The document's tests are "turn1".."turnN" (schema.BenchTest):
// ttft_ms, per repetition the turn's time to first token (its prefill of
// prompt_tokens tokens and the first draw), and samples_ms / tok_s the
// time and rate of its n_tokens = -n - 1 decode steps after it. The
// document carries "turns": N; n_prompt is 0, n_gen -n. The census and
// device-time fields of pp/tg are not written for turns. The untimed
// warmup runs the whole conversation until the budget is spent, at least
// once.

// benchScript is the conversation of --turns without --script.
var benchScript = []string{
	"Write a Python function that returns the n-th Fibonacci number.",
	"Now make it iterative, and explain the change in one sentence.",
	"Write a unit test for it with pytest.",
	"class Config:\n    def __init__(self",
}

func (a *app) benchTurns(cmd *cobra.Command, f *benchFlags) error {
	switch {
	case f.turns < 1:
		return usagef("--turns %d: want at least one turn", f.turns)
	case cmd.Flags().Changed("n-prompt"):
		return usagef("-p: a conversation's prompts are its turns: not with --turns")
	case f.depth != 0:
		return usagef("-d: a conversation starts from an empty context: not with --turns")
	case f.n < 2:
		return usagef("-n %d: want at least 2 answer tokens per turn with --turns (the first, then decode steps)", f.n)
	case f.reps < 1:
		return usagef("-r %d: want at least one repetition", f.reps)
	}
	script := benchScript
	if f.script != "" {
		fh, err := os.Open(f.script)
		if err != nil {
			return usagef("--script: %v", err)
		}
		script, err = chat.ReadScript(fh)
		fh.Close()
		if err != nil {
			return usagef("--script %s: %v", f.script, err)
		}
	}
	turns := make([]string, f.turns)
	for i := range turns {
		turns[i] = script[i%len(script)]
	}
	if f.ctx == 0 {
		f.ctx = 4096
	}
	if err := f.check(); err != nil {
		return err
	}
	path, err := f.path()
	if err != nil {
		return err
	}
	tmpl, err := chatTemplate(path, "auto")
	if err != nil {
		return err
	}
	sum, err := fileSHA256(path)
	if err != nil {
		return err
	}
	e, clm, err := a.openChat(path, f.device, f.ctx, "bench --turns")
	if err != nil {
		return err
	}
	defer e.Close()
	dec, closeDraft, err := a.openDraft(&f.draft, e, path, f.device, f.ctx)
	if err != nil {
		return err
	}
	defer closeDraft()
	drafts := make([]spec.Stats, len(turns)) // per turn, over the timed repetitions (--draft)
	res, err := a.benchHead(e, path, sum, f)
	if err != nil {
		return err
	}
	res.Turns = f.turns
	// conversation runs the turns once from an empty context.
	conversation := func() ([]chat.Reply, error) {
		e.Reset()
		c, err := chat.New(clm, tmpl, sample.New(sample.Params{Greedy: true}), "", nil)
		if err != nil {
			return nil, err
		}
		c.IgnoreEOG = true
		c.SetDraft(dec)
		if err := c.Warm(); err != nil {
			return nil, err
		}
		var out []chat.Reply
		for i, user := range turns {
			var before spec.Stats
			if dec != nil {
				before = dec.Stats()
			}
			r, err := c.Turn(user, f.n, false, nil)
			if err != nil {
				return nil, fmt.Errorf("turn %d of %d: %w", i+1, len(turns), err)
			}
			if dec != nil {
				drafts[i] = addStats(drafts[i], subStats(dec.Stats(), before))
			}
			out = append(out, r)
		}
		return out, nil
	}
	res.Warmup.BudgetMS = float64(a.cfg.BenchWarmupMS)
	budget := time.Duration(a.cfg.BenchWarmupMS) * time.Millisecond
	w0 := time.Now()
	for res.Warmup.Iterations < 1 || time.Since(w0) < budget {
		if _, err := conversation(); err != nil {
			return fmt.Errorf("warmup: %w", err)
		}
		res.Warmup.Iterations++
	}
	res.Warmup.ElapsedMS = ms(time.Since(w0))
	clear(drafts) // the warmup's drafts are not the timed ones
	res.Tests = make([]schema.BenchTest, len(turns))
	for i := range turns {
		res.Tests[i] = schema.BenchTest{Name: "turn" + strconv.Itoa(i+1), NTokens: f.n - 1}
	}
	for range f.reps {
		replies, err := conversation()
		if err != nil {
			return err
		}
		for i, r := range replies {
			t := &res.Tests[i]
			t.PromptTokens = r.Fed
			t.TTFTMS = append(t.TTFTMS, ms(r.FirstToken))
			t.SamplesMS = append(t.SamplesMS, ms(r.Decode))
			t.TokS = append(t.TokS, rate(r.DecodeSteps, r.Decode))
		}
	}
	for i := range res.Tests {
		res.Tests[i].MeanTokS, res.Tests[i].StddevTokS = meanStddev(res.Tests[i].TokS)
		if dec != nil {
			res.Tests[i].Speculative = speculativeDoc(dec, drafts[i])
		}
	}
	return emitBench(cmd, f, &res)
}
