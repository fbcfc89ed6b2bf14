package stats

import (
	"encoding/json"
	"math"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"
)

// Power of the not-slower check (GATES.md gate 3).
//
// Model: the per-round log ratios L_i = ln(B_i / A_i) of a higher-is-better
// metric are independent N(mu, sd^2), sd measured by an A/A calibration
// (the same build and settings in both arms). Under a true slowdown by the
// factor s (B takes s times as long), mu = -ln s. A round counts as slower
// when L_i < -ln(bar), which happens with probability
//
//	p(s) = Phi((ln s - ln bar) / sd),
//
// and the check refuses when the count of slower rounds reaches
// k(n) = RefuseAt(n, NotSlowerAlpha), so its power at s is
//
//	power(n, s) = P(Binomial(n, p(s)) >= k(n)).
//
// At s = bar, p = 1/2 and the refusal probability is the test's alpha
// (<= 0.09). The pre-registered rounds are the smallest n in [MinRounds,
// the lever's cap] with power(n, TwiceBar(bar)) >= TargetPower.

// Power targets of GATES.md.
const (
	// TargetPower is the probability with which the not-slower check must
	// refuse a slowdown of twice its bar.
	TargetPower = 0.8
	// MinRounds and MaxRounds bound the pre-registered rounds.
	MinRounds = 9
	MaxRounds = 45
)

// TwiceBar is the slowdown of twice a bar: 1 + 2 (bar - 1) (1.03 for the
// 1.015 bar, 1.5 for 1.25).
func TwiceBar(bar float64) float64 { return 1 + 2*(bar-1) }

// SlowerProb is p(s): the probability that one round counts as slower than
// the bar under a true slowdown factor s at per-round log-ratio sd.
func SlowerProb(sd, bar, slowdown float64) float64 {
	if !(bar > 0) || !(slowdown > 0) || math.IsNaN(sd) || sd < 0 {
		return math.NaN()
	}
	d := math.Log(slowdown) - math.Log(bar)
	if sd == 0 {
		switch {
		case d > 0:
			return 1
		case d < 0:
			return 0
		}
		return 0.5
	}
	return distuv.UnitNormal.CDF(d / sd)
}

// NotSlowerPower is power(n, s): the probability that NotSlower with n
// rounds refuses a true slowdown factor s at log-ratio sd (0 when n rounds
// can never refuse; NaN for invalid input).
func NotSlowerPower(n int, sd, bar, slowdown float64) float64 {
	p := SlowerProb(sd, bar, slowdown)
	if n < 1 || math.IsNaN(p) {
		return math.NaN()
	}
	k := RefuseAt(n, NotSlowerAlpha)
	if k > n {
		return 0
	}
	return binomAtLeast(n, p, k)
}

// binomAtLeast is P(X >= k) for X ~ Binomial(n, p).
func binomAtLeast(n int, p float64, k int) float64 {
	switch {
	case k <= 0:
		return 1
	case k > n:
		return 0
	case p <= 0:
		return 0
	case p >= 1:
		return 1
	}
	return 1 - distuv.Binomial{N: float64(n), P: p}.CDF(float64(k-1))
}

// Rounds is a pre-registration: the rounds a run needs and the power they
// give at twice the bar.
type Rounds struct {
	N     int     `json:"n"`
	Power float64 `json:"power"` // at TwiceBar(bar), with N rounds
	// OK: N reaches TargetPower within [min, max]; else N is max and the
	// gate is underpowered.
	OK bool `json:"ok"`
	// MinDetectable is the smallest slowdown factor N rounds refuse with
	// TargetPower (the report's "minimum detectable slowdown").
	MinDetectable float64 `json:"min_detectable"`
}

// RoundsFor pre-registers the rounds of one metric: the smallest n in
// [minN, maxN] whose power at TwiceBar(bar) is >= target, else maxN (OK
// false). Power is not monotone in n (the refusal count is an integer), so
// every n is tried.
func RoundsFor(sd, bar, target float64, minN, maxN int) Rounds {
	minN = max(minN, 1)
	maxN = max(maxN, minN)
	s := TwiceBar(bar)
	for n := minN; n <= maxN; n++ {
		if pw := NotSlowerPower(n, sd, bar, s); pw >= target {
			return Rounds{N: n, Power: pw, OK: true, MinDetectable: MinDetectableSlowdown(n, sd, bar, target)}
		}
	}
	return Rounds{N: maxN, Power: NotSlowerPower(maxN, sd, bar, s), MinDetectable: MinDetectableSlowdown(maxN, sd, bar, target)}
}

