package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Dots of the 32-value block weights against quantized activations.
//
// Per block the integer dot of the quants is computed with straight-line
// int32 code (two partial sums, for the low and the high half of the
// block), then scaled in f32:
//
//	Q4_0, Q5_0, Q8_0 x Q8_0:  sum += f32(sumi) * (dx*dy)
//	Q4_1, Q5_1 x Q8_1:        sum += f32(sumi) * (dx*dy) + mx*sy
//
// Blocks are accumulated into one f32 sum in block order; every product and
// sum is rounded to f32 separately (explicit conversions keep the compiler
// from fusing multiply-adds), so the result is bitwise the same on every host.
//
// Little-endian fields are read with encoding/binary, which the compiler turns
// into plain loads on little-endian hosts; f16 scales are decoded through
// plainHalfLUT (the same values as FP16ToFP32, without a call). Each block is
// viewed as a fixed-size array so its constant indices need no bounds checks.
//
// A Dot never panics: when n is not a whole number of blocks, or w or act is
// shorter than n values need, it returns NaN.

// blockDotCheck returns the block count of n values when w and act hold them.
func blockDotCheck(n, wBlockBytes, aBlockBytes int, w, act []byte) (nb int, ok bool) {
	if n < 0 || n%QK != 0 {
		return 0, false
	}
	nb = n / QK
	if nb > len(w)/wBlockBytes || nb > len(act)/aBlockBytes {
		return 0, false
	}
	return nb, true
}

// ActivationBytes returns the bytes of n activation values in the format the
// Dot of weight type t reads (its VecDot): the buffer to quantize an input
// row into with Quantize(VecDot, ...).
func ActivationBytes(t Type, n int) (int, error) {
	tr, err := TraitsOf(t)
	if err != nil {
		return 0, err
	}
	if tr.Dot == nil {
		return 0, fmt.Errorf("quant: %s has no dot product", t)
	}
	return tr.VecDot.RowBytes(n)
}

// dotQ4_0Q8_0 is the dot of Q4_0 weights and Q8_0 activations.
func dotQ4_0Q8_0(n int, w, act []byte) float32 {
	nb, ok := blockDotCheck(n, q4_0BlockBytes, q8_0BlockBytes, w, act)
	if !ok {
		return float32(math.NaN())
	}
	var sum float32
	for i := 0; i < nb; i++ {
		x := (*[q4_0BlockBytes]byte)(w[i*q4_0BlockBytes:])
		y := (*[q8_0BlockBytes]byte)(act[i*q8_0BlockBytes:])
		var s0, s1 int32
		s0 += ((int32(x[2]&15)-8)*int32(int8(y[2])) + (int32(x[3]&15)-8)*int32(int8(y[3]))) + ((int32(x[4]&15)-8)*int32(int8(y[4])) + (int32(x[5]&15)-8)*int32(int8(y[5])))
		s0 += ((int32(x[6]&15)-8)*int32(int8(y[6])) + (int32(x[7]&15)-8)*int32(int8(y[7]))) + ((int32(x[8]&15)-8)*int32(int8(y[8])) + (int32(x[9]&15)-8)*int32(int8(y[9])))
		s0 += ((int32(x[10]&15)-8)*int32(int8(y[10])) + (int32(x[11]&15)-8)*int32(int8(y[11]))) + ((int32(x[12]&15)-8)*int32(int8(y[12])) + (int32(x[13]&15)-8)*int32(int8(y[13])))
		s0 += ((int32(x[14]&15)-8)*int32(int8(y[14])) + (int32(x[15]&15)-8)*int32(int8(y[15]))) + ((int32(x[16]&15)-8)*int32(int8(y[16])) + (int32(x[17]&15)-8)*int32(int8(y[17])))
		s1 += ((int32(x[2]>>4)-8)*int32(int8(y[18])) + (int32(x[3]>>4)-8)*int32(int8(y[19]))) + ((int32(x[4]>>4)-8)*int32(int8(y[20])) + (int32(x[5]>>4)-8)*int32(int8(y[21])))
		s1 += ((int32(x[6]>>4)-8)*int32(int8(y[22])) + (int32(x[7]>>4)-8)*int32(int8(y[23]))) + ((int32(x[8]>>4)-8)*int32(int8(y[24])) + (int32(x[9]>>4)-8)*int32(int8(y[25])))
		s1 += ((int32(x[10]>>4)-8)*int32(int8(y[26])) + (int32(x[11]>>4)-8)*int32(int8(y[27]))) + ((int32(x[12]>>4)-8)*int32(int8(y[28])) + (int32(x[13]>>4)-8)*int32(int8(y[29])))
		s1 += ((int32(x[14]>>4)-8)*int32(int8(y[30])) + (int32(x[15]>>4)-8)*int32(int8(y[31]))) + ((int32(x[16]>>4)-8)*int32(int8(y[32])) + (int32(x[17]>>4)-8)*int32(int8(y[33])))
		dx := plainHalfLUT[binary.LittleEndian.Uint16(x[0:2])]
		dy := plainHalfLUT[binary.LittleEndian.Uint16(y[0:2])]
		sum += float32(float32(s0+s1) * float32(dx*dy))
	}
	return sum
}

