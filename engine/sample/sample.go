// Package sample picks the next token from a row of logits: greedy, or the
// classic llama.cpp chain repeat penalty -> top-k -> top-p -> temperature
// -> a draw from a seeded generator owned by the Sampler.
package sample

import (
	"container/heap"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Params configure a Sampler. The zero value samples at temperature 0, that
// is greedily.
type Params struct {
	Temp float32 // <= 0: greedy
	TopK int     // <= 0 or >= n_vocab: off
	TopP float32 // >= 1 (or <= 0 treated as 1): off
	// RepeatPenalty divides positive and multiplies negative logits of every
	// distinct token in the last RepeatLastN of the history; 0 or 1: off.
	RepeatPenalty float32
	RepeatLastN   int // 0: off; < 0: the whole history
	Seed          uint64
	Greedy        bool
}

// Validate refuses values that have no meaning, so a typo is an error and
// not a silently different chain: a non-finite temperature, a negative
// top-k, a top-p outside [0, 1], a negative or non-finite repeat penalty
// (it would flip the sign of the logits it touches), a window below -1.
// The documented "off" values (temp <= 0, top-k 0, top-p 0 or 1, penalty 0
// or 1, window 0) stay valid.
func (p Params) Validate() error {
	switch {
	case !finite(p.Temp):
		return fmt.Errorf("temperature %v: want a finite value (<= 0: greedy)", p.Temp)
	case p.TopK < 0:
		return fmt.Errorf("top-k %d: want 0 (off) or a positive count", p.TopK)
	case !(p.TopP >= 0 && p.TopP <= 1):
		return fmt.Errorf("top-p %v: want a value in [0, 1] (1: off)", p.TopP)
	case !finite(p.RepeatPenalty) || p.RepeatPenalty < 0:
		return fmt.Errorf("repeat penalty %v: want a finite non-negative factor (1: off)", p.RepeatPenalty)
	case p.RepeatLastN < -1:
		return fmt.Errorf("repeat window %d: want -1 (whole context), 0 (off) or a positive count", p.RepeatLastN)
	}
	return nil
}

func finite(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }

// Sampler holds its parameters, its own PRNG and scratch buffers, so one
// Sampler is not safe for concurrent use, and two Samplers never interfere.
type Sampler struct {
	p      Params
	pcg    *rand.PCG // rng's source, whose state RNG and SetRNG carry
	rng    *rand.Rand
	logits []float32 // penalized copy of the caller's logits
	seen   []bool    // per token: already penalized in this call
	cands  []cand
	probs  []float64
}

type cand struct {
	id    int32
	logit float32
}

// New returns a Sampler whose generator is PCG seeded from p.Seed.
func New(p Params) *Sampler {
	pcg := rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15)
	return &Sampler{p: p, pcg: pcg, rng: rand.New(pcg)}
}

// Params returns the parameters the Sampler was made with.
func (s *Sampler) Params() Params { return s.p }

// RNG is the generator's state (PCG's 128-bit state, high word first): a
// Sampler given it with SetRNG draws what this one would draw next. It is
// what a saved session keeps of the sampler besides its parameters.
func (s *Sampler) RNG() [2]uint64 {
	b, err := s.pcg.MarshalBinary() // "pcg:" + hi + lo, big-endian
	if err != nil || len(b) != len(pcgTag)+16 || string(b[:len(pcgTag)]) != pcgTag {
		panic(fmt.Sprintf("sample: PCG state encoding changed: %q, %v", b, err))
	}
	return [2]uint64{binary.BigEndian.Uint64(b[4:]), binary.BigEndian.Uint64(b[12:])}
}

// SetRNG sets the generator's state to one RNG returned.
func (s *Sampler) SetRNG(st [2]uint64) {
	b := binary.BigEndian.AppendUint64([]byte(pcgTag), st[0])
	b = binary.BigEndian.AppendUint64(b, st[1])
	if err := s.pcg.UnmarshalBinary(b); err != nil {
		panic(fmt.Sprintf("sample: PCG state encoding changed: %v", err))
	}
}

// pcgTag starts math/rand/v2's PCG binary encoding.
const pcgTag = "pcg:"

// Sample returns the next token id for logits given the history of ids so
// far (prompt and generated). The caller's logits are not modified. An empty
// logits row gives -1.
func (s *Sampler) Sample(logits []float32, history []int32) int32 {
	n := len(logits)
	if n == 0 {
		return -1
	}
	greedy := s.p.Greedy || !(s.p.Temp > 0)
	if greedy && !s.UsesHistory() {
		return Argmax(logits) // nothing to penalize: read the row in place, no 600 KB copy
	}
	s.logits = append(s.logits[:0], logits...)
	s.penalize(history)
	if greedy {
		return Argmax(s.logits)
	}

	// top-k: candidates sorted by logit (descending), ties by id.
	k := s.p.TopK
	if k <= 0 || k > n {
		k = n
	}
	s.topK(k)
	c := s.cands

	// top-p on the untempered distribution, then temperature on what is
	// kept: the order of llama.cpp's default chain (temperature is last).
	if !s.softmax(c, 1) {
		return c[0].id
	}
	keep := len(c)
	if p := float64(s.p.TopP); p > 0 && p < 1 {
		cum := 0.0
		for i, pr := range s.probs {
			cum += pr
			if cum >= p {
				keep = i + 1
				break
			}
		}
	}
	c = c[:keep]
	if !s.softmax(c, 1/float64(s.p.Temp)) {
		return c[0].id
	}
	u := s.rng.Float64()
	for i, pr := range s.probs {
		u -= pr
		if u < 0 {
			return c[i].id
		}
	}
	return c[keep-1].id
}

