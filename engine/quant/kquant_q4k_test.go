package quant

import (
	"encoding/binary"
	"testing"
)

func TestQuantizeQ4K_ByteIdenticalToReference(t *testing.T) {
	kCheckReference(t, Q4_K, "q4_K.bin")
}

// Bounds: RMS error <= 12% of the row RMS, max error <= 15% of max |x|.
func TestRoundTripQ4K_RelRMSWithin12pctMaxWithin15pct(t *testing.T) {
	kCheckRoundTrip(t, Q4_K, kRoundTripRows(t), 0.12, 0.15)
}

func TestDotQ4K_MatchesFloat64Within2e6(t *testing.T) {
	kCheckDotAgainstFloat64(t, Q4_K)
}

func TestDotQ4K_BitwiseEqualsIntegerReimplementation(t *testing.T) {
	kCheckDotExact(t, Q4_K, testIntDotQ4K)
}

// testIntDotQ4K decodes every value's level, scale and min from the layout
// one index at a time and sums exactly in integers; the min term uses the
// Q8_K levels themselves, not bsums.
func testIntDotQ4K(n int, w, act []byte) float32 {
	var sum float32
	for i := 0; i < n/QKK; i++ {
		b := w[i*144 : (i+1)*144]
		yd, a := kQ8KParts(act, i)
		d := float32(FP16ToFP32(binary.LittleEndian.Uint16(b[0:])) * yd)
		dmin := float32(FP16ToFP32(binary.LittleEndian.Uint16(b[2:])) * yd)
		var sumi, summs int32
		for v := 0; v < QKK; v++ {
			c, l := v/64, v%64
			byt := b[16+32*c+l%32]
			q := int32(byt & 15)
			if l >= 32 {
				q = int32(byt >> 4)
			}
			sc, m := kTestScaleMin(b[4:16], v/32)
			sumi += sc * q * a[v]
			summs += m * a[v]
		}
		sum += float32(d*float32(sumi)) - float32(dmin*float32(summs))
	}
	return sum
}
