package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Synthetic runs of 9 values with ~1% noise: fixed offsets in percent, each set with median 0,
// so median(base) = 100 exactly and median(head) is the planted level exactly.
var (
	noiseBase = []float64{0.8, -0.6, 0.1, -1.0, 0.5, -0.2, 1.0, -0.4, 0.0}
	noiseHead = []float64{-0.3, 0.9, -0.8, 0.2, -0.1, 0.6, -1.0, 0.4, 0.0}
)

func run9(level float64, noisePct []float64) []float64 {
	xs := make([]float64, len(noisePct))
	for i, e := range noisePct {
		xs[i] = level * (1 + e/100)
	}
	return xs
}

func TestCompareMedians_Flags5PctRegressionNot0p3Pct(t *testing.T) {
	base := run9(100, noiseBase)
	tests := []struct {
		name      string
		head      []float64
		threshold float64
		ratio     float64
		verdict   string
	}{
		// Planted 5% regression: ratio 95/100 = 0.95; medians 5% apart with +-1% noise, the
		// bootstrap CI stays well below 1.
		{"5% regression", run9(95, noiseHead), 0.01, 0.95, VerdictSlower},
		{"5% regression, threshold 0", run9(95, noiseHead), 0, 0.95, VerdictSlower},
		// 0.3% change: ratio 1.003. With threshold 0.01 it is "~" by the threshold; with
		// threshold 0 it must still be "~" because the CI of the ratio contains 1.
		{"0.3% change", run9(100.3, noiseHead), 0.01, 1.003, VerdictSame},
		{"0.3% change, threshold 0", run9(100.3, noiseHead), 0, 1.003, VerdictSame},
		{"5% gain", run9(105, noiseHead), 0.01, 1.05, VerdictFaster},
	}
	for _, tt := range tests {
		d := CompareMedians(base, tt.head, tt.threshold)
		if !approx(d.Ratio, tt.ratio, 1e-12) || d.Verdict != tt.verdict || !(d.Lo <= d.Ratio && d.Ratio <= d.Hi) {
			t.Errorf("%s: %+v, want ratio %v verdict %q with Lo <= Ratio <= Hi", tt.name, d, tt.ratio, tt.verdict)
		}
		if tt.verdict == VerdictSame && tt.threshold == 0 && !(d.Lo <= 1 && 1 <= d.Hi) {
			t.Errorf("%s: CI (%v, %v) should contain 1", tt.name, d.Lo, d.Hi)
		}
		if tt.verdict != VerdictSame && d.P >= 0.05 {
			t.Errorf("%s: Mann-Whitney p = %v, want < 0.05", tt.name, d.P)
		}
	}
	// Deterministic: the bootstrap seed is fixed.
	d1, d2 := CompareMedians(base, run9(100.3, noiseHead), 0), CompareMedians(base, run9(100.3, noiseHead), 0)
	if d1 != d2 {
		t.Errorf("not deterministic: %+v vs %+v", d1, d2)
	}
}

func TestCompareMedians_Edges(t *testing.T) {
	// n=1 each: the bootstrap CI collapses to the ratio itself, so only the threshold can say "~".
	if d := CompareMedians([]float64{100}, []float64{90}, 0.01); d.Verdict != VerdictSlower || d.Ratio != 0.9 || d.P != 1 {
		t.Errorf("n=1: %+v", d)
	}
	// All ties, same value: ratio 1, CI [1, 1], p = 1.
	if d := CompareMedians(make9(50), make9(50), 0); d.Verdict != VerdictSame || d.Ratio != 1 || d.Lo != 1 || d.Hi != 1 || d.P != 1 {
		t.Errorf("all ties: %+v", d)
	}
	for _, c := range []struct {
		name       string
		base, head []float64
		th         float64
	}{
		{"empty base", nil, make9(1), 0.01},
		{"empty head", make9(1), nil, 0.01},
		{"zero value", []float64{0, 1}, make9(1), 0.01},
		{"NaN threshold", make9(1), make9(1), math.NaN()},
	} {
		if d := CompareMedians(c.base, c.head, c.th); d.Verdict != VerdictInvalid || !math.IsNaN(d.Ratio) {
			t.Errorf("%s: %+v, want invalid", c.name, d)
		}
	}
}

