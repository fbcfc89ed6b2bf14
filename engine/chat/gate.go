package chat

import (
	"fmt"
	"math"
	"slices"

	"github.com/minfer-go/minfer/engine/sample"
)

// ReuseBar is the bar of the conversation-reuse gate: how the answers of a
// conversation that kept its KV cache must agree with a fresh engine that
// prefills the conversation so far.
type ReuseBar struct {
	// Class names the bar in messages ("bitwise", or a tolerance class).
	Class string
	// Bitwise: every logit of every answer position bitwise equal, and so
	// the same tokens (the CPU, where both runs take the same path).
	Bitwise bool
	// Otherwise the answers are token-identical up to the first step at
	// which the fresh run's top-2 margin is below Margin (a near-tie may
	// flip; the comparison of that turn stops there), and at every step
	// compared before it the logits are within MaxAbs with the same top-1.
	// RelL2 > 0 holds the relative L2 distance of the logits to it
	// instead of MaxAbs (the activation-quantization class); RelMax > 0
	// holds max |diff| / max |fresh logit| to it (the device suite's
	// whole-model class).
	MaxAbs float64
	RelL2  float64
	RelMax float64
	Margin float32
}

// BitwiseBar is the CPU's bar: the same path, the same bits.
var BitwiseBar = ReuseBar{Class: "bitwise", Bitwise: true}

// DeviceBar is the bar on CUDA, where the two runs take different paths:
// the conversation's answer positions follow single-token decode steps and
// 32-token chunks (mmvq, activations rounded to Q8_1, captured graphs),
// the fresh engine's first one a prefill of the whole conversation
// (GEMM/MMQ). Its class is the one the device suite holds the whole model
// to across paths (TestWholeModel_SynthLogitsMatchCPUWithinTheirClass):
// max |diff| <= 5% of the largest logit, top-1 equal at every position
// compared, compared up to the first top-2 margin below 0.2. A relative L2
// bar of 0.05 was the first choice; on the H200 (2026-12-02) the trained
// tiny-code model's turn 2 measured rel L2 0.089 with max |diff| 0.17 and
// the same top-1: its logit vectors are small in L2 against their peak.
var DeviceBar = ReuseBar{Class: "activation-quantization (device)", RelMax: 0.05, Margin: 0.2}

// ReuseTurn is one turn of CheckReuse: the answer of the conversation and
// of the fresh engine.
type ReuseTurn struct {
	User            string
	Fed             int // tokens the conversation forwarded for the turn
	Context         int // tokens the fresh engine prefilled (the conversation so far)
	Answer, Fresh   []int32
	MaxAbs          float64 // the largest |diff| of the compared logits
	RelL2           float64 // the largest relative L2 distance of them
	Compared        int     // answer positions compared
	StoppedAtMargin bool    // the comparison stopped at a near-tie (not bitwise bars)
}

// ReuseOptions configure CheckReuse.
type ReuseOptions struct {
	Template Template
	System   string
	Turns    []string
	Max      int // answer tokens at most
	Bar      ReuseBar
	// IgnoreEOG: the answers run to Max tokens (the end-of-generation
	// tokens masked before sampling, in both runs), so a model that would
	// end its turn at once still gives answers long enough to compare.
	IgnoreEOG bool
	// Chunked prefills every turn in DefaultChunks whatever the engine
	// (the CPU tests the device's path with it).
	Chunked bool
	// Defect plants a fault in the conversation (DefectDropAnswer,
	// DefectDropPending): the tests show the gate fails on each.
	Defect string
	// Graphs, when set, reads after each turn how many decode graphs the
	// conversation's engine has built (Built: captured on a device,
	// compiled on the CPU) and replayed so far (Replayed, -1 where the
	// backend replays nothing: the CPU). From the second turn on the gate
	// wants no new build and, where counted, more replays: the decode
	// graph of the first answer is the one of every later answer.
	Graphs func() GraphCount
	// AfterTurn, when set, runs after each turn of the conversation, before
	// any fresh engine runs (the census check reads the conversation
	// engine's graph counts there). turn counts from 1.
	AfterTurn func(turn int) error
}

// GraphCount is what ReuseOptions.Graphs reads.
type GraphCount struct{ Built, Replayed int64 }

// checkGraphs holds the counts read after each turn to the gate's census
// bar: after the first turn, no decode graph built again, and replays
// growing every turn where they are counted.
func checkGraphs(counts []GraphCount) error {
	if len(counts) == 0 {
		return nil
	}
	first := counts[0]
	if first.Built < 1 {
		return fmt.Errorf("census: no decode graph built in turn 1 (%+v)", first)
	}
	for i := 1; i < len(counts); i++ {
		c, prev := counts[i], counts[i-1]
		if c.Built != first.Built {
			return fmt.Errorf("turn %d: census: the decode graph was built again: %d builds after turn 1, %d after turn %d (the conversation did not keep its graph)",
				i+1, first.Built, c.Built, i+1)
		}
		if c.Replayed >= 0 && c.Replayed <= prev.Replayed {
			return fmt.Errorf("turn %d: census: no decode graph replayed in the turn (%d replays after turn %d, %d after turn %d)",
				i+1, prev.Replayed, i, c.Replayed, i+1)
		}
	}
	return nil
}

