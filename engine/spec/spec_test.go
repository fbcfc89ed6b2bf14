package spec

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/sample"
)

// fakeLM is a deterministic language model over a small vocabulary: the
// logits after a position depend on the last two tokens only, so its
// greedy continuation is known without a real model. It keeps its
// context as a real engine does (Truncate cuts it, Forward appends) and
// counts its forwards by shape.
type fakeLM struct {
	nv, nCtx int
	ctx      []int32
	shapes   map[int]int // forwards by number of tokens
	failAt   int         // Forward fails once the context would pass this (0: never)
	rows     []*float32  // ForwardInto's returned rows (their first element)
}

func newFakeLM(nv, nCtx int) *fakeLM { return &fakeLM{nv: nv, nCtx: nCtx, shapes: map[int]int{}} }

// row is the logits after the context ending in a, b.
func (m *fakeLM) row(a, b int32) []float32 {
	out := make([]float32, m.nv)
	r := rand.New(rand.NewPCG(uint64(a)*7919+uint64(b), 3))
	for i := range out {
		out[i] = r.Float32()
	}
	return out
}

func (m *fakeLM) Forward(tokens []int32, all bool) ([]float32, error) {
	if len(tokens) == 0 || len(m.ctx)+len(tokens) > m.nCtx {
		return nil, fmt.Errorf("fake: %d tokens at %d exceed %d", len(tokens), len(m.ctx), m.nCtx)
	}
	if m.failAt > 0 && len(m.ctx)+len(tokens) > m.failAt {
		return nil, errors.New("fake: planted failure")
	}
	m.shapes[len(tokens)]++
	var out []float32
	for i, t := range tokens {
		m.ctx = append(m.ctx, t)
		if all || i == len(tokens)-1 {
			var a int32
			if len(m.ctx) > 1 {
				a = m.ctx[len(m.ctx)-2]
			}
			out = append(out, m.row(a, t)...)
		}
	}
	return out, nil
}

// ForwardInto is Forward with the logits copied into dst when it holds
// them, as model.Engine does; rows records the backing array of every
// returned row, so a test sees whether its caller reuses one.
func (m *fakeLM) ForwardInto(dst []float32, tokens []int32, all bool) ([]float32, error) {
	out, err := m.Forward(tokens, all)
	if err != nil {
		return nil, err
	}
	if cap(dst) >= len(out) {
		out = append(dst[:0], out...)
	}
	if len(out) > 0 {
		m.rows = append(m.rows, &out[:1][0])
	}
	return out, nil
}

func (m *fakeLM) Truncate(n int) error {
	if n < 0 || n > len(m.ctx) {
		return fmt.Errorf("fake: truncate to %d of %d", n, len(m.ctx))
	}
	m.ctx = m.ctx[:n]
	return nil
}

func (m *fakeLM) Reset()    { m.ctx = m.ctx[:0] }
func (m *fakeLM) Pos() int  { return len(m.ctx) }
func (m *fakeLM) NCtx() int { return m.nCtx }

// fixedDraft proposes what its func says.
type fixedDraft func(ctx []int32, k int) []int32

func (f fixedDraft) Draft(ctx []int32, k int) ([]int32, error) { return f(ctx, k), nil }
func (fixedDraft) Name() string                                { return "fixed" }

// plain is greedy decoding of n tokens after prompt, one token a forward.
func plain(t *testing.T, m *fakeLM, prompt []int32, n int) []int32 {
	t.Helper()
	m.Reset()
	logits, err := m.Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for {
		out = append(out, sample.Argmax(logits))
		if len(out) == n {
			return out
		}
		if logits, err = m.Forward(out[len(out)-1:], false); err != nil {
			t.Fatal(err)
		}
	}
}

