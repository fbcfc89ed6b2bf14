package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func randLogits(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 3)
	}
	return x
}

func logProbs(p ...float64) []float32 {
	out := make([]float32, len(p))
	for i, v := range p {
		out[i] = float32(math.Log(v))
	}
	return out
}

func TestSample_SameSeedSameSequenceOtherSeedDiffers(t *testing.T) {
	logits := randLogits(1, 1000)
	p := Params{Temp: 1.2, TopK: 50, TopP: 0.95, RepeatPenalty: 1.1, RepeatLastN: 64, Seed: 42}
	run := func(p Params) []int32 {
		s := New(p)
		var hist []int32
		for i := 0; i < 200; i++ {
			hist = append(hist, s.Sample(logits, hist))
		}
		return hist
	}
	a, b := run(p), run(p)
	if !slices.Equal(a, b) {
		t.Fatal("two samplers with the same seed drew different sequences")
	}
	p.Seed = 43
	if slices.Equal(a, run(p)) {
		t.Fatal("seeds 42 and 43 drew the same 200 tokens")
	}
}

func TestSample_DoesNotModifyCallerLogits(t *testing.T) {
	logits := randLogits(2, 300)
	orig := slices.Clone(logits)
	s := New(Params{Temp: 0.8, TopK: 10, TopP: 0.9, RepeatPenalty: 1.3, RepeatLastN: 8, Seed: 1})
	for i := 0; i < 10; i++ {
		s.Sample(logits, []int32{0, 1, 2, 3, 4, 5})
	}
	for i := range logits {
		if math.Float32bits(logits[i]) != math.Float32bits(orig[i]) {
			t.Fatalf("logits[%d] changed: %g -> %g", i, orig[i], logits[i])
		}
	}
}

func TestSample_TopK1EqualsGreedy(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		logits := randLogits(seed, 500)
		hist := []int32{int32(seed), int32(seed * 3)}
		greedy := New(Params{Greedy: true, RepeatPenalty: 1.2, RepeatLastN: 4}).Sample(logits, hist)
		k1 := New(Params{Temp: 5, TopK: 1, RepeatPenalty: 1.2, RepeatLastN: 4, Seed: seed}).Sample(logits, hist)
		if greedy != k1 {
			t.Fatalf("seed %d: top-k=1 drew %d, greedy %d", seed, k1, greedy)
		}
	}
}

func TestSample_GreedyIsArgmaxAndTempZeroIsGreedy(t *testing.T) {
	logits := randLogits(9, 2000)
	want := Argmax(logits)
	for _, p := range []Params{{Greedy: true, Temp: 1, Seed: 3}, {Temp: 0}, {Temp: -1, TopK: 5}, {Greedy: true, RepeatPenalty: 1}} {
		s := New(p)
		for i := 0; i < 3; i++ {
			if got := s.Sample(logits, []int32{want}); got != want {
				t.Fatalf("%+v: got %d, want argmax %d", p, got, want)
			}
		}
	}
}

// counts draws n tokens from logits.
func counts(p Params, logits []float32, n int) []int {
	s := New(p)
	c := make([]int, len(logits))
	for i := 0; i < n; i++ {
		c[s.Sample(logits, nil)]++
	}
	return c
}

func TestSample_TopPKeepsShortestPrefixReachingP(t *testing.T) {
	logits := logProbs(0.5, 0.3, 0.2)
	cases := []struct {
		topP float32
		keep int // tokens that may appear: 0..keep-1
	}{
		{0.01, 1}, {0.499, 1}, {0.501, 2}, {0.799, 2}, {0.801, 3}, {1, 3}, {0, 3},
	}
	for _, c := range cases {
		got := counts(Params{Temp: 1, TopP: c.topP, Seed: 7}, logits, 3000)
		for id, n := range got {
			if id < c.keep && n == 0 {
				t.Errorf("top-p %g: token %d never drawn, want it kept", c.topP, id)
			}
			if id >= c.keep && n != 0 {
				t.Errorf("top-p %g: token %d drawn %d times, want it cut", c.topP, id, n)
			}
		}
	}
}

