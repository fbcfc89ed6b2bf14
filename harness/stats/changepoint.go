package stats

import (
	"math"
	"slices"

	mstats "github.com/montanaflynn/stats"
)

// Change points of a nightly history: E-divisive means (Matteson & James 2014, "A nonparametric
// approach for multiple change point analysis of multivariate data", JASA 109:505), the method
// MongoDB's signal-processing and Apache Otava run over performance histories, adapted to nights
// that each hold several rounds:
//
//   - The unit is the night. The distance between two nights is the mean |log r_a - log r_b| over
//     every pair of their rounds (NightDistances), so every round counts, not only the night's
//     median; a night's rounds share its build and machine state, so they are not independent
//     units and are never split apart.
//   - The divergence of a split is Q̂ = mn/(m+n) · Ê with the energy distance
//     Ê = 2/(mn) Σ d(X_i, Y_j) − C(m,2)⁻¹ Σ d(X_i, X_k) − C(n,2)⁻¹ Σ d(Y_j, Y_k) (α = 1), the
//     right part running to the end of its segment (κ fixed there, as signal-processing does:
//     the hierarchical bisection finds further changes inside each part).
//   - Significance: the best split over all current segments is tested by permutation, nights
//     shuffled within each segment and the search re-run, with a fixed seed so a history always
//     gives the same answer. Under no change the nights of a segment are exchangeable whatever
//     their noise distribution or their within-night correlation, so the test is exact:
//     P(p <= alpha) <= alpha. A split is kept at p <= alpha, and the search goes on in the parts.
//   - A change smaller than the floor (|after/before − 1| of the segments' median night points) is
//     merged away, smallest first: a magnitude floor from the calibrated noise keeps real but
//     negligible shifts, which enough nights make significant, out of the alerts.
//   - Every segment has at least MinNights nights, except the newest, which may have as few as
//     two: a change with fewer than MinNights nights after it is Pending, no verdict yet.

// Settings of the nightly history's change points (ChangeOptions' defaults).
const (
	ChangeAlpha        = 0.001
	ChangePermutations = 4999             // p resolution 1/5000, so p <= 0.001 allows 4 exceedances
	ChangeSeed         = 0x6e696768746c79 // "nightly"
	ChangeMinNights    = 6
	// ChangeDefaultFloor is the floor of a series with no calibration of its machine and model.
	ChangeDefaultFloor = 0.015
)

// changeMinPending is the fewest newest nights a pending candidate stands on (the energy
// distance needs a pair of nights on each side).
const changeMinPending = 2

// ChangeOptions are the settings of ChangePoints.
type ChangeOptions struct {
	Alpha        float64 // significance of each split
	Permutations int     // permutations per test
	Seed         uint64
	MinNights    int     // nights on each side of a change before its verdict
	Floor        float64 // smallest |after/before − 1| reported
}

// DefaultChangeOptions are the nightly history's settings with the given floor.
func DefaultChangeOptions(floor float64) ChangeOptions {
	return ChangeOptions{Alpha: ChangeAlpha, Permutations: ChangePermutations, Seed: ChangeSeed, MinNights: ChangeMinNights, Floor: floor}
}

// ChangePoint is one change in a series of nights.
type ChangePoint struct {
	At int `json:"at"` // index of the first night after the change
	// P is the permutation p-value of the test that admitted the split: (k+1)/(R+1), k of R
	// permuted histories at least as divided.
	P float64 `json:"p"`
	// Before and After are the medians of the night points of the segments either side (to the
	// neighbouring changes); Change is After/Before − 1.
	Before       float64 `json:"before"`
	After        float64 `json:"after"`
	Change       float64 `json:"change"`
	NightsBefore int     `json:"nights_before"`
	NightsAfter  int     `json:"nights_after"`
	// Pending: fewer than MinNights nights stand after it (it is the newest change); no verdict.
	Pending bool `json:"pending"`
}

