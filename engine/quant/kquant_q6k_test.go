package quant

import (
	"encoding/binary"
	"testing"
)

func TestQuantizeQ6K_ByteIdenticalToReference(t *testing.T) {
	kCheckReference(t, Q6_K, "q6_K.bin")
}

// Bounds: RMS error <= 4% of the row RMS, max error <= 4% of max |x|.
func TestRoundTripQ6K_RelRMSWithin4pctMaxWithin4pct(t *testing.T) {
	kCheckRoundTrip(t, Q6_K, kRoundTripRows(t), 0.04, 0.04)
}

func TestDotQ6K_MatchesFloat64Within2e6(t *testing.T) {
	kCheckDotAgainstFloat64(t, Q6_K)
}

func TestDotQ6K_BitwiseEqualsIntegerReimplementation(t *testing.T) {
	kCheckDotExact(t, Q6_K, testIntDotQ6K)
}

// testIntDotQ6K decodes value v of a block from the layout: half h = v/128,
// quarter k = (v%128)/32, lane l = v%32; low nibble from ql[64h + 32*(k%2) + l]
// (low nibble for k < 2, high for k >= 2), top bits 2k..2k+1 of qh[32h+l],
// int8 scale scales[v/16].
func testIntDotQ6K(n int, w, act []byte) float32 {
	var sum float32
	for i := 0; i < n/QKK; i++ {
		b := w[i*210 : (i+1)*210]
		yd, a := kQ8KParts(act, i)
		d := float32(FP16ToFP32(binary.LittleEndian.Uint16(b[208:])) * yd)
		var sumi int32
		for v := 0; v < QKK; v++ {
			h, k, l := v/128, (v%128)/32, v%32
			byt := b[64*h+32*(k%2)+l]
			lo := int32(byt & 15)
			if k >= 2 {
				lo = int32(byt >> 4)
			}
			hi := int32((b[128+32*h+l] >> uint(2*k)) & 3)
			q := lo + 16*hi - 32
			sc := int32(int8(b[192+v/16]))
			sumi += sc * q * a[v]
		}
		sum += float32(d * float32(sumi))
	}
	return sum
}
