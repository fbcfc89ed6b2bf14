package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/sample"
	"github.com/minfer-go/minfer/engine/tokenizer"
	"github.com/minfer-go/minfer/schema"
)

// lm is what generate, logits and bench use of a loaded engine.
type lm interface {
	// Forward appends tokens to the context and returns the logits of the
	// last position (n_vocab) or of every position (len(tokens)*n_vocab).
	Forward(tokens []int32, allLogits bool) ([]float32, error)
	// ForwardInto is Forward with the logits written into dst when it
	// holds them (bench's loops reuse one buffer).
	ForwardInto(dst []float32, tokens []int32, allLogits bool) ([]float32, error)
	HParams() model.HParams
	Tokenizer() *tokenizer.Tokenizer
	Reset()
	// Truncate cuts the context back to its first n tokens.
	Truncate(n int) error
	Close() error
}

// modelFlags are the flags every model-running command shares.
type modelFlags struct {
	model  string
	device string
	ctx    int
}

func (m *modelFlags) register(cmd *cobra.Command, ctxDefault int) {
	addModelFlag(cmd, &m.model)
	cmd.Flags().StringVar(&m.device, "device", "auto", "backend: cpu, cuda or auto")
	ctxUsage := "context size in tokens"
	if ctxDefault == 0 {
		ctxUsage += " (default: what the tests need)"
	}
	cmd.Flags().IntVarP(&m.ctx, "ctx", "c", ctxDefault, ctxUsage)
}

// addModelFlag gives a command that reads a model the one -m/--model flag
// every such command takes; resolveModel turns its value into a path.
func addModelFlag(cmd *cobra.Command, model *string) {
	cmd.Flags().StringVarP(model, "model", "m", "", "GGUF model file (default: the embedded synthetic model)")
}