// NightPoints are the nights' points: the median of each night's per-round ratios.
func NightPoints(nights [][]float64) []float64 {
	pts := make([]float64, len(nights))
	for i, n := range nights {
		pts[i], _ = mstats.Median(n)
	}
	return pts
}

// NightDistances returns the matrix of mean absolute differences of log ratio between the rounds
// of every two nights (0 on the diagonal, which the energy distance never uses).
func NightDistances(nights [][]float64) [][]float64 {
	logs := make([][]float64, len(nights))
	for i, n := range nights {
		logs[i] = make([]float64, len(n))
		for j, r := range n {
			logs[i][j] = math.Log(r)
		}
	}
	d := make([][]float64, len(nights))
	for i := range d {
		d[i] = make([]float64, len(nights))
	}
	for i := range logs {
		for j := i + 1; j < len(logs); j++ {
			s := 0.0
			for _, a := range logs[i] {
				for _, b := range logs[j] {
					s += math.Abs(a - b)
				}
			}
			s /= float64(len(logs[i]) * len(logs[j]))
			d[i][j], d[j][i] = s, s
		}
	}
	return d
}

// EnergyQ is the E-divisive divergence Q̂ = mn/(m+n) · Ê(X, Y; α=1) of two samples of points
// (each at least two), NaN otherwise.
func EnergyQ(x, y []float64) float64 {
	if len(x) < 2 || len(y) < 2 || !allFinite(x) || !allFinite(y) {
		return math.NaN()
	}
	d := func(a, b []float64) (s float64) {
		for _, u := range a {
			for _, v := range b {
				s += math.Abs(u - v)
			}
		}
		return s
	}
	m, n := float64(len(x)), float64(len(y))
	// d(x, x) counts each unordered pair twice: half of it over C(m,2) is d/(m(m-1)).
	e := 2*d(x, y)/(m*n) - d(x, x)/(m*(m-1)) - d(y, y)/(n*(n-1))
	return m * n / (m + n) * e
}

// ChangePoints finds the change points of a series of nights (each night its per-round ratios,
// oldest first) by E-divisive means with a permutation test, as the comment above describes.
// They come back oldest first. A night with no rounds or a ratio that is not finite and
// positive, or options out of range, give nil: the caller drops such nights first.
func ChangePoints(nights [][]float64, o ChangeOptions) []ChangePoint {
	if !(o.Alpha > 0 && o.Alpha < 1) || o.Permutations < 1 || o.MinNights < changeMinPending || !(o.Floor >= 0) {
		return nil
	}
	for _, n := range nights {
		if !validRatios(n) {
			return nil
		}
	}
	s := newCPSearch(NightDistances(nights), o.MinNights)
	rng := newRand(o.Seed)
	bounds := []int{0, s.t} // segment boundaries, sorted
	pOf := map[int]float64{}
	ident := make([]int, s.t)
	for i := range ident {
		ident[i] = i
	}
	// Exceedances allowed for p = (k+1)/(R+1) <= alpha; one more ends the test early.
	allowed := int(math.Floor(o.Alpha*float64(o.Permutations+1)+1e-9)) - 1
	perm := make([]int, s.t)
	for {
		obs, at := s.best(ident, bounds)
		if at < 0 {
			break
		}
		k, r := 0, 0
		for r < o.Permutations && k <= allowed {
			copy(perm, ident)
			for i := 0; i+1 < len(bounds); i++ {
				seg := perm[bounds[i]:bounds[i+1]]
				rng.Shuffle(len(seg), func(a, b int) { seg[a], seg[b] = seg[b], seg[a] })
			}
			r++
			// Ties count as exceedances (conservative); the slack absorbs summation order.
			if q, _ := s.best(perm, bounds); q >= obs-1e-12*math.Abs(obs) {
				k++
			}
		}
		if k > allowed {
			break
		}
		pOf[at] = float64(k+1) / float64(o.Permutations+1)
		bounds = append(bounds, at)
		slices.Sort(bounds)
	}
	pts := NightPoints(nights)
	cps := describeChanges(pts, bounds, pOf, o.MinNights)
	// Merge away the smallest change below the floor until none is left: merging grows the
	// neighbouring segments, so the remaining changes are measured against their new neighbours.
	for {
		worst := -1
		for i, c := range cps {
			if math.Abs(c.Change) < o.Floor && (worst < 0 || math.Abs(c.Change) < math.Abs(cps[worst].Change)) {
				worst = i
			}
		}
		if worst < 0 {
			return cps
		}
		bounds = slices.DeleteFunc(bounds, func(b int) bool { return b == cps[worst].At })
		cps = describeChanges(pts, bounds, pOf, o.MinNights)
	}
}

