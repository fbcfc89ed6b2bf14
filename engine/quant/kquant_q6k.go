package quant

import "math"

// Q6_K: 256 values in 16 sub-blocks of 16; value = d*sc*(q-32) with a 6-bit
// q, an int8 sc per sub-block and an fp16 d per block.
// Layout (210 bytes): ql[128] | qh[64] | scales[16] int8 | d f16.
// In the 128-value half h, for l in 0..31: ql[64h+l] holds the low nibbles
// of values 128h+l (low) and 128h+64+l (high), ql[64h+32+l] those of
// 128h+32+l and 128h+96+l; qh[32h+l] holds the top two bits of the four
// values 128h+l, +32, +64, +96 in bits 0-1, 2-3, 4-5, 6-7.

// quantizeQ6K writes src as Q6_K, byte-identical to quantize_row_q6_K_ref.
func quantizeQ6K(src []float32, dst []byte) {
	var (
		L      [QKK]int8
		scales [QKK / 16]float32
	)
	for i := 0; i < len(src)/QKK; i++ {
		x := src[i*QKK : (i+1)*QKK]
		y := dst[i*q6KBytes : (i+1)*q6KBytes]

		var maxScale, maxAbsScale float32
		for ib := 0; ib < QKK/16; ib++ {
			s := kMakeQXQuantsRMSE1(16, 32, x[16*ib:16*ib+16], L[16*ib:16*ib+16])
			scales[ib] = s
			if as := float32(math.Abs(float64(s))); as > maxAbsScale {
				maxAbsScale = as
				maxScale = s
			}
		}
		if maxAbsScale < kGroupMaxEps {
			for k := range y {
				y[k] = 0
			}
			continue
		}

		iscale := -128 / maxScale
		d := FP32ToFP16(1 / iscale)
		kPut16(y[q6KDOff:], d)
		sc := y[q6KScOff:q6KDOff]
		for ib := range scales {
			sc[ib] = byte(int8(min(127, kNearestInt(float32(iscale*scales[ib])))))
		}
		df := FP16ToFP32(d)
		for j := 0; j < QKK/16; j++ {
			ds := float32(df * float32(int8(sc[j])))
			if ds == 0 {
				continue // keep the levels of the search
			}
			for ii := 0; ii < 16; ii++ {
				l := kNearestInt(x[16*j+ii] / ds)
				L[16*j+ii] = int8(max(-32, min(31, l)) + 32)
			}
		}

		ql := y[0:q6KQhOff]
		qh := y[q6KQhOff:q6KScOff]
		for h := 0; h < 2; h++ {
			Lh := L[128*h : 128*h+128]
			for l := 0; l < 32; l++ {
				q1, q2 := uint8(Lh[l]), uint8(Lh[l+32])
				q3, q4 := uint8(Lh[l+64]), uint8(Lh[l+96])
				ql[64*h+l] = q1&0xF | (q3&0xF)<<4
				ql[64*h+32+l] = q2&0xF | (q4&0xF)<<4
				qh[32*h+l] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
			}
		}
	}
}

// dequantizeQ6K expands whole Q6_K blocks into dst.
func dequantizeQ6K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QKK; i++ {
		x := src[i*q6KBytes : (i+1)*q6KBytes]
		y := dst[i*QKK : (i+1)*QKK]
		d := FP16ToFP32(kLE16(x[q6KDOff:]))
		for h := 0; h < 2; h++ {
			ql := x[64*h : 64*h+64]
			qh := x[q6KQhOff+32*h : q6KQhOff+32*h+32]
			sc := x[q6KScOff+8*h : q6KScOff+8*h+8]
			yh := y[128*h : 128*h+128]
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int32(ql[l]&0xF|(qh[l]>>0&3)<<4) - 32
				q2 := int32(ql[l+32]&0xF|(qh[l]>>2&3)<<4) - 32
				q3 := int32(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int32(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				yh[l] = float32(d*float32(int8(sc[is]))) * float32(q1)
				yh[l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
				yh[l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
				yh[l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
			}
		}
	}
}

// dotQ6KQ8K is the dot product of n values of a Q6_K row w and a Q8_K row
// act: per block the exact integer sum of sc * ((q-32) . q8) over the 16
// sub-blocks, then sum += d*dq8*sumi in f32, blocks in order.
func dotQ6KQ8K(n int, w, act []byte) float32 {
	if n%QKK != 0 {
		panic("quant: Q6_K dot length is not a whole number of 256-value blocks")
	}
	var sum float32
	for i := 0; i < n/QKK; i++ {
		x := (*[q6KBytes]byte)(w[i*q6KBytes:])
		y := (*[q8KBytes]byte)(act[i*q8KBytes:])
		sum += dotBlockQ6K(x, y)
	}
	return sum
}

func dotBlockQ6K(x *[q6KBytes]byte, y *[q8KBytes]byte) float32 {
	var sumi int32
	for h := 0; h < 2; h++ {
		ql := (*[64]byte)(x[64*h:])
		qh := (*[32]byte)(x[q6KQhOff+32*h:])
		sc := (*[8]byte)(x[q6KScOff+8*h:])
		a := (*[128]byte)(y[q8KQsOff+128*h:])
		for g := 0; g < 2; g++ {
			var s1, s2, s3, s4 int32
			for l := 16 * g; l < 16*g+16; l++ {
				q1 := int32(ql[l]&0xF|(qh[l]&3)<<4) - 32
				q2 := int32(ql[l+32]&0xF|(qh[l]>>2&3)<<4) - 32
				q3 := int32(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int32(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				s1 += q1 * int32(int8(a[l]))
				s2 += q2 * int32(int8(a[l+32]))
				s3 += q3 * int32(int8(a[l+64]))
				s4 += q4 * int32(int8(a[l+96]))
			}
			sumi += int32(int8(sc[g]))*s1 + int32(int8(sc[g+2]))*s2 +
				int32(int8(sc[g+4]))*s3 + int32(int8(sc[g+6]))*s4
		}
	}
	d := float32(FP16ToFP32(kLE16(x[q6KDOff:])) * math.Float32frombits(q8KD(y)))
	return float32(d * float32(sumi))
}