// dotQ4_1Q8_1 is the dot of Q4_1 weights and Q8_1 activations.
func dotQ4_1Q8_1(n int, w, act []byte) float32 {
	nb, ok := blockDotCheck(n, q4_1BlockBytes, q8_1BlockBytes, w, act)
	if !ok {
		return float32(math.NaN())
	}
	var sum float32
	for i := 0; i < nb; i++ {
		x := (*[q4_1BlockBytes]byte)(w[i*q4_1BlockBytes:])
		y := (*[q8_1BlockBytes]byte)(act[i*q8_1BlockBytes:])
		var s0, s1 int32
		s0 += (int32(x[4]&15)*int32(int8(y[4])) + int32(x[5]&15)*int32(int8(y[5]))) + (int32(x[6]&15)*int32(int8(y[6])) + int32(x[7]&15)*int32(int8(y[7])))
		s0 += (int32(x[8]&15)*int32(int8(y[8])) + int32(x[9]&15)*int32(int8(y[9]))) + (int32(x[10]&15)*int32(int8(y[10])) + int32(x[11]&15)*int32(int8(y[11])))
		s0 += (int32(x[12]&15)*int32(int8(y[12])) + int32(x[13]&15)*int32(int8(y[13]))) + (int32(x[14]&15)*int32(int8(y[14])) + int32(x[15]&15)*int32(int8(y[15])))
		s0 += (int32(x[16]&15)*int32(int8(y[16])) + int32(x[17]&15)*int32(int8(y[17]))) + (int32(x[18]&15)*int32(int8(y[18])) + int32(x[19]&15)*int32(int8(y[19])))
		s1 += (int32(x[4]>>4)*int32(int8(y[20])) + int32(x[5]>>4)*int32(int8(y[21]))) + (int32(x[6]>>4)*int32(int8(y[22])) + int32(x[7]>>4)*int32(int8(y[23])))
		s1 += (int32(x[8]>>4)*int32(int8(y[24])) + int32(x[9]>>4)*int32(int8(y[25]))) + (int32(x[10]>>4)*int32(int8(y[26])) + int32(x[11]>>4)*int32(int8(y[27])))
		s1 += (int32(x[12]>>4)*int32(int8(y[28])) + int32(x[13]>>4)*int32(int8(y[29]))) + (int32(x[14]>>4)*int32(int8(y[30])) + int32(x[15]>>4)*int32(int8(y[31])))
		s1 += (int32(x[16]>>4)*int32(int8(y[32])) + int32(x[17]>>4)*int32(int8(y[33]))) + (int32(x[18]>>4)*int32(int8(y[34])) + int32(x[19]>>4)*int32(int8(y[35])))
		dx := plainHalfLUT[binary.LittleEndian.Uint16(x[0:2])]
		mx := plainHalfLUT[binary.LittleEndian.Uint16(x[2:4])]
		dy := plainHalfLUT[binary.LittleEndian.Uint16(y[0:2])]
		sy := plainHalfLUT[binary.LittleEndian.Uint16(y[2:4])]
		sum += float32(float32(s0+s1)*float32(dx*dy)) + float32(mx*sy)
	}
	return sum
}