// MinDetectableSlowdown is the smallest slowdown factor s >= bar that n
// rounds refuse with probability >= target at log-ratio sd (+Inf when none
// does: n rounds can never refuse).
func MinDetectableSlowdown(n int, sd, bar, target float64) float64 {
	if k := RefuseAt(n, NotSlowerAlpha); k > n || math.IsNaN(sd) || sd < 0 || !(bar >= 1) {
		return math.Inf(1)
	}
	// p* is the smallest per-round probability whose binomial tail reaches
	// target (bisection on p; the tail grows with p), then s from p(s) = p*.
	k := RefuseAt(n, NotSlowerAlpha)
	lo, hi := 0.0, 1.0
	for range 60 {
		mid := (lo + hi) / 2
		if binomAtLeast(n, mid, k) >= target {
			hi = mid
		} else {
			lo = mid
		}
	}
	if sd == 0 {
		return bar
	}
	return bar * math.Exp(sd*distuv.UnitNormal.Quantile(hi))
}

// LogSD is the sample standard deviation (n-1) of ln(ratios): the noise a
// calibration records (NaN for fewer than 2 valid ratios).
func LogSD(ratios []float64) float64 {
	if len(ratios) < 2 || !validRatios(ratios) {
		return math.NaN()
	}
	var mean float64
	for _, r := range ratios {
		mean += math.Log(r)
	}
	mean /= float64(len(ratios))
	var ss float64
	for _, r := range ratios {
		d := math.Log(r) - mean
		ss += d * d
	}
	return math.Sqrt(ss / float64(len(ratios)-1))
}

// NoisierThan is the one-sided p of "this run's rounds are noisier than
// the calibration": with n rounds of observed log-ratio sd s and a
// calibrated sd sigma, (n-1) s^2 / sigma^2 is chi-square with n-1 degrees
// of freedom under the calibration; p = P(chi2 >= that).
func NoisierThan(observed float64, n int, calibrated float64) float64 {
	if n < 2 || !(calibrated > 0) || math.IsNaN(observed) || observed < 0 {
		return math.NaN()
	}
	df := float64(n - 1)
	x := df * observed * observed / (calibrated * calibrated)
	return 1 - distuv.ChiSquared{K: df}.CDF(x)
}

// ClaimFalsePositiveRate resamples n rounds (with replacement) from A/A
// ratios iters times and returns the fraction on which ImprovementClaim
// fires at bar: how often the claim rule would call a speedup where there
// is none, on this machine and workload. Deterministic for a seed; NaN
// for invalid input.
func ClaimFalsePositiveRate(aa []float64, n int, bar float64, iters int, seed uint64) float64 {
	if len(aa) == 0 || n < 1 || iters < 1 || !validRatios(aa) {
		return math.NaN()
	}
	rng := newRand(seed)
	buf := make([]float64, n)
	fires := 0
	for range iters {
		for i := range buf {
			buf[i] = aa[rng.IntN(len(aa))]
		}
		if ImprovementClaim(slices.Clone(buf), bar).Claim {
			fires++
		}
	}
	return float64(fires) / float64(iters)
}

// MarshalJSON writes a non-finite power or minimum detectable slowdown
// (no count of the rounds can refuse) as null.
func (r Rounds) MarshalJSON() ([]byte, error) {
	num := func(x float64) any {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
		return x
	}
	return json.Marshal(struct {
		N             int  `json:"n"`
		Power         any  `json:"power"`
		OK            bool `json:"ok"`
		MinDetectable any  `json:"min_detectable"`
	}{r.N, num(r.Power), r.OK, num(r.MinDetectable)})
}

// UnmarshalJSON reads what MarshalJSON writes (null as +Inf / NaN).
func (r *Rounds) UnmarshalJSON(b []byte) error {
	var v struct {
		N             int      `json:"n"`
		Power         *float64 `json:"power"`
		OK            bool     `json:"ok"`
		MinDetectable *float64 `json:"min_detectable"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = Rounds{N: v.N, OK: v.OK, Power: math.NaN(), MinDetectable: math.Inf(1)}
	if v.Power != nil {
		r.Power = *v.Power
	}
	if v.MinDetectable != nil {
		r.MinDetectable = *v.MinDetectable
	}
	return nil
}
