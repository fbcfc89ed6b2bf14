package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/sample"
	"github.com/minfer-go/minfer/engine/tokenizer"
)

// lm is what generate, logits and bench use of a loaded engine.
type lm interface {
	// Forward appends tokens to the context and returns the logits of the
	// last position (n_vocab) or of every position (len(tokens)*n_vocab).
	Forward(tokens []int32, allLogits bool) ([]float32, error)
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
	cmd.Flags().StringVarP(&m.model, "model", "m", "", "GGUF model file (default: the embedded synthetic model)")
	cmd.Flags().StringVar(&m.device, "device", "auto", "backend: cpu, cuda or auto")
	cmd.Flags().IntVarP(&m.ctx, "ctx", "c", ctxDefault, "context size in tokens")
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
func (m *modelFlags) path() (string, error) {
	if m.model != "" {
		if _, err := os.Stat(m.model); err != nil {
			return "", fmt.Errorf("model: %w", err)
		}
		return m.model, nil
	}
	return defaultModelPath()
}

// open loads the model on the chosen device with a context of nCtx cells.
func (a *app) open(path, device string, nCtx int) (lm, error) {
	e, err := model.Load(path, a.modelOptions(device, nCtx))
	if err != nil {
		return nil, err
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
	text := prompt
	if chat {
		text = chatPrompt(prompt)
	}
	var ids []int32
	if tok.AddBOS() {
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
}

// generateResult is the --json output of generate.
type generateResult struct {
	Model       string            `json:"model"`
	Prompt      string            `json:"prompt"`
	PromptIDs   []int32           `json:"prompt_ids"`
	IDs         []int32           `json:"ids"`
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
}

func newGenerateCmd(a *app) *cobra.Command {
	var f generateFlags
	cmd := &cobra.Command{
		Use:   "generate [flags] PROMPT",
		Short: "generate text from a prompt, streamed as tokens arrive",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.generate(cmd, &f, args[0])
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
	fl.Float32Var(&f.repeatPenalty, "repeat-penalty", 1.0, "repeat penalty (1: off, the default, as llama.cpp)")
	fl.IntVar(&f.repeatLastN, "repeat-last-n", 64, "repeat penalty window (0: off, -1: whole context)")
	fl.BoolVar(&f.chat, "chat", false, "wrap the prompt in the ChatML template")
	fl.BoolVar(&f.json, "json", false, "print one JSON object at the end instead of streaming text")
	return cmd
}

func (a *app) generate(cmd *cobra.Command, f *generateFlags, prompt string) error {
	if err := f.check(); err != nil {
		return err
	}
	if f.n < 0 {
		return usagef("-n %d: want a non-negative token count", f.n)
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
	tok := e.Tokenizer()
	ids := encodePrompt(tok, prompt, f.chat)
	if len(ids) == 0 {
		return usagef("the prompt encodes to no tokens")
	}
	if len(ids) > f.ctx {
		return fmt.Errorf("prompt of %d tokens does not fit the context of %d (--ctx)", len(ids), f.ctx)
	}
	smp := sample.New(sp)

	out := cmd.OutOrStdout()
	stream := !f.json
	var pending, text []byte
	emit := func(b []byte) error {
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

	t0 := time.Now()
	logits, err := e.Forward(ids, false)
	prefill := time.Since(t0)
	if err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	history := append([]int32(nil), ids...)
	var gen []int32
	var decode time.Duration
	decodeSteps := 0
	for len(gen) < f.n {
		id := smp.Sample(logits, history)
		gen = append(gen, id)
		history = append(history, id)
		if tok.IsEOG(id) {
			break
		}
		if err := emit(tok.TokenBytes(id)); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if len(gen) == f.n {
			break
		}
		if len(history) >= f.ctx {
			fmt.Fprintf(cmd.ErrOrStderr(), "minfer: context of %d tokens is full, stopping\n", f.ctx)
			break
		}
		t := time.Now()
		logits, err = e.Forward([]int32{id}, false)
		decode += time.Since(t)
		decodeSteps++
		if err != nil {
			return fmt.Errorf("decode step %d: %w", len(gen), err)
		}
	}
	if stream {
		if len(pending) > 0 {
			if _, err := out.Write(pending); err != nil {
				return fmt.Errorf("write: %w", err)
			}
		}
		fmt.Fprintln(out)
		return nil
	}
	res := generateResult{
		Model: path, Prompt: prompt, PromptIDs: ids, IDs: gen, Text: string(text),
		NPrompt: len(ids), NGen: len(gen),
		PrefillMS: ms(prefill), DecodeMS: ms(decode),
		PrefillTokS: rate(len(ids), prefill), DecodeTokS: rate(decodeSteps, decode),
		Backend: backendName(e, f.device), KVFormat: kvFormat(e, a.cfg.CacheType), Levers: a.cfg.Set(),
	}
	if res.IDs == nil {
		res.IDs = []int32{}
	}
	return writeJSON(out, res, false)
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