func TestSample_TopKCutsToTheKBest(t *testing.T) {
	logits := []float32{1, 5, 3, 5, 4, 0}
	got := counts(Params{Temp: 10, TopK: 3, Seed: 11}, logits, 3000)
	// best three: id 1 (5), id 3 (5), id 4 (4)
	for id, n := range got {
		kept := id == 1 || id == 3 || id == 4
		if kept != (n > 0) {
			t.Errorf("top-k 3: token %d drawn %d times (kept=%v)", id, n, kept)
		}
	}
}

func TestPenalize_MatchesHandComputedValues(t *testing.T) {
	s := New(Params{RepeatPenalty: 2, RepeatLastN: 64})
	s.logits = []float32{2, -1, 0.5, 3, 0}
	// 0 twice (penalized once), 1, an id past the vocabulary, a negative id, 4 (zero stays zero)
	s.penalize([]int32{0, 1, 0, 5, -3, 4})
	want := []float32{1, -2, 0.5, 3, 0}
	if !slices.Equal(s.logits, want) {
		t.Fatalf("penalized = %v, want %v", s.logits, want)
	}

	// window: only the last 2 ids (3 and 1)
	s = New(Params{RepeatPenalty: 1.5, RepeatLastN: 2})
	s.logits = []float32{3, -2, 1, 6}
	s.penalize([]int32{0, 2, 3, 1})
	want = []float32{3, -3, 1, 4}
	if !slices.Equal(s.logits, want) {
		t.Fatalf("windowed penalized = %v, want %v", s.logits, want)
	}

	// the penalty flips a greedy choice: 2/1.5 = 1.333 < 1.5
	g := New(Params{Greedy: true, RepeatPenalty: 1.5, RepeatLastN: -1})
	if got := g.Sample([]float32{2, 1.5}, []int32{0}); got != 1 {
		t.Fatalf("penalized greedy = %d, want 1", got)
	}
	// penalty 1.0 and RepeatLastN 0 are off
	for _, p := range []Params{{Greedy: true, RepeatPenalty: 1, RepeatLastN: 8}, {Greedy: true, RepeatPenalty: 3}} {
		if got := New(p).Sample([]float32{2, 1.5}, []int32{0}); got != 0 {
			t.Fatalf("%+v: got %d, want 0 (penalty off)", p, got)
		}
	}
}

// chiSquare of observed counts against probabilities p.
func chiSquare(obs []int, p []float64) float64 {
	n := 0
	for _, o := range obs {
		n += o
	}
	x := 0.0
	for i, o := range obs {
		e := p[i] * float64(n)
		x += (float64(o) - e) * (float64(o) - e) / e
	}
	return x
}

// Bar: chi-square with 3 degrees of freedom below 16.27 (p = 0.001); the seed
// is fixed, so the test is deterministic.
func TestSample_DistributionMatchesSoftmaxChiSquare(t *testing.T) {
	p := []float64{0.4, 0.3, 0.2, 0.1}
	logits := logProbs(p...)
	const n = 40000
	if x := chiSquare(counts(Params{Temp: 1, Seed: 2024}, logits, n), p); x > 16.27 {
		t.Errorf("temp 1: chi-square %g > 16.27", x)
	}
	// temperature 0.5 squares the probabilities.
	q := make([]float64, len(p))
	sum := 0.0
	for i, v := range p {
		q[i] = v * v
		sum += q[i]
	}
	for i := range q {
		q[i] /= sum
	}
	if x := chiSquare(counts(Params{Temp: 0.5, Seed: 77}, logits, n), q); x > 16.27 {
		t.Errorf("temp 0.5: chi-square %g > 16.27", x)
	}
}

