package stats

import (
	"math"
	"slices"
	"testing"
)

// Coverage of (x(k), x(n+1-k)) is 1 - 2*P(X <= k-1), X ~ Binomial(n, 1/2).
func TestMedianCI_OrderStatistics(t *testing.T) {
	nine := []float64{5, 2, 9, 1, 7, 3, 8, 4, 6} // sorted 1..9: x(k) = k
	ten := []float64{10, 1, 9, 2, 8, 3, 7, 4, 6, 5}
	twenty := make([]float64, 20)
	for i := range twenty {
		twenty[i] = float64(20 - i) // x(k) = k
	}
	tests := []struct {
		name             string
		xs               []float64
		conf             float64
		lo, hi, achieved float64
	}{
		// n=9, 95%: k=2 gives 1 - 2*(1+9)/512 = 492/512 = 0.9609375; k=3 gives
		// 1 - 2*(1+9+36)/512 = 420/512 = 0.8203 < 0.95.
		{"n=9 95%", nine, 0.95, 2, 8, 0.9609375},
		// Asking for exactly the achievable coverage still picks k=2.
		{"n=9 at 0.9609375", nine, 0.9609375, 2, 8, 0.9609375},
		// n=9, 99%: k=1 gives 1 - 2/512 = 0.99609375.
		{"n=9 99%", nine, 0.99, 1, 9, 0.99609375},
		// n=9, 80%: k=3 gives 420/512 = 0.8203125; k=4: 1 - 2*130/512 = 252/512 < 0.8.
		{"n=9 80%", nine, 0.80, 3, 7, 0.8203125},
		// n=10, 95%: k=2: 1 - 2*11/1024 = 0.978515625; k=3: 1 - 2*56/1024 = 0.890625.
		{"n=10 95%", ten, 0.95, 2, 9, 0.978515625},
		// n=20, 95%: P(X<=5) = (1+20+190+1140+4845+15504)/2^20 = 21700/1048576,
		// k=6: 1 - 43400/1048576 = 0.95861053466796875; k=7: 1 - 2*60460/1048576 = 0.8847.
		{"n=20 95%", twenty, 0.95, 6, 15, 1 - 43400.0/1048576},
		// n=5, 95%: even k=1 covers only 1 - 2/32 = 0.9375: widest pair, achieved < conf.
		{"n=5 short of conf", []float64{3, 1, 2, 5, 4}, 0.95, 1, 5, 0.9375},
		// n=1: k=1 covers 1 - 2*P(X<=0) = 1 - 2*1/2 = 0.
		{"n=1", []float64{4}, 0.95, 4, 4, 0},
		{"all ties", make9(3), 0.95, 3, 3, 0.9609375},
		{"n=0", nil, 0.95, nan, nan, nan},
		{"NaN value", []float64{1, math.NaN(), 3}, 0.95, nan, nan, nan},
		{"conf 1", nine, 1, nan, nan, nan},
		{"conf 0", nine, 0, nan, nan, nan},
	}
	for _, tt := range tests {
		lo, hi, ach := MedianCI(tt.xs, tt.conf)
		if !approx(lo, tt.lo, 0) || !approx(hi, tt.hi, 0) || !approx(ach, tt.achieved, 1e-13) {
			t.Errorf("%s: MedianCI = (%v, %v, %.17g), want (%v, %v, %.17g)",
				tt.name, lo, hi, ach, tt.lo, tt.hi, tt.achieved)
		}
	}
	if !slices.Equal(nine, []float64{5, 2, 9, 1, 7, 3, 8, 4, 6}) {
		t.Error("MedianCI modified its input")
	}
}

func TestBootstrapMedianCI_SeededPercentile(t *testing.T) {
	r := []float64{1.02, 0.99, 1.03, 1.01, 1.04, 1.00, 1.02, 1.05, 0.98}
	lo1, hi1 := BootstrapMedianCI(r, 2000, 0.95, 7)
	lo2, hi2 := BootstrapMedianCI(r, 2000, 0.95, 7)
	if lo1 != lo2 || hi1 != hi2 {
		t.Errorf("same seed, different CI: (%v, %v) vs (%v, %v)", lo1, hi1, lo2, hi2)
	}
	// n odd: every resampled median is one of the values, so are lo and hi; they bracket the
	// sample median 1.02 and stay inside [min, max].
	if !slices.Contains(r, lo1) || !slices.Contains(r, hi1) || !(0.98 <= lo1 && lo1 <= 1.02 && 1.02 <= hi1 && hi1 <= 1.05) {
		t.Errorf("CI (%v, %v) not order statistics bracketing the median 1.02", lo1, hi1)
	}

	tests := []struct {
		name   string
		xs     []float64
		iters  int
		conf   float64
		lo, hi float64
	}{
		// n=2 {1, 3}: a resampled median is 1 w.p. 1/4, 2 w.p. 1/2, 3 w.p. 1/4; of 2000
		// resamples ~500 are 1 and ~500 are 3, so ranks 50 and 1950 are 1 and 3.
		{"n=2", []float64{3, 1}, 2000, 0.95, 1, 3},
		{"n=1", []float64{1.5}, 100, 0.95, 1.5, 1.5},
		{"all ties", make9(1.1), 500, 0.95, 1.1, 1.1},
		{"n=0", nil, 100, 0.95, nan, nan},
		{"iters 0", r, 0, 0.95, nan, nan},
		{"conf 1", r, 100, 1, nan, nan},
		{"Inf", []float64{1, math.Inf(1)}, 100, 0.95, nan, nan},
	}
	for _, tt := range tests {
		lo, hi := BootstrapMedianCI(tt.xs, tt.iters, tt.conf, 1)
		if !approx(lo, tt.lo, 0) || !approx(hi, tt.hi, 0) {
			t.Errorf("%s: BootstrapMedianCI = (%v, %v), want (%v, %v)", tt.name, lo, hi, tt.lo, tt.hi)
		}
	}
}

// Nearest rank: the p-th percentile of n sorted values is x(ceil(n*p/100)). For 1..2000 at 95%:
// ranks ceil(2000*0.025) = 50 and ceil(2000*0.975) = 1950 (not 51: (1-0.95)/2*100 is
// 2.5000000000000022 in float64 and must be rounded first).
func TestPercentileInterval_NearestRank(t *testing.T) {
	xs := make([]float64, 2000)
	for i := range xs {
		xs[len(xs)-1-i] = float64(i + 1)
	}
	tests := []struct {
		conf   float64
		lo, hi float64
	}{
		{0.95, 50, 1950},
		{0.90, 100, 1900},
		{0.99, 10, 1990},
	}
	for _, tt := range tests {
		lo, hi := percentileInterval(xs, tt.conf)
		if lo != tt.lo || hi != tt.hi {
			t.Errorf("conf %v: (%v, %v), want (%v, %v)", tt.conf, lo, hi, tt.lo, tt.hi)
		}
	}
}
