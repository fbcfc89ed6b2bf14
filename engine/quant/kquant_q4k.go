package quant

import "math"

// Q4_K: 256 values in 8 sub-blocks of 32; value = d*sc*q - dmin*m with a
// 4-bit q, 6-bit sc and m per sub-block and fp16 d, dmin per block.
// Layout (144 bytes): d f16 | dmin f16 | scales[12] | qs[128], where qs
// byte l of the 64-value chunk c holds value 64c+l (low nibble) and
// 64c+32+l (high nibble).

// quantizeQ4K writes src as Q4_K, byte-identical to quantize_row_q4_K_ref.
func quantizeQ4K(src []float32, dst []byte) {
	var L [QKK]uint8
	for i := 0; i < len(src)/QKK; i++ {
		x := src[i*QKK : (i+1)*QKK]
		y := dst[i*q4KBytes : (i+1)*q4KBytes]
		d, dmin := kQuantizeScaleMinBlock(x, 15, -1, 0.1, 20, &L, y[kScalesOff:kScalesOff+12])
		kPut16(y[0:], d)
		kPut16(y[2:], dmin)
		qs := y[q4KQsOff:q4KBytes]
		for c := 0; c < 4; c++ {
			for l := 0; l < 32; l++ {
				qs[32*c+l] = L[64*c+l] | L[64*c+32+l]<<4
			}
		}
	}
}

// dequantizeQ4K expands whole Q4_K blocks into dst.
func dequantizeQ4K(src []byte, dst []float32) {
	var sc, mn [8]uint8
	for i := 0; i < len(dst)/QKK; i++ {
		x := src[i*q4KBytes : (i+1)*q4KBytes]
		y := dst[i*QKK : (i+1)*QKK]
		d := FP16ToFP32(kLE16(x[0:]))
		dmin := FP16ToFP32(kLE16(x[2:]))
		kScaleMinUnpack(x[kScalesOff:], &sc, &mn)
		qs := x[q4KQsOff:q4KBytes]
		for c := 0; c < 4; c++ {
			d1, m1 := float32(d*float32(sc[2*c])), float32(dmin*float32(mn[2*c]))
			d2, m2 := float32(d*float32(sc[2*c+1])), float32(dmin*float32(mn[2*c+1]))
			q := qs[32*c : 32*c+32]
			lo := y[64*c : 64*c+32]
			hi := y[64*c+32 : 64*c+64]
			for l := 0; l < 32; l++ {
				lo[l] = float32(d1*float32(q[l]&0xF)) - m1
				hi[l] = float32(d2*float32(q[l]>>4)) - m2
			}
		}
	}
}

// dotQ4KQ8K is the dot product of n values of a Q4_K row w and a Q8_K row
// act. Per block: an exact integer sum of scale * (q4 . q8) over the eight
// sub-blocks and of min * (bsum pair), then
// sum += d*dq8*sumi - dmin*dq8*summs in f32, blocks in order.
func dotQ4KQ8K(n int, w, act []byte) float32 {
	if n%QKK != 0 {
		panic("quant: Q4_K dot length is not a whole number of 256-value blocks")
	}
	var sum float32
	for i := 0; i < n/QKK; i++ {
		x := (*[q4KBytes]byte)(w[i*q4KBytes:])
		y := (*[q8KBytes]byte)(act[i*q8KBytes:])
		sum += dotBlockQ4K(x, y)
	}
	return sum
}

func dotBlockQ4K(x *[q4KBytes]byte, y *[q8KBytes]byte) float32 {
	var sc, mn [8]uint8
	kScaleMinUnpack(x[kScalesOff:kScalesOff+12], &sc, &mn)
	var summs int32
	for j := 0; j < 8; j++ {
		b0 := int32(int16(kLE16(y[q8KBsumOff+4*j:])))
		b1 := int32(int16(kLE16(y[q8KBsumOff+4*j+2:])))
		summs += int32(mn[j]) * (b0 + b1)
	}
	var sumi int32
	for c := 0; c < 4; c++ {
		q := (*[32]byte)(x[q4KQsOff+32*c:])
		a := (*[64]byte)(y[q8KQsOff+64*c:])
		var s0, s1 int32
		for l := 0; l < 32; l++ {
			s0 += int32(q[l]&0xF) * int32(int8(a[l]))
			s1 += int32(q[l]>>4) * int32(int8(a[32+l]))
		}
		sumi += int32(sc[2*c])*s0 + int32(sc[2*c+1])*s1
	}
	yd := math.Float32frombits(q8KD(y))
	d := float32(FP16ToFP32(kLE16(x[0:])) * yd)
	dmin := float32(FP16ToFP32(kLE16(x[2:])) * yd)
	return float32(d*float32(sumi)) - float32(dmin*float32(summs))
}
