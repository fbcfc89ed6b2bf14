package stats

import (
	"encoding/json"
	"math"
	"slices"
	"testing"
)

func TestSummary_Describe(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		want Describe
	}{
		// 2 4 4 4 5 5 7 9: mean 40/8 = 5, median (4+5)/2 = 4.5, squared deviations
		// 9+1+1+1+0+0+4+16 = 32, sample sd = sqrt(32/7) = 2.1380899352993952, CV = sd/5.
		{"classic", []float64{2, 4, 4, 4, 5, 5, 7, 9},
			Describe{N: 8, Min: 2, Max: 9, Mean: 5, Median: 4.5, Stddev: math.Sqrt(32.0 / 7), CV: math.Sqrt(32.0/7) / 5}},
		// 1 2 3: mean 2, sd = sqrt((1+0+1)/2) = 1, CV 0.5.
		{"n=3", []float64{3, 1, 2}, Describe{N: 3, Min: 1, Max: 3, Mean: 2, Median: 2, Stddev: 1, CV: 0.5}},
		{"n=1", []float64{7}, Describe{N: 1, Min: 7, Max: 7, Mean: 7, Median: 7}},
		{"all ties", []float64{4, 4, 4}, Describe{N: 3, Min: 4, Max: 4, Mean: 4, Median: 4}},
		{"mean 0", []float64{-1, 1}, Describe{N: 2, Min: -1, Max: 1, Stddev: math.Sqrt2}},
		{"n=0", nil, Describe{}},
	}
	for _, tt := range tests {
		got := Summary(tt.xs)
		w := tt.want
		if got.N != w.N || !approx(got.Min, w.Min, 0) || !approx(got.Max, w.Max, 0) ||
			!approx(got.Mean, w.Mean, 1e-15) || !approx(got.Median, w.Median, 0) ||
			!approx(got.Stddev, w.Stddev, 1e-15) || !approx(got.CV, w.CV, 1e-15) {
			t.Errorf("%s: Summary = %+v, want %+v", tt.name, got, w)
		}
		if _, err := json.Marshal(got); err != nil {
			t.Errorf("%s: not JSON-encodable: %v", tt.name, err)
		}
	}
}

func TestMADOutliers_ReportedNotDropped(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		k    float64
		want []int
	}{
		// median 3, |x-3| = 2 1 0 1 97, MAD = 1, cut 3*1.4826*1 = 4.4478: only 100.
		{"one far round", []float64{1, 2, 3, 4, 100}, 3, []int{4}},
		// Same data, k = 1: cut 1.4826 flags |x-3| = 2 (index 0) and 97.
		{"k=1", []float64{1, 2, 3, 4, 100}, 1, []int{0, 4}},
		// Tok/s with one slow round: median 100, |dev| = 1 1 0 1 20 1 0 1 2 -> MAD 1,
		// cut 3.5*1.4826 = 5.1891: index 4 (80).
		{"slow round", []float64{101, 99, 100, 101, 80, 99, 100, 101, 102}, 3.5, []int{4}},
		// MAD = 0: five 5s and a 6. Mean |dev| = 1/6, scale 1.253314/6 = 0.20889,
		// cut 3*0.20889 = 0.62666 < 1: the 6 is reported.
		{"MAD=0 falls back to mean AD", []float64{5, 5, 5, 6, 5, 5}, 3, []int{3}},
		{"all ties", []float64{5, 5, 5, 5}, 3, nil},
		{"n=1", []float64{5}, 3, nil},
		{"non-finite reported", []float64{1, 2, math.NaN(), 3}, 3, []int{2}},
		{"n=0", nil, 3, nil},
		{"negative k", []float64{1, 2, 100}, -1, nil},
	}
	for _, tt := range tests {
		if got := MADOutliers(tt.xs, tt.k); !slices.Equal(got, tt.want) {
			t.Errorf("%s: MADOutliers(%v, %v) = %v, want %v", tt.name, tt.xs, tt.k, got, tt.want)
		}
	}
}