func TestArgmax_TiesGoToLowestIdAndNaNNeverWins(t *testing.T) {
	nan := float32(math.NaN())
	cases := []struct {
		in   []float32
		want int32
	}{
		{[]float32{1, 3, 3, 2}, 1},
		{[]float32{nan, 1, 2}, 2},
		{[]float32{0, nan, -1}, 0},
		{[]float32{float32(math.Inf(-1)), float32(math.Inf(-1))}, 0},
		{nil, -1},
	}
	for _, c := range cases {
		if got := Argmax(c.in); got != c.want {
			t.Errorf("Argmax(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestTop2Margin_ReturnsTwoBestAndTheirGap(t *testing.T) {
	a, b, m := Top2Margin([]float32{0.5, 2, -1, 1.25, 2})
	if a != 1 || b != 4 || m != 0 {
		t.Fatalf("ties: got %d %d %g, want 1 4 0", a, b, m)
	}
	a, b, m = Top2Margin([]float32{0.5, 2, -1, 1.25})
	if a != 1 || b != 3 || m != 0.75 {
		t.Fatalf("got %d %d %g, want 1 3 0.75", a, b, m)
	}
	if a, b, _ := Top2Margin([]float32{7}); a != 0 || b != -1 {
		t.Fatalf("single: got %d %d", a, b)
	}
	if a, b, _ := Top2Margin(nil); a != -1 || b != -1 {
		t.Fatalf("empty: got %d %d", a, b)
	}
}

func TestSample_DegenerateRowsDoNotPanic(t *testing.T) {
	s := New(Params{Temp: 1, TopK: 2, TopP: 0.5, Seed: 1})
	if got := s.Sample(nil, nil); got != -1 {
		t.Fatalf("empty row: %d", got)
	}
	inf := float32(math.Inf(-1))
	if got := s.Sample([]float32{inf, inf, inf}, nil); got < 0 || got > 2 {
		t.Fatalf("all -Inf: %d", got)
	}
	if got := New(Params{Temp: 1e-30, Seed: 1}).Sample([]float32{1, 3, 2}, nil); got != 1 {
		t.Fatalf("tiny temperature: %d, want 1", got)
	}
}

// Temperature comes after top-p (llama.cpp's chain): a high temperature must
// not widen the set top-p keeps, which it would if applied first.
func TestSample_TemperatureAppliesAfterTopP(t *testing.T) {
	logits := logProbs(0.5, 0.3, 0.2)
	got := counts(Params{Temp: 5, TopP: 0.7, Seed: 3}, logits, 3000)
	if got[2] != 0 {
		t.Fatalf("token 2 drawn %d times: top-p 0.7 on the untempered distribution keeps only tokens 0 and 1", got[2])
	}
	if got[0] == 0 || got[1] == 0 {
		t.Fatalf("kept tokens not both drawn: %v", got)
	}
}

func TestParamsValidate_RefusesMeaninglessValuesKeepsTheOffValues(t *testing.T) {
	ok := Params{Temp: 0.8, TopK: 40, TopP: 0.95, RepeatPenalty: 1.1, RepeatLastN: 64}
	for _, p := range []Params{ok, {}, {TopP: 1, RepeatPenalty: 1}, {Temp: -1, TopP: 1, RepeatPenalty: 1, RepeatLastN: -1}} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v, want valid", p, err)
		}
	}
	nan := float32(math.NaN())
	bad := []struct {
		mutate func(*Params)
		want   string
	}{
		{func(p *Params) { p.Temp = nan }, "temperature"},
		{func(p *Params) { p.Temp = float32(math.Inf(1)) }, "temperature"},
		{func(p *Params) { p.TopK = -1 }, "top-k -1"},
		{func(p *Params) { p.TopP = 2 }, "top-p 2"},
		{func(p *Params) { p.TopP = -0.5 }, "top-p -0.5"},
		{func(p *Params) { p.TopP = nan }, "top-p"},
		{func(p *Params) { p.RepeatPenalty = float32(math.Inf(1)) }, "repeat penalty"},
		{func(p *Params) { p.RepeatPenalty = -1.1 }, "repeat penalty -1.1"},
		{func(p *Params) { p.RepeatLastN = -2 }, "repeat window -2"},
	}
	for _, c := range bad {
		p := ok
		c.mutate(&p)
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %q", p, err, c.want)
		}
	}
}