// dotQ5_0Q8_0 is the dot of Q5_0 weights and Q8_0 activations.
func dotQ5_0Q8_0(n int, w, act []byte) float32 {
	nb, ok := blockDotCheck(n, q5_0BlockBytes, q8_0BlockBytes, w, act)
	if !ok {
		return float32(math.NaN())
	}
	var sum float32
	for i := 0; i < nb; i++ {
		x := (*[q5_0BlockBytes]byte)(w[i*q5_0BlockBytes:])
		y := (*[q8_0BlockBytes]byte)(act[i*q8_0BlockBytes:])
		qh := binary.LittleEndian.Uint32(x[2:6])
		var s0, s1 int32
		s0 += (((int32(x[6]&15)|int32(qh<<4&0x10))-16)*int32(int8(y[2])) + ((int32(x[7]&15)|int32(qh<<3&0x10))-16)*int32(int8(y[3]))) + (((int32(x[8]&15)|int32(qh<<2&0x10))-16)*int32(int8(y[4])) + ((int32(x[9]&15)|int32(qh<<1&0x10))-16)*int32(int8(y[5])))
		s0 += (((int32(x[10]&15)|int32(qh&0x10))-16)*int32(int8(y[6])) + ((int32(x[11]&15)|int32(qh>>1&0x10))-16)*int32(int8(y[7]))) + (((int32(x[12]&15)|int32(qh>>2&0x10))-16)*int32(int8(y[8])) + ((int32(x[13]&15)|int32(qh>>3&0x10))-16)*int32(int8(y[9])))
		s0 += (((int32(x[14]&15)|int32(qh>>4&0x10))-16)*int32(int8(y[10])) + ((int32(x[15]&15)|int32(qh>>5&0x10))-16)*int32(int8(y[11]))) + (((int32(x[16]&15)|int32(qh>>6&0x10))-16)*int32(int8(y[12])) + ((int32(x[17]&15)|int32(qh>>7&0x10))-16)*int32(int8(y[13])))
		s0 += (((int32(x[18]&15)|int32(qh>>8&0x10))-16)*int32(int8(y[14])) + ((int32(x[19]&15)|int32(qh>>9&0x10))-16)*int32(int8(y[15]))) + (((int32(x[20]&15)|int32(qh>>10&0x10))-16)*int32(int8(y[16])) + ((int32(x[21]&15)|int32(qh>>11&0x10))-16)*int32(int8(y[17])))
		s1 += (((int32(x[6]>>4)|int32(qh>>12&0x10))-16)*int32(int8(y[18])) + ((int32(x[7]>>4)|int32(qh>>13&0x10))-16)*int32(int8(y[19]))) + (((int32(x[8]>>4)|int32(qh>>14&0x10))-16)*int32(int8(y[20])) + ((int32(x[9]>>4)|int32(qh>>15&0x10))-16)*int32(int8(y[21])))
		s1 += (((int32(x[10]>>4)|int32(qh>>16&0x10))-16)*int32(int8(y[22])) + ((int32(x[11]>>4)|int32(qh>>17&0x10))-16)*int32(int8(y[23]))) + (((int32(x[12]>>4)|int32(qh>>18&0x10))-16)*int32(int8(y[24])) + ((int32(x[13]>>4)|int32(qh>>19&0x10))-16)*int32(int8(y[25])))
		s1 += (((int32(x[14]>>4)|int32(qh>>20&0x10))-16)*int32(int8(y[26])) + ((int32(x[15]>>4)|int32(qh>>21&0x10))-16)*int32(int8(y[27]))) + (((int32(x[16]>>4)|int32(qh>>22&0x10))-16)*int32(int8(y[28])) + ((int32(x[17]>>4)|int32(qh>>23&0x10))-16)*int32(int8(y[29])))
		s1 += (((int32(x[18]>>4)|int32(qh>>24&0x10))-16)*int32(int8(y[30])) + ((int32(x[19]>>4)|int32(qh>>25&0x10))-16)*int32(int8(y[31]))) + (((int32(x[20]>>4)|int32(qh>>26&0x10))-16)*int32(int8(y[32])) + ((int32(x[21]>>4)|int32(qh>>27&0x10))-16)*int32(int8(y[33])))
		dx := plainHalfLUT[binary.LittleEndian.Uint16(x[0:2])]
		dy := plainHalfLUT[binary.LittleEndian.Uint16(y[0:2])]
		sum += float32(float32(s0+s1) * float32(dx*dy))
	}
	return sum
}