func TestMannWhitneyU_ExactNull(t *testing.T) {
	tests := []struct {
		name    string
		x, y    []float64
		u, pTwo float64
	}{
		// 3 vs 3 separated: U = 9, one ordering of C(6,3) = 20: two-sided 2/20.
		{"3v3 y above", []float64{1, 2, 3}, []float64{4, 5, 6}, 9, 0.1},
		{"3v3 y below", []float64{4, 5, 6}, []float64{1, 2, 3}, 0, 0.1},
		// 9 vs 9 separated: 2/C(18,9) = 2/48620.
		{"9v9 separated", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9}, []float64{11, 12, 13, 14, 15, 16, 17, 18, 19}, 81, 2.0 / 48620},
		// 2 vs 2 interleaved x<y<x<y: U = pairs (x,y) with y > x: y=2 beats x=1, y=4 beats both: 3.
		// Null over C(4,2)=6 orderings: U = 0,1,2,2,3,4 -> P(U >= 3) = 2/6, P(U <= 3) = 5/6.
		{"2v2 interleaved", []float64{1, 3}, []float64{2, 4}, 3, 4.0 / 6},
		{"1v1", []float64{1}, []float64{2}, 1, 1},
		// All ties: mid-ranks give U = mn/2 = 4.5; read at ceil 5 / floor 4, both tails >= 1/2.
		{"all ties", []float64{1, 1, 1}, []float64{1, 1, 1}, 4.5, 1},
		{"empty", nil, []float64{1}, nan, nan},
	}
	for _, tt := range tests {
		u, p := MannWhitneyU(tt.x, tt.y)
		if !approx(u, tt.u, 0) || !approx(p, tt.pTwo, 1e-14) {
			t.Errorf("%s: MannWhitneyU = (%v, %.17g), want (%v, %.17g)", tt.name, u, p, tt.u, tt.pTwo)
		}
	}
	// Normal approximation above 25 per side: 30 vs 30 separated is far in the tail.
	x, y := make([]float64, 30), make([]float64, 30)
	for i := range x {
		x[i], y[i] = float64(i), float64(100+i)
	}
	if u, p := MannWhitneyU(x, y); u != 900 || p > 1e-9 {
		t.Errorf("30v30 separated: (%v, %v)", u, p)
	}
}

// The counts of rankSumCounts are the C(m+n, n) orderings, symmetric about mn/2.
func TestRankSumCounts_TotalAndSymmetry(t *testing.T) {
	for m := 1; m <= 8; m++ {
		for n := 1; n <= 8; n++ {
			c := rankSumCounts(m, n)
			var total float64
			for u := range c {
				total += c[u]
				if c[u] != c[len(c)-1-u] {
					t.Fatalf("m=%d n=%d: not symmetric at %d", m, n, u)
				}
			}
			if want := float64(binom(m+n, n)); total != want {
				t.Fatalf("m=%d n=%d: total %v, want %v", m, n, total, want)
			}
		}
	}
}

func binom(n, k int) int {
	r := 1
	for i := 1; i <= k; i++ {
		r = r * (n - k + i) / i
	}
	return r
}

// The false-positive rate of CompareRatios under the null (both runs'
// ratios from one distribution), measured on 1,000 simulated pairs at
// n = 9 per side: at most its alpha. abtest compare's help prints it.
func TestCompareRatios_FalsePositiveRateUnderTheNullAtMostAlpha(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	const pairs, n = 1000, 9
	fires := 0
	for range pairs {
		old, cur := make([]float64, n), make([]float64, n)
		for i := range old {
			old[i] = math.Exp(0.01 * rng.NormFloat64())
			cur[i] = math.Exp(0.01 * rng.NormFloat64())
		}
		if CompareRatios(old, cur, 0).Verdict != VerdictSame {
			fires++
		}
	}
	rate := float64(fires) / pairs
	if rate > CompareAlpha || math.Abs(rate-CompareNullRate) > 0.015 {
		t.Fatalf("false-positive rate %.3f over %d pairs at n=%d; alpha %v, documented %.3f", rate, pairs, n, CompareAlpha, CompareNullRate)
	}
}

func TestCompareRatios_ShiftedRatiosAreSlowerAndBeyondTheThreshold(t *testing.T) {
	old := []float64{1.10, 1.11, 1.09, 1.10, 1.12, 1.08, 1.10, 1.11, 1.09}
	cur := make([]float64, len(old))
	for i, r := range old {
		cur[i] = r * 0.95
	}
	c := CompareRatios(old, cur, 0.02)
	if c.Verdict != VerdictSlower || !c.Beyond || math.Abs(c.Change-0.95) > 1e-9 || c.P > 0.001 {
		t.Fatalf("%+v", c)
	}
	if c := CompareRatios(old, cur, 0.06); c.Beyond {
		t.Errorf("a 5%% change beyond a 6%% threshold: %+v", c)
	}
	if g := GeoMean([]float64{0.5, 2}); math.Abs(g-1) > 1e-12 {
		t.Errorf("geomean %v", g)
	}
}
