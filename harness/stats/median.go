package stats

import (
	"math"
	"math/rand/v2"
	"slices"

	mstats "github.com/montanaflynn/stats"
	"gonum.org/v1/gonum/stat/distuv"
)

// coverageSlack absorbs the rounding of the binomial CDF when a requested confidence equals an
// achievable coverage exactly (e.g. conf = 0.9609375 for n = 9).
const coverageSlack = 1e-12

// MedianCI returns a distribution-free confidence interval for the median of xs by order
// statistics: the pair (x(k), x(n+1-k)) covers the median with probability
// 1 - 2*P(X <= k-1), X ~ Binomial(n, 1/2), whatever the distribution (continuous). It picks the
// largest k, i.e. the narrowest symmetric pair, whose coverage is >= conf, and returns the
// coverage achieved. For n = 9, conf = 0.95: k = 2, (x(2), x(8)), 1 - 2*10/512 = 0.9609375.
//
// When even (x(1), x(n)) falls short of conf (n <= 5 for 95%), it returns that widest pair with
// its smaller achieved coverage; the caller must print achieved. Empty or non-finite input, or
// conf outside (0, 1), gives NaN.
func MedianCI(xs []float64, conf float64) (lo, hi float64, achieved float64) {
	n := len(xs)
	if n == 0 || !(conf > 0 && conf < 1) || !allFinite(xs) {
		return math.NaN(), math.NaN(), math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	b := distuv.Binomial{N: float64(n), P: 0.5}
	coverage := func(k int) float64 { return 1 - 2*b.CDF(float64(k-1)) }
	k := 1
	for next := 2; next <= (n+1)/2; next++ {
		if coverage(next) < conf-coverageSlack {
			break
		}
		k = next
	}
	return s[k-1], s[n-k], coverage(k)
}

// BootstrapMedianCI returns a percentile-bootstrap confidence interval of the median of paired
// ratios: each of iters resamples draws n ratios (i.e. n rounds, pairs kept whole) with
// replacement, and the interval is the (1-conf)/2 and (1+conf)/2 percentiles of the resampled
// medians. The RNG is math/rand/v2 PCG seeded from seed, so the result is a pure function of
// its arguments. Empty or non-finite input, iters < 1 or conf outside (0, 1) gives NaN.
func BootstrapMedianCI(ratios []float64, iters int, conf float64, seed uint64) (lo, hi float64) {
	if len(ratios) == 0 || iters < 1 || !(conf > 0 && conf < 1) || !allFinite(ratios) {
		return math.NaN(), math.NaN()
	}
	rng := newRand(seed)
	meds := make([]float64, iters)
	buf := make([]float64, len(ratios))
	for i := range meds {
		meds[i] = resampleMedian(rng, ratios, buf)
	}
	return percentileInterval(meds, conf)
}

// newRand returns a PCG generator for seed; the second PCG word is a fixed odd constant so that
// seed 0 is as good a seed as any other.
func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
}

// resampleMedian fills buf with len(xs) draws from xs with replacement and returns their median.
func resampleMedian(rng *rand.Rand, xs, buf []float64) float64 {
	for j := range buf {
		buf[j] = xs[rng.IntN(len(xs))]
	}
	m, _ := mstats.Median(buf)
	return m
}

// percentileInterval returns the (1-conf)/2 and (1+conf)/2 percentiles of xs (len > 0).
//
// Percentile rule: montanaflynn/stats PercentileNearestRank, the nearest-rank method: the p-th
// percentile of n sorted values is x(ceil(n*p/100)) (x(1) when that rank is 0), always one of
// the values, never an interpolation. For 2000 resamples at 95%: ranks 50 and 1950.
// (We avoid mstats.Percentile: it averages x(i) and x(i+1) when n*p/100 is not whole, which is
// neither nearest-rank nor linear interpolation.)
func percentileInterval(xs []float64, conf float64) (lo, hi float64) {
	// Round away the binary noise of (1-conf): (1-0.95)/2*100 is 2.5000000000000022 in float64,
	// which would push the nearest rank from 50 to 51 of 2000.
	tail := math.Round((1-conf)/2*100*1e9) / 1e9
	lo, _ = mstats.PercentileNearestRank(xs, tail)
	hi, _ = mstats.PercentileNearestRank(xs, 100-tail)
	return lo, hi
}

func allFinite(xs []float64) bool {
	for _, x := range xs {
		if !finite(x) {
			return false
		}
	}
	return true
}
