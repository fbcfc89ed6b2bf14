package chat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/sample"
	"github.com/minfer-go/minfer/engine/synth"
	"github.com/minfer-go/minfer/engine/tokenizer"
)

// gateTurns is the three-turn script of the conversation-reuse gate.
var gateTurns = []string{
	"Write a Python function that returns the n-th Fibonacci number.",
	"Now make it iterative.",
	"class Config:\n    def __init__(self",
}

// gateModels are the models the gate runs: the synthetic Qwen2 and Qwen3
// shapes (always), and the trained Qwen2 and Qwen3 models with the real
// tokenizer and the Qwen3 template when ../shared is there.
func gateModels(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	ms := map[string]string{}
	for _, shape := range []string{"qwen2-tiny", "qwen3-tiny"} {
		p := filepath.Join(dir, shape+".gguf")
		if err := synth.Write(p, synth.Options{Shape: shape, Type: quant.Q8_0, Seed: 3, Workers: 1}); err != nil {
			t.Fatal(err)
		}
		ms[shape] = p
	}
	for name, p := range map[string]string{"tiny-code": qwen2Model, "tiny-qwen3-code": qwen3Model} {
		if _, err := os.Stat(p); err != nil {
			t.Logf("%s absent (%v): not in the gate", name, err)
			continue
		}
		ms[name] = p
	}
	return ms
}