// CheckReuse is the conversation-reuse gate (the design's
// cuda_conversation_multiturn_reuse). It runs the turns as one greedy
// conversation on the engine conv, which keeps its KV cache across turns,
// and then, for every turn from the second on, opens a fresh engine that
// prefills the whole conversation before that turn's answer (Replay) and
// decodes as many tokens greedily. Each fresh answer must meet the bar: the
// same tokens, and the logits of every answer position bitwise equal (or
// within the bar's tolerance class). It returns every turn and the first
// failure (nil: the gate passes). With Graphs set it also holds the
// engine's graph counts to the census bar (checkGraphs) before any fresh
// engine runs.
func CheckReuse(conv LM, fresh func() (LM, func(), error), o ReuseOptions) ([]ReuseTurn, error) {
	c, err := New(conv, o.Template, sample.New(sample.Params{Greedy: true}), o.System, nil)
	if err != nil {
		return nil, err
	}
	c.defect = o.Defect
	c.IgnoreEOG = o.IgnoreEOG
	if o.Chunked {
		c.Chunks = DefaultChunks
	}
	turns := make([]ReuseTurn, len(o.Turns))
	logits := make([][][]float32, len(o.Turns))
	replays := make([][]int32, len(o.Turns))
	var counts []GraphCount
	for i, user := range o.Turns {
		r, err := c.Turn(user, o.Max, true, nil)
		if err != nil {
			return turns, fmt.Errorf("turn %d: %w", i+1, err)
		}
		// The transcript gains the answer at the next Ask: Replay is
		// still the context this answer was drawn after.
		if replays[i], err = c.Replay(); err != nil {
			return turns, err
		}
		turns[i] = ReuseTurn{User: user, Fed: r.Fed, Context: len(replays[i]), Answer: r.IDs}
		logits[i] = r.Logits
		if o.Graphs != nil {
			counts = append(counts, o.Graphs())
		}
		if o.AfterTurn != nil {
			if err := o.AfterTurn(i + 1); err != nil {
				return turns, fmt.Errorf("turn %d: %w", i+1, err)
			}
		}
	}
	if err := checkGraphs(counts); err != nil {
		return turns, err
	}
	for i := 1; i < len(o.Turns); i++ {
		if err := checkFresh(fresh, &turns[i], replays[i], logits[i], o.Bar, o.IgnoreEOG); err != nil {
			return turns, fmt.Errorf("turn %d: %w", i+1, err)
		}
	}
	return turns, nil
}

// checkFresh decodes the turn on a fresh engine after prefilling replay and
// holds it to the bar against the conversation's answer and logits.
func checkFresh(fresh func() (LM, func(), error), t *ReuseTurn, replay []int32, want [][]float32, bar ReuseBar, ignoreEOG bool) error {
	e, done, err := fresh()
	if err != nil {
		return fmt.Errorf("fresh engine: %w", err)
	}
	defer done()
	smp := sample.New(sample.Params{Greedy: true})
	history := slices.Clone(replay)
	got, err := e.ForwardInto(nil, replay, false)
	for step := 0; step < len(t.Answer); step++ {
		if err != nil {
			return fmt.Errorf("fresh engine, answer position %d: %w", step, err)
		}
		draw := got
		if ignoreEOG {
			draw = MaskEOG(e.Tokenizer(), got)
		}
		id := smp.Sample(draw, history)
		t.Fresh = append(t.Fresh, id)
		history = append(history, id)
		if bar.Bitwise {
			for j := range got {
				if math.Float32bits(got[j]) != math.Float32bits(want[step][j]) {
					return fmt.Errorf("%s bar: answer position %d, logit %d: %g in the conversation, %g on a fresh engine that prefilled the %d tokens of the conversation so far",
						bar.Class, step, j, want[step][j], got[j], len(replay))
				}
			}
		} else {
			d, rel := maxAbsDiff(got, want[step]), relL2(want[step], got)
			t.MaxAbs, t.RelL2 = max(t.MaxAbs, d), max(t.RelL2, rel)
			top1, _, margin := sample.Top2Margin(got)
			if margin < bar.Margin {
				t.StoppedAtMargin = true
				t.Compared = step
				return nil // a near-tie: the tokens may part here
			}
			over, limit := d > bar.MaxAbs, fmt.Sprintf("max |diff| <= %g", bar.MaxAbs)
			switch {
			case bar.RelL2 > 0:
				over, limit = rel > bar.RelL2, fmt.Sprintf("rel L2 <= %g", bar.RelL2)
			case bar.RelMax > 0:
				peak := maxAbs(got)
				over, limit = d > bar.RelMax*peak, fmt.Sprintf("max |diff| <= %g x max |logit| = %.4g", bar.RelMax, bar.RelMax*peak)
			}
			if over || top1 != sample.Argmax(want[step]) {
				return fmt.Errorf("%s bar: answer position %d: max |diff| %.4g, rel L2 %.4g (bar: %s, top-1 equal), top-1 %d on the fresh engine, %d in the conversation",
					bar.Class, step, d, rel, limit, top1, sample.Argmax(want[step]))
			}
		}
		if id != t.Answer[step] {
			return fmt.Errorf("%s bar: answer position %d: token %d in the conversation, %d on a fresh engine", bar.Class, step, t.Answer[step], id)
		}
		t.Compared = step + 1
		if step+1 < len(t.Answer) {
			got, err = e.ForwardInto(nil, []int32{id}, false)
		}
	}
	return nil
}

// relL2 is |a - b| / |b| (Euclidean norms); +Inf where b is 0 or a value
// is NaN.
func relL2(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	if den == 0 || math.IsNaN(num) {
		return math.Inf(1)
	}
	return math.Sqrt(num / den)
}

func maxAbsDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		m = max(m, d)
	}
	return m
}

// maxAbs is the largest |x| of a.
func maxAbs(a []float32) float64 {
	m := 0.0
	for _, x := range a {
		m = max(m, math.Abs(float64(x)))
	}
	return m
}