// drafted is the same through Step, with the target's context checked
// after every step.
func drafted(t *testing.T, m *fakeLM, d Drafter, opts Options, prompt []int32, n int) ([]int32, Stats) {
	t.Helper()
	m.Reset()
	dec, err := New(m, d, opts)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := m.Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	hist := append(slices.Clone(prompt), sample.Argmax(logits))
	out := hist[len(prompt):]
	for len(out) < n {
		more := true
		err := dec.Step(hist, n-len(out), func(row []float32) int32 { return sample.Argmax(row) }, func(id int32) (bool, error) {
			hist = append(hist, id)
			out = hist[len(prompt):]
			more = len(out) < n
			return more, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(m.ctx, hist[:len(hist)-1]) {
			t.Fatalf("after a step the target holds %v, want %v (every token but the last)", m.ctx, hist[:len(hist)-1])
		}
		if !more {
			break
		}
	}
	return out, dec.Stats()
}

func TestStep_EveryDrafterGivesThePlainGreedyTokens(t *testing.T) {
	const nv, n = 50, 40
	prompt := []int32{1, 2, 3, 4, 5, 1, 2, 3}
	ref := newFakeLM(nv, 256)
	want := plain(t, ref, prompt, n)
	oracle := func(ctx []int32, k int) []int32 { // the target's own continuation
		o := newFakeLM(nv, 256)
		g := plain(t, o, ctx[:len(ctx)-1], 1+k)
		return g[1:]
	}
	r := rand.New(rand.NewPCG(1, 2))
	cases := map[string]Drafter{
		"oracle": fixedDraft(oracle),
		"random": fixedDraft(func(_ []int32, k int) []int32 {
			out := make([]int32, k)
			for i := range out {
				out[i] = int32(r.IntN(nv))
			}
			return out
		}),
		"half-right": fixedDraft(func(ctx []int32, k int) []int32 {
			o := oracle(ctx, k)
			o[len(o)/2] = (o[len(o)/2] + 1) % nv
			return o
		}),
		"nothing":         fixedDraft(func([]int32, int) []int32 { return nil }),
		"beyond-vocab":    fixedDraft(func(ctx []int32, k int) []int32 { return append(oracle(ctx, k)[:k-1], nv+3) }),
		"lookup":          DefaultLookup(),
		"model-of-itself": NewModel(newFakeLM(nv, 256), "fake"),
	}
	for name, d := range cases {
		for _, k := range []int{1, 3, 8} {
			for _, fixed := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/k%d/fixed=%v", name, k, fixed), func(t *testing.T) {
					m := newFakeLM(nv, 256)
					got, st := drafted(t, m, d, Options{K: k, NVocab: nv, FixedShape: fixed}, prompt, n)
					if !slices.Equal(got, want) {
						t.Fatalf("drafted %v\nplain   %v", got, want)
					}
					if st.Emitted != n-1 || st.Accepted > st.Drafted || st.Forwards < 1 {
						t.Errorf("stats %+v for %d tokens after the first", st, n-1)
					}
					if name == "oracle" && k > 1 && st.AcceptanceRate() != 1 {
						t.Errorf("the target's own continuation accepted at %.2f, want 1", st.AcceptanceRate())
					}
					if name == "oracle" && st.TokensPerForward() < 0.9*float64(k) {
						t.Errorf("%.2f tokens per forward with a perfect draft of %d", st.TokensPerForward(), k)
					}
					for nt := range m.shapes {
						if fixed && nt != 1 && nt != 1+k && nt != len(prompt) || nt > max(1+k, len(prompt)) {
							t.Errorf("a forward of %d tokens: the verify shape is 1+K = %d (fixed: %v, shapes %v)", nt, 1+k, fixed, m.shapes)
						}
					}
				})
			}
		}
	}
}

// The planted defect (AcceptWrongDraft) emits one token the target did not
// choose: the output is no longer the plain one.
func TestStep_AcceptWrongDraftChangesTheOutput(t *testing.T) {
	const nv, n = 50, 30
	prompt := []int32{7, 8, 9}
	want := plain(t, newFakeLM(nv, 128), prompt, n)
	wrong := fixedDraft(func(ctx []int32, k int) []int32 { return slices.Repeat([]int32{int32(nv - 1)}, k) })
	got, _ := drafted(t, newFakeLM(nv, 128), wrong, Options{K: 4, NVocab: nv, AcceptWrongDraft: true}, prompt, n)
	if slices.Equal(got, want) {
		t.Fatal("accept_wrong_draft left the output as it was")
	}
	got, _ = drafted(t, newFakeLM(nv, 128), wrong, Options{K: 4, NVocab: nv}, prompt, n)
	if !slices.Equal(got, want) {
		t.Fatal("without the defect the output differs")
	}
}