// resolveModel is the model file a command reads: the path given, which
// must exist, or the embedded default model for "".
func resolveModel(path string) (string, error) {
	if path == "" {
		return defaultModelPath()
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	return path, nil
}

// check validates the flags before anything is loaded (usage errors).
func (m *modelFlags) check() error {
	switch m.device {
	case "cpu", "cuda", "auto":
	default:
		return usagef("--device %q: want cpu, cuda or auto", m.device)
	}
	if m.ctx <= 0 {
		return usagef("--ctx %d: want a positive context size", m.ctx)
	}
	return nil
}

// path is --model, or the default model.
func (m *modelFlags) path() (string, error) { return resolveModel(m.model) }

// open loads the model on the chosen device with a context of nCtx cells.
func (a *app) open(path, device string, nCtx int) (lm, error) {
	e, err := model.Load(path, a.modelOptions(device, nCtx))
	if err != nil {
		return nil, err
	}
	a.dev.noteEngine(e)
	if a.wrap != nil {
		return a.wrap(e), nil
	}
	return e, nil
}

// backendName and kvFormat ask the engine what it runs on, when it says.
func backendName(e lm, fallback string) string {
	if b, ok := e.(interface{ Backend() string }); ok {
		return b.Backend()
	}
	return fallback
}

func kvFormat(e lm, cfg string) string {
	if k, ok := e.(interface{ KVFormat() string }); ok {
		return k.KVFormat()
	}
	return cfg
}

// completeUTF8 returns the length of the longest prefix of b that does not
// end inside an incomplete UTF-8 sequence (invalid bytes count as complete,
// so they are flushed rather than held forever).
func completeUTF8(b []byte) int {
	for back := 1; back <= utf8.UTFMax && back <= len(b); back++ {
		c := b[len(b)-back]
		if c < 0x80 {
			return len(b) // ASCII: everything before is settled
		}
		if !utf8.RuneStart(c) {
			continue // continuation byte: look further back
		}
		need := 0
		switch {
		case c&0xe0 == 0xc0:
			need = 2
		case c&0xf0 == 0xe0:
			need = 3
		case c&0xf8 == 0xf0:
			need = 4
		default:
			return len(b)
		}
		if back < need {
			return len(b) - back
		}
		return len(b)
	}
	return len(b)
}

// chatPrompt wraps a user prompt in the ChatML template.
func chatPrompt(p string) string {
	return "<|im_start|>user\n" + p + "<|im_end|>\n<|im_start|>assistant\n"
}

// encodePrompt tokenizes a prompt (ChatML-wrapped with special tokens
// parsed when chat is set), with BOS when the vocabulary asks for it.
func encodePrompt(tok *tokenizer.Tokenizer, prompt string, chat bool) []int32 {
	return encodeTurn(tok, prompt, chat, false)
}

// encodeTurn is encodePrompt of a prompt that follows a context when
// appended is set: no BOS, and a ChatML turn starts on a new line.
func encodeTurn(tok *tokenizer.Tokenizer, prompt string, chat, appended bool) []int32 {
	text := prompt
	if chat {
		text = chatPrompt(prompt)
		if appended {
			text = "\n" + text
		}
	}
	var ids []int32
	if tok.AddBOS() && !appended {
		ids = append(ids, tok.BOS())
	}
	return append(ids, tok.Encode(text, chat)...)
}

type generateFlags struct {
	modelFlags
	greedy        bool
	n             int
	seed          uint64
	temp          float32
	topK          int
	topP          float32
	repeatPenalty float32
	repeatLastN   int
	chat          bool
	json          bool
	ids           string
	repeat        int
	session       sessionFlags
	draft         draftFlags
}

func newGenerateCmd(a *app) *cobra.Command {
	var f generateFlags
	cmd := &cobra.Command{
		Use:   "generate [flags] (PROMPT | --ids 1,2,3)",
		Short: "generate text from a prompt, streamed as tokens arrive",
		Long: "Generate text from a prompt, streamed as tokens arrive.\n\n" +
			"With --session FILE the context is saved to FILE after generating (tokens, KV cells in the engine's KV\n" +
			"format, sampler state), and a later run with the same FILE restores it and appends its prompt (with\n" +
			"--chat a new ChatML turn) to it; without a prompt it continues the generation where it stopped, token\n" +
			"for token as the run that never stopped. The sampling flags are this run's; the generator continues\n" +
			"from the saved state unless --seed names another seed. --ctx defaults to the session's. A FILE of another model,\n" +
			"KV format or context length, of a newer format, truncated or corrupt is refused in one line naming\n" +
			"the field (exit 2) and left as it is; so is FILE when a run fails.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.generate(cmd, &f, args)
		},
	}
	fl := cmd.Flags()
	f.register(cmd, 4096)
	fl.BoolVar(&f.greedy, "greedy", false, "argmax decoding (after the repeat penalty)")
	fl.IntVarP(&f.n, "n", "n", 128, "tokens to generate at most")
	fl.Uint64Var(&f.seed, "seed", 0, "sampler seed")
	fl.Float32Var(&f.temp, "temp", 0.8, "temperature (<= 0: greedy)")
	fl.IntVar(&f.topK, "top-k", 40, "top-k (0: off)")
	fl.Float32Var(&f.topP, "top-p", 0.95, "top-p (1: off)")
	fl.Float32Var(&f.repeatPenalty, "repeat-penalty", 1.0, "repeat penalty (1: off, as llama.cpp)")
	fl.IntVar(&f.repeatLastN, "repeat-last-n", 64, "repeat penalty window (0: off, -1: whole context)")
	fl.BoolVar(&f.chat, "chat", false, "wrap the prompt in the ChatML template")
	fl.BoolVar(&f.json, "json", false, "print the schema.Generate document at the end instead of streaming text")
	fl.StringVar(&f.ids, "ids", "", "the prompt as comma-separated token ids instead of text")
	f.session.register(cmd)
	f.draft.register(cmd, a.cfg)
	fl.IntVar(&f.repeat, "repeat", 1, "run the whole generation this many times from an empty context and print the last run (not streamed when above 1); ids that differ between runs are an error (CUDA graphs are captured at a shape's 3rd execution and replayed from the 4th)")
	return cmd
}

// genRun is one generation.
type genRun struct {
	gen               []int32
	prefill, decode   time.Duration
	decodeSteps       int
	contextFullNotice bool
}

// generateOnce runs one generation of at most n tokens after the prompt
// ids from an empty context, handing each generated token that is not an
// end-of-generation token to emit (nil: none).
func generateOnce(e lm, ids []int32, sp sample.Params, n, nCtx int, emit func(id int32) error) (genRun, error) {
	e.Reset()
	return generateAfter(e, nil, ids, sample.New(sp), n, nCtx, emit) // every run samples from the same seed
}

