package quant

import (
	"encoding/binary"
	"math"
)

// Multi-token dots: one weight row against three activation rows at once,
// bitwise equal to three calls of the weight type's Dot.
//
// The weight row is decoded once into its integer levels (one int8 per value,
// in value order: the same integers the Dot multiplies), and the activation
// quants of three tokens are packed into one int64 per value,
//
//	p = a0 + a1<<21 + a2<<42   (lanes of 21 bits, two's complement)
//
// so one 64-bit multiply-add accumulates the three integer dots. A lane sum
// over one sub-block of at most 32 values is bounded by 32*128*128 = 2^19 <
// 2^20 in magnitude, so the three sums are recovered exactly from the packed
// sum (laneSplit), and the packed sum itself stays below 2^62. The integer
// sums equal the Dot's, and the f32 part of every block is the same
// expression in the same order, blocks accumulated in order: the results are
// the Dot's bits, whatever the values (extreme quants included).

const laneBits = 21

// MultiDot holds the multi-token routines of one weight type.
type MultiDot struct {
	// Decode writes the integer levels of the n values of the weight row w
	// into q[:n].
	Decode func(n int, w []byte, q []int8)
	// Dot3 sets out[t] to Dot(n, w, act[t]) for t = 0, 1, 2, given q from
	// Decode(n, w, q) and p from PackLanes of the same three activation
	// rows (a lane packed as zero may pair with any valid act row; its
	// output is then meaningless). Unlike Dot it does not check its
	// arguments: n must be a whole number of blocks and every slice must
	// hold n values (it panics otherwise).
	Dot3 func(n int, w []byte, q []int8, p []int64, act *[3][]byte, out *[3]float32)
}

// MultiDotOf returns the multi-token routines of weight type t, or nil when
// t has none (callers then use Traits.Dot).
func MultiDotOf(t Type) *MultiDot { return multiDots[t] }

var multiDots = map[Type]*MultiDot{
	Q4_0: {Decode: decodeQ4_0, Dot3: dot3Q4_0},
	Q5_0: {Decode: decodeQ5_0, Dot3: dot3Q5_0},
	Q8_0: {Decode: decodeQ8_0, Dot3: dot3Q8_0},
	Q4_1: {Decode: decodeQ4_1, Dot3: dot3Q4_1},
	Q5_1: {Decode: decodeQ5_1, Dot3: dot3Q5_1},
	Q4_K: {Decode: decodeQ4K, Dot3: dot3Q4K},
	Q5_K: {Decode: decodeQ5K, Dot3: dot3Q5K},
	Q6_K: {Decode: decodeQ6K, Dot3: dot3Q6K},
}

// PackLanes writes into p[:n] the quants of the activation rows a0, a1, a2
// (format vt: Q8_0, Q8_1 or Q8_K; n values each) packed into 21-bit lanes.
// A nil row packs as zero lanes.
func PackLanes(vt Type, n int, a0, a1, a2 []byte, p []int64) {
	var bs, off, per int
	switch vt {
	case Q8_0:
		bs, off, per = q8_0BlockBytes, 2, QK
	case Q8_1:
		bs, off, per = q8_1BlockBytes, 4, QK
	case Q8_K:
		bs, off, per = q8KBytes, q8KQsOff, QKK
	default:
		panic("quant: PackLanes of " + vt.String())
	}
	p = p[:n]
	for i := 0; i < n/per; i++ {
		dst := p[i*per : (i+1)*per]
		src := a0[i*bs+off : i*bs+off+per]
		for l := range dst {
			dst[l] = int64(int8(src[l]))
		}
		if a1 != nil {
			src := a1[i*bs+off : i*bs+off+per]
			for l := range dst {
				dst[l] += int64(int8(src[l])) << laneBits
			}
		}
		if a2 != nil {
			src := a2[i*bs+off : i*bs+off+per]
			for l := range dst {
				dst[l] += int64(int8(src[l])) << (2 * laneBits)
			}
		}
	}
}

// laneSplit recovers the three lane sums of a packed sum s; each lane must
// lie in [-2^20, 2^20).
func laneSplit(s int64) (l0, l1, l2 int32) {
	a := s << (64 - laneBits) >> (64 - laneBits)
	s = (s - a) >> laneBits
	b := s << (64 - laneBits) >> (64 - laneBits)
	c := (s - b) >> laneBits
	return int32(a), int32(b), int32(c)
}

// The 32-value block types.

func decodeQ8_0(n int, w []byte, q []int8) {
	for i := 0; i < n/QK; i++ {
		x := (*[q8_0BlockBytes]byte)(w[i*q8_0BlockBytes:])
		d := (*[QK]int8)(q[i*QK:])
		for l := 0; l < QK; l++ {
			d[l] = int8(x[2+l])
		}
	}
}

