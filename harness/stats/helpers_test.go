package stats

import (
	"math"
	"testing"
)

// approx reports whether got is within tol of want (absolute, or relative for |want| > 1);
// NaN matches NaN.
func approx(got, want, tol float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))
}

func checkClose(t *testing.T, name string, got, want, tol float64) {
	t.Helper()
	if !approx(got, want, tol) {
		t.Errorf("%s = %.17g, want %.17g (tol %g)", name, got, want, tol)
	}
}

var nan = math.NaN()
