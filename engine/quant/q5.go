package quant

import (
	"encoding/binary"
	"math"
)

// Q5_0: per 32 values, f16 d, a little-endian u32 qh of fifth bits (bit j for
// value j) and 16 nibble bytes as in Q4_0 (low nibble value j, high nibble
// value j+16); q in [0, 31], value = (q - 16) * d.
//
// Q5_1: per 32 values, f16 d, f16 m, qh and the nibble bytes,
// value = q*d + m.

const (
	q5_0BlockBytes = 2 + 4 + QK/2
	q5_1BlockBytes = 4 + 4 + QK/2
)

// quantizeQ5_0 matches quantize_row_q5_0_ref: d = max / -16 (max the signed
// value of largest magnitude, first on ties), q = min(31, trunc(x/d + 16.5)).
func quantizeQ5_0(src []float32, dst []byte) {
	nb := min(len(src)/QK, len(dst)/q5_0BlockBytes)
	for i := 0; i < nb; i++ {
		x := (*[QK]float32)(src[i*QK:])
		y := (*[q5_0BlockBytes]byte)(dst[i*q5_0BlockBytes:])
		var amax, max float32
		for _, v := range x {
			if a := blockAbs32(v); amax < a {
				amax, max = a, v
			}
		}
		d := max / -16
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(y[0:2], FP32ToFP16(d))
		var qh uint32
		for j := 0; j < QK/2; j++ {
			q0 := uint32(blockTrunc(float32(x[j]*id)+16.5, 0, 31))
			q1 := uint32(blockTrunc(float32(x[j+QK/2]*id)+16.5, 0, 31))
			y[6+j] = byte(q0&15) | byte(q1&15)<<4
			qh |= (q0 >> 4) << j
			qh |= (q1 >> 4) << (j + QK/2)
		}
		binary.LittleEndian.PutUint32(y[2:6], qh)
	}
}

func dequantizeQ5_0(src []byte, dst []float32) {
	nb := min(len(dst)/QK, len(src)/q5_0BlockBytes)
	for i := 0; i < nb; i++ {
		x := (*[q5_0BlockBytes]byte)(src[i*q5_0BlockBytes:])
		y := (*[QK]float32)(dst[i*QK:])
		d := FP16ToFP32(binary.LittleEndian.Uint16(x[0:2]))
		qh := binary.LittleEndian.Uint32(x[2:6])
		for j := 0; j < QK/2; j++ {
			h0 := int32(qh>>j&1) << 4
			h1 := int32(qh>>(j+QK/2)&1) << 4
			y[j] = float32((int32(x[6+j]&15)|h0)-16) * d
			y[j+QK/2] = float32((int32(x[6+j]>>4)|h1)-16) * d
		}
	}
}

// quantizeQ5_1 matches quantize_row_q5_1_ref: d = (max-min)/31, m = min,
// q = trunc((x-min)/d + 0.5) (the reference has no clamp; q cannot exceed 31
// for finite input).
func quantizeQ5_1(src []float32, dst []byte) {
	nb := min(len(src)/QK, len(dst)/q5_1BlockBytes)
	for i := 0; i < nb; i++ {
		x := (*[QK]float32)(src[i*QK:])
		y := (*[q5_1BlockBytes]byte)(dst[i*q5_1BlockBytes:])
		lo, hi := float32(math.MaxFloat32), float32(-math.MaxFloat32)
		for _, v := range x {
			if v < lo {
				lo = v
			}
			if v > hi {
				hi = v
			}
		}
		d := (hi - lo) / 31
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(y[0:2], FP32ToFP16(d))
		binary.LittleEndian.PutUint16(y[2:4], FP32ToFP16(lo))
		var qh uint32
		for j := 0; j < QK/2; j++ {
			q0 := uint32(blockTrunc(float32((x[j]-lo)*id)+0.5, 0, 31))
			q1 := uint32(blockTrunc(float32((x[j+QK/2]-lo)*id)+0.5, 0, 31))
			y[8+j] = byte(q0&15) | byte(q1&15)<<4
			qh |= (q0 >> 4) << j
			qh |= (q1 >> 4) << (j + QK/2)
		}
		binary.LittleEndian.PutUint32(y[4:8], qh)
	}
}

func dequantizeQ5_1(src []byte, dst []float32) {
	nb := min(len(dst)/QK, len(src)/q5_1BlockBytes)
	for i := 0; i < nb; i++ {
		x := (*[q5_1BlockBytes]byte)(src[i*q5_1BlockBytes:])
		y := (*[QK]float32)(dst[i*QK:])
		d := FP16ToFP32(binary.LittleEndian.Uint16(x[0:2]))
		m := FP16ToFP32(binary.LittleEndian.Uint16(x[2:4]))
		qh := binary.LittleEndian.Uint32(x[4:8])
		for j := 0; j < QK/2; j++ {
			h0 := uint32(qh>>j&1) << 4
			h1 := uint32(qh>>(j+QK/2)&1) << 4
			y[j] = float32(float32(uint32(x[8+j]&15)|h0)*d) + m
			y[j+QK/2] = float32(float32(uint32(x[8+j]>>4)|h1)*d) + m
		}
	}
}