// At the end of the context the verify forward shrinks and the drafts with
// it; a full context is an error.
func TestStep_StaysInsideTheContext(t *testing.T) {
	const nv = 30
	m := newFakeLM(nv, 12)
	oracle := fixedDraft(func(ctx []int32, k int) []int32 {
		g := plain(t, newFakeLM(nv, 64), ctx[:len(ctx)-1], 1+k)
		return g[1:]
	})
	prompt := []int32{1, 2, 3}
	got, _ := drafted(t, m, oracle, Options{K: 4, NVocab: nv, FixedShape: true}, prompt, 10)
	if want := plain(t, newFakeLM(nv, 64), prompt, 10); !slices.Equal(got, want) {
		t.Fatalf("near the end of the context: %v, want %v", got, want)
	}
	for nt := range m.shapes {
		if nt > 5 {
			t.Errorf("a forward of %d tokens", nt)
		}
	}
	full := newFakeLM(nv, 4)
	dec, _ := New(full, oracle, Options{K: 2, NVocab: nv})
	full.Forward([]int32{1, 2, 3, 4}, false)
	err := dec.Step([]int32{1, 2, 3, 4, 5}, 3, sample.Argmax, func(int32) (bool, error) { return true, nil })
	if err == nil || !strings.Contains(err.Error(), "full") {
		t.Errorf("a step on a full context: %v", err)
	}
}

func TestStep_BadCallsAreErrors(t *testing.T) {
	m := newFakeLM(10, 32)
	if _, err := New(m, DefaultLookup(), Options{K: 0, NVocab: 10}); err == nil {
		t.Error("K = 0 accepted")
	}
	if _, err := New(nil, DefaultLookup(), Options{K: 1, NVocab: 10}); err == nil {
		t.Error("no target accepted")
	}
	dec, _ := New(m, DefaultLookup(), Options{K: 2, NVocab: 10})
	m.Forward([]int32{1, 2}, false)
	if err := dec.Step([]int32{1, 2}, 2, sample.Argmax, nil); err == nil {
		t.Error("a context that does not end in one unforwarded token accepted")
	}
	long := fixedDraft(func(_ []int32, k int) []int32 { return make([]int32, k+1) })
	dec, _ = New(m, long, Options{K: 2, NVocab: 10})
	if err := dec.Step([]int32{1, 2, 3}, 5, sample.Argmax, func(int32) (bool, error) { return true, nil }); err == nil {
		t.Error("a drafter that proposed more than asked was not refused")
	}
	stop := errors.New("stop")
	dec, _ = New(m, DefaultLookup(), Options{K: 2, NVocab: 10})
	if err := dec.Step([]int32{1, 2, 3}, 5, sample.Argmax, func(int32) (bool, error) { return false, stop }); !errors.Is(err, stop) {
		t.Errorf("commit's error: %v", err)
	}
}

func TestLookup_ProposesWhatFollowedTheLatestLongestMatch(t *testing.T) {
	l := DefaultLookup()
	for _, c := range []struct {
		ctx  []int32
		k    int
		want []int32
	}{
		{[]int32{1, 2, 3, 9, 9, 1, 2, 3, 4, 5, 6, 1, 2, 3}, 3, []int32{4, 5, 6}}, // the latest 3-gram wins
		{[]int32{5, 6, 7, 8, 0, 6, 7}, 4, []int32{8, 0, 6, 7}},                   // a 2-gram
		{[]int32{5, 6, 7, 8, 0, 6, 7}, 1, []int32{8}},
		{[]int32{1, 2, 3, 4}, 3, nil},                 // nothing repeats
		{[]int32{4, 1, 2, 3, 4}, 3, []int32{1, 2, 3}}, // a 1-gram
		{[]int32{3, 3}, 5, []int32{3}},                // cut at the end of the context
		{[]int32{3}, 5, nil},
	} {
		got, err := l.Draft(c.ctx, c.k)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Draft(%v, %d) = %v, %v; want %v", c.ctx, c.k, got, err, c.want)
		}
	}
}

