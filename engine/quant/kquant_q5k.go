package quant

import "math"

// Q5_K: as Q4_K with a fifth bit per value, levels 0..31.
// Layout (176 bytes): d f16 | dmin f16 | scales[12] | qh[32] | qs[128].
// For the 64-value chunk c, qs byte l holds the low nibbles of values
// 64c+l and 64c+32+l; their fifth bits are bits 2c and 2c+1 of qh[l].

// quantizeQ5K writes src as Q5_K, byte-identical to quantize_row_q5_K_ref.
func quantizeQ5K(src []float32, dst []byte) {
	var L [QKK]uint8
	for i := 0; i < len(src)/QKK; i++ {
		x := src[i*QKK : (i+1)*QKK]
		y := dst[i*q5KBytes : (i+1)*q5KBytes]
		d, dmin := kQuantizeScaleMinBlock(x, 31, -0.5, 0.1, 15, &L, y[kScalesOff:kScalesOff+12])
		kPut16(y[0:], d)
		kPut16(y[2:], dmin)
		qh := y[q5KQhOff:q5KQsOff]
		qs := y[q5KQsOff:q5KBytes]
		for l := range qh {
			qh[l] = 0
		}
		for c := 0; c < 4; c++ {
			m1, m2 := uint8(1)<<(2*c), uint8(2)<<(2*c)
			for l := 0; l < 32; l++ {
				l1, l2 := L[64*c+l], L[64*c+32+l]
				if l1 > 15 {
					l1 -= 16
					qh[l] |= m1
				}
				if l2 > 15 {
					l2 -= 16
					qh[l] |= m2
				}
				qs[32*c+l] = l1 | l2<<4
			}
		}
	}
}

// dequantizeQ5K expands whole Q5_K blocks into dst.
func dequantizeQ5K(src []byte, dst []float32) {
	var sc, mn [8]uint8
	for i := 0; i < len(dst)/QKK; i++ {
		x := src[i*q5KBytes : (i+1)*q5KBytes]
		y := dst[i*QKK : (i+1)*QKK]
		d := FP16ToFP32(kLE16(x[0:]))
		dmin := FP16ToFP32(kLE16(x[2:]))
		kScaleMinUnpack(x[kScalesOff:], &sc, &mn)
		qh := x[q5KQhOff:q5KQsOff]
		qs := x[q5KQsOff:q5KBytes]
		for c := 0; c < 4; c++ {
			d1, m1 := float32(d*float32(sc[2*c])), float32(dmin*float32(mn[2*c]))
			d2, m2 := float32(d*float32(sc[2*c+1])), float32(dmin*float32(mn[2*c+1]))
			q := qs[32*c : 32*c+32]
			lo := y[64*c : 64*c+32]
			hi := y[64*c+32 : 64*c+64]
			for l := 0; l < 32; l++ {
				v1 := q[l]&0xF | (qh[l]>>(2*c)&1)<<4
				v2 := q[l]>>4 | (qh[l]>>(2*c+1)&1)<<4
				lo[l] = float32(d1*float32(v1)) - m1
				hi[l] = float32(d2*float32(v2)) - m2
			}
		}
	}
}

// dotQ5KQ8K is the dot product of n values of a Q5_K row w and a Q8_K row
// act, with the same integer-then-f32 scheme as dotQ4KQ8K.
func dotQ5KQ8K(n int, w, act []byte) float32 {
	if n%QKK != 0 {
		panic("quant: Q5_K dot length is not a whole number of 256-value blocks")
	}
	var sum float32
	for i := 0; i < n/QKK; i++ {
		x := (*[q5KBytes]byte)(w[i*q5KBytes:])
		y := (*[q8KBytes]byte)(act[i*q8KBytes:])
		sum += dotBlockQ5K(x, y)
	}
	return sum
}

func dotBlockQ5K(x *[q5KBytes]byte, y *[q8KBytes]byte) float32 {
	var sc, mn [8]uint8
	kScaleMinUnpack(x[kScalesOff:kScalesOff+12], &sc, &mn)
	var summs int32
	for j := 0; j < 8; j++ {
		b0 := int32(int16(kLE16(y[q8KBsumOff+4*j:])))
		b1 := int32(int16(kLE16(y[q8KBsumOff+4*j+2:])))
		summs += int32(mn[j]) * (b0 + b1)
	}
	hb := *(*[32]byte)(x[q5KQhOff:]) // fifth bits, shifted down by 2 per chunk
	var sumi int32
	for c := 0; c < 4; c++ {
		q := (*[32]byte)(x[q5KQsOff+32*c:])
		a := (*[64]byte)(y[q8KQsOff+64*c:])
		var s0, s1 int32
		for l := 0; l < 32; l++ {
			h := hb[l]
			v1 := int32(q[l]&0xF | (h&1)<<4)
			v2 := int32(q[l]>>4 | (h&2)<<3)
			hb[l] = h >> 2
			s0 += v1 * int32(int8(a[l]))
			s1 += v2 * int32(int8(a[32+l]))
		}
		sumi += int32(sc[2*c])*s0 + int32(sc[2*c+1])*s1
	}
	yd := math.Float32frombits(q8KD(y))
	d := float32(FP16ToFP32(kLE16(x[0:])) * yd)
	dmin := float32(FP16ToFP32(kLE16(x[2:])) * yd)
	return float32(d*float32(sumi)) - float32(dmin*float32(summs))
}