// generateAfter forwards ids after the context past (the tokens the KV
// cache holds, for the repeat penalty) and samples at most n tokens with
// smp. Every generated token is forwarded but the last.
func generateAfter(e lm, past, ids []int32, smp *sample.Sampler, n, nCtx int, emit func(id int32) error) (genRun, error) {
	var r genRun
	logits, history, err := r.prefillAfter(e, past, ids)
	if err != nil {
		return r, err
	}
	for len(r.gen) < n {
		id := smp.Sample(logits, history)
		r.gen = append(r.gen, id)
		history = append(history, id)
		if e.Tokenizer().IsEOG(id) {
			break
		}
		if emit != nil {
			if err := emit(id); err != nil {
				return r, fmt.Errorf("write: %w", err)
			}
		}
		if len(r.gen) == n {
			break
		}
		if len(history) >= nCtx {
			r.contextFullNotice = true
			break
		}
		t := time.Now()
		// The sampler is done with this step's row: the next forward
		// writes over it (no 600 KB allocation a token).
		logits, err = e.ForwardInto(logits, []int32{id}, false)
		r.decode += time.Since(t)
		r.decodeSteps++
		if err != nil {
			return r, fmt.Errorf("decode step %d: %w", len(r.gen), err)
		}
	}
	return r, nil
}

