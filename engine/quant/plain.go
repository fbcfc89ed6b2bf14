package quant

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// The plain types F32, F16 and BF16: one value per "block", little-endian.
//
// Their Dot reads f32 activations (little-endian f32 bytes). On a
// little-endian host (amd64, arm64: every machine minfer runs on) an aligned
// f32 byte slice is read in place as []float32; otherwise, or when a slice is
// not 4-byte aligned, the bytes are decoded with encoding/binary. Both paths
// give the same bits.

// hostLittleEndian is true when the native byte order is little-endian, so
// that little-endian f32 bytes may be reinterpreted in place.
var hostLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// plainHalfLUT maps every f16 bit pattern to its f32 value (256 KiB): the
// F16 dot and dequantizer look values up instead of decoding them.
var plainHalfLUT = func() *[1 << 16]float32 {
	t := new([1 << 16]float32)
	for h := range t {
		t[h] = FP16ToFP32(uint16(h))
	}
	return t
}()

// plainF32View returns b as n float32 values without copying when the host
// is little-endian and b is 4-byte aligned; ok is false otherwise. b must hold
// at least 4*n bytes.
func plainF32View(b []byte, n int) (v []float32, ok bool) {
	if n == 0 {
		return nil, true
	}
	if !hostLittleEndian || uintptr(unsafe.Pointer(&b[0]))%4 != 0 {
		return nil, false
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n), true
}

func dequantizeF32(src []byte, dst []float32) {
	n := min(len(dst), len(src)/4)
	for i := 0; i < n; i++ {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func quantizeF32(src []float32, dst []byte) {
	n := min(len(src), len(dst)/4)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(src[i]))
	}
}

func dequantizeF16(src []byte, dst []float32) {
	n := min(len(dst), len(src)/2)
	lut := plainHalfLUT
	for i := 0; i < n; i++ {
		dst[i] = lut[binary.LittleEndian.Uint16(src[2*i:])]
	}
}

func quantizeF16(src []float32, dst []byte) {
	n := min(len(src), len(dst)/2)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint16(dst[2*i:], FP32ToFP16(src[i]))
	}
}

func dequantizeBF16(src []byte, dst []float32) {
	n := min(len(dst), len(src)/2)
	for i := 0; i < n; i++ {
		dst[i] = BF16ToFP32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

func quantizeBF16(src []float32, dst []byte) {
	n := min(len(src), len(dst)/2)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint16(dst[2*i:], FP32ToBF16(src[i]))
	}
}

// The plain dots accumulate in f32 over 8 lanes (lane i%8 holds the products
// of elements i, i+8, ...), combine the lanes as
// ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) and then add the n%8 tail elements in
// order. Every product and sum is rounded to f32 (no fused multiply-add), so
// the result is the same on every host.

// plainDotCheck reports whether w (wbytes per value) and act (f32) hold n values.
func plainDotCheck(n, wbytes int, w, act []byte) bool {
	return n >= 0 && n <= len(w)/wbytes && n <= len(act)/4
}

// plainDotF32F32 is the 8-lane dot of two f32 slices of equal length.
func plainDotF32F32(w, a []float32) float32 {
	n := len(w)
	a = a[:n]
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	i := 0
	for ; i+8 <= n; i += 8 {
		x := (*[8]float32)(w[i : i+8])
		y := (*[8]float32)(a[i : i+8])
		l0 += float32(x[0] * y[0])
		l1 += float32(x[1] * y[1])
		l2 += float32(x[2] * y[2])
		l3 += float32(x[3] * y[3])
		l4 += float32(x[4] * y[4])
		l5 += float32(x[5] * y[5])
		l6 += float32(x[6] * y[6])
		l7 += float32(x[7] * y[7])
	}
	s := ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))
	for ; i < n; i++ {
		s += float32(w[i] * a[i])
	}
	return s
}

// dotF32F32: f32 weights against f32 activations.
func dotF32F32(n int, w, act []byte) float32 {
	if !plainDotCheck(n, 4, w, act) {
		return float32(math.NaN())
	}
	wv, okw := plainF32View(w, n)
	av, oka := plainF32View(act, n)
	if okw && oka {
		return plainDotF32F32(wv, av)
	}
	var l [8]float32
	i := 0
	for ; i+8 <= n; i += 8 {
		x := w[4*i : 4*i+32 : 4*i+32]
		y := act[4*i : 4*i+32 : 4*i+32]
		for k := 0; k < 8; k++ {
			xv := math.Float32frombits(binary.LittleEndian.Uint32(x[4*k:]))
			yv := math.Float32frombits(binary.LittleEndian.Uint32(y[4*k:]))
			l[k] += float32(xv * yv)
		}
	}
	s := ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
	for ; i < n; i++ {
		xv := math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:]))
		yv := math.Float32frombits(binary.LittleEndian.Uint32(act[4*i:]))
		s += float32(xv * yv)
	}
	return s
}