// softmax fills s.probs with the normalized probabilities of c at inverse
// temperature inv, in float64; false when nothing has positive mass.
func (s *Sampler) softmax(c []cand, inv float64) bool {
	maxL := float64(c[0].logit)
	s.probs = slices.Grow(s.probs[:0], len(c))[:len(c)]
	sum := 0.0
	for i, x := range c {
		e := 1.0 // the best logit (and its ties) even when inv is +Inf
		if d := float64(x.logit) - maxL; d != 0 {
			e = math.Exp(d * inv)
		}
		if math.IsNaN(e) {
			e = 0
		}
		s.probs[i] = e
		sum += e
	}
	if !(sum > 0) { // every logit -Inf or NaN: nothing to draw from
		return false
	}
	for i := range s.probs {
		s.probs[i] /= sum
	}
	return true
}

// penalize applies the repeat penalty to s.logits, once per distinct token
// of the window; ids outside the vocabulary are ignored.
// UsesHistory reports whether Sample reads the history at all (a repeat
// penalty over a window): without one, a caller need not keep it.
func (s *Sampler) UsesHistory() bool {
	pen := s.p.RepeatPenalty
	return pen != 0 && pen != 1 && s.p.RepeatLastN != 0
}

func (s *Sampler) penalize(history []int32) {
	if !s.UsesHistory() || len(history) == 0 {
		return
	}
	pen := s.p.RepeatPenalty
	win := history
	if s.p.RepeatLastN > 0 && len(win) > s.p.RepeatLastN {
		win = win[len(win)-s.p.RepeatLastN:]
	}
	n := len(s.logits)
	if len(s.seen) < n {
		s.seen = make([]bool, n)
	}
	for _, id := range win {
		if id < 0 || int(id) >= n || s.seen[id] {
			continue
		}
		s.seen[id] = true
		if l := s.logits[id]; l > 0 {
			s.logits[id] = l / pen
		} else {
			s.logits[id] = l * pen
		}
	}
	for _, id := range win {
		if id >= 0 && int(id) < n {
			s.seen[id] = false
		}
	}
}

// better orders candidates: higher logit first, then lower id; NaN last.
func better(a, b cand) bool {
	if a.logit != b.logit {
		if math.IsNaN(float64(b.logit)) {
			return !math.IsNaN(float64(a.logit))
		}
		return a.logit > b.logit
	}
	return a.id < b.id
}

// topK leaves the best k candidates of s.logits in s.cands, sorted.
func (s *Sampler) topK(k int) {
	n := len(s.logits)
	s.cands = s.cands[:0]
	if k < n {
		// a min-heap of the best k seen so far; its root is the worst kept.
		h := candHeap(slices.Grow(s.cands, k))
		for i, l := range s.logits {
			x := cand{int32(i), l}
			if len(h) < k {
				heap.Push(&h, x)
			} else if better(x, h[0]) {
				h[0] = x
				heap.Fix(&h, 0)
			}
		}
		s.cands = []cand(h)
	} else {
		for i, l := range s.logits {
			s.cands = append(s.cands, cand{int32(i), l})
		}
	}
	slices.SortFunc(s.cands, func(a, b cand) int {
		if better(a, b) {
			return -1
		}
		if better(b, a) {
			return 1
		}
		return 0
	})
}

type candHeap []cand

func (h candHeap) Len() int           { return len(h) }
func (h candHeap) Less(i, j int) bool { return better(h[j], h[i]) } // worst at the root
func (h candHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)        { *h = append(*h, x.(cand)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Argmax returns the id of the largest logit, the lowest id on ties; NaN
// never wins unless every value is NaN (then 0). An empty row gives -1.
//
// Two passes: the largest non-NaN value with four independent running
// maxima (one compare chain through 152K logits is latency-bound), then the
// first id that holds it.
func Argmax(logits []float32) int32 {
	if len(logits) == 0 {
		return -1
	}
	ninf := float32(math.Inf(-1))
	m0, m1, m2, m3 := ninf, ninf, ninf, ninf // a NaN compares false and never replaces one
	i := 0
	for ; i+4 <= len(logits); i += 4 {
		l := logits[i : i+4 : i+4]
		if l[0] > m0 {
			m0 = l[0]
		}
		if l[1] > m1 {
			m1 = l[1]
		}
		if l[2] > m2 {
			m2 = l[2]
		}
		if l[3] > m3 {
			m3 = l[3]
		}
	}
	for ; i < len(logits); i++ {
		if logits[i] > m0 {
			m0 = logits[i]
		}
	}
	m := max(m0, m1, m2, m3)
	for j, v := range logits {
		if v == m {
			return int32(j)
		}
	}
	return 0 // every value NaN
}

// Top2Margin returns the two best ids (ties to the lower id, as Argmax) and
// logits[top1]-logits[top2]. With fewer than two logits top2 is -1 and the
// margin +Inf; an empty row gives -1, -1, 0.
func Top2Margin(logits []float32) (top1, top2 int32, margin float32) {
	if len(logits) == 0 {
		return -1, -1, 0
	}
	top1 = Argmax(logits)
	if len(logits) == 1 {
		return top1, -1, float32(math.Inf(1))
	}
	top2 = -1
	for i, l := range logits {
		if int32(i) == top1 || l != l {
			continue
		}
		if top2 < 0 || l > logits[top2] {
			top2 = int32(i)
		}
	}
	if top2 < 0 { // every other value is NaN
		return top1, -1, float32(math.Inf(1))
	}
	return top1, top2, logits[top1] - logits[top2]
}
