package stats

import (
	"fmt"
	"math"

	mstats "github.com/montanaflynn/stats"
	"gonum.org/v1/gonum/stat/distuv"
)

// Pre-registered levels of gate 3 (GATES.md).
const (
	// NotSlowerAlpha is the one-sided level of the not-slower refusal: for n = 9 the smallest
	// count with P(X >= k) <= 0.09 is k = 7, P = 46/512 = 0.08984375.
	NotSlowerAlpha = 0.09
	// ClaimAlpha is the one-sided level of the improvement claim: for n = 9 it needs >= 8 wins,
	// P(X >= 8) = 10/512 = 0.01953125 (7 wins give 46/512 > 0.05).
	ClaimAlpha = 0.05
)

// SignTest returns the exact one-sided sign-test p-value P(X >= wins) for X ~ Binomial(n, 1/2).
// wins <= 0 gives 1, wins > n gives 0; n < 0 gives NaN.
func SignTest(wins, n int) (pOneSided float64) {
	switch {
	case n < 0:
		return math.NaN()
	case wins <= 0:
		return 1
	case wins > n:
		return 0
	}
	// With p = 1/2 the distribution is symmetric: P(X >= w) = P(X <= n-w). Using the CDF of the
	// mirror avoids the cancellation of 1 - CDF(w-1) for small p-values.
	return distuv.Binomial{N: float64(n), P: 0.5}.CDF(float64(n - wins))
}

// RefuseAt returns the smallest count k in 0..n with SignTest(k, n) <= alpha, or n+1 when no
// count of n rounds is that unlikely (the test is then underpowered and can never fire).
// RefuseAt(9, NotSlowerAlpha) = 7 and RefuseAt(9, ClaimAlpha) = 8.
func RefuseAt(n int, alpha float64) int {
	for k := 0; k <= n; k++ {
		if SignTest(k, n) <= alpha {
			return k
		}
	}
	return n + 1
}

// NotSlowerResult is the verdict of the not-slower check.
type NotSlowerResult struct {
	N        int     `json:"n"`
	Bar      float64 `json:"bar"`       // slowdown factor, e.g. 1.25 or 1.015
	Slower   int     `json:"slower"`    // rounds with r_i < 1/Bar
	RefuseAt int     `json:"refuse_at"` // refuse when Slower >= RefuseAt (n+1: cannot refuse)
	P        float64 `json:"p"`         // SignTest(Slower, N): P(X >= Slower) under no slowdown
	Pass     bool    `json:"pass"`
	Reason   string  `json:"reason"`
}

// NotSlower applies the seed's not-slower rule to paired ratios r_i = B/A of a higher-is-better
// metric: a round counts as slower when B is slower than A by more than the bar factor
// (r_i < 1/bar; bar >= 1, e.g. 1.25 for kernel timings, 1.015 for whole prefill). The check
// refuses when the count reaches RefuseAt(n, NotSlowerAlpha), 7 of 9.
//
// It fails closed: invalid input, or too few rounds for the test to ever refuse (n <= 3), is
// not a pass.
func NotSlower(ratios []float64, bar float64) NotSlowerResult {
	n := len(ratios)
	res := NotSlowerResult{N: n, Bar: bar, RefuseAt: RefuseAt(n, NotSlowerAlpha)}
	if !(bar >= 1) || math.IsInf(bar, 1) {
		res.Reason = fmt.Sprintf("invalid bar %v: want a finite slowdown factor >= 1", bar)
		return res
	}
	if !validRatios(ratios) {
		res.Reason = "invalid ratios: want a non-empty sample of finite positive values"
		return res
	}
	for _, r := range ratios {
		if r < 1/bar {
			res.Slower++
		}
	}
	res.P = SignTest(res.Slower, n)
	if res.RefuseAt > n {
		res.Reason = fmt.Sprintf("underpowered: with n=%d no count reaches one-sided p <= %v; not a pass", n, NotSlowerAlpha)
		return res
	}
	res.Pass = res.Slower < res.RefuseAt
	verdict := "pass"
	if !res.Pass {
		verdict = "refuse"
	}
	res.Reason = fmt.Sprintf("%s: %d of %d rounds slower than 1/%v (refuse at %d, one-sided p = %.6g)",
		verdict, res.Slower, n, bar, res.RefuseAt, res.P)
	return res
}

// ClaimResult is the verdict of the improvement claim.
type ClaimResult struct {
	N          int     `json:"n"`
	Bar        float64 `json:"bar"` // required fractional gain, e.g. 0.015 for +1.5%
	Median     float64 `json:"median"`
	Wins       int     `json:"wins"`        // rounds with r_i > 1
	Ties       int     `json:"ties"`        // rounds with r_i == 1, counted as not-wins
	WinsNeeded int     `json:"wins_needed"` // RefuseAt(n, ClaimAlpha); n+1 when unreachable
	P          float64 `json:"p"`           // SignTest(Wins, N)
	// SEP is min(B) > max(A); only ClaimFromArms sets it (nil: the arms were not given).
	SEP    *bool  `json:"sep,omitempty"`
	Claim  bool   `json:"claim"`
	Reason string `json:"reason"`
}

// ImprovementClaim claims a speedup of a higher-is-better metric from paired ratios r_i = B/A
// only if the median ratio is >= 1+bar (bar is a fraction, 0.015 for +1.5%) AND the exact
// one-sided sign-test p for "B faster" is <= ClaimAlpha. A win is r_i > 1; a tie r_i == 1 is a
// not-win (conservative: ties are never split in the claimant's favour), and the reason says so.
func ImprovementClaim(ratios []float64, bar float64) ClaimResult {
	n := len(ratios)
	res := ClaimResult{N: n, Bar: bar, WinsNeeded: RefuseAt(n, ClaimAlpha)}
	if !(bar >= 0) || math.IsInf(bar, 1) {
		res.Reason = fmt.Sprintf("invalid bar %v: want a finite fractional gain >= 0", bar)
		return res
	}
	if !validRatios(ratios) {
		res.Reason = "invalid ratios: want a non-empty sample of finite positive values"
		return res
	}
	for _, r := range ratios {
		switch {
		case r > 1:
			res.Wins++
		case r == 1:
			res.Ties++
		}
	}
	res.Median, _ = mstats.Median(ratios)
	res.P = SignTest(res.Wins, n)
	medianOK := res.Median >= 1+bar
	signOK := res.P <= ClaimAlpha
	res.Claim = medianOK && signOK
	var why string
	switch {
	case res.Claim:
		why = "claim"
	case !medianOK && !signOK:
		why = "no claim: median below bar and sign test not significant"
	case !medianOK:
		why = "no claim: median below bar"
	default:
		why = "no claim: sign test not significant"
	}
	res.Reason = fmt.Sprintf("%s: median %.6g vs bar %.6g; %d of %d wins (need %d), one-sided p = %.6g <= %v is %t",
		why, res.Median, 1+bar, res.Wins, n, res.WinsNeeded, res.P, ClaimAlpha, signOK)
	if res.Ties > 0 {
		res.Reason += fmt.Sprintf("; %d tie(s) r=1 counted as not-wins", res.Ties)
	}
	return res
}

// ClaimFromArms computes the paired ratios of two arms, the improvement claim on them and SEP.
func ClaimFromArms(a, b []float64, bar float64) (ClaimResult, error) {
	r, err := Ratios(a, b)
	if err != nil {
		return ClaimResult{}, err
	}
	res := ImprovementClaim(r, bar)
	sep := Separated(a, b)
	res.SEP = &sep
	return res, nil
}
