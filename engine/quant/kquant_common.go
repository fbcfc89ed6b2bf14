package quant

import (
	"encoding/binary"
	"math"
)

// Shared pieces of the K-quant formats (Q4_K, Q5_K, Q6_K): the rounding rule,
// the two scale searches of the reference quantizer and the 6-bit scale/min
// packing of Q4_K and Q5_K.
//
// Byte identity with the reference depends on float32 arithmetic done in the
// reference's operation order. Products that feed an addition are wrapped in
// an explicit float32 conversion: the Go spec lets a compiler fuse x*y+z
// (GOAMD64=v3, arm64), and an explicit conversion forbids that fusion.

// kGroupMaxEps is the amplitude under which a group counts as all zero.
const kGroupMaxEps = 1e-15

// Byte offsets inside the K-quant blocks.
const (
	q4KBytes = 144 // d f16 | dmin f16 | scales[12] | qs[128]
	q5KBytes = 176 // d f16 | dmin f16 | scales[12] | qh[32] | qs[128]
	q6KBytes = 210 // ql[128] | qh[64] | scales[16] int8 | d f16
	q8KBytes = 292 // d f32 | qs[256] int8 | bsums[16] int16

	kScalesOff = 4  // Q4_K / Q5_K: the 12 packed scale bytes
	q4KQsOff   = 16 // Q4_K: nibbles
	q5KQhOff   = 16 // Q5_K: fifth bits
	q5KQsOff   = 48 // Q5_K: nibbles
	q6KQhOff   = 128
	q6KScOff   = 192
	q6KDOff    = 208
	q8KQsOff   = 4
	q8KBsumOff = 260
)

// kNearestInt rounds to the nearest integer, ties to even, by adding 1.5*2^23
// in float32 and reading the mantissa, as the reference does. It is exact for
// |v| <= 2^22-1; beyond that it returns the same wrapped value as the reference.
func kNearestInt(v float32) int {
	s := float32(v) + 12582912 // conversion keeps a caller's product from fusing here
	return int(math.Float32bits(s)&0x007fffff) - 0x00400000
}

// kMakeQKX2Quants searches an asymmetric (scale, min) fit of x[:n] to levels
// 0..nmax under per-value weights: a first fit from the value range, then
// nstep+1 candidate inverse scales (rmin + rdelta*is + nmax)/(max-min), each
// refined by weighted least squares and kept when its weighted error
// (absolute when useMAD, else squared) is smaller. L receives the levels,
// Laux is scratch. It returns the scale and the (non-negative) min such that
// x ~ scale*L - min.
func kMakeQKX2Quants(n, nmax int, x, weights []float32, L, Laux []uint8,
	rmin, rdelta float32, nstep int, useMAD bool) (scale, theMin float32) {
	x = x[:n]
	weights = weights[:n]
	L = L[:n]
	Laux = Laux[:n]

	lo, hi := x[0], x[0]
	sumW := weights[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		if x[i] < lo {
			lo = x[i]
		}
		if x[i] > hi {
			hi = x[i]
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * x[i])
	}
	if lo > 0 {
		lo = 0
	}
	if hi == lo {
		for i := range L {
			L[i] = 0
		}
		return 0, -lo
	}
	fmax := float32(nmax)
	iscale := fmax / (hi - lo)
	scale = 1 / iscale
	var bestErr float32
	for i := range x {
		l := kNearestInt(float32(iscale * (x[i] - lo)))
		l = max(0, min(nmax, l))
		L[i] = uint8(l)
		diff := float32(scale*float32(L[i])) + lo - x[i]
		if useMAD {
			diff = float32(math.Abs(float64(diff)))
		} else {
			diff = float32(diff * diff)
		}
		bestErr += float32(weights[i] * diff)
	}
	if nstep < 1 {
		return scale, -lo
	}
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + float32(rdelta*float32(is)) + fmax) / (hi - lo)
		var sumL, sumL2, sumXL float32
		for i := range x {
			l := kNearestInt(float32(iscale * (x[i] - lo)))
			l = max(0, min(nmax, l))
			Laux[i] = uint8(l)
			w := weights[i]
			fl := float32(l)
			wl := float32(w * fl)
			sumL += wl
			sumL2 += float32(wl * fl)
			sumXL += float32(wl * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var curErr float32
			for i := range x {
				diff := float32(thisScale*float32(Laux[i])) + thisMin - x[i]
				if useMAD {
					diff = float32(math.Abs(float64(diff)))
				} else {
					diff = float32(diff * diff)
				}
				curErr += float32(weights[i] * diff)
			}
			if curErr < bestErr {
				copy(L, Laux)
				bestErr = curErr
				scale = thisScale
				lo = thisMin
			}
		}
	}
	return scale, -lo
}