func loadCPU(t *testing.T, path, kvFormat string) *model.Engine {
	t.Helper()
	lv, err := levers.Parse([]string{"MINFER_CACHE_TYPE=" + kvFormat})
	if err != nil {
		t.Fatal(err)
	}
	e, err := model.Load(path, model.Options{Device: "cpu", Threads: 2, NCtx: 512, Levers: lv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func templateOf(t *testing.T, path string) Template {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src, err := ReadTemplate(f)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := Recognize(src)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// reuse runs the gate on the CPU for one model and KV format.
func reuse(t *testing.T, path, kvFormat, defect string) ([]ReuseTurn, error) {
	return reuseBar(t, path, kvFormat, defect, BitwiseBar)
}

func reuseBar(t *testing.T, path, kvFormat, defect string, bar ReuseBar) ([]ReuseTurn, error) {
	return reuseOpts(t, path, kvFormat, defect, bar, false)
}

func reuseOpts(t *testing.T, path, kvFormat, defect string, bar ReuseBar, chunked bool) ([]ReuseTurn, error) {
	t.Helper()
	fresh := func() (LM, func(), error) {
		lv, _ := levers.Parse([]string{"MINFER_CACHE_TYPE=" + kvFormat})
		e, err := model.Load(path, model.Options{Device: "cpu", Threads: 2, NCtx: 512, Levers: lv})
		if err != nil {
			return nil, nil, err
		}
		return e, func() { e.Close() }, nil
	}
	conv := loadCPU(t, path, kvFormat)
	return CheckReuse(conv, fresh, ReuseOptions{
		Template: templateOf(t, path), System: "You are a terse assistant.", Turns: gateTurns, Max: 12,
		Bar: bar, Defect: defect, IgnoreEOG: true, Graphs: cpuGraphs(conv), Chunked: chunked,
	})
}

// cpuGraphs counts the decode graphs the engine compiled, turn by turn: the
// CPU captures nothing, so its evidence that the decode graph is kept is
// that the compiled decode plan is the same one after every turn (a new
// plan is a build; replays are not counted).
func cpuGraphs(e *model.Engine) func() GraphCount {
	var last *graph.Plan
	var built int64
	return func() GraphCount {
		if p := e.DecodePlan(); p != nil && p != last {
			built++
			last = p
		}
		return GraphCount{Built: built, Replayed: -1}
	}
}

// TestConversation_TurnsTwoAndThreeEqualAFreshPrefillBitwise is the
// conversation-reuse gate on the CPU: a three-turn conversation that keeps
// its KV cache gives, in turns 2 and 3, the tokens of a fresh engine that
// prefills the whole conversation so far, and bitwise the same logits at
// every answer position; in every KV format, on Qwen2 and Qwen3.
func TestConversation_TurnsTwoAndThreeEqualAFreshPrefillBitwise(t *testing.T) {
	for name, path := range gateModels(t) {
		for _, f := range kv.Formats() {
			t.Run(name+"/"+f.String(), func(t *testing.T) {
				turns, err := reuse(t, path, f.String(), "")
				if err != nil {
					t.Fatal(err)
				}
				for i, tr := range turns[1:] {
					if tr.Compared != len(tr.Answer) || tr.Compared == 0 || tr.Fed >= tr.Context {
						t.Errorf("turn %d: compared %d of %d answer tokens; fed %d of a context of %d", i+2, tr.Compared, len(tr.Answer), tr.Fed, tr.Context)
					}
				}
			})
		}
	}
}

// The device's prefill path (each turn in chunks of 256 and 32 tokens,
// the rest through the decode graph one token at a time) is bitwise the
// fresh engine's single prefill on the CPU too, in every KV format.
func TestConversation_ChunkedTurnsEqualAFreshPrefillBitwise(t *testing.T) {
	ms := gateModels(t)
	for _, name := range []string{"qwen2-tiny", "qwen3-tiny", "tiny-code"} {
		path, ok := ms[name]
		if !ok {
			continue
		}
		for _, f := range kv.Formats() {
			if name == "tiny-code" && f != kv.F16 {
				continue // the slow model in one format
			}
			t.Run(name+"/"+f.String(), func(t *testing.T) {
				turns, err := reuseOpts(t, path, f.String(), "", BitwiseBar, true)
				if err != nil {
					t.Fatal(err)
				}
				if turns[1].Compared == 0 || turns[1].Fed < 2 {
					t.Errorf("turn 2: compared %d, fed %d", turns[1].Compared, turns[1].Fed)
				}
			})
		}
	}
}

// The gate fails on each planted defect, at the bar itself (the logits of
// an answer position), on every model: a conversation that drops the
// previous answer from its KV cache, and one that never forwards the
// answer's last sampled token.
func TestConversation_GateFailsOnEveryPlantedDefect(t *testing.T) {
	for name, path := range gateModels(t) {
		for _, defect := range []string{DefectDropAnswer, DefectDropPending} {
			t.Run(name+"/"+defect, func(t *testing.T) {
				_, err := reuse(t, path, "f32", defect)
				if err == nil || !strings.Contains(err.Error(), "bitwise bar: answer position 0") || !strings.HasPrefix(err.Error(), "turn 2: ") {
					t.Fatalf("planted %s: %v; want turn 2 to fail the bitwise bar at its first answer position", defect, err)
				}
				t.Log(err)
			})
		}
	}
}

// The device's bar (a tolerance class, for runs on other paths) passes
// where the bitwise one does, and still fails on every planted defect: the
// tolerance is no blind spot for a conversation that lost its context.
func TestConversation_DeviceBarPassesAndFailsOnEveryPlantedDefect(t *testing.T) {
	ms := gateModels(t)
	for _, name := range []string{"qwen2-tiny", "tiny-code"} {
		path, ok := ms[name]
		if !ok {
			continue
		}
		if _, err := reuseBar(t, path, "q8_0", "", DeviceBar); err != nil {
			t.Errorf("%s: no defect: %v", name, err)
		}
		for _, defect := range []string{DefectDropAnswer, DefectDropPending} {
			_, err := reuseBar(t, path, "q8_0", defect, DeviceBar)
			if err == nil || !strings.HasPrefix(err.Error(), "turn 2: "+DeviceBar.Class+" bar: answer position ") {
				t.Errorf("%s, planted %s: %v; want turn 2 to fail the device bar", name, defect, err)
			}
			t.Logf("%s, %s: %v", name, defect, err)
		}
	}
}

// A conversation that throws its compiled graphs away before every turn
// (and so builds the decode graph again: on a device, captures it again)
// gives the right answers, and fails the gate's census check at turn 2.
func TestConversation_GateFailsWhenTheDecodeGraphIsBuiltAgain(t *testing.T) {
	path := gateModels(t)["qwen2-tiny"]
	_, err := reuse(t, path, "f32", DefectRecompile)
	if err == nil || !strings.HasPrefix(err.Error(), "turn 2: census: the decode graph was built again: 1 builds after turn 1, 2 after turn 2") {
		t.Fatalf("planted %s: %v; want turn 2 to fail the census check", DefectRecompile, err)
	}
}

// The census check itself: a new build after turn 1 fails, and so does a
// turn without replays where replays are counted.
func TestCheckGraphs_NoNewBuildAndReplaysGrowing(t *testing.T) {
	for _, c := range []struct {
		counts []GraphCount
		want   string
	}{
		{[]GraphCount{{1, 5}, {1, 20}, {1, 31}}, ""},
		{[]GraphCount{{1, -1}, {1, -1}, {1, -1}}, ""},
		{[]GraphCount{{0, 0}, {0, 0}}, "no decode graph built in turn 1"},
		{[]GraphCount{{1, 5}, {1, 20}, {2, 31}}, "turn 3: census: the decode graph was built again"},
		{[]GraphCount{{1, 5}, {1, 5}}, "turn 2: census: no decode graph replayed"},
	} {
		err := checkGraphs(c.counts)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%v: %v, want %q", c.counts, err, c.want)
		}
	}
}

// A turn's tokens go in the fixed chunk shapes, the rest one at a time.
func TestChunks_FixedShapesThenSingleTokens(t *testing.T) {
	c := &Conversation{Chunks: DefaultChunks}
	for n, want := range map[int][]int{
		0: nil, 3: {1, 1, 1}, 32: {32}, 35: {32, 1, 1, 1}, 300: {256, 32, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
	} {
		if got := c.chunks(n); !slices.Equal(got, want) {
			t.Errorf("%d tokens: %v, want %v", n, got, want)
		}
	}
	c.Chunks = nil
	if got := c.chunks(35); !slices.Equal(got, []int{35}) {
		t.Errorf("no chunks: %v", got)
	}
}

// After every turn the KV cache holds exactly what a fresh engine would
// prefill for the conversation so far (Replay), the answer's last token
// pending; the turn forwarded only its own tokens.
func TestConversation_ContextIsTheRenderedConversationAndTurnsAppendOnly(t *testing.T) {
	path := gateModels(t)["qwen3-tiny"]
	e := loadCPU(t, path, "f32")
	c, err := New(e, templateOf(t, path), sample.New(sample.Params{Greedy: true}), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, user := range gateTurns {
		before := e.Tokens()
		r, err := c.Turn(user, 5, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		replay, err := c.Replay()
		if err != nil {
			t.Fatal(err)
		}
		ctx := append(e.Tokens(), c.Pending()...)
		if want := append(replay, r.IDs...); !slices.Equal(ctx, want) {
			t.Fatalf("turn %d: context %v, want the rendered conversation and the answer %v", i+1, ctx, want)
		}
		if !slices.Equal(e.Tokens()[:len(before)], before) || r.Fed != len(replay)-len(before) {
			t.Fatalf("turn %d: forwarded %d tokens after %d, the replay has %d", i+1, r.Fed, len(before), len(replay))
		}
	}
}

// fakeLM answers with logits whose top token is the next of a script, so a
// test decides what the "model" says; its context is what was forwarded.
type fakeLM struct {
	tok    *tokenizer.Tokenizer
	ctx    []int32
	nCtx   int
	script []int32
	rows   []*float32 // ForwardInto's returned rows (their first element)
}

func (f *fakeLM) ForwardInto(dst []float32, ids []int32, _ bool) ([]float32, error) {
	f.ctx = append(f.ctx, ids...)
	out := make([]float32, f.tok.NVocab())
	if cap(dst) >= len(out) {
		out = dst[:len(out)]
		clear(out)
	}
	if len(out) > 0 {
		f.rows = append(f.rows, &out[0])
	}
	if len(f.script) > 0 {
		out[f.script[0]] = 1
		f.script = f.script[1:]
	}
	return out, nil
}
func (f *fakeLM) Tokenizer() *tokenizer.Tokenizer { return f.tok }
func (f *fakeLM) Tokens() []int32                 { return slices.Clone(f.ctx) }
func (f *fakeLM) Pos() int                        { return len(f.ctx) }
func (f *fakeLM) NCtx() int                       { return f.nCtx }

func synthTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	v, err := synth.ByteVocab(512)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.New(tokenizer.Vocab{Model: "gpt2", Pre: "qwen2", Tokens: v.Tokens, Types: v.Types, Merges: v.Merges,
		BOS: -1, EOS: int32(v.Special[IMEnd]), PAD: -1})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// An answer ends at <|im_end|> (forwarded by the next turn as the
// template's end of the answer), at another end token (replaced by
// <|im_end|>) or at the limit (closed with <|im_end|>); the context is
// always the template's conversation.
func TestTurn_ClosesEveryKindOfAnswerAsTheTemplateDoes(t *testing.T) {
	tok := synthTokenizer(t)
	imEnd, _ := tok.ID(IMEnd)
	eot, _ := tok.ID("<|endoftext|>")
	a, b := tok.Encode("a", false)[0], tok.Encode("b", false)[0]
	f := &fakeLM{tok: tok, nCtx: 512, script: []int32{a, imEnd, b, eot, a, b, a}}
	tm, _ := Recognize(synth.ChatTemplate)
	c, err := New(f, tm, sample.New(sample.Params{Greedy: true}), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var stops []Stop
	var shown string
	for _, user := range []string{"1", "2", "3"} {
		r, err := c.Turn(user, 3, false, func(id int32) error { shown += tok.Decode([]int32{id}); return nil })
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, r.Stop)
	}
	if want := []Stop{StopEOG, StopEOG, StopLimit}; !slices.Equal(stops, want) || shown != "ababa" {
		t.Errorf("stops %v, shown %q; want %v, \"ababa\"", stops, shown, want)
	}
	if _, _, _, err := c.Ask("4"); err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>user\n1<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n" +
		"<|im_start|>user\n2<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n" +
		"<|im_start|>user\n3<|im_end|>\n<|im_start|>assistant\naba<|im_end|>\n" +
		"<|im_start|>user\n4<|im_end|>\n<|im_start|>assistant\n"
	if got := tok.Decode(f.ctx); got != want {
		t.Errorf("context\n%q\nwant\n%q", got, want)
	}
	if replay, err := c.Replay(); err != nil || !slices.Equal(replay, f.ctx) {
		t.Errorf("replay %q (%v) is not the context %q", tok.Decode(replay), err, tok.Decode(f.ctx))
	}
}

// A turn or an answer that would overflow the context is ErrContextFull,
// with what fits said; nothing is cut.
func TestTurn_ContextFullIsAClearErrorNotATruncation(t *testing.T) {
	tok := synthTokenizer(t)
	a := tok.Encode("a", false)[0]
	tm, _ := Recognize(synth.ChatTemplate)
	opening, err := tm.Opening("", "hi").Encode(tok)
	if err != nil {
		t.Fatal(err)
	}
	n := len(opening) + 3 // the opening and 3 answer tokens fit
	f := &fakeLM{tok: tok, nCtx: n, script: slices.Repeat([]int32{a}, 20)}
	c, _ := New(f, tm, sample.New(sample.Params{Greedy: true}), "", nil)
	r, err := c.Turn("hi", 10, false, nil)
	if !errors.Is(err, ErrContextFull) || len(f.ctx) != n || len(r.IDs) != 4 {
		t.Fatalf("answer past the context: %v, context %d of %d, answer %v", err, len(f.ctx), n, r.IDs)
	}
	_, err = c.Turn(strings.Repeat("long ", 20), 2, false, nil)
	if !errors.Is(err, ErrContextFull) || len(f.ctx) != n || !strings.Contains(err.Error(), fmt.Sprintf("do not fit the context of %d", n)) {
		t.Fatalf("a turn past the context: %v, context %d", err, len(f.ctx))
	}
}

// A restored context (a session) gets the next turn appended; a system
// message cannot start it again, and it has no transcript to replay.
func TestNew_OnARestoredContextAppendsAndRefusesASystemMessage(t *testing.T) {
	tok := synthTokenizer(t)
	tm, _ := Recognize(synth.ChatTemplate)
	imEnd, _ := tok.ID(IMEnd)
	prior, _ := tm.Opening("", "x").Encode(tok)
	f := &fakeLM{tok: tok, nCtx: 512, ctx: append(prior, tok.Encode("y", false)...)}
	if _, err := New(f, tm, sample.New(sample.Params{Greedy: true}), "sys", []int32{imEnd}); err == nil {
		t.Error("a system message on a restored context: no error")
	}
	c, err := New(f, tm, sample.New(sample.Params{Greedy: true}), "", []int32{imEnd})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Turn("z", 1, false, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Decode(f.ctx), "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\ny<|im_end|>\n<|im_start|>user\nz<|im_end|>\n<|im_start|>assistant\n"; got != want {
		t.Errorf("context %q, want %q", got, want)
	}
	if _, err := c.Replay(); err == nil {
		t.Error("Replay of a restored conversation: no error")
	}
}

// capturingLM is a CPU engine that says it captures graphs (as CUDA does)
// and records the shape of every forward.
type capturingLM struct {
	*model.Engine
	shapes map[int]int
	order  []int
}

func (c *capturingLM) CapturesGraphs() bool { return true }
func (c *capturingLM) ForwardInto(dst []float32, ids []int32, all bool) ([]float32, error) {
	c.shapes[len(ids)]++
	c.order = append(c.order, len(ids))
	return c.Engine.ForwardInto(dst, ids, all)
}

// On an engine that captures graphs a conversation warms its shapes first
// (dummy forwards past the context, cut off again) and then forwards only
// those shapes, whatever its turns' lengths: the answers stay bitwise those
// of a fresh prefill, so the warm-up leaves nothing behind in the context.
func TestConversation_WarmUpOnACapturingEngineKeepsShapesFixedAndAnswersExact(t *testing.T) {
	path := gateModels(t)["qwen3-tiny"]
	lm := &capturingLM{Engine: loadCPU(t, path, "q8_0"), shapes: map[int]int{}}
	fresh := func() (LM, func(), error) {
		lv, _ := levers.Parse([]string{"MINFER_CACHE_TYPE=q8_0"})
		e, err := model.Load(path, model.Options{Device: "cpu", Threads: 2, NCtx: 512, Levers: lv})
		if err != nil {
			return nil, nil, err
		}
		return e, func() { e.Close() }, nil
	}
	long := strings.Repeat("the quick brown fox jumps over the lazy dog ", 8)
	turns, err := CheckReuse(lm, fresh, ReuseOptions{
		Template: templateOf(t, path), Turns: []string{gateTurns[0], long, gateTurns[2]}, Max: 6,
		Bar: BitwiseBar, IgnoreEOG: true, Graphs: cpuGraphs(lm.Engine),
	})
	if err != nil {
		t.Fatal(err)
	}
	for n := range lm.shapes {
		if n != 1 && n != 32 && n != 256 {
			t.Errorf("a forward of %d tokens: want only the shapes 256, 32 and 1 (%v)", n, lm.shapes)
		}
	}
	if len(lm.order) < 3 || !slices.Equal(lm.order[:3], []int{256, 32, 1}) || lm.shapes[256] < 2 {
		t.Errorf("forwards %v: want the warm-up (256, 32, 1) first, and 256 again in the long turn", lm.order)
	}
	if turns[1].Fed < 32 {
		t.Errorf("the long turn forwarded %d tokens", turns[1].Fed)
	}
}

// TestConversation_AnswerStepsReuseOneLogitsRow: an answer's decode steps
// (Next) write every step's logits into the row of the step before, and
// with IgnoreEOG mask into one reused copy: no vocabulary-sized row a token.
// The logits a turn keeps are still each step's own.
func TestConversation_AnswerStepsReuseOneLogitsRow(t *testing.T) {
	tok := synthTokenizer(t)
	a, b := tok.Encode("a", false)[0], tok.Encode("b", false)[0]
	script := []int32{a, b, a, b, a, b, a}
	f := &fakeLM{tok: tok, nCtx: 512, script: script}
	tm, _ := Recognize(synth.ChatTemplate)
	c, err := New(f, tm, sample.New(sample.Params{Greedy: true}), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	c.IgnoreEOG = true
	r, err := c.Turn("1", len(script), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.IDs) != len(script) || len(f.rows) < len(script) {
		t.Fatalf("%d tokens, %d forwards", len(r.IDs), len(f.rows))
	}
	steps := f.rows[len(f.rows)-(len(script)-1):] // Next's forwards
	for i, p := range steps[1:] {
		if p != steps[0] {
			t.Errorf("answer step %d forwarded into a new row", i+2)
		}
	}
	masked := &c.masked[0]
	if _, _, _, err := c.Ask("2"); err != nil {
		t.Fatal(err)
	}
	if &c.masked[0] != masked {
		t.Error("the IgnoreEOG mask was written into a new row")
	}
	for i, l := range r.Logits {
		if got := sample.Argmax(l); got != script[i] {
			t.Errorf("kept logits of step %d: top %d, want %d (a reused row kept by reference)", i, got, script[i])
		}
	}
}