// describeChanges measures each interior boundary against its neighbours.
func describeChanges(pts []float64, bounds []int, pOf map[int]float64, minNights int) []ChangePoint {
	var cps []ChangePoint
	for i := 1; i+1 < len(bounds); i++ {
		lo, at, hi := bounds[i-1], bounds[i], bounds[i+1]
		before, _ := mstats.Median(pts[lo:at])
		after, _ := mstats.Median(pts[at:hi])
		cps = append(cps, ChangePoint{At: at, P: pOf[at], Before: before, After: after, Change: after/before - 1,
			NightsBefore: at - lo, NightsAfter: hi - at, Pending: hi-at < minNights})
	}
	return cps
}

// cpSearch is the split search over one series' night distances.
type cpSearch struct {
	d         []float64 // t x t, row-major: the inner loop of every permutation reads it
	t         int
	minNights int
	left      []float64 // scratch: per position, its distance sum to the positions before it in its segment
	right     []float64 // and to those after it
}

func newCPSearch(d [][]float64, minNights int) *cpSearch {
	t := len(d)
	s := &cpSearch{d: make([]float64, t*t), t: t, minNights: minNights, left: make([]float64, t), right: make([]float64, t)}
	for i, row := range d {
		copy(s.d[i*t:], row)
	}
	return s
}

// best returns the largest Q̂ over every allowed split of every segment, the nights in the order
// perm (positions bounds[i]..bounds[i+1]-1 form segment i), and the split's position (-1: none).
func (s *cpSearch) best(perm []int, bounds []int) (float64, int) {
	bestQ, bestAt := math.Inf(-1), -1
	for i := 0; i+1 < len(bounds); i++ {
		lo, hi := bounds[i], bounds[i+1]
		minRight := s.minNights
		if hi == s.t {
			minRight = changeMinPending // the newest segment may end in a pending change
		}
		if hi-lo < s.minNights+minRight {
			continue
		}
		total := 0.0
		for a := lo; a < hi; a++ {
			s.left[a], s.right[a] = 0, 0
		}
		left, right := s.left[:hi], s.right[:hi]
		for a := lo; a < hi; a++ {
			row := s.d[perm[a]*s.t : (perm[a]+1)*s.t]
			sum := 0.0
			for b := a + 1; b < hi; b++ {
				v := row[perm[b]]
				sum += v
				left[b] += v
			}
			right[a] = sum
			total += sum
		}
		wl := 0.0 // within the left part, positions lo..tau-1
		wr := total
		for a := lo; a < lo+s.minNights; a++ {
			wl += s.left[a]
			wr -= s.right[a]
		}
		for tau := lo + s.minNights; tau <= hi-minRight; tau++ {
			m, n := float64(tau-lo), float64(hi-tau)
			cross := total - wl - wr
			e := 2*cross/(m*n) - 2*wl/(m*(m-1)) - 2*wr/(n*(n-1))
			if q := m * n / (m + n) * e; q > bestQ {
				bestQ, bestAt = q, tau
			}
			wl += s.left[tau]
			wr -= s.right[tau]
		}
	}
	return bestQ, bestAt
}