// The model drafter forwards only what the context adds to what its engine
// holds, and a failed forward leaves it empty and usable.
func TestModel_ForwardsOnlyTheNewTokens(t *testing.T) {
	lm := newFakeLM(20, 64)
	d := NewModel(lm, "fake")
	ctx := []int32{1, 2, 3, 4, 5, 6}
	if _, err := d.Draft(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if len(lm.ctx) != len(ctx)+2 {
		t.Fatalf("the draft engine holds %d tokens, want the context and all drafts but the last (%d)", len(lm.ctx), len(ctx)+2)
	}
	before := lm.shapes[1]
	ctx = append(ctx, lm.ctx[len(ctx)], 17) // one draft accepted, then the target's token
	if _, err := d.Draft(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if lm.shapes[1] != before+3 || !slices.Equal(lm.ctx[:len(ctx)], ctx) {
		t.Errorf("catching up: forwards by shape %v, context %v", lm.shapes, lm.ctx)
	}
	lm.failAt = len(ctx) + 1
	if _, err := d.Draft(append(ctx, 1, 2, 3), 3); err == nil {
		t.Fatal("a failed draft forward was not an error")
	}
	lm.failAt = 0
	if got, err := d.Draft(ctx, 2); err != nil || len(got) != 2 {
		t.Errorf("after a failure: %v, %v", got, err)
	}
}

// TestScore_VerifyRowsAreThePlainForwardRowsBitwise: teacher-forced scoring
// through verify forwards gives, at every position, the row one forward of
// the whole sequence gives (the fake's rows are exact), drafts were checked,
// the rejected ones cut off, and the target ends holding the ids.
func TestScore_VerifyRowsAreThePlainForwardRowsBitwise(t *testing.T) {
	ids := []int32{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7}
	ref := newFakeLM(16, 64)
	want, err := ref.Forward(ids, true)
	if err != nil {
		t.Fatal(err)
	}
	// Half right: the drafter proposes the true next ids, then a wrong one.
	half := fixedDraft(func(ctx []int32, k int) []int32 {
		var out []int32
		for i := 0; i < k && len(ctx)+i < len(ids); i++ {
			out = append(out, ids[len(ctx)+i])
		}
		if len(out) > 1 {
			out[len(out)-1] = (out[len(out)-1] + 1) % 16
		}
		return out
	})
	for _, fixed := range []bool{false, true} {
		m := newFakeLM(16, 64)
		dec, err := New(m, half, Options{K: 3, NVocab: 16, FixedShape: fixed})
		if err != nil {
			t.Fatal(err)
		}
		next := 0
		err = dec.Score(ids, func(pos int, row []float32) error {
			if pos != next {
				return fmt.Errorf("row of position %d, want %d", pos, next)
			}
			next++
			if !slices.Equal(row, want[pos*16:(pos+1)*16]) {
				return fmt.Errorf("position %d: the verify row differs from the plain forward's", pos)
			}
			return nil
		})
		if err != nil || next != len(ids) {
			t.Fatalf("fixed=%v: %v after %d rows", fixed, err, next)
		}
		st := dec.Stats()
		if st.Drafted == 0 || st.Accepted == 0 || st.Accepted == st.Drafted || st.Emitted != len(ids) {
			t.Errorf("fixed=%v: stats %+v: want drafts checked, some kept and some rejected", fixed, st)
		}
		if !slices.Equal(m.ctx, ids) {
			t.Errorf("fixed=%v: the target holds %v, want the ids", fixed, m.ctx)
		}
	}
}

// TestDecoder_StepsReuseOneLogitsBuffer: the decoder's verify forwards and
// the model drafter's forwards each write into one buffer, step after step
// (a new one only when a larger shape first comes), not a new
// vocabulary-sized row a forward.
func TestDecoder_StepsReuseOneLogitsBuffer(t *testing.T) {
	const nv = 97
	draftLM := newFakeLM(nv, 256)
	m := newFakeLM(nv, 256)
	_, st := drafted(t, m, NewModel(draftLM, "fake"), Options{K: 4, NVocab: nv, FixedShape: true}, []int32{5, 9, 14}, 40)
	distinct := func(rows []*float32) int {
		seen := map[*float32]bool{}
		for _, p := range rows {
			seen[p] = true
		}
		return len(seen)
	}
	if st.Forwards < 5 || len(m.rows) != st.Forwards {
		t.Fatalf("%d verify forwards, %d rows recorded", st.Forwards, len(m.rows))
	}
	if d := distinct(m.rows); d > 2 {
		t.Errorf("the target's %d verify forwards returned %d distinct rows, want at most 2 (the first, one growth)", st.Forwards, d)
	}
	if d := distinct(draftLM.rows); len(draftLM.rows) < 5 || d > 2 {
		t.Errorf("the drafter's %d forwards returned %d distinct rows, want at most 2", len(draftLM.rows), d)
	}
}