func (a *app) generate(cmd *cobra.Command, f *generateFlags, args []string) error {
	if err := f.check(); err != nil {
		return err
	}
	if f.n < 0 {
		return usagef("-n %d: want a non-negative token count", f.n)
	}
	if f.repeat < 1 {
		return usagef("--repeat %d: want at least one run", f.repeat)
	}
	if err := f.draft.check(cmd); err != nil {
		return err
	}
	if f.session.path != "" && f.repeat > 1 {
		return usagef("--repeat runs from an empty context: not with --session")
	}
	if err := f.session.prepare(cmd, &f.ctx); err != nil {
		return err
	}
	var prompt string
	var ids []int32
	switch {
	case f.ids != "" && len(args) > 0:
		return usagef("give the prompt as text or as --ids, not both")
	case f.ids != "":
		if f.chat {
			return usagef("--chat wraps a text prompt: not with --ids")
		}
		var err error
		if ids, err = parseIDs(f.ids); err != nil {
			return usageError{err}
		}
	case len(args) == 1:
		prompt = args[0]
	case !f.session.restore:
		return usagef("give a prompt: text or --ids")
	}
	sp := sample.Params{Temp: f.temp, TopK: f.topK, TopP: f.topP, RepeatPenalty: f.repeatPenalty,
		RepeatLastN: f.repeatLastN, Seed: f.seed, Greedy: f.greedy}
	if err := sp.Validate(); err != nil {
		return usageError{err}
	}
	path, err := f.path()
	if err != nil {
		return err
	}
	e, err := a.open(path, f.device, f.ctx)
	if err != nil {
		return err
	}
	defer e.Close()
	dec, closeDraft, err := a.openDraft(&f.draft, e, path, f.device, f.ctx)
	if err != nil {
		return err
	}
	defer closeDraft()
	smp := sample.New(sp)
	sess, err := f.session.open(cmd, e, smp)
	if err != nil {
		return err
	}
	var past, unfed []int32 // the restored context; its tokens never forwarded
	if sess != nil {
		past, unfed = sess.past, sess.pending
	}
	tok := e.Tokenizer()
	if ids == nil && len(args) == 1 {
		ids = encodeTurn(tok, prompt, f.chat, len(past)+len(unfed) > 0)
		if len(ids) == 0 {
			return usagef("the prompt encodes to no tokens")
		}
	}
	for _, id := range ids {
		if int(id) >= e.HParams().NVocab {
			return fmt.Errorf("token id %d is outside the vocabulary of %d", id, e.HParams().NVocab)
		}
	}
	feed := append(append([]int32(nil), unfed...), ids...)
	switch {
	case len(feed) == 0 && len(past) >= f.ctx:
		return fmt.Errorf("the session's context of %d tokens is full", f.ctx)
	case len(feed) == 0:
		return usagef("the session %s ends with no token to continue from: give a prompt", f.session.path)
	case len(past) == 0 && len(ids) > f.ctx:
		return fmt.Errorf("prompt of %d tokens does not fit the context of %d (--ctx)", len(ids), f.ctx)
	case len(past)+len(feed) > f.ctx:
		return fmt.Errorf("prompt of %d tokens after the session's %d does not fit the context of %d (--ctx)", len(ids), len(past)+len(unfed), f.ctx)
	}

	out := cmd.OutOrStdout()
	// Text streams as tokens arrive, for one run only: with --repeat the
	// last run's text is printed once every run has been checked.
	stream := !f.json && f.repeat == 1
	var pending, text []byte
	emit := func(id int32) error {
		b := tok.TokenBytes(id)
		text = append(text, b...)
		if !stream {
			return nil
		}
		pending = append(pending, b...)
		n := completeUTF8(pending)
		if n == 0 {
			return nil
		}
		_, err := out.Write(pending[:n])
		pending = append(pending[:0], pending[n:]...)
		return err
	}
	var first, r genRun
	for i := 1; i <= f.repeat; i++ {
		var emitRun func(int32) error
		if i == f.repeat {
			emitRun = emit
		}
		if dec != nil {
			dec.ResetStats() // the document speaks of the run it prints
		}
		switch {
		case dec != nil && sess != nil:
			r, err = generateSpec(e, dec, past, feed, smp, f.n, f.ctx, emitRun)
		case dec != nil:
			e.Reset()
			r, err = generateSpec(e, dec, nil, ids, sample.New(sp), f.n, f.ctx, emitRun)
		case sess != nil:
			r, err = generateAfter(e, past, feed, smp, f.n, f.ctx, emitRun)
		default:
			r, err = generateOnce(e, ids, sp, f.n, f.ctx, emitRun)
		}
		if err != nil {
			if f.repeat > 1 {
				return fmt.Errorf("run %d of %d: %w", i, f.repeat, err)
			}
			return err
		}
		if i == 1 {
			first = r
		} else if j := firstIDDiff(first.gen, r.gen); j >= 0 {
			return fmt.Errorf("--repeat: run %d generated %s at step %d, run 1 %s (the same prompt from an empty context must give the same ids)",
				i, idAt(r.gen, j), j, idAt(first.gen, j))
		}
	}
	if dec != nil && !f.json {
		fmt.Fprintf(cmd.ErrOrStderr(), "minfer: %s\n", strings.TrimPrefix(draftStats(dec), ", "))
	}
	if r.contextFullNotice {
		fmt.Fprintf(cmd.ErrOrStderr(), "minfer: context of %d tokens is full, stopping\n", f.ctx)
	}
	if err := f.session.save(sess, r.gen, f.ctx, sp, smp); err != nil {
		return err
	}
	if !f.json {
		if !stream {
			pending = text
		}
		if len(pending) > 0 {
			if _, err := out.Write(pending); err != nil {
				return fmt.Errorf("write: %w", err)
			}
		}
		fmt.Fprintln(out)
		return nil
	}
	res := schema.Generate{
		Model: path, Prompt: prompt, PromptIDs: ids, IDs: r.gen, Text: string(text),
		NPrompt: len(ids), NGen: len(r.gen),
		PrefillMS: ms(r.prefill), DecodeMS: ms(r.decode),
		PrefillTokS: rate(len(feed), r.prefill), DecodeTokS: rate(r.decodeSteps, r.decode),
		Backend: backendName(e, f.device), KVFormat: kvFormat(e, a.cfg.CacheType), Levers: a.cfg.Set(),
	}
	if sess != nil {
		res.Session = sess.doc
	}
	if dec != nil {
		res.Speculative = speculativeDoc(dec, dec.Stats())
	}
	if res.PromptIDs == nil {
		res.PromptIDs = []int32{}
	}
	if res.IDs == nil {
		res.IDs = []int32{}
	}
	return writeJSON(out, res, false)
}

// firstIDDiff is the first step at which two generations differ (one
// ending early counts), or -1.
func firstIDDiff(a, b []int32) int {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	return -1
}

// idAt names step i of a generation: its id, or that it had ended.
func idAt(gen []int32, i int) string {
	if i < len(gen) {
		return fmt.Sprintf("id %d", gen[i])
	}
	return "nothing (it had ended)"
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// rate is n per second over d (0 when nothing was timed).
func rate(n int, d time.Duration) float64 {
	if n == 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// writeJSON writes v as one JSON document: indented, or on one line.
func writeJSON(w io.Writer, v any, indent bool) error {
	enc := json.NewEncoder(w)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("json: %w", err)
	}
	return nil
}

// prefillAfter forwards ids after the context past, timed into r.prefill,
// and returns the last position's logits and the history (past and ids)
// the sampler's repeat penalty reads.
func (r *genRun) prefillAfter(e lm, past, ids []int32) ([]float32, []int32, error) {
	t0 := time.Now()
	logits, err := e.Forward(ids, false)
	r.prefill = time.Since(t0)
	if err != nil {
		return nil, nil, fmt.Errorf("prefill: %w", err)
	}
	return logits, append(append([]int32(nil), past...), ids...), nil
}
