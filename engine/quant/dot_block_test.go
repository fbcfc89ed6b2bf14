package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

var blkDotTypes = []Type{F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0}

// blkDotFixture quantizes weight row wrow as typ and activation row arow in
// typ's VecDot format.
func blkDotFixture(t testing.TB, typ Type, wrow, arow []float32) (tr *Traits, w, act []byte) {
	t.Helper()
	tr, err := TraitsOf(typ)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := typ.RowBytes(len(wrow))
	if err != nil {
		t.Fatal(err)
	}
	ab, err := ActivationBytes(typ, len(arow))
	if err != nil {
		t.Fatal(err)
	}
	w, act = make([]byte, wb), make([]byte, ab)
	if err := Quantize(typ, wrow, w); err != nil {
		t.Fatal(err)
	}
	if err := Quantize(tr.VecDot, arow, act); err != nil {
		t.Fatal(err)
	}
	return tr, w, act
}

// blkDotRows returns weight and activation rows: random ones and, when the
// shared data is present, the reference inputs against shifted reference rows.
func blkDotRows(t *testing.T) (ws, as [][]float32) {
	ws = blkRandomRows(3, 20, 1024)
	as = blkRandomRows(4, 20, 1024)
	// activation rows of mixed sign for every weight row
	for i := range as {
		as[i], as[(i+1)%len(as)] = as[(i+1)%len(as)], as[i]
	}
	return ws, as
}

// Dot(w, q(x)) against the float64 dot of the dequantized weight and the
// dequantized activation. The bound is the f32 rounding of the per-block
// scaling and of the block-order accumulation, (nb+3)*2^-24*sum|w_i*a_i|,
// plus, for the Q8_1 formats, the gap between the stored block sum
// s = fp16(d*sum q) (made from the unrounded activation scale d) and the sum
// of the dequantized activations, fp16(d)*sum q, times the weight min m:
// sum_b |m_b| * (2^-11*|s_b| + |sum q_b|*|d_b - fp16(d_b)|).
func TestDotBlockTypes_MatchFloat64OfDequantizedWithinF32RoundingBound(t *testing.T) {
	ws, as := blkDotRows(t)
	for _, typ := range blkDotTypes {
		t.Run(typ.String(), func(t *testing.T) {
			for r := range ws {
				tr, w, act := blkDotFixture(t, typ, ws[r], as[r])
				n := len(ws[r])
				dw, da := make([]float32, n), make([]float32, n)
				if err := Dequantize(typ, w, dw); err != nil {
					t.Fatal(err)
				}
				if err := Dequantize(tr.VecDot, act, da); err != nil {
					t.Fatal(err)
				}
				var ref, sumAbs float64
				for i := range dw {
					p := float64(dw[i]) * float64(da[i])
					ref += p
					sumAbs += math.Abs(p)
				}
				steps := n/QK + 3
				if typ.BlockSize() == 1 {
					steps = n/8 + 12
				}
				tol := float64(steps) * 0x1p-24 * sumAbs
				if tr.VecDot == Q8_1 {
					bb := typ.BlockBytes()
					for b := 0; b < n/QK; b++ {
						m := blkH(w, b*bb+2)
						s, dh := blkH(act, b*36+2), blkH(act, b*36)
						var amax float32
						sumq := 0.0
						for j := 0; j < QK; j++ {
							amax = max(amax, blkAbs(as[r][b*QK+j]))
							sumq += float64(int8(act[b*36+4+j]))
						}
						d := float64(amax / 127)
						// s = fp16(d*sum q) is made with the unrounded d; the
						// dequantized activation uses fp16(d)
						tol += math.Abs(m) * (0x1p-11*math.Abs(s) + math.Abs(sumq)*math.Abs(d-dh) + 0x1p-22*math.Abs(s))
					}
				}
				got := float64(tr.Dot(n, w, act))
				if e := math.Abs(got - ref); !(e <= tol) {
					t.Fatalf("row %d: dot %g, float64 reference %g, |err| %g > %g", r, got, ref, e, tol)
				}
			}
		})
	}
}

