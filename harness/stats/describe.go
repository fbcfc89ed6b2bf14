package stats

import (
	"math"

	mstats "github.com/montanaflynn/stats"
)

// Describe is the descriptive line of one arm of one metric.
type Describe struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
	Median float64 `json:"median"`
	Stddev float64 `json:"stddev"` // sample standard deviation (n-1); 0 for n = 1
	CV     float64 `json:"cv"`     // Stddev / Mean; 0 when Mean is 0
}

// Summary describes xs with montanaflynn/stats. An empty xs gives the zero Describe (N = 0:
// the caller must not print its fields as numbers); non-finite values propagate as the library
// computes them. For n = 1 the sample stddev is undefined and reported as 0, so that the
// result always encodes as JSON.
func Summary(xs []float64) Describe {
	d := Describe{N: len(xs)}
	if d.N == 0 {
		return d
	}
	data := mstats.Float64Data(xs)
	d.Min, _ = data.Min()
	d.Max, _ = data.Max()
	d.Mean, _ = data.Mean()
	d.Median, _ = data.Median()
	if d.N > 1 {
		d.Stddev, _ = mstats.StandardDeviationSample(data)
	}
	if d.Mean != 0 {
		d.CV = d.Stddev / d.Mean
	}
	return d
}

// madScale makes the MAD a consistent estimator of the standard deviation of a normal sample.
const madScale = 1.4826

// meanADScale does the same for the mean absolute deviation (sqrt(pi/2)); it replaces the MAD
// when the MAD is 0 (Iglewicz & Hoaglin's modified z-score).
const meanADScale = 1.253314

// MADOutliers returns, in increasing order, the indices i with |xs[i] - median| >
// k * 1.4826 * MAD, MAD = median(|xs - median|). The rounds are reported, never dropped.
//
// MAD = 0 (more than half the values equal the median) would flag every other value at any k;
// then the scale falls back to 1.253314 * mean(|xs - median|), and when that is 0 too (all
// values equal) nothing is flagged. Non-finite values are always reported and left out of the
// median and the scale. An empty xs, or k not finite and >= 0, gives nil.
func MADOutliers(xs []float64, k float64) []int {
	if len(xs) == 0 || !(k >= 0) || math.IsInf(k, 1) {
		return nil
	}
	var out []int
	var vals []float64
	for _, x := range xs {
		if finite(x) {
			vals = append(vals, x)
		}
	}
	if len(vals) == 0 {
		for i := range xs {
			out = append(out, i)
		}
		return out
	}
	med, _ := mstats.Median(vals)
	dev := make([]float64, len(vals))
	var sumDev float64
	for i, x := range vals {
		dev[i] = math.Abs(x - med)
		sumDev += dev[i]
	}
	mad, _ := mstats.Median(dev)
	scale := madScale * mad
	if mad == 0 {
		scale = meanADScale * sumDev / float64(len(vals))
	}
	for i, x := range xs {
		if !finite(x) || (scale > 0 && math.Abs(x-med) > k*scale) {
			out = append(out, i)
		}
	}
	return out
}