func decodeQ4_0(n int, w []byte, q []int8) {
	for i := 0; i < n/QK; i++ {
		x := (*[q4_0BlockBytes]byte)(w[i*q4_0BlockBytes:])
		d := (*[QK]int8)(q[i*QK:])
		for l := 0; l < QK/2; l++ {
			d[l] = int8(x[2+l]&15) - 8
			d[l+16] = int8(x[2+l]>>4) - 8
		}
	}
}

func decodeQ4_1(n int, w []byte, q []int8) {
	for i := 0; i < n/QK; i++ {
		x := (*[q4_1BlockBytes]byte)(w[i*q4_1BlockBytes:])
		d := (*[QK]int8)(q[i*QK:])
		for l := 0; l < QK/2; l++ {
			d[l] = int8(x[4+l] & 15)
			d[l+16] = int8(x[4+l] >> 4)
		}
	}
}

func decodeQ5_0(n int, w []byte, q []int8) {
	for i := 0; i < n/QK; i++ {
		x := (*[q5_0BlockBytes]byte)(w[i*q5_0BlockBytes:])
		d := (*[QK]int8)(q[i*QK:])
		qh := binary.LittleEndian.Uint32(x[2:6])
		for l := 0; l < QK/2; l++ {
			d[l] = int8(x[6+l]&15|byte(qh>>l&1)<<4) - 16
			d[l+16] = int8(x[6+l]>>4|byte(qh>>(l+16)&1)<<4) - 16
		}
	}
}

func decodeQ5_1(n int, w []byte, q []int8) {
	for i := 0; i < n/QK; i++ {
		x := (*[q5_1BlockBytes]byte)(w[i*q5_1BlockBytes:])
		d := (*[QK]int8)(q[i*QK:])
		qh := binary.LittleEndian.Uint32(x[4:8])
		for l := 0; l < QK/2; l++ {
			d[l] = int8(x[8+l]&15 | byte(qh>>l&1)<<4)
			d[l+16] = int8(x[8+l]>>4 | byte(qh>>(l+16)&1)<<4)
		}
	}
}

// dot3D0 is Dot3 of the types whose block is d f16 | quants, against Q8_0:
// sum += f32(sumi) * (dx*dy) per block, as dotQ4_0Q8_0 and friends.
func dot3D0(n, wbs int, w []byte, q []int8, p []int64, act *[3][]byte, out *[3]float32) {
	a0, a1, a2 := act[0], act[1], act[2]
	lut := plainHalfLUT
	var s0, s1, s2 float32
	for i := 0; i < n/QK; i++ {
		l0, l1, l2 := laneSplit(laneDot32((*[QK]int8)(q[i*QK:]), (*[QK]int64)(p[i*QK:])))
		dx := lut[binary.LittleEndian.Uint16(w[i*wbs:])]
		y0 := (*[2]byte)(a0[i*q8_0BlockBytes:])
		y1 := (*[2]byte)(a1[i*q8_0BlockBytes:])
		y2 := (*[2]byte)(a2[i*q8_0BlockBytes:])
		s0 += float32(float32(l0) * float32(dx*lut[binary.LittleEndian.Uint16(y0[:])]))
		s1 += float32(float32(l1) * float32(dx*lut[binary.LittleEndian.Uint16(y1[:])]))
		s2 += float32(float32(l2) * float32(dx*lut[binary.LittleEndian.Uint16(y2[:])]))
	}
	out[0], out[1], out[2] = s0, s1, s2
}

func dot3Q4_0(n int, w []byte, q []int8, p []int64, act *[3][]byte, out *[3]float32) {
	dot3D0(n, q4_0BlockBytes, w, q, p, act, out)
}

func dot3Q5_0(n int, w []byte, q []int8, p []int64, act *[3][]byte, out *[3]float32) {
	dot3D0(n, q5_0BlockBytes, w, q, p, act, out)
}

func dot3Q8_0(n int, w []byte, q []int8, p []int64, act *[3][]byte, out *[3]float32) {
	dot3D0(n, q8_0BlockBytes, w, q, p, act, out)
}