// blkIntDot is a straightforward reimplementation of the block dots: unpack
// every quant to an int, sum the products per block, scale with the same f32
// formula, accumulate blocks in order.
func blkIntDot(typ Type, n int, w, act []byte) float32 {
	bb := typ.BlockBytes()
	ab := 34
	if typ == Q4_1 || typ == Q5_1 {
		ab = 36
	}
	var sum float32
	for b := 0; b < n/QK; b++ {
		x, y := w[b*bb:(b+1)*bb], act[b*ab:(b+1)*ab]
		var wq [QK]int
		switch typ {
		case Q4_0, Q4_1:
			qs := x[len(x)-16:]
			for j := 0; j < 16; j++ {
				wq[j], wq[j+16] = int(qs[j]%16), int(qs[j]/16)
			}
		case Q5_0, Q5_1:
			qs := x[len(x)-16:]
			qh := binary.LittleEndian.Uint32(x[len(x)-20:])
			for j := 0; j < 16; j++ {
				wq[j] = int(qs[j]%16) + 16*int(qh>>j&1)
				wq[j+16] = int(qs[j]/16) + 16*int(qh>>(j+16)&1)
			}
		case Q8_0:
			for j := 0; j < QK; j++ {
				wq[j] = int(int8(x[2+j]))
			}
		}
		switch typ {
		case Q4_0:
			for j := range wq {
				wq[j] -= 8
			}
		case Q5_0:
			for j := range wq {
				wq[j] -= 16
			}
		}
		aq := y[ab-QK:]
		sumi := 0
		for j := 0; j < QK; j++ {
			sumi += wq[j] * int(int8(aq[j]))
		}
		dx := FP16ToFP32(binary.LittleEndian.Uint16(x))
		dy := FP16ToFP32(binary.LittleEndian.Uint16(y))
		if ab == 36 {
			mx := FP16ToFP32(binary.LittleEndian.Uint16(x[2:]))
			sy := FP16ToFP32(binary.LittleEndian.Uint16(y[2:]))
			sum += float32(float32(sumi)*float32(dx*dy)) + float32(mx*sy)
		} else {
			sum += float32(float32(sumi) * float32(dx*dy))
		}
	}
	return sum
}

// blkPlainDot reimplements the 8-lane f32 accumulation of the plain dots.
func blkPlainDot(typ Type, n int, w, act []byte) float32 {
	val := func(i int) float32 {
		switch typ {
		case F16:
			return FP16ToFP32(binary.LittleEndian.Uint16(w[2*i:]))
		case BF16:
			return BF16ToFP32(binary.LittleEndian.Uint16(w[2*i:]))
		}
		return math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:]))
	}
	var lane [8]float32
	full := n / 8 * 8
	for i := 0; i < full; i++ {
		lane[i%8] += float32(val(i) * math.Float32frombits(binary.LittleEndian.Uint32(act[4*i:])))
	}
	s := ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]))
	for i := full; i < n; i++ {
		s += float32(val(i) * math.Float32frombits(binary.LittleEndian.Uint32(act[4*i:])))
	}
	return s
}

func TestDotBlockTypes_BitwiseEqualToStraightforwardReimplementation(t *testing.T) {
	ws, as := blkDotRows(t)
	for _, typ := range blkDotTypes {
		t.Run(typ.String(), func(t *testing.T) {
			for r := range ws {
				tr, w, act := blkDotFixture(t, typ, ws[r], as[r])
				for _, n := range []int{QK, 256, len(ws[r])} {
					got := tr.Dot(n, w, act)
					var want float32
					if typ.BlockSize() == 1 {
						want = blkPlainDot(typ, n, w, act)
					} else {
						want = blkIntDot(typ, n, w, act)
					}
					if math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("row %d n=%d: Dot %v (%#08x), reimplementation %v (%#08x)",
							r, n, got, math.Float32bits(got), want, math.Float32bits(want))
					}
				}
			}
		})
	}
}

// The plain dots read f32 activations in place when aligned and decode them
// otherwise; both paths, and odd lengths, give the same bits.
func TestDotPlainTypes_UnalignedAndOddLengthsBitwiseEqual(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, typ := range []Type{F32, F16, BF16} {
		for _, n := range []int{0, 1, 7, 8, 9, 33, 1000} {
			wrow, arow := make([]float32, n), make([]float32, n)
			for i := range wrow {
				wrow[i], arow[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			}
			tr, w, act := blkDotFixture(t, typ, wrow, arow)
			want := blkPlainDot(typ, n, w, act)
			wu := append(make([]byte, 1, len(w)+1), w...)[1:]
			au := append(make([]byte, 3, len(act)+3), act...)[3:]
			for _, c := range []struct {
				name   string
				w, act []byte
			}{{"aligned", w, act}, {"unaligned-w", wu, act}, {"unaligned-act", w, au}, {"unaligned-both", wu, au}} {
				if got := tr.Dot(n, c.w, c.act); math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("%s n=%d %s: %v want %v", typ, n, c.name, got, want)
				}
			}
		}
	}
}