// kMakeQXQuantsRMSE1 is the reference's symmetric scale search with squared
// value weights (rmse_type 1, no importance): levels -nmax..nmax-1 stored
// with an offset of nmax in L; the first fit from the signed extreme, then
// the inverse scales -(nmax + 0.1*is)/max for is in -9..9 (not 0), keeping
// the weighted least-squares scale with the best score. It returns the scale.
func kMakeQXQuantsRMSE1(n, nmax int, x []float32, L []int8) float32 {
	x = x[:n]
	L = L[:n]
	var mx, amax float32
	for _, v := range x {
		if av := float32(math.Abs(float64(v))); av > amax {
			amax = av
			mx = v
		}
	}
	if amax < kGroupMaxEps {
		for i := range L {
			L[i] = 0
		}
		return 0
	}
	fmax := float32(nmax)
	iscale := -fmax / mx
	var sumlx, suml2 float32
	for i, v := range x {
		l := kNearestInt(float32(iscale * v))
		l = max(-nmax, min(nmax-1, l))
		L[i] = int8(l + nmax)
		w := float32(v * v)
		fl := float32(l)
		sumlx += float32(float32(w*v) * fl)
		suml2 += float32(float32(w*fl) * fl)
	}
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := float32(scale * sumlx)
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fmax + float32(0.1*float32(is))) / mx
		sumlx, suml2 = 0, 0
		for _, v := range x {
			l := kNearestInt(float32(iscale * v))
			l = max(-nmax, min(nmax-1, l))
			w := float32(v * v)
			fl := float32(l)
			sumlx += float32(float32(w*v) * fl)
			suml2 += float32(float32(w*fl) * fl)
		}
		if suml2 > 0 && float32(sumlx*sumlx) > float32(best*suml2) {
			for i, v := range x {
				l := kNearestInt(float32(iscale * v))
				L[i] = int8(nmax + max(-nmax, min(nmax-1, l)))
			}
			scale = sumlx / suml2
			best = float32(scale * sumlx)
		}
	}
	return scale
}

// kScaleMinK4 reads the 6-bit scale and min of sub-block j (0..7) from the
// 12 packed bytes of Q4_K / Q5_K: sub-blocks 0-3 keep their six bits in the
// low bits of bytes j (scale) and j+4 (min); sub-blocks 4-7 keep their low
// nibbles in byte j+4 and their top two bits in the high bits of bytes j-4
// (scale) and j (min).
func kScaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xF | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// kScaleMinUnpack decodes all eight scale/min pairs of a Q4_K / Q5_K block.
func kScaleMinUnpack(q []byte, sc, m *[8]uint8) {
	q = q[:12]
	for j := 0; j < 4; j++ {
		sc[j] = q[j] & 63
		m[j] = q[j+4] & 63
		sc[j+4] = q[j+8]&0xF | (q[j]>>6)<<4
		m[j+4] = q[j+8]>>4 | (q[j+4]>>6)<<4
	}
}

// kQuantizeScaleMinBlock is the part Q4_K and Q5_K share for one 256-value
// block: per 32-value sub-block a kMakeQKX2Quants fit with weights
// av_x + |x| (av_x the sub-block's RMS), the 6-bit quantization of the
// scales and mins against their maxima, their packing into scales (12
// bytes), the fp16 super-scales d and dmin, and the re-quantization of the
// values with the final scales into L (0..nmax).
func kQuantizeScaleMinBlock(x []float32, nmax int, rmin, rdelta float32, nstep int,
	L *[QKK]uint8, scales []byte) (d, dmin uint16) {
	x = x[:QKK]
	scales = scales[:12]
	var (
		weights [32]float32
		laux    [32]uint8
		subSc   [8]float32
		subMin  [8]float32
	)
	var maxScale, maxMin float32
	for j := 0; j < QKK/32; j++ {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += float32(v * v)
		}
		avX := float32(math.Sqrt(float64(sumX2 / 32)))
		for l, v := range xs {
			weights[l] = avX + float32(math.Abs(float64(v)))
		}
		subSc[j], subMin[j] = kMakeQKX2Quants(32, nmax, xs, weights[:], L[32*j:32*j+32], laux[:],
			rmin, rdelta, nstep, false)
		if subSc[j] > maxScale {
			maxScale = subSc[j]
		}
		if subMin[j] > maxMin {
			maxMin = subMin[j]
		}
	}

	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	for j := 0; j < QKK/32; j++ {
		ls := min(63, uint8(kNearestInt(float32(invScale*subSc[j]))))
		lm := min(63, uint8(kNearestInt(float32(invMin*subMin[j]))))
		if j < 4 {
			scales[j] = ls
			scales[j+4] = lm
		} else {
			scales[j+4] = ls&0xF | (lm&0xF)<<4
			scales[j-4] |= (ls >> 4) << 6
			scales[j] |= (lm >> 4) << 6
		}
	}
	d = FP32ToFP16(maxScale / 63)
	dmin = FP32ToFP16(maxMin / 63)
	df, mf := FP16ToFP32(d), FP16ToFP32(dmin)

	for j := 0; j < QKK/32; j++ {
		sc, m := kScaleMinK4(j, scales)
		ds := float32(df * float32(sc))
		if ds == 0 {
			continue // keep the levels of the search
		}
		dm := float32(mf * float32(m))
		for ii := 0; ii < 32; ii++ {
			l := kNearestInt((x[32*j+ii] + dm) / ds)
			L[32*j+ii] = uint8(max(0, min(nmax, l)))
		}
	}
	return d, dmin
}

func kLE16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }

func kPut16(b []byte, v uint16) { binary.LittleEndian.PutUint16(b, v) }
