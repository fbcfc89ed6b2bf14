package quant

import (
	"encoding/binary"
	"testing"
)

func TestQuantizeQ5K_ByteIdenticalToReference(t *testing.T) {
	kCheckReference(t, Q5_K, "q5_K.bin")
}

// Bounds: RMS error <= 8% of the row RMS, max error <= 10% of max |x|.
func TestRoundTripQ5K_RelRMSWithin8pctMaxWithin10pct(t *testing.T) {
	kCheckRoundTrip(t, Q5_K, kRoundTripRows(t), 0.08, 0.10)
}

func TestDotQ5K_MatchesFloat64Within2e6(t *testing.T) {
	kCheckDotAgainstFloat64(t, Q5_K)
}

func TestDotQ5K_BitwiseEqualsIntegerReimplementation(t *testing.T) {
	kCheckDotExact(t, Q5_K, testIntDotQ5K)
}

// testIntDotQ5K: as testIntDotQ4K with the fifth bit of value v read from
// bit 2*(v/64) + (v%64)/32 of qh[v%32].
func testIntDotQ5K(n int, w, act []byte) float32 {
	var sum float32
	for i := 0; i < n/QKK; i++ {
		b := w[i*176 : (i+1)*176]
		yd, a := kQ8KParts(act, i)
		d := float32(FP16ToFP32(binary.LittleEndian.Uint16(b[0:])) * yd)
		dmin := float32(FP16ToFP32(binary.LittleEndian.Uint16(b[2:])) * yd)
		var sumi, summs int32
		for v := 0; v < QKK; v++ {
			c, l := v/64, v%64
			byt := b[48+32*c+l%32]
			q := int32(byt & 15)
			if l >= 32 {
				q = int32(byt >> 4)
			}
			bit := uint(2*c + l/32)
			q += 16 * int32((b[16+l%32]>>bit)&1)
			sc, m := kTestScaleMin(b[4:16], v/32)
			sumi += sc * q * a[v]
			summs += m * a[v]
		}
		sum += float32(d*float32(sumi)) - float32(dmin*float32(summs))
	}
	return sum
}
