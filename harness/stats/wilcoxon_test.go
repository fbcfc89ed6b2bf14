package stats

import (
	"math"
	"testing"
)

func TestWilcoxonSignedRank_ExactNull(t *testing.T) {
	tests := []struct {
		name          string
		diffs         []float64
		w, pOne, pTwo float64
	}{
		// n=9 all positive: W+ = 45, only the all-positive pattern reaches it: 1/512.
		{"n=9 all positive", []float64{.01, .02, .03, .04, .05, .06, .07, .08, .09}, 45, 1.0 / 512, 2.0 / 512},
		// n=9 all negative: W+ = 0, P(W+ >= 0) = 1, P(W+ <= 0) = 1/512.
		{"n=9 all negative", []float64{-.01, -.02, -.03, -.04, -.05, -.06, -.07, -.08, -.09}, 0, 1, 2.0 / 512},
		// n=3 {1,2,3}: W+ = 6, 1/8.
		{"n=3 all positive", []float64{1, 2, 3}, 6, 1.0 / 8, 2.0 / 8},
		// n=5, ranks 1..5, negative rank 2: W+ = 1+3+4+5 = 13. Subsets of {1..5} (sum 15) with
		// sum >= 13 are complements of sums <= 2: {}, {1}, {2} -> 3/32. Lower tail:
		// P(W+ <= 13) = 1 - P(W+ >= 14) = 1 - 2/32 = 30/32; two-sided 2*3/32 = 6/32.
		{"n=5 one negative", []float64{1, -2, 3, 4, 5}, 13, 3.0 / 32, 6.0 / 32},
		// n=10, the table's one-sided 5% critical value (T = 10): rank 10 negative gives
		// W+ = 45 with P = 43/1024 = 0.0420 <= 0.05; ranks 1 and 10 negative give W+ = 44 with
		// 54/1024 = 0.0527 > 0.05 (counts by enumeration of the 1024 patterns).
		{"n=10 W+=45", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, -10}, 45, 43.0 / 1024, 86.0 / 1024},
		{"n=10 W+=44", []float64{-1, 2, 3, 4, 5, 6, 7, 8, 9, -10}, 44, 54.0 / 1024, 108.0 / 1024},
		// Zeros are dropped: n=3 left.
		{"zeros dropped", []float64{0, 1, 0, 2, 3}, 6, 1.0 / 8, 2.0 / 8},
		// Ties: |d| = 1, 1, 2 -> ranks 1.5, 1.5, 3; W+ = 1.5 + 1.5 = 3 from {+1, +1, -2}.
		// No-ties null over {1,2,3}: sums 0,1,2,3,3,4,5,6 -> P(>=3) = 5/8, P(<=3) = 5/8.
		{"ties get mid-ranks", []float64{1, 1, -2}, 3, 5.0 / 8, 1},
		// n=1: W+ = 1, P = 1/2, two-sided 1.
		{"n=1", []float64{0.5}, 1, 0.5, 1},
		{"all zeros", []float64{0, 0, 0}, 0, 1, 1},
		{"n=0", nil, nan, nan, nan},
		{"NaN", []float64{1, math.NaN()}, nan, nan, nan},
	}
	for _, tt := range tests {
		w, p1, p2 := WilcoxonSignedRank(tt.diffs)
		if !approx(w, tt.w, 0) || !approx(p1, tt.pOne, 1e-15) || !approx(p2, tt.pTwo, 1e-15) {
			t.Errorf("%s: got (%v, %.17g, %.17g), want (%v, %.17g, %.17g)",
				tt.name, w, p1, p2, tt.w, tt.pOne, tt.pTwo)
		}
	}
}

// The dynamic program must match brute-force enumeration of all 2^n sign patterns.
func TestSignedRankCounts_MatchBruteForce(t *testing.T) {
	for n := 1; n <= 12; n++ {
		c := signedRankCounts(n)
		total := math.Ldexp(1, n)
		for w := 0; w <= n*(n+1)/2; w++ {
			if got, want := tailSum(c, w, len(c)-1)/total, bruteUpper(n, float64(w)); got != want {
				t.Fatalf("n=%d w=%d: %v, want %v", n, w, got, want)
			}
		}
	}
}

// bruteUpper counts the sign patterns of ranks 1..n with W+ >= w, over 2^n.
func bruteUpper(n int, w float64) float64 {
	count := 0
	for mask := 0; mask < 1<<n; mask++ {
		s := 0
		for i := 0; i < n; i++ {
			if mask>>i&1 == 1 {
				s += i + 1
			}
		}
		if float64(s) >= w {
			count++
		}
	}
	return float64(count) / float64(int(1)<<n)
}

// Above n = 25 the normal approximation: n = 30, ranks 25..30 negative, W+ = 24*25/2 = 300;
// mu = 30*31/4 = 232.5, var = 30*31*61/24 = 2363.75, sd = 48.6184;
// z = (300 - 232.5 - 0.5)/48.6184 = 1.37808, P(Z >= z) = 0.0840895.
func TestWilcoxonSignedRank_NormalApproxAbove25(t *testing.T) {
	d := make([]float64, 30)
	for i := range d {
		d[i] = float64(i + 1)
		if i >= 24 {
			d[i] = -d[i]
		}
	}
	w, p1, p2 := WilcoxonSignedRank(d)
	checkClose(t, "w", w, 300, 0)
	checkClose(t, "pOneSided", p1, 0.08408948986167625, 1e-12)
	checkClose(t, "pTwoSided", p2, 2*0.08408948986167625, 1e-12)
	// At n = 25 (exact) the approximation is already close: W+ = 262 gives exact 0.003065,
	// normal 0.003863.
	e := make([]float64, 25)
	for i := range e {
		e[i] = float64(i + 1)
	}
	e[24], e[23], e[13] = -25, -24, -14 // W+ = 325 - 63 = 262
	_, exact, _ := WilcoxonSignedRank(e)
	mu, sd := 25*26/4.0, math.Sqrt(25*26*51/24.0)
	if approxP := normalUpper((262 - mu - 0.5) / sd); math.Abs(exact-approxP) > 0.001 {
		t.Errorf("n=25: exact %v vs normal %v differ by more than 0.001", exact, approxP)
	}
}

func TestMidRanks_AverageTies(t *testing.T) {
	// 3, 1, 3, 2, 3: sorted 1, 2, 3, 3, 3 -> ranks 1, 2, then (3+4+5)/3 = 4 for the 3s;
	// tie term 3^3 - 3 = 24.
	r, ties := midRanks([]float64{3, 1, 3, 2, 3})
	want := []float64{4, 1, 4, 2, 4}
	for i := range want {
		if r[i] != want[i] {
			t.Fatalf("ranks = %v, want %v", r, want)
		}
	}
	if ties != 24 {
		t.Errorf("tie term = %v, want 24", ties)
	}
}
