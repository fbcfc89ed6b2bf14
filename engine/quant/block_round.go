package quant

import "math"

// Scalar helpers of the 32-value block quantizers. They mirror the C
// conversions the reference quantizers rely on, and never panic on NaN or
// infinite input (Go's float-to-int conversion of such values is
// implementation-defined but harmless; the results are clamped).

// blockAbs32 is fabsf.
func blockAbs32(v float32) float32 {
	return math.Float32frombits(math.Float32bits(v) &^ (1 << 31))
}

// blockTrunc is C's (int) cast of a float (truncation toward zero), clamped
// to [lo, hi]. For in-range values it equals the C conversion the reference
// quantizers use before their MIN().
func blockTrunc(v float32, lo, hi int32) int32 {
	t := int32(v)
	if !(v >= float32(lo)) { // also NaN
		t = lo
	}
	if t > hi || v >= float32(hi)+1 {
		t = hi
	}
	return t
}

// blockRoundAway is C's roundf (halfway cases away from zero) as an int32,
// clamped to [-128, 127].
func blockRoundAway(v float32) int32 {
	if !(v > -128.5) { // also NaN
		return -128
	}
	if v >= 127.5 {
		return 127
	}
	t := int32(v) // truncation; exact for |v| < 2^31
	f := v - float32(t)
	if f >= 0.5 {
		t++
	} else if f <= -0.5 {
		t--
	}
	return t
}