// dotQ5_1Q8_1 is the dot of Q5_1 weights and Q8_1 activations.
func dotQ5_1Q8_1(n int, w, act []byte) float32 {
	nb, ok := blockDotCheck(n, q5_1BlockBytes, q8_1BlockBytes, w, act)
	if !ok {
		return float32(math.NaN())
	}
	var sum float32
	for i := 0; i < nb; i++ {
		x := (*[q5_1BlockBytes]byte)(w[i*q5_1BlockBytes:])
		y := (*[q8_1BlockBytes]byte)(act[i*q8_1BlockBytes:])
		qh := binary.LittleEndian.Uint32(x[4:8])
		var s0, s1 int32
		s0 += ((int32(x[8]&15)|int32(qh<<4&0x10))*int32(int8(y[4])) + (int32(x[9]&15)|int32(qh<<3&0x10))*int32(int8(y[5]))) + ((int32(x[10]&15)|int32(qh<<2&0x10))*int32(int8(y[6])) + (int32(x[11]&15)|int32(qh<<1&0x10))*int32(int8(y[7])))
		s0 += ((int32(x[12]&15)|int32(qh&0x10))*int32(int8(y[8])) + (int32(x[13]&15)|int32(qh>>1&0x10))*int32(int8(y[9]))) + ((int32(x[14]&15)|int32(qh>>2&0x10))*int32(int8(y[10])) + (int32(x[15]&15)|int32(qh>>3&0x10))*int32(int8(y[11])))
		s0 += ((int32(x[16]&15)|int32(qh>>4&0x10))*int32(int8(y[12])) + (int32(x[17]&15)|int32(qh>>5&0x10))*int32(int8(y[13]))) + ((int32(x[18]&15)|int32(qh>>6&0x10))*int32(int8(y[14])) + (int32(x[19]&15)|int32(qh>>7&0x10))*int32(int8(y[15])))
		s0 += ((int32(x[20]&15)|int32(qh>>8&0x10))*int32(int8(y[16])) + (int32(x[21]&15)|int32(qh>>9&0x10))*int32(int8(y[17]))) + ((int32(x[22]&15)|int32(qh>>10&0x10))*int32(int8(y[18])) + (int32(x[23]&15)|int32(qh>>11&0x10))*int32(int8(y[19])))
		s1 += ((int32(x[8]>>4)|int32(qh>>12&0x10))*int32(int8(y[20])) + (int32(x[9]>>4)|int32(qh>>13&0x10))*int32(int8(y[21]))) + ((int32(x[10]>>4)|int32(qh>>14&0x10))*int32(int8(y[22])) + (int32(x[11]>>4)|int32(qh>>15&0x10))*int32(int8(y[23])))
		s1 += ((int32(x[12]>>4)|int32(qh>>16&0x10))*int32(int8(y[24])) + (int32(x[13]>>4)|int32(qh>>17&0x10))*int32(int8(y[25]))) + ((int32(x[14]>>4)|int32(qh>>18&0x10))*int32(int8(y[26])) + (int32(x[15]>>4)|int32(qh>>19&0x10))*int32(int8(y[27])))
		s1 += ((int32(x[16]>>4)|int32(qh>>20&0x10))*int32(int8(y[28])) + (int32(x[17]>>4)|int32(qh>>21&0x10))*int32(int8(y[29]))) + ((int32(x[18]>>4)|int32(qh>>22&0x10))*int32(int8(y[30])) + (int32(x[19]>>4)|int32(qh>>23&0x10))*int32(int8(y[31])))
		s1 += ((int32(x[20]>>4)|int32(qh>>24&0x10))*int32(int8(y[32])) + (int32(x[21]>>4)|int32(qh>>25&0x10))*int32(int8(y[33]))) + ((int32(x[22]>>4)|int32(qh>>26&0x10))*int32(int8(y[34])) + (int32(x[23]>>4)|int32(qh>>27&0x10))*int32(int8(y[35])))
		dx := plainHalfLUT[binary.LittleEndian.Uint16(x[0:2])]
		mx := plainHalfLUT[binary.LittleEndian.Uint16(x[2:4])]
		dy := plainHalfLUT[binary.LittleEndian.Uint16(y[0:2])]
		sy := plainHalfLUT[binary.LittleEndian.Uint16(y[2:4])]
		sum += float32(float32(s0+s1)*float32(dx*dy)) + float32(mx*sy)
	}
	return sum
}

