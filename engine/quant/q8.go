package quant

import "encoding/binary"

// Q8_0: per 32 values, f16 d and 32 int8 quants, value = q*d. It is both a
// weight type and the activation format of Q4_0, Q5_0 and Q8_0 weights.
//
// Q8_1: per 32 values, f16 d, f16 s = d*sum(q) and 32 int8 quants; the
// activation format of Q4_1 and Q5_1 weights (their min term needs the
// activation block sums).

const (
	q8_0BlockBytes = 2 + QK
	q8_1BlockBytes = 4 + QK
)

// q8BlockScale returns the absolute maximum of a block exactly as the
// reference's MAX(amax, fabsf(v)) fold computes it, and d = amax/127 and its
// inverse (0 when d is 0).
func q8BlockScale(x *[QK]float32) (d, id float32) {
	var amax float32
	for _, v := range x {
		a := blockAbs32(v)
		if !(amax > a) {
			amax = a
		}
	}
	d = amax / 127
	if d != 0 {
		id = 1 / d
	}
	return d, id
}

// quantizeQ8_0 matches quantize_row_q8_0_ref: d = amax/127, q = roundf(x/d).
func quantizeQ8_0(src []float32, dst []byte) {
	nb := min(len(src)/QK, len(dst)/q8_0BlockBytes)
	for i := 0; i < nb; i++ {
		x := (*[QK]float32)(src[i*QK:])
		y := (*[q8_0BlockBytes]byte)(dst[i*q8_0BlockBytes:])
		d, id := q8BlockScale(x)
		binary.LittleEndian.PutUint16(y[0:2], FP32ToFP16(d))
		for j, v := range x {
			y[2+j] = byte(int8(blockRoundAway(float32(v * id))))
		}
	}
}

func dequantizeQ8_0(src []byte, dst []float32) {
	nb := min(len(dst)/QK, len(src)/q8_0BlockBytes)
	for i := 0; i < nb; i++ {
		x := (*[q8_0BlockBytes]byte)(src[i*q8_0BlockBytes:])
		y := (*[QK]float32)(dst[i*QK:])
		d := FP16ToFP32(binary.LittleEndian.Uint16(x[0:2]))
		for j := range y {
			y[j] = float32(int8(x[2+j])) * d
		}
	}
}

// quantizeQ8_1 matches quantize_row_q8_1_ref: as Q8_0, plus s = fp16(sum(q)*d).
func quantizeQ8_1(src []float32, dst []byte) {
	nb := min(len(src)/QK, len(dst)/q8_1BlockBytes)
	for i := 0; i < nb; i++ {
		x := (*[QK]float32)(src[i*QK:])
		y := (*[q8_1BlockBytes]byte)(dst[i*q8_1BlockBytes:])
		d, id := q8BlockScale(x)
		var sum int32
		for j, v := range x {
			q := blockRoundAway(float32(v * id))
			y[4+j] = byte(int8(q))
			sum += q
		}
		binary.LittleEndian.PutUint16(y[0:2], FP32ToFP16(d))
		binary.LittleEndian.PutUint16(y[2:4], FP32ToFP16(float32(sum)*d))
	}
}

func dequantizeQ8_1(src []byte, dst []float32) {
	nb := min(len(dst)/QK, len(src)/q8_1BlockBytes)
	for i := 0; i < nb; i++ {
		x := (*[q8_1BlockBytes]byte)(src[i*q8_1BlockBytes:])
		y := (*[QK]float32)(dst[i*QK:])
		d := FP16ToFP32(binary.LittleEndian.Uint16(x[0:2]))
		for j := range y {
			y[j] = float32(int8(x[4+j])) * d
		}
	}
}