// A Sampler given another's RNG state draws what that one draws next, for
// every draw after (the state a saved session carries).
func TestSetRNG_ContinuesTheSameSequence(t *testing.T) {
	logits := randLogits(4, 700)
	p := Params{Temp: 0.9, TopK: 30, TopP: 0.9, Seed: 11}
	a := New(p)
	for i := 0; i < 17; i++ {
		a.Sample(logits, nil)
	}
	b := New(Params{Temp: 0.9, TopK: 30, TopP: 0.9, Seed: 999})
	b.SetRNG(a.RNG())
	if a.RNG() != b.RNG() {
		t.Fatalf("state %x after SetRNG(%x)", b.RNG(), a.RNG())
	}
	for i := 0; i < 50; i++ {
		if x, y := a.Sample(logits, nil), b.Sample(logits, nil); x != y {
			t.Fatalf("draw %d: %d vs %d after SetRNG", i, x, y)
		}
	}
	if New(p).RNG() == a.RNG() {
		t.Fatal("the state did not move with the draws")
	}
}

// argmaxOneChain is Argmax's contract written as one compare chain (the
// implementation before the four-lane form): the lowest id of the largest
// non-NaN logit, 0 when every value is NaN, -1 for an empty row.
func argmaxOneChain(logits []float32) int32 {
	if len(logits) == 0 {
		return -1
	}
	best := 0
	for i := 1; i < len(logits); i++ {
		if logits[i] > logits[best] || (logits[best] != logits[best] && logits[i] == logits[i]) {
			best = i
		}
	}
	return int32(best)
}

// TestArgmax_FourLanesEqualTheOneChainContract: over 4,000 rows of every
// length 0..67 (each lane and tail position) and some vocabulary sizes,
// drawn from a small pool so ties are common, with NaN, ±Inf and ±0, the
// four-lane Argmax gives the one-chain answer.
func TestArgmax_FourLanesEqualTheOneChainContract(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	pool := []float32{nan, inf, -inf, 0, float32(math.Copysign(0, -1)), 1, 1, -1, 2.5, 2.5, -3, 7}
	r := rand.New(rand.NewPCG(5, 9))
	for i := range 4000 {
		n := i % 68
		if i%400 == 399 {
			n = []int{151936, 152064, 1001}[i/400%3]
		}
		row := make([]float32, n)
		for j := range row {
			if i%3 == 0 {
				row[j] = pool[r.IntN(len(pool))]
			} else {
				row[j] = float32(r.NormFloat64())
				if r.IntN(50) == 0 {
					row[j] = pool[r.IntN(len(pool))]
				}
			}
		}
		if got, want := Argmax(row), argmaxOneChain(row); got != want {
			t.Fatalf("row %d (len %d): Argmax %d, the one-chain contract %d: %v", i, n, got, want, row)
		}
	}
}

func BenchmarkArgmax(b *testing.B) {
	row := randLogits(2, 151936)
	for b.Loop() {
		Argmax(row)
	}
}

// BenchmarkArgmaxOneChain is the contract's single compare chain, for
// comparison with BenchmarkArgmax on the same row.
func BenchmarkArgmaxOneChain(b *testing.B) {
	row := randLogits(2, 151936)
	for b.Loop() {
		argmaxOneChain(row)
	}
}

// TestSample_GreedyWithoutPenaltyReadsTheRowInPlace: greedy sampling with
// no repeat penalty picks Argmax of the caller's row without copying it
// (a 152K-vocabulary row is 600 KB a token); with a penalty it copies,
// penalizes the copy and leaves the caller's row as it was.
func TestSample_GreedyWithoutPenaltyReadsTheRowInPlace(t *testing.T) {
	row := randLogits(3, 151936)
	s := New(Params{Greedy: true})
	if s.UsesHistory() {
		t.Fatal("no repeat penalty: UsesHistory")
	}
	if got, want := s.Sample(row, []int32{1, 2}), Argmax(row); got != want {
		t.Fatalf("greedy: %d, want Argmax %d", got, want)
	}
	if a := testing.AllocsPerRun(5, func() { s.Sample(row, nil) }); a != 0 || s.logits != nil {
		t.Errorf("greedy without a penalty: %v allocations a call, copy of %d values kept", a, len(s.logits))
	}
	top := Argmax(row)
	before := row[top]
	p := New(Params{Greedy: true, RepeatPenalty: 1e6, RepeatLastN: -1})
	if !p.UsesHistory() {
		t.Fatal("repeat penalty: !UsesHistory")
	}
	if got := p.Sample(row, []int32{top}); got == top || row[top] != before {
		t.Errorf("penalized greedy: %d (the penalized top is %d), caller's row %v -> %v", got, top, before, row[top])
	}
}
