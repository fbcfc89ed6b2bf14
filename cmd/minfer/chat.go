package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/engine/chat"
	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/sample"
)

// minfer chat: a conversation that keeps its KV cache (engine/chat). Each
// user turn is appended to the context and the answer streamed; the
// conversation is never prefilled again. Turns come from stdin, one line
// each, or from --script FILE (turns between "---" lines, chat.ReadScript).

type chatFlags struct {
	modelFlags
	sampling      generateFlags // the sampling flags only
	n             int
	system        string
	script        string
	template      string
	session       sessionFlags
	showTurnStats bool
	draft         draftFlags
}

func newChatCmd(a *app) *cobra.Command {
	var f chatFlags
	cmd := &cobra.Command{
		Use:   "chat [flags]",
		Short: "a multi-turn conversation with the model's chat template, the KV cache kept across turns",
		Long: "A multi-turn conversation. The model's chat template (tokenizer.chat_template in the GGUF) must be of\n" +
			"the ChatML family the Qwen2 and Qwen3 models carry (minfer renders it natively; --template chatml forces\n" +
			"plain ChatML for a model whose template is absent or not recognized). Every turn appends its tokens to\n" +
			"the KV cache, and the compiled (on CUDA captured) decode graph is kept: no turn prefills the conversation\n" +
			"again.\n\n" +
			"Without --script, each line read from stdin is one user turn (an empty line is skipped; end of input or\n" +
			"/exit ends the chat). With --script FILE the turns are read from FILE, separated by lines of \"---\",\n" +
			"and each is echoed as \"> turn\" before its answer.\n\n" +
			"With --session FILE the conversation continues the saved one when FILE exists, and is saved to FILE at\n" +
			"the end (see generate --help).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.chat(cmd, &f)
		},
	}
	fl := cmd.Flags()
	f.register(cmd, 4096)
	s := &f.sampling
	fl.BoolVar(&s.greedy, "greedy", false, "argmax decoding (after the repeat penalty)")
	fl.Uint64Var(&s.seed, "seed", 0, "sampler seed")
	fl.Float32Var(&s.temp, "temp", 0.8, "temperature (<= 0: greedy)")
	fl.IntVar(&s.topK, "top-k", 40, "top-k (0: off)")
	fl.Float32Var(&s.topP, "top-p", 0.95, "top-p (1: off)")
	fl.Float32Var(&s.repeatPenalty, "repeat-penalty", 1.0, "repeat penalty (1: off, as llama.cpp)")
	fl.IntVar(&s.repeatLastN, "repeat-last-n", 64, "repeat penalty window (0: off, -1: whole context)")
	fl.IntVarP(&f.n, "n", "n", 512, "answer tokens at most, per turn")
	fl.StringVar(&f.system, "system", "", "system message (default: the template's own, if any)")
	fl.StringVar(&f.script, "script", "", "read the user turns from FILE (turns separated by lines of ---) instead of stdin")
	fl.StringVar(&f.template, "template", "auto", "chat template: auto (the model's) or chatml (plain ChatML, for a model whose template is not recognized)")
	fl.BoolVar(&f.showTurnStats, "stats", false, "after each answer, print the turn's tokens, time to first token and decode tok/s on stderr")
	f.session.register(cmd)
	f.draft.register(cmd, a.cfg)
	return cmd
}

// chatTemplate is the template a chat runs with: the model's, recognized,
// or forced ChatML.
func chatTemplate(path, choice string) (chat.Template, error) {
	switch choice {
	case "chatml":
		return chat.Forced(), nil
	case "auto":
	default:
		return chat.Template{}, usagef("--template %q: want auto or chatml", choice)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return chat.Template{}, fmt.Errorf("chat template: %w", err)
	}
	defer f.Close()
	src, err := chat.ReadTemplate(f)
	if err != nil {
		return chat.Template{}, fmt.Errorf("chat template of %s: %w", path, err)
	}
	t, err := chat.Recognize(src)
	if err != nil {
		return chat.Template{}, usagef("%s: %v (--template chatml renders plain ChatML)", path, err)
	}
	return t, nil
}

// turnSource hands out the user turns: from the script, or line by line
// from stdin. ok false: no more turns.
type turnSource func() (turn string, ok bool, err error)

func scriptTurns(path string) (turnSource, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, usagef("--script: %v", err)
	}
	defer fh.Close()
	turns, err := chat.ReadScript(fh)
	if err != nil {
		return nil, usagef("--script %s: %v", path, err)
	}
	i := 0
	return func() (string, bool, error) {
		if i == len(turns) {
			return "", false, nil
		}
		i++
		return turns[i-1], true, nil
	}, nil
}

func stdinTurns(in io.Reader, prompt func()) turnSource {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	return func() (string, bool, error) {
		for {
			prompt()
			if !sc.Scan() {
				return "", false, sc.Err()
			}
			line := strings.TrimSpace(sc.Text())
			switch line {
			case "":
				continue
			case "/exit", "/quit":
				return "", false, nil
			}
			return line, true, nil
		}
	}
}