// dot3D1 is Dot3 of the types whose block is d f16 | m f16 | quants, against
// Q8_1: sum += f32(sumi)*(dx*dy) + mx*sy per block, as dotQ4_1Q8_1.
func dot3D1(n, wbs int, w []byte, q []int8, p []int64, act *[3][]byte, out *[3]float32) {
	a0, a1, a2 := act[0], act[1], act[2]
	lut := plainHalfLUT
	var s0, s1, s2 float32
	for i := 0; i < n/QK; i++ {
		l0, l1, l2 := laneSplit(laneDot32((*[QK]int8)(q[i*QK:]), (*[QK]int64)(p[i*QK:])))
		x := (*[4]byte)(w[i*wbs:])
		dx := lut[binary.LittleEndian.Uint16(x[0:2])]
		mx := lut[binary.LittleEndian.Uint16(x[2:4])]
		y0 := (*[4]byte)(a0[i*q8_1BlockBytes:])
		y1 := (*[4]byte)(a1[i*q8_1BlockBytes:])
		y2 := (*[4]byte)(a2[i*q8_1BlockBytes:])
		s0 += float32(float32(l0)*float32(dx*lut[binary.LittleEndian.Uint16(y0[0:2])])) + float32(mx*lut[binary.LittleEndian.Uint16(y0[2:4])])
		s1 += float32(float32(l1)*float32(dx*lut[binary.LittleEndian.Uint16(y1[0:2])])) + float32(mx*lut[binary.LittleEndian.Uint16(y1[2:4])])
		s2 += float32(float32(l2)*float32(dx*lut[binary.LittleEndian.Uint16(y2[0:2])])) + float32(mx*lut[binary.LittleEndian.Uint16(y2[2:4])])
	}
	out[0], out[1], out[2] = s0, s1, s2
}

func dot3Q4_1(n int, w []byte, q []int8, p []int64, act *[3][]byte, out *[3]float32) {
	dot3D1(n, q4_1BlockBytes, w, q, p, act, out)
}

func dot3Q5_1(n int, w []byte, q []int8, p []int64, act *[3][]byte, out *[3]float32) {
	dot3D1(n, q5_1BlockBytes, w, q, p, act, out)
}

// The K-quants: levels in value order, sub-block j (32 values for Q4_K and
// Q5_K, 16 for Q6_K) scaled by scale j, as the Dots sum them.

func decodeQ4K(n int, w []byte, q []int8) {
	for i := 0; i < n/QKK; i++ {
		x := (*[q4KBytes]byte)(w[i*q4KBytes:])
		d := (*[QKK]int8)(q[i*QKK:])
		for c := 0; c < 4; c++ {
			qs := (*[32]byte)(x[q4KQsOff+32*c:])
			lo := (*[32]int8)(d[64*c:])
			hi := (*[32]int8)(d[64*c+32:])
			for l := 0; l < 32; l++ {
				lo[l] = int8(qs[l] & 0xF)
				hi[l] = int8(qs[l] >> 4)
			}
		}
	}
}

func decodeQ5K(n int, w []byte, q []int8) {
	for i := 0; i < n/QKK; i++ {
		x := (*[q5KBytes]byte)(w[i*q5KBytes:])
		d := (*[QKK]int8)(q[i*QKK:])
		qh := (*[32]byte)(x[q5KQhOff:])
		for c := 0; c < 4; c++ {
			qs := (*[32]byte)(x[q5KQsOff+32*c:])
			lo := (*[32]int8)(d[64*c:])
			hi := (*[32]int8)(d[64*c+32:])
			for l := 0; l < 32; l++ {
				h := qh[l] >> (2 * c)
				lo[l] = int8(qs[l]&0xF | (h&1)<<4)
				hi[l] = int8(qs[l]>>4 | (h&2)<<3)
			}
		}
	}
}

