package quant

import (
	"encoding/binary"
	"math"
)

// Q8_K: the activation format of the K-quant dot products. 256 values as
// int8 q with one f32 d (value = d*q), plus the sums of the 16 groups of 16
// q that the Q4_K / Q5_K dots use for their min term.
// Layout (292 bytes): d f32 | qs[256] int8 | bsums[16] int16, little endian.

// quantizeQ8K writes src as Q8_K with the semantics of quantize_row_q8_K_ref:
// the signed value of largest magnitude maps to -127 (iscale = -127/max),
// rounding is nearest-even, levels are clamped to 127 and d = 1/iscale.
// An all-zero block gets d = 0, zero levels and zero sums.
func quantizeQ8K(src []float32, dst []byte) {
	for i := 0; i < len(src)/QKK; i++ {
		x := src[i*QKK : (i+1)*QKK]
		y := (*[q8KBytes]byte)(dst[i*q8KBytes:])
		var mx, amax float32
		for _, v := range x {
			if av := float32(math.Abs(float64(v))); av > amax {
				amax = av
				mx = v
			}
		}
		if amax == 0 {
			*y = [q8KBytes]byte{}
			continue
		}
		iscale := -127 / mx
		qs := y[q8KQsOff : q8KQsOff+QKK]
		for j, v := range x {
			qs[j] = byte(int8(min(127, kNearestInt(float32(iscale*v)))))
		}
		for g := 0; g < QKK/16; g++ {
			var s int32
			for _, q := range qs[16*g : 16*g+16] {
				s += int32(int8(q))
			}
			binary.LittleEndian.PutUint16(y[q8KBsumOff+2*g:], uint16(int16(s)))
		}
		binary.LittleEndian.PutUint32(y[0:], math.Float32bits(1/iscale))
	}
}

// dequantizeQ8K expands whole Q8_K blocks into dst.
func dequantizeQ8K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QKK; i++ {
		x := (*[q8KBytes]byte)(src[i*q8KBytes:])
		y := dst[i*QKK : (i+1)*QKK]
		d := math.Float32frombits(q8KD(x))
		for j := range y {
			y[j] = d * float32(int8(x[q8KQsOff+j]))
		}
	}
}

// q8KD returns the bits of a Q8_K block's f32 scale.
func q8KD(y *[q8KBytes]byte) uint32 { return binary.LittleEndian.Uint32(y[0:4]) }
