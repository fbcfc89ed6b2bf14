package stats

import (
	"math"
	"math/big"
	"strings"
	"testing"
)

// Binomial(9, 1/2) counts C(9,k), k = 0..9: 1 9 36 84 126 126 84 36 9 1 (sum 512).
// P(X >= 9) = 1/512, P(X >= 8) = (9+1)/512 = 10/512, P(X >= 7) = (36+9+1)/512 = 46/512,
// P(X >= 6) = (84+46)/512 = 130/512.
func TestSignTest_PinnedN9(t *testing.T) {
	tests := []struct {
		wins, n int
		want    float64
	}{
		{9, 9, 1.0 / 512},
		{8, 9, 10.0 / 512},  // 0.01953125: the claim's 8 of 9
		{7, 9, 46.0 / 512},  // 0.08984375: the not-slower refusal's 7 of 9
		{6, 9, 130.0 / 512}, // 0.25390625
		{0, 9, 1},
		{-1, 9, 1},
		{10, 9, 0},
		{0, 0, 1},
		{1, 1, 0.5},
		{1, 0, 0},
		{0, -1, nan},
	}
	for _, tt := range tests {
		checkClose(t, "SignTest", SignTest(tt.wins, tt.n), tt.want, 1e-13)
	}
}

// SignTest must agree with the exact rational sum_{k>=w} C(n,k) / 2^n for every w and n <= 60,
// including the far tail (no cancellation).
func TestSignTest_MatchesExactBinomialSums(t *testing.T) {
	for n := 1; n <= 60; n++ {
		for w := 0; w <= n; w++ {
			num := new(big.Int)
			for k := w; k <= n; k++ {
				num.Add(num, new(big.Int).Binomial(int64(n), int64(k)))
			}
			want, _ := new(big.Rat).SetFrac(num, new(big.Int).Lsh(big.NewInt(1), uint(n))).Float64()
			if got := SignTest(w, n); math.Abs(got-want) > 1e-12*want {
				t.Fatalf("SignTest(%d, %d) = %.17g, want %.17g", w, n, got, want)
			}
		}
	}
}

// Smallest k with P(X >= k) <= alpha:
// n=3: P(X>=3) = 1/8 = 0.125 > 0.09: none, 4. n=4: 1/16 = 0.0625 -> 4.
// n=5: P(X>=5) = 1/32, P(X>=4) = 6/32 = 0.1875 -> 5.
// n=9: 46/512 <= 0.09 < 130/512 -> 7; 10/512 <= 0.05 < 46/512 -> 8.
// n=10: P(X>=8) = (45+10+1)/1024 = 0.0547, P(X>=7) = 176/1024 = 0.172 -> 8 at 0.09;
// P(X>=9) = 11/1024 = 0.0107 -> 9 at 0.05.
func TestRefuseAt_SmallestCountAtAlpha(t *testing.T) {
	tests := []struct {
		n     int
		alpha float64
		want  int
	}{
		{9, NotSlowerAlpha, 7},
		{9, ClaimAlpha, 8},
		{10, NotSlowerAlpha, 8},
		{10, ClaimAlpha, 9},
		{5, NotSlowerAlpha, 5},
		{4, NotSlowerAlpha, 4},
		{4, ClaimAlpha, 5}, // 1/16 > 0.05: cannot claim with 4 rounds
		{3, NotSlowerAlpha, 4},
		{1, NotSlowerAlpha, 2},
		{0, NotSlowerAlpha, 1},
	}
	for _, tt := range tests {
		if got := RefuseAt(tt.n, tt.alpha); got != tt.want {
			t.Errorf("RefuseAt(%d, %v) = %d, want %d", tt.n, tt.alpha, got, tt.want)
		}
	}
}

func TestNotSlower_RefusesAt7Of9(t *testing.T) {
	// Bar 1.25: a round is slower when r < 1/1.25 = 0.8 (0.8 itself is not slower).
	// Bar 1.015: slower when r < 1/1.015 = 0.98522...
	tests := []struct {
		name       string
		ratios     []float64
		bar        float64
		wantSlower int
		wantP      float64
		wantPass   bool
		wantReason string
	}{
		{"6 of 9 slower passes", []float64{0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 1, 1, 1}, 1.25, 6, 130.0 / 512, true, "pass"},
		{"7 of 9 slower refuses", []float64{0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 1, 1}, 1.25, 7, 46.0 / 512, false, "refuse"},
		{"9 of 9 slower refuses", []float64{0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7}, 1.25, 9, 1.0 / 512, false, "refuse"},
		{"exactly 1/bar is not slower", []float64{0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8}, 1.25, 0, 1, true, "pass"},
		{"prefill bar 1.015", []float64{0.985, 0.985, 0.985, 0.985, 0.985, 0.985, 0.985, 0.986, 0.986}, 1.015, 7, 46.0 / 512, false, "refuse"},
		{"all ties r=1", []float64{1, 1, 1, 1, 1, 1, 1, 1, 1}, 1.25, 0, 1, true, "pass"},
		{"n=1 is underpowered, not a pass", []float64{1}, 1.25, 0, 1, false, "underpowered"},
		{"n=0", nil, 1.25, 0, 0, false, "invalid ratios"},
		{"NaN ratio", []float64{1, math.NaN()}, 1.25, 0, 0, false, "invalid ratios"},
		{"bar below 1", []float64{1, 1, 1, 1, 1, 1, 1, 1, 1}, 0.8, 0, 0, false, "invalid bar"},
	}
	for _, tt := range tests {
		got := NotSlower(tt.ratios, tt.bar)
		if got.Slower != tt.wantSlower || got.Pass != tt.wantPass || !approx(got.P, tt.wantP, 1e-13) ||
			!strings.HasPrefix(got.Reason, tt.wantReason) {
			t.Errorf("%s: got %+v, want slower=%d p=%v pass=%v reason %q...",
				tt.name, got, tt.wantSlower, tt.wantP, tt.wantPass, tt.wantReason)
		}
		if got.N != len(tt.ratios) {
			t.Errorf("%s: N = %d, want %d", tt.name, got.N, len(tt.ratios))
		}
	}
	if got := NotSlower(make9(1), 1.25).RefuseAt; got != 7 {
		t.Errorf("RefuseAt for n=9 = %d, want 7", got)
	}
}