// dotQ8_0Q8_0 is the dot of Q8_0 weights and Q8_0 activations.
func dotQ8_0Q8_0(n int, w, act []byte) float32 {
	nb, ok := blockDotCheck(n, q8_0BlockBytes, q8_0BlockBytes, w, act)
	if !ok {
		return float32(math.NaN())
	}
	var sum float32
	for i := 0; i < nb; i++ {
		x := (*[q8_0BlockBytes]byte)(w[i*q8_0BlockBytes:])
		y := (*[q8_0BlockBytes]byte)(act[i*q8_0BlockBytes:])
		var s0, s1 int32
		s0 += (int32(int8(x[2]))*int32(int8(y[2])) + int32(int8(x[3]))*int32(int8(y[3]))) + (int32(int8(x[4]))*int32(int8(y[4])) + int32(int8(x[5]))*int32(int8(y[5])))
		s0 += (int32(int8(x[6]))*int32(int8(y[6])) + int32(int8(x[7]))*int32(int8(y[7]))) + (int32(int8(x[8]))*int32(int8(y[8])) + int32(int8(x[9]))*int32(int8(y[9])))
		s0 += (int32(int8(x[10]))*int32(int8(y[10])) + int32(int8(x[11]))*int32(int8(y[11]))) + (int32(int8(x[12]))*int32(int8(y[12])) + int32(int8(x[13]))*int32(int8(y[13])))
		s0 += (int32(int8(x[14]))*int32(int8(y[14])) + int32(int8(x[15]))*int32(int8(y[15]))) + (int32(int8(x[16]))*int32(int8(y[16])) + int32(int8(x[17]))*int32(int8(y[17])))
		s1 += (int32(int8(x[18]))*int32(int8(y[18])) + int32(int8(x[19]))*int32(int8(y[19]))) + (int32(int8(x[20]))*int32(int8(y[20])) + int32(int8(x[21]))*int32(int8(y[21])))
		s1 += (int32(int8(x[22]))*int32(int8(y[22])) + int32(int8(x[23]))*int32(int8(y[23]))) + (int32(int8(x[24]))*int32(int8(y[24])) + int32(int8(x[25]))*int32(int8(y[25])))
		s1 += (int32(int8(x[26]))*int32(int8(y[26])) + int32(int8(x[27]))*int32(int8(y[27]))) + (int32(int8(x[28]))*int32(int8(y[28])) + int32(int8(x[29]))*int32(int8(y[29])))
		s1 += (int32(int8(x[30]))*int32(int8(y[30])) + int32(int8(x[31]))*int32(int8(y[31]))) + (int32(int8(x[32]))*int32(int8(y[32])) + int32(int8(x[33]))*int32(int8(y[33])))
		dx := plainHalfLUT[binary.LittleEndian.Uint16(x[0:2])]
		dy := plainHalfLUT[binary.LittleEndian.Uint16(y[0:2])]
		sum += float32(float32(s0+s1) * float32(dx*dy))
	}
	return sum
}