func (a *app) chat(cmd *cobra.Command, f *chatFlags) error {
	if err := f.check(); err != nil {
		return err
	}
	if f.n < 1 {
		return usagef("-n %d: want at least one answer token per turn", f.n)
	}
	if err := f.draft.check(cmd); err != nil {
		return err
	}
	s := &f.sampling
	sp := sample.Params{Temp: s.temp, TopK: s.topK, TopP: s.topP, RepeatPenalty: s.repeatPenalty,
		RepeatLastN: s.repeatLastN, Seed: s.seed, Greedy: s.greedy}
	if err := sp.Validate(); err != nil {
		return usageError{err}
	}
	if err := f.session.prepare(cmd, &f.ctx); err != nil {
		return err
	}
	path, err := f.path()
	if err != nil {
		return err
	}
	tmpl, err := chatTemplate(path, f.template)
	if err != nil {
		return err
	}
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	prompt := func() {}
	if fh, ok := cmd.InOrStdin().(*os.File); ok {
		if fi, err := fh.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			prompt = func() { fmt.Fprint(errOut, "> ") } // a terminal
		}
	}
	next := stdinTurns(cmd.InOrStdin(), prompt)
	if f.script != "" {
		if next, err = scriptTurns(f.script); err != nil {
			return err
		}
	}
	e, clm, err := a.openChat(path, f.device, f.ctx, "chat")
	if err != nil {
		return err
	}
	defer e.Close()
	smp := sample.New(sp)
	sess, err := f.session.open(cmd, e, smp)
	if err != nil {
		return err
	}
	var restored []int32
	if sess != nil {
		restored = sess.pending
	}
	if sess != nil && len(sess.past)+len(sess.pending) > 0 && f.system != "" {
		return usagef("--system starts a conversation: the session %s already holds one", f.session.path)
	}
	c, err := chat.New(clm, tmpl, smp, f.system, restored)
	if err != nil {
		return err
	}
	dec, closeDraft, err := a.openDraft(&f.draft, e, path, f.device, f.ctx)
	if err != nil {
		return err
	}
	defer closeDraft()
	c.SetDraft(dec)
	tok := e.Tokenizer()
	for turn := 1; ; turn++ {
		user, ok, err := next()
		if err != nil {
			return fmt.Errorf("read turn %d: %w", turn, err)
		}
		if !ok {
			break
		}
		if f.script != "" {
			fmt.Fprintf(out, "> %s\n", user)
		}
		var held []byte
		emit := func(id int32) error {
			held = append(held, tok.TokenBytes(id)...)
			n := completeUTF8(held)
			if n == 0 {
				return nil
			}
			_, err := out.Write(held[:n])
			held = append(held[:0], held[n:]...)
			return err
		}
		r, err := c.Turn(user, f.n, false, emit)
		if len(held) > 0 {
			out.Write(held)
		}
		fmt.Fprintln(out)
		if f.script != "" {
			fmt.Fprintln(out)
		}
		if err != nil {
			return fmt.Errorf("turn %d: %w", turn, err)
		}
		if f.showTurnStats {
			rate := 0.0
			if r.Decode > 0 {
				rate = float64(r.DecodeSteps) / r.Decode.Seconds()
			}
			fmt.Fprintf(errOut, "minfer: turn %d: %d tokens forwarded, %d answered (%s), first token %.1f ms, decode %.2f tok/s, context %d of %d%s\n",
				turn, r.Fed, len(r.IDs), r.Stop, ms(r.FirstToken), rate, len(clm.Tokens()), f.ctx, a.decodeGraphs()+draftStats(dec))
		}
	}
	return f.session.save(sess, c.Pending(), f.ctx, sp, smp)
}

// decodeGraphs is what --stats says of the CUDA decode graphs so far: how
// often one was captured and replayed (a chat that keeps its graph
// captures it once); "" on the CPU, which captures nothing.
func (a *app) decodeGraphs() string {
	if len(a.dev.backends) == 0 {
		return ""
	}
	var captured, replayed int
	for _, b := range a.dev.backends {
		st := b.CaptureStats()
		captured += st.DecodeCaptures
		replayed += st.DecodeReplays
	}
	return fmt.Sprintf(", decode graph captured %d times, replayed %d", captured, replayed)
}

// openChat opens the model as an engine that exposes its context (a
// conversation appends to it); what names the command in the error.
func (a *app) openChat(path, device string, nCtx int, what string) (lm, chat.LM, error) {
	e, err := a.open(path, device, nCtx)
	if err != nil {
		return nil, nil, err
	}
	clm, ok := e.(chat.LM)
	if !ok {
		return nil, nil, errors.Join(fmt.Errorf("%s: this engine does not expose its context", what), e.Close())
	}
	return e, clm, nil
}