func make9(v float64) []float64 {
	xs := make([]float64, 9)
	for i := range xs {
		xs[i] = v
	}
	return xs
}

func TestImprovementClaim_MedianBarAnd8Of9Wins(t *testing.T) {
	tests := []struct {
		name               string
		ratios             []float64
		bar                float64
		wantClaim          bool
		wantWins, wantTies int
		wantMedian, wantP  float64
		wantReason         string // substring
	}{
		// sorted: 0.99 1.01 1.02 1.02 1.02 1.03 1.03 1.04 1.05 -> median 1.02 >= 1.015, 8 wins.
		{"8 of 9 wins, median clears bar", []float64{1.02, 0.99, 1.03, 1.02, 1.04, 1.01, 1.02, 1.05, 1.03}, 0.015,
			true, 8, 0, 1.02, 10.0 / 512, "claim: median"},
		// 7 wins: p = 46/512 = 0.0898 > 0.05 even though the median is +5%.
		{"7 of 9 wins is not enough", []float64{1.05, 1.05, 1.05, 1.05, 1.05, 1.05, 1.05, 0.9, 0.9}, 0.015,
			false, 7, 0, 1.05, 46.0 / 512, "sign test not significant"},
		{"9 wins but median below bar", []float64{1.01, 1.01, 1.01, 1.01, 1.01, 1.01, 1.01, 1.01, 1.01}, 0.015,
			false, 9, 0, 1.01, 1.0 / 512, "median below bar"},
		// P(X >= 4) = (126+126+84+36+9+1)/512 = 382/512.
		{"both fail", []float64{0.9, 0.9, 0.9, 0.9, 0.9, 1.1, 1.1, 1.1, 1.1}, 0.015,
			false, 4, 0, 0.9, 382.0 / 512, "median below bar and sign test"},
		// A tie is a not-win: 8 wins + 1 tie still claims; 7 wins + 2 ties does not.
		{"8 wins 1 tie", []float64{1, 1.02, 1.02, 1.02, 1.02, 1.02, 1.02, 1.02, 1.02}, 0.015,
			true, 8, 1, 1.02, 10.0 / 512, "1 tie(s) r=1 counted as not-wins"},
		{"7 wins 2 ties", []float64{1, 1, 1.02, 1.02, 1.02, 1.02, 1.02, 1.02, 1.02}, 0.015,
			false, 7, 2, 1.02, 46.0 / 512, "2 tie(s) r=1 counted as not-wins"},
		// Median exactly on the bar claims (>=): 1 + 0.5 = 1.5 is exact in binary.
		{"median on the bar", []float64{1.5, 1.5, 1.5, 1.5, 1.5, 2, 2, 2, 2}, 0.5,
			true, 9, 0, 1.5, 1.0 / 512, "claim"},
		{"all ties", make9(1), 0.015, false, 0, 9, 1, 1, "9 tie(s)"},
		{"n=1 can never claim", []float64{2}, 0.015, false, 1, 0, 2, 0.5, "sign test not significant"},
		{"n=0", nil, 0.015, false, 0, 0, 0, 0, "invalid ratios"},
		{"negative bar", make9(2), -0.1, false, 0, 0, 0, 0, "invalid bar"},
	}
	for _, tt := range tests {
		got := ImprovementClaim(tt.ratios, tt.bar)
		if got.Claim != tt.wantClaim || got.Wins != tt.wantWins || got.Ties != tt.wantTies ||
			!approx(got.Median, tt.wantMedian, 1e-15) || !approx(got.P, tt.wantP, 1e-13) ||
			!strings.Contains(got.Reason, tt.wantReason) {
			t.Errorf("%s: got %+v\nwant claim=%v wins=%d ties=%d median=%v p=%v reason ~%q",
				tt.name, got, tt.wantClaim, tt.wantWins, tt.wantTies, tt.wantMedian, tt.wantP, tt.wantReason)
		}
		if got.SEP != nil {
			t.Errorf("%s: ImprovementClaim set SEP", tt.name)
		}
	}
	if got := ImprovementClaim(make9(2), 0.015).WinsNeeded; got != 8 {
		t.Errorf("WinsNeeded for n=9 = %d, want 8", got)
	}
}

func TestClaimFromArms_SetsSEP(t *testing.T) {
	a := []float64{100, 101, 99, 100, 102, 98, 100, 101, 99}
	sep := []float64{103, 104, 105, 103, 104, 105, 103, 104, 105} // min 103 > max 102
	overlap := []float64{103, 104, 105, 103, 104, 105, 103, 104, 101}
	got, err := ClaimFromArms(a, sep, 0.015)
	if err != nil || got.SEP == nil || !*got.SEP || !got.Claim {
		t.Errorf("separated arms: %+v, %v", got, err)
	}
	got, err = ClaimFromArms(a, overlap, 0.015)
	if err != nil || got.SEP == nil || *got.SEP {
		t.Errorf("overlapping arms: SEP should be false: %+v, %v", got, err)
	}
	if _, err := ClaimFromArms(a, sep[:8], 0.015); err == nil {
		t.Error("length mismatch: want error")
	}
}
