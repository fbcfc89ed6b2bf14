package stats

import (
	"math"
	"slices"
)

// exactMaxN is the largest number of non-zero differences for which WilcoxonSignedRank and the
// Mann-Whitney test enumerate the exact null distribution (2^25 subsets counted exactly in a
// float64); above it they use the normal approximation.
const exactMaxN = 25

// WilcoxonSignedRank runs the Wilcoxon signed-rank test on paired differences, in gate 3 the log
// ratios log(B_i/A_i). Zero differences are dropped (Wilcoxon's convention); tied |d| get the
// average of the ranks they span. w is W+, the sum of the ranks of the positive differences.
// pOneSided is P(W+ >= w) under the null (alternative: B > A); pTwoSided is
// min(1, 2*min(P(W+ >= w), P(W+ <= w))).
//
// For n <= 25 non-zero differences the null distribution is exact, counted by dynamic
// programming over the 2^n sign patterns of ranks 1..n. That exact null assumes no ties: with
// tied |d| the mid-ranks can make w a half-integer, and the p-value is then read off the no-ties
// distribution at ceil(w) (upper) / floor(w) (lower), an approximation. Above 25 the normal
// approximation with continuity correction and the tie correction of the variance is used.
//
// Empty or non-finite input gives NaN for all three; all-zero differences (no evidence either
// way) give w = 0 and p = 1.
func WilcoxonSignedRank(diffs []float64) (w float64, pOneSided, pTwoSided float64) {
	if len(diffs) == 0 || !allFinite(diffs) {
		return math.NaN(), math.NaN(), math.NaN()
	}
	var abs []float64
	var pos []bool
	for _, d := range diffs {
		if d != 0 {
			abs = append(abs, math.Abs(d))
			pos = append(pos, d > 0)
		}
	}
	n := len(abs)
	if n == 0 {
		return 0, 1, 1
	}
	ranks, ties := midRanks(abs)
	for i, r := range ranks {
		if pos[i] {
			w += r
		}
	}
	var upper, lower float64
	if n <= exactMaxN {
		counts := signedRankCounts(n) // counts[s] = number of subsets of {1..n} with sum s
		total := math.Ldexp(1, n)
		upper = tailSum(counts, int(math.Ceil(w)), len(counts)-1) / total
		lower = tailSum(counts, 0, int(math.Floor(w))) / total
	} else {
		fn := float64(n)
		mu := fn * (fn + 1) / 4
		sd := math.Sqrt(fn*(fn+1)*(2*fn+1)/24 - ties/48)
		upper = normalUpper((w - mu - 0.5) / sd)
		lower = 1 - normalUpper((w-mu+0.5)/sd)
	}
	return w, upper, math.Min(1, 2*math.Min(upper, lower))
}

// signedRankCounts returns c with c[s] = the number of subsets of {1..n} whose sum is s, for
// s = 0..n(n+1)/2: the null distribution of W+ times 2^n.
func signedRankCounts(n int) []float64 {
	c := make([]float64, n*(n+1)/2+1)
	c[0] = 1
	maxSum := 0
	for r := 1; r <= n; r++ {
		maxSum += r
		for s := maxSum; s >= r; s-- {
			c[s] += c[s-r]
		}
	}
	return c
}

// tailSum returns the sum of c[lo..hi], clamped to the slice.
func tailSum(c []float64, lo, hi int) float64 {
	lo = max(lo, 0)
	hi = min(hi, len(c)-1)
	var s float64
	for i := lo; i <= hi; i++ {
		s += c[i]
	}
	return s
}

// midRanks returns the 1-based ranks of xs with ties given the average of the ranks they span,
// and the tie term sum(t^3 - t) over groups of t tied values.
func midRanks(xs []float64) (ranks []float64, ties float64) {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(i, j int) int {
		switch {
		case xs[i] < xs[j]:
			return -1
		case xs[i] > xs[j]:
			return 1
		}
		return 0
	})
	ranks = make([]float64, len(xs))
	for i := 0; i < len(idx); {
		j := i + 1
		for j < len(idx) && xs[idx[j]] == xs[idx[i]] {
			j++
		}
		avg := float64(i+1+j) / 2 // mean of ranks i+1..j
		for _, k := range idx[i:j] {
			ranks[k] = avg
		}
		t := float64(j - i)
		ties += t*t*t - t
		i = j
	}
	return ranks, ties
}

// normalUpper returns P(Z >= z) for a standard normal Z.
func normalUpper(z float64) float64 { return 0.5 * math.Erfc(z/math.Sqrt2) }
