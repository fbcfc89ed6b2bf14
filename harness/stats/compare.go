package stats

import (
	"math"

	mstats "github.com/montanaflynn/stats"
)

// Verdicts of CompareMedians.
const (
	VerdictSame    = "~" // no significant change
	VerdictFaster  = "faster"
	VerdictSlower  = "slower"
	VerdictInvalid = "?" // empty or invalid input, or invalid threshold
)

// Bootstrap settings of CompareMedians: fixed so that `abtest compare` is reproducible.
const (
	compareIters = 10000
	compareConf  = 0.95
	compareSeed  = 0x6d696e666572 // "minfer"
)

// Delta is one metric's change from a base run to a head run.
type Delta struct {
	Ratio   float64 `json:"ratio"`   // median(head) / median(base)
	Lo      float64 `json:"lo"`      // 95% bootstrap CI of Ratio
	Hi      float64 `json:"hi"`      //
	P       float64 `json:"p"`       // two-sided Mann-Whitney U p-value, head vs base
	Verdict string  `json:"verdict"` // "~", "faster", "slower" or "?"
}

// CompareMedians compares two independent samples of one higher-is-better metric (tok/s), the
// base and head runs of `abtest compare`. Ratio is median(head)/median(base); [Lo, Hi] is its 95%
// percentile-bootstrap CI, resampling base and head independently 10000 times with a fixed seed
// (the runs are not paired, so no pairing is assumed). The verdict is "~" when the CI contains 1
// or |Ratio-1| < threshold (a fraction, e.g. 0.01), else "faster" (Ratio > 1) or "slower".
// P, the two-sided Mann-Whitney U p-value, is reported but does not decide. Empty or non-positive
// samples or a threshold that is not finite and >= 0 give NaN fields and Verdict "?".
func CompareMedians(base, head []float64, threshold float64) Delta {
	if !validRatios(base) || !validRatios(head) || !(threshold >= 0) || math.IsInf(threshold, 1) {
		nan := math.NaN()
		return Delta{Ratio: nan, Lo: nan, Hi: nan, P: nan, Verdict: VerdictInvalid}
	}
	mb, _ := mstats.Median(base)
	mh, _ := mstats.Median(head)
	d := Delta{Ratio: mh / mb}

	rng := newRand(compareSeed)
	bufB := make([]float64, len(base))
	bufH := make([]float64, len(head))
	ratios := make([]float64, compareIters)
	for i := range ratios {
		ratios[i] = resampleMedian(rng, head, bufH) / resampleMedian(rng, base, bufB)
	}
	d.Lo, d.Hi = percentileInterval(ratios, compareConf)
	_, d.P = MannWhitneyU(base, head)

	switch {
	case (d.Lo <= 1 && 1 <= d.Hi) || math.Abs(d.Ratio-1) < threshold:
		d.Verdict = VerdictSame
	case d.Ratio > 1:
		d.Verdict = VerdictFaster
	default:
		d.Verdict = VerdictSlower
	}
	return d
}

// MannWhitneyU runs the two-sided Mann-Whitney U (Wilcoxon rank-sum) test of y against x. u is
// the number of pairs with y_j > x_i, ties counting 1/2 (u = mn: every y above every x).
// For both sizes <= 25 the null distribution is exact, counted by dynamic programming; it
// assumes no ties (with ties u may be a half-integer and is read at ceil/floor). Larger samples
// use the normal approximation with continuity and tie corrections. Empty or non-finite input
// gives NaN.
func MannWhitneyU(x, y []float64) (u, pTwoSided float64) {
	m, n := len(x), len(y)
	if m == 0 || n == 0 || !allFinite(x) || !allFinite(y) {
		return math.NaN(), math.NaN()
	}
	all := append(append(make([]float64, 0, m+n), x...), y...)
	ranks, ties := midRanks(all)
	var ry float64
	for _, r := range ranks[m:] {
		ry += r
	}
	u = ry - float64(n*(n+1))/2
	var upper, lower float64
	if m <= exactMaxN && n <= exactMaxN {
		counts := rankSumCounts(m, n)
		var total float64
		for _, c := range counts {
			total += c
		}
		upper = tailSum(counts, int(math.Ceil(u)), len(counts)-1) / total
		lower = tailSum(counts, 0, int(math.Floor(u))) / total
	} else {
		fm, fn, fN := float64(m), float64(n), float64(m+n)
		mu := fm * fn / 2
		sd := math.Sqrt(fm * fn / 12 * ((fN + 1) - ties/(fN*(fN-1))))
		upper = normalUpper((u - mu - 0.5) / sd)
		lower = 1 - normalUpper((u-mu+0.5)/sd)
	}
	return u, math.Min(1, 2*math.Min(upper, lower))
}