func TestDotBlockTypes_DoNotAllocate(t *testing.T) {
	ws, as := blkDotRows(t)
	for _, typ := range blkDotTypes {
		tr, w, act := blkDotFixture(t, typ, ws[0], as[0])
		n := len(ws[0])
		if a := testing.AllocsPerRun(20, func() { tr.Dot(n, w, act) }); a != 0 {
			t.Errorf("%s: Dot allocates %v times", typ, a)
		}
	}
}

// A Dot never panics on lengths that do not fit: it returns NaN.
func TestDotBlockTypes_BadLengthsReturnNaNWithoutPanic(t *testing.T) {
	for _, typ := range blkDotTypes {
		tr, w, act := blkDotFixture(t, typ, make([]float32, 64), make([]float32, 64))
		cases := []struct {
			n      int
			w, act []byte
		}{
			{-32, w, act}, {96, w, act}, {64, w[:len(w)-1], act}, {64, w, act[:len(act)-1]}, {64, nil, nil},
		}
		if typ.BlockSize() == QK {
			cases = append(cases, struct {
				n      int
				w, act []byte
			}{33, w, act})
		}
		for _, c := range cases {
			if got := tr.Dot(c.n, c.w, c.act); !math.IsNaN(float64(got)) {
				t.Errorf("%s n=%d len(w)=%d len(act)=%d: got %v, want NaN", typ, c.n, len(c.w), len(c.act), got)
			}
		}
		if got := tr.Dot(0, nil, nil); got != 0 {
			t.Errorf("%s: empty dot = %v, want 0", typ, got)
		}
	}
}

func TestActivationBytes_IsVecDotRowBytes(t *testing.T) {
	want := map[Type]int{F32: 4096, F16: 4096, BF16: 4096, Q4_0: 34 * 32, Q5_0: 34 * 32, Q8_0: 34 * 32, Q4_1: 36 * 32, Q5_1: 36 * 32}
	for typ, w := range want {
		got, err := ActivationBytes(typ, 1024)
		if err != nil || got != w {
			t.Errorf("ActivationBytes(%s, 1024) = %d, %v; want %d", typ, got, err, w)
		}
	}
	if _, err := ActivationBytes(Q4_0, 33); err == nil {
		t.Error("ActivationBytes(Q4_0, 33): want error")
	}
	if _, err := ActivationBytes(Q8_1, 32); err == nil {
		t.Error("ActivationBytes(Q8_1, 32): want error (no dot)")
	}
}

func TestTraitsBlock_RegisteredWithActivationFormats(t *testing.T) {
	vec := map[Type]Type{F32: F32, F16: F32, BF16: F32, Q4_0: Q8_0, Q4_1: Q8_1, Q5_0: Q8_0, Q5_1: Q8_1, Q8_0: Q8_0, Q8_1: Q8_1}
	for typ, v := range vec {
		tr, err := TraitsOf(typ)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Type != typ || tr.VecDot != v || tr.Quantize == nil || tr.Dequantize == nil {
			t.Errorf("%s: traits %+v", typ, tr)
		}
		if (tr.Dot == nil) != (typ == Q8_1) {
			t.Errorf("%s: Dot nil = %v", typ, tr.Dot == nil)
		}
	}
}

func BenchmarkDot(b *testing.B) {
	const n = 4096
	ws, as := blkRandomRows(5, 1, n), blkRandomRows(6, 1, n)
	for _, typ := range blkDotTypes {
		b.Run(typ.String(), func(b *testing.B) {
			tr, w, act := blkDotFixture(b, typ, ws[0], as[0])
			b.SetBytes(int64(len(w)))
			var s float32
			for b.Loop() {
				s += tr.Dot(n, w, act)
			}
			_ = s
		})
	}
}

func BenchmarkQuantize(b *testing.B) {
	const n = 4096
	row := blkRandomRows(7, 1, n)[0]
	for _, typ := range []Type{Q8_0, Q8_1, Q4_0, Q4_1, Q5_0, Q5_1, F16, BF16} {
		b.Run(typ.String(), func(b *testing.B) {
			nb, _ := typ.RowBytes(n)
			dst := make([]byte, nb)
			b.SetBytes(4 * n)
			for b.Loop() {
				if err := Quantize(typ, row, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDequantize(b *testing.B) {
	const n = 4096
	row := blkRandomRows(8, 1, n)[0]
	for _, typ := range []Type{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16, BF16} {
		b.Run(typ.String(), func(b *testing.B) {
			nb, _ := typ.RowBytes(n)
			src := make([]byte, nb)
			if err := Quantize(typ, row, src); err != nil {
				b.Fatal(err)
			}
			dst := make([]float32, n)
			b.SetBytes(int64(nb))
			for b.Loop() {
				if err := Dequantize(typ, src, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func blkAbs(v float32) float32 { return float32(math.Abs(float64(v))) }
