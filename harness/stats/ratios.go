package stats

import (
	"errors"
	"fmt"
	"math"
)

// Errors returned by Ratios.
var (
	ErrEmpty  = errors.New("stats: empty sample")
	ErrLength = errors.New("stats: arms differ in length")
	ErrValue  = errors.New("stats: value not finite and positive")
)

// Ratios returns the paired per-round ratios r_i = b[i] / a[i]. Both arms must have the same
// non-zero length and hold finite positive values (tok/s).
func Ratios(a, b []float64) ([]float64, error) {
	if len(a) != len(b) {
		return nil, fmt.Errorf("%w: len(a) = %d, len(b) = %d", ErrLength, len(a), len(b))
	}
	if len(a) == 0 {
		return nil, ErrEmpty
	}
	r := make([]float64, len(a))
	for i := range a {
		if !positive(a[i]) {
			return nil, fmt.Errorf("%w: a[%d] = %v", ErrValue, i, a[i])
		}
		if !positive(b[i]) {
			return nil, fmt.Errorf("%w: b[%d] = %v", ErrValue, i, b[i])
		}
		r[i] = b[i] / a[i]
	}
	return r, nil
}

// Separated reports "SEP" for a higher-is-better metric: every value of arm B is above every
// value of arm A (min B > max A). It is false when either arm is empty or holds a NaN.
func Separated(a, b []float64) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	maxA, minB := math.Inf(-1), math.Inf(1)
	for _, x := range a {
		if math.IsNaN(x) {
			return false
		}
		maxA = math.Max(maxA, x)
	}
	for _, x := range b {
		if math.IsNaN(x) {
			return false
		}
		minB = math.Min(minB, x)
	}
	return minB > maxA
}

func positive(x float64) bool { return x > 0 && !math.IsInf(x, 1) }

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// validRatios reports whether xs is non-empty and every value is finite and positive.
func validRatios(xs []float64) bool {
	if len(xs) == 0 {
		return false
	}
	for _, x := range xs {
		if !positive(x) {
			return false
		}
	}
	return true
}