// plainActAt reads f32 activation i from act (fallback path).
func plainActAt(act []byte, i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(act[4*i:]))
}

// dotF16F32: f16 weights against f32 activations.
func dotF16F32(n int, w, act []byte) float32 {
	if !plainDotCheck(n, 2, w, act) {
		return float32(math.NaN())
	}
	lut := plainHalfLUT
	av, ok := plainF32View(act, n)
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	i := 0
	if ok {
		for ; i+8 <= n; i += 8 {
			x := (*[16]byte)(w[2*i : 2*i+16])
			y := (*[8]float32)(av[i : i+8])
			l0 += float32(lut[binary.LittleEndian.Uint16(x[0:2])] * y[0])
			l1 += float32(lut[binary.LittleEndian.Uint16(x[2:4])] * y[1])
			l2 += float32(lut[binary.LittleEndian.Uint16(x[4:6])] * y[2])
			l3 += float32(lut[binary.LittleEndian.Uint16(x[6:8])] * y[3])
			l4 += float32(lut[binary.LittleEndian.Uint16(x[8:10])] * y[4])
			l5 += float32(lut[binary.LittleEndian.Uint16(x[10:12])] * y[5])
			l6 += float32(lut[binary.LittleEndian.Uint16(x[12:14])] * y[6])
			l7 += float32(lut[binary.LittleEndian.Uint16(x[14:16])] * y[7])
		}
	} else {
		for ; i+8 <= n; i += 8 {
			x := (*[16]byte)(w[2*i : 2*i+16])
			l0 += float32(lut[binary.LittleEndian.Uint16(x[0:2])] * plainActAt(act, i))
			l1 += float32(lut[binary.LittleEndian.Uint16(x[2:4])] * plainActAt(act, i+1))
			l2 += float32(lut[binary.LittleEndian.Uint16(x[4:6])] * plainActAt(act, i+2))
			l3 += float32(lut[binary.LittleEndian.Uint16(x[6:8])] * plainActAt(act, i+3))
			l4 += float32(lut[binary.LittleEndian.Uint16(x[8:10])] * plainActAt(act, i+4))
			l5 += float32(lut[binary.LittleEndian.Uint16(x[10:12])] * plainActAt(act, i+5))
			l6 += float32(lut[binary.LittleEndian.Uint16(x[12:14])] * plainActAt(act, i+6))
			l7 += float32(lut[binary.LittleEndian.Uint16(x[14:16])] * plainActAt(act, i+7))
		}
	}
	s := ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))
	for ; i < n; i++ {
		s += float32(lut[binary.LittleEndian.Uint16(w[2*i:])] * plainActAt(act, i))
	}
	return s
}

// dotBF16F32: bf16 weights against f32 activations.
func dotBF16F32(n int, w, act []byte) float32 {
	if !plainDotCheck(n, 2, w, act) {
		return float32(math.NaN())
	}
	av, ok := plainF32View(act, n)
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	i := 0
	if ok {
		for ; i+8 <= n; i += 8 {
			x := (*[16]byte)(w[2*i : 2*i+16])
			y := (*[8]float32)(av[i : i+8])
			l0 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[0:2])) * y[0])
			l1 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[2:4])) * y[1])
			l2 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[4:6])) * y[2])
			l3 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[6:8])) * y[3])
			l4 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[8:10])) * y[4])
			l5 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[10:12])) * y[5])
			l6 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[12:14])) * y[6])
			l7 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[14:16])) * y[7])
		}
	} else {
		for ; i+8 <= n; i += 8 {
			x := (*[16]byte)(w[2*i : 2*i+16])
			l0 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[0:2])) * plainActAt(act, i))
			l1 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[2:4])) * plainActAt(act, i+1))
			l2 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[4:6])) * plainActAt(act, i+2))
			l3 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[6:8])) * plainActAt(act, i+3))
			l4 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[8:10])) * plainActAt(act, i+4))
			l5 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[10:12])) * plainActAt(act, i+5))
			l6 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[12:14])) * plainActAt(act, i+6))
			l7 += float32(BF16ToFP32(binary.LittleEndian.Uint16(x[14:16])) * plainActAt(act, i+7))
		}
	}
	s := ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))
	for ; i < n; i++ {
		s += float32(BF16ToFP32(binary.LittleEndian.Uint16(w[2*i:])) * plainActAt(act, i))
	}
	return s
}