func decodeQ6K(n int, w []byte, q []int8) {
	for i := 0; i < n/QKK; i++ {
		x := (*[q6KBytes]byte)(w[i*q6KBytes:])
		d := (*[QKK]int8)(q[i*QKK:])
		for h := 0; h < 2; h++ {
			ql := (*[64]byte)(x[64*h:])
			qh := (*[32]byte)(x[q6KQhOff+32*h:])
			v := (*[128]int8)(d[128*h:])
			for l := 0; l < 32; l++ {
				v[l] = int8(ql[l]&0xF|(qh[l]&3)<<4) - 32
				v[l+32] = int8(ql[l+32]&0xF|(qh[l]>>2&3)<<4) - 32
				v[l+64] = int8(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				v[l+96] = int8(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
			}
		}
	}
}

// dot3ScaleMin is Dot3 of Q4_K and Q5_K (block bytes wbs): per block
// sum += d*dq8*sumi - dmin*dq8*summs, as dotBlockQ4K.
func dot3ScaleMin(n, wbs int, w []byte, q []int8, p []int64, act *[3][]byte, out *[3]float32) {
	var s [3]float32
	for i := 0; i < n/QKK; i++ {
		x := w[i*wbs : i*wbs+16]
		var sc, mn [8]uint8
		kScaleMinUnpack(x[kScalesOff:kScalesOff+12], &sc, &mn)
		var sumi [3]int32
		for j := 0; j < 8; j++ {
			o := i*QKK + 32*j
			l0, l1, l2 := laneSplit(laneDot32((*[32]int8)(q[o:]), (*[32]int64)(p[o:])))
			f := int32(sc[j])
			sumi[0] += f * l0
			sumi[1] += f * l1
			sumi[2] += f * l2
		}
		xd := FP16ToFP32(kLE16(x[0:]))
		xm := FP16ToFP32(kLE16(x[2:]))
		for t := 0; t < 3; t++ {
			y := (*[q8KBytes]byte)(act[t][i*q8KBytes:])
			var summs int32
			for j := 0; j < 8; j++ {
				b0 := int32(int16(kLE16(y[q8KBsumOff+4*j:])))
				b1 := int32(int16(kLE16(y[q8KBsumOff+4*j+2:])))
				summs += int32(mn[j]) * (b0 + b1)
			}
			yd := math.Float32frombits(q8KD(y))
			d := float32(xd * yd)
			dmin := float32(xm * yd)
			s[t] += float32(d*float32(sumi[t])) - float32(dmin*float32(summs))
		}
	}
	*out = s
}

func dot3Q4K(n int, w []byte, q []int8, p []int64, act *[3][]byte, out *[3]float32) {
	dot3ScaleMin(n, q4KBytes, w, q, p, act, out)
}

func dot3Q5K(n int, w []byte, q []int8, p []int64, act *[3][]byte, out *[3]float32) {
	dot3ScaleMin(n, q5KBytes, w, q, p, act, out)
}

// dot3Q6K: per block sum += d*dq8*sumi over 16 sub-blocks of 16, as dotBlockQ6K.
func dot3Q6K(n int, w []byte, q []int8, p []int64, act *[3][]byte, out *[3]float32) {
	var s [3]float32
	for i := 0; i < n/QKK; i++ {
		x := (*[q6KBytes]byte)(w[i*q6KBytes:])
		sc := (*[16]byte)(x[q6KScOff:])
		var sumi [3]int32
		for j := 0; j < 16; j++ {
			o := i*QKK + 16*j
			l0, l1, l2 := laneSplit(laneDot16((*[16]int8)(q[o:]), (*[16]int64)(p[o:])))
			f := int32(int8(sc[j]))
			sumi[0] += f * l0
			sumi[1] += f * l1
			sumi[2] += f * l2
		}
		xd := FP16ToFP32(kLE16(x[q6KDOff:]))
		for t := 0; t < 3; t++ {
			y := (*[q8KBytes]byte)(act[t][i*q8KBytes:])
			d := float32(xd * math.Float32frombits(q8KD(y)))
			s[t] += float32(d * float32(sumi[t]))
		}
	}
	*out = s
}

// laneDot32 and laneDot16 are the packed integer dots of one sub-block.
func laneDot32(q *[32]int8, p *[32]int64) int64 {
	var s0, s1 int64
	s0 += int64(q[0])*p[0] + int64(q[1])*p[1] + int64(q[2])*p[2] + int64(q[3])*p[3]
	s1 += int64(q[4])*p[4] + int64(q[5])*p[5] + int64(q[6])*p[6] + int64(q[7])*p[7]
	s0 += int64(q[8])*p[8] + int64(q[9])*p[9] + int64(q[10])*p[10] + int64(q[11])*p[11]
	s1 += int64(q[12])*p[12] + int64(q[13])*p[13] + int64(q[14])*p[14] + int64(q[15])*p[15]
	s0 += int64(q[16])*p[16] + int64(q[17])*p[17] + int64(q[18])*p[18] + int64(q[19])*p[19]
	s1 += int64(q[20])*p[20] + int64(q[21])*p[21] + int64(q[22])*p[22] + int64(q[23])*p[23]
	s0 += int64(q[24])*p[24] + int64(q[25])*p[25] + int64(q[26])*p[26] + int64(q[27])*p[27]
	s1 += int64(q[28])*p[28] + int64(q[29])*p[29] + int64(q[30])*p[30] + int64(q[31])*p[31]
	return s0 + s1
}

func laneDot16(q *[16]int8, p *[16]int64) int64 {
	var s0, s1 int64
	s0 += int64(q[0])*p[0] + int64(q[1])*p[1] + int64(q[2])*p[2] + int64(q[3])*p[3]
	s1 += int64(q[4])*p[4] + int64(q[5])*p[5] + int64(q[6])*p[6] + int64(q[7])*p[7]
	s0 += int64(q[8])*p[8] + int64(q[9])*p[9] + int64(q[10])*p[10] + int64(q[11])*p[11]
	s1 += int64(q[12])*p[12] + int64(q[13])*p[13] + int64(q[14])*p[14] + int64(q[15])*p[15]
	return s0 + s1
}