// rankSumCounts returns c with c[u] = the number of the C(m+n, n) orderings of m x's and n y's
// in which exactly u (x, y) pairs have y above x. Recurrence on the largest element: if it is a
// y it is above all m x's, so f(m, n, u) = f(m, n-1, u-m) + f(m-1, n, u).
func rankSumCounts(m, n int) []float64 {
	// f[i][j] is the distribution for i x's and j y's, of length i*j+1.
	f := make([][][]float64, m+1)
	for i := range f {
		f[i] = make([][]float64, n+1)
		for j := range f[i] {
			c := make([]float64, i*j+1)
			switch {
			case i == 0 || j == 0:
				c[0] = 1
			default:
				for u, v := range f[i-1][j] { // largest is an x: adds nothing
					c[u] += v
				}
				for u, v := range f[i][j-1] { // largest is a y: above all i x's
					c[u+i] += v
				}
			}
			f[i][j] = c
		}
	}
	return f[m][n]
}

// CompareAlpha is the level of the unpaired test of CompareRatios: a
// change is called only when the two-sided Mann-Whitney p is <= it.
// CompareNullRate is the false-positive rate measured under the null on
// 1,000 simulated pairs of 9 rounds a side (the exact test at n = 9 cannot
// reach 5% exactly); a test keeps it honest.
const (
	CompareAlpha    = 0.05
	CompareNullRate = 0.035
)

// RatioChange is one metric of two runs, each a set of per-round B/A
// ratios (drift cancels inside each run, which interleaved its arms).
type RatioChange struct {
	NOld, NNew int     `json:"-"`
	Old, New   float64 `json:"-"` // median ratio of each run
	// Change is New/Old: how much B gained (> 1) or lost against A from
	// the old run to the new one.
	Change  float64 `json:"change"`
	P       float64 `json:"p"` // two-sided Mann-Whitney U, old vs new ratios
	Verdict string  `json:"verdict"`
	// Beyond: a significant change beyond the threshold (in either
	// direction; Verdict says which).
	Beyond bool `json:"beyond"`
}

// CompareRatios compares two independent runs' per-round ratios of one
// higher-is-better metric, as benchstat compares two samples: an unpaired
// two-sided Mann-Whitney U test at CompareAlpha (no pairing of rounds
// across runs, no direction chosen after seeing the data); "~" when it is
// not significant, else "faster" or "slower" by the medians. A significant
// change smaller than threshold (a fraction) is still reported with its
// verdict but is not Beyond. Invalid input gives "?" and NaN.
func CompareRatios(old, new []float64, threshold float64) RatioChange {
	c := RatioChange{NOld: len(old), NNew: len(new)}
	if !validRatios(old) || !validRatios(new) || !(threshold >= 0) || math.IsInf(threshold, 1) {
		nan := math.NaN()
		c.Old, c.New, c.Change, c.P, c.Verdict = nan, nan, nan, nan, VerdictInvalid
		return c
	}
	c.Old, _ = mstats.Median(old)
	c.New, _ = mstats.Median(new)
	c.Change = c.New / c.Old
	_, c.P = MannWhitneyU(old, new)
	switch {
	case !(c.P <= CompareAlpha):
		c.Verdict = VerdictSame
	case c.Change > 1:
		c.Verdict = VerdictFaster
	default:
		c.Verdict = VerdictSlower
	}
	c.Beyond = c.Verdict != VerdictSame && math.Abs(c.Change-1) >= threshold
	return c
}

// GeoMean is the geometric mean of positive values (NaN for none or a
// non-positive one): benchstat's summary row.
func GeoMean(xs []float64) float64 {
	if !validRatios(xs) {
		return math.NaN()
	}
	var s float64
	for _, x := range xs {
		s += math.Log(x)
	}
	return math.Exp(s / float64(len(xs)))
}
