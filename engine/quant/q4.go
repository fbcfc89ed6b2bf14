package quant

import (
	"encoding/binary"
	"math"
)

// Q4_0: per 32 values, an f16 scale d and 16 bytes of 4-bit quants q in
// [0, 15], value = (q - 8) * d. Byte j holds value j in its low nibble and
// value j+16 in its high nibble.
//
// Q4_1: per 32 values, f16 d, f16 m and the same 16 nibble bytes,
// value = q*d + m.

const (
	q4_0BlockBytes = 2 + QK/2
	q4_1BlockBytes = 4 + QK/2
)

// quantizeQ4_0 matches quantize_row_q4_0_ref: d = max / -8 where max is the
// signed value of largest magnitude (the first one on ties), q =
// min(15, trunc(x/d + 8.5)).
func quantizeQ4_0(src []float32, dst []byte) {
	nb := min(len(src)/QK, len(dst)/q4_0BlockBytes)
	for i := 0; i < nb; i++ {
		x := (*[QK]float32)(src[i*QK:])
		y := (*[q4_0BlockBytes]byte)(dst[i*q4_0BlockBytes:])
		var amax, max float32
		for _, v := range x {
			if a := blockAbs32(v); amax < a {
				amax, max = a, v
			}
		}
		d := max / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(y[0:2], FP32ToFP16(d))
		for j := 0; j < QK/2; j++ {
			q0 := blockTrunc(float32(x[j]*id)+8.5, 0, 15)
			q1 := blockTrunc(float32(x[j+QK/2]*id)+8.5, 0, 15)
			y[2+j] = byte(q0) | byte(q1)<<4
		}
	}
}

func dequantizeQ4_0(src []byte, dst []float32) {
	nb := min(len(dst)/QK, len(src)/q4_0BlockBytes)
	for i := 0; i < nb; i++ {
		x := (*[q4_0BlockBytes]byte)(src[i*q4_0BlockBytes:])
		y := (*[QK]float32)(dst[i*QK:])
		d := FP16ToFP32(binary.LittleEndian.Uint16(x[0:2]))
		for j := 0; j < QK/2; j++ {
			y[j] = float32(int32(x[2+j]&15)-8) * d
			y[j+QK/2] = float32(int32(x[2+j]>>4)-8) * d
		}
	}
}

// quantizeQ4_1 matches quantize_row_q4_1_ref: min and max of the block,
// d = (max-min)/15, m = min, q = min(15, trunc((x-min)/d + 0.5)).
func quantizeQ4_1(src []float32, dst []byte) {
	nb := min(len(src)/QK, len(dst)/q4_1BlockBytes)
	for i := 0; i < nb; i++ {
		x := (*[QK]float32)(src[i*QK:])
		y := (*[q4_1BlockBytes]byte)(dst[i*q4_1BlockBytes:])
		lo, hi := float32(math.MaxFloat32), float32(-math.MaxFloat32)
		for _, v := range x {
			if v < lo {
				lo = v
			}
			if v > hi {
				hi = v
			}
		}
		d := (hi - lo) / 15
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(y[0:2], FP32ToFP16(d))
		binary.LittleEndian.PutUint16(y[2:4], FP32ToFP16(lo))
		for j := 0; j < QK/2; j++ {
			q0 := blockTrunc(float32((x[j]-lo)*id)+0.5, 0, 15)
			q1 := blockTrunc(float32((x[j+QK/2]-lo)*id)+0.5, 0, 15)
			y[4+j] = byte(q0) | byte(q1)<<4
		}
	}
}

func dequantizeQ4_1(src []byte, dst []float32) {
	nb := min(len(dst)/QK, len(src)/q4_1BlockBytes)
	for i := 0; i < nb; i++ {
		x := (*[q4_1BlockBytes]byte)(src[i*q4_1BlockBytes:])
		y := (*[QK]float32)(dst[i*QK:])
		d := FP16ToFP32(binary.LittleEndian.Uint16(x[0:2]))
		m := FP16ToFP32(binary.LittleEndian.Uint16(x[2:4]))
		for j := 0; j < QK/2; j++ {
			y[j] = float32(float32(x[4+j]&15)*d) + m
			y[j+QK/2] = float32(float32(x[4+j]>>4)*d) + m
		}
	}
}
