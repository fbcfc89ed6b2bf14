package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// The reference vectors of ../../../shared/testdata/quant (see its README).
const kRefDir = "../../../shared/testdata/quant"

func kLoadRefInput(t *testing.T) [][]float32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(kRefDir, "input.f32"))
	if err != nil {
		t.Skipf("reference vectors absent (%v): skipping", err)
	}
	if len(b)%(4*QKK) != 0 {
		t.Fatalf("input.f32: %d bytes is not a whole number of 256-value rows", len(b))
	}
	rows := make([][]float32, len(b)/(4*QKK))
	for r := range rows {
		rows[r] = make([]float32, QKK)
		for j := range rows[r] {
			rows[r][j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*(r*QKK+j):]))
		}
	}
	return rows
}

func kLoadRefOutput(t *testing.T, name string, rows, rowBytes int) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(kRefDir, name))
	if err != nil {
		t.Skipf("reference vectors absent (%v): skipping", err)
	}
	if len(b) != rows*rowBytes {
		t.Fatalf("%s: %d bytes, want %d rows x %d", name, len(b), rows, rowBytes)
	}
	return b
}

// kFieldOf names the field that byte off of a block of type t belongs to.
func kFieldOf(t Type, off int) string {
	switch t {
	case Q4_K, Q5_K:
		switch {
		case off < 2:
			return "d"
		case off < 4:
			return "dmin"
		case off < 16:
			return fmt.Sprintf("scales[%d]", off-4)
		case t == Q5_K && off < q5KQsOff:
			return fmt.Sprintf("qh[%d]", off-q5KQhOff)
		case t == Q5_K:
			return fmt.Sprintf("qs[%d]", off-q5KQsOff)
		default:
			return fmt.Sprintf("qs[%d]", off-q4KQsOff)
		}
	case Q6_K:
		switch {
		case off < q6KQhOff:
			return fmt.Sprintf("ql[%d]", off)
		case off < q6KScOff:
			return fmt.Sprintf("qh[%d]", off-q6KQhOff)
		case off < q6KDOff:
			return fmt.Sprintf("scales[%d]", off-q6KScOff)
		default:
			return "d"
		}
	}
	return "?"
}

func kCheckReference(t *testing.T, typ Type, file string) {
	rows := kLoadRefInput(t)
	rowBytes, err := typ.RowBytes(QKK)
	if err != nil {
		t.Fatal(err)
	}
	want := kLoadRefOutput(t, file, len(rows), rowBytes)
	tr, err := TraitsOf(typ)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, rowBytes)
	bad := 0
	for r, x := range rows {
		tr.Quantize(x, got)
		w := want[r*rowBytes : (r+1)*rowBytes]
		nDiff, first := 0, -1
		for k := range got {
			if got[k] != w[k] {
				if first < 0 {
					first = k
				}
				nDiff++
			}
		}
		if nDiff == 0 {
			continue
		}
		bad++
		off := first % typ.BlockBytes()
		t.Errorf("%s row %d: %d bytes differ; first at byte %d (%s): got %#02x want %#02x",
			typ, r, nDiff, first, kFieldOf(typ, off), got[first], w[first])
	}
	if bad == 0 {
		t.Logf("%s: all %d rows byte-identical to the reference", typ, len(rows))
	}
}

// kRandomRows returns deterministic test rows of n values: Gaussian, shifted
// uniform (all positive mins), mostly-negative, and heavy-tailed.
func kRandomRows(seed uint64, nrows, n int) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	rows := make([][]float32, nrows)
	for r := range rows {
		x := make([]float32, n)
		for j := range x {
			switch r % 4 {
			case 0:
				x[j] = float32(rng.NormFloat64())
			case 1:
				x[j] = float32(rng.Float64()*2 + 0.25)
			case 2:
				x[j] = float32(rng.Float64()*3 - 2.5)
			default:
				x[j] = float32(rng.NormFloat64() * math.Exp(2*rng.NormFloat64()))
			}
		}
		rows[r] = x
	}
	return rows
}

// kCheckRoundTrip quantizes and dequantizes every row and bounds the error:
// RMS(x - x') <= relRMS * RMS(x) and max|x - x'| <= relMax * max|x|.
// All-zero rows must come back exactly zero.
func kCheckRoundTrip(t *testing.T, typ Type, rows [][]float32, relRMS, relMax float64) {
	t.Helper()
	tr, err := TraitsOf(typ)
	if err != nil {
		t.Fatal(err)
	}
	var worstRMS, worstMax float64
	for r, x := range rows {
		nb, err := typ.RowBytes(len(x))
		if err != nil {
			t.Fatal(err)
		}
		q := make([]byte, nb)
		y := make([]float32, len(x))
		tr.Quantize(x, q)
		tr.Dequantize(q, y)
		var se, ss, amax, emax float64
		for j := range x {
			if math.IsNaN(float64(y[j])) || math.IsInf(float64(y[j]), 0) {
				t.Fatalf("%s row %d: value %d dequantizes to %v", typ, r, j, y[j])
			}
			e := float64(x[j]) - float64(y[j])
			se += e * e
			ss += float64(x[j]) * float64(x[j])
			amax = math.Max(amax, math.Abs(float64(x[j])))
			emax = math.Max(emax, math.Abs(e))
		}
		if ss == 0 {
			if emax != 0 {
				t.Errorf("%s row %d: zero row comes back with error %g", typ, r, emax)
			}
			continue
		}
		worstRMS = math.Max(worstRMS, math.Sqrt(se/ss))
		worstMax = math.Max(worstMax, emax/amax)
		if rel := math.Sqrt(se / ss); rel > relRMS {
			t.Errorf("%s row %d: relative RMS error %.4f > bound %.4f", typ, r, rel, relRMS)
		}
		if rel := emax / amax; rel > relMax {
			t.Errorf("%s row %d: max error %.4g of max |x| %.4g = %.4f > bound %.4f", typ, r, emax, amax, rel, relMax)
		}
	}
	t.Logf("%s over %d rows: worst relative RMS error %.4f (bound %.4f), worst max error / max|x| %.4f (bound %.4f)",
		typ, len(rows), worstRMS, relRMS, worstMax, relMax)
}

// kRoundTripRows: the reference vectors (when present) and random rows.
func kRoundTripRows(t *testing.T) [][]float32 {
	rows := kRandomRows(7, 64, QKK)
	rows = append(rows, kRandomRows(8, 4, 8*QKK)...)
	if b, err := os.ReadFile(filepath.Join(kRefDir, "input.f32")); err == nil && len(b)%(4*QKK) == 0 {
		rows = append(rows, kLoadRefInput(t)...)
	}
	return rows
}

// kDotFixture quantizes random weights to typ and activations to Q8_K.
func kDotFixture(t testing.TB, typ Type, n int, seed uint64) (w, act []byte) {
	tr, err := TraitsOf(typ)
	if err != nil {
		t.Fatal(err)
	}
	rows := kRandomRows(seed, 2, n)
	wb, _ := typ.RowBytes(n)
	ab, _ := Q8_K.RowBytes(n)
	w, act = make([]byte, wb), make([]byte, ab)
	tr.Quantize(rows[0], w)
	quantizeQ8K(rows[1], act)
	return w, act
}

// kCheckDotAgainstFloat64 compares Dot(w, act) with the float64 dot of the
// dequantized rows: |Dot - ref| <= 2e-6 * sum |w_i a_i|.
func kCheckDotAgainstFloat64(t *testing.T, typ Type) {
	tr, _ := TraitsOf(typ)
	const bound = 2e-6
	var worst float64
	for _, n := range []int{QKK, 16 * QKK} {
		for seed := uint64(1); seed <= 8; seed++ {
			w, act := kDotFixture(t, typ, n, seed)
			wf, af := make([]float32, n), make([]float32, n)
			tr.Dequantize(w, wf)
			dequantizeQ8K(act, af)
			var ref, mag float64
			for i := range wf {
				p := float64(wf[i]) * float64(af[i])
				ref += p
				mag += math.Abs(p)
			}
			got := float64(tr.Dot(n, w, act))
			worst = math.Max(worst, math.Abs(got-ref)/mag)
			if err := math.Abs(got - ref); err > bound*mag {
				t.Errorf("%s n=%d seed=%d: Dot %v, float64 reference %v: error %.3g > %g * %.3g",
					typ, n, seed, got, ref, err, bound, mag)
			}
		}
	}
	t.Logf("%s: worst |Dot - float64 reference| / sum|w_i a_i| = %.3g (bound %g)", typ, worst, bound)
}

// kCheckDotExact compares Dot with intDot, a reimplementation in this test:
// both must give the same float32 bits.
func kCheckDotExact(t *testing.T, typ Type, intDot func(n int, w, act []byte) float32) {
	tr, _ := TraitsOf(typ)
	for _, n := range []int{QKK, 16 * QKK} {
		for seed := uint64(11); seed <= 18; seed++ {
			w, act := kDotFixture(t, typ, n, seed)
			got, want := tr.Dot(n, w, act), intDot(n, w, act)
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Errorf("%s n=%d seed=%d: Dot %v (%#08x), integer reimplementation %v (%#08x)",
					typ, n, seed, got, math.Float32bits(got), want, math.Float32bits(want))
			}
			if again := tr.Dot(n, w, act); math.Float32bits(again) != math.Float32bits(got) {
				t.Errorf("%s: Dot not deterministic: %v then %v", typ, got, again)
			}
		}
	}
	w, act := kDotFixture(t, typ, 4*QKK, 99)
	if a := testing.AllocsPerRun(20, func() { tr.Dot(4*QKK, w, act) }); a != 0 {
		t.Errorf("%s: Dot allocates %v times per call", typ, a)
	}
}

// kQ8KParts is the test's own view of block i of act (Q8_K): its scale
// and its 256 int8 levels.
func kQ8KParts(act []byte, i int) (d float32, q [QKK]int32) {
	b := act[i*292 : (i+1)*292]
	d = math.Float32frombits(binary.LittleEndian.Uint32(b))
	for j := range q {
		q[j] = int32(int8(b[4+j]))
	}
	return d, q
}

// kTestScaleMin decodes the 6-bit scale and min of sub-block j of a Q4_K /
// Q5_K block from its 12 scale bytes, bit by bit from the layout.
func kTestScaleMin(s []byte, j int) (sc, m int32) {
	if j < 4 {
		return int32(s[j] % 64), int32(s[j+4] % 64)
	}
	sc = int32(s[j+4]%16) + 16*int32(s[j-4]/64)
	m = int32(s[j+4]/16) + 16*int32(s[j]/64)
	return sc, m
}

func TestNearestIntK_RoundsHalfToEven(t *testing.T) {
	cases := []struct {
		in   float32
		want int
	}{
		{0, 0}, {0.5, 0}, {1.5, 2}, {2.5, 2}, {-0.5, 0}, {-1.5, -2}, {-2.5, -2},
		{0.49999997, 0}, {3.7, 4}, {-3.7, -4}, {4194303, 4194303}, {-4194303, -4194303},
	}
	for _, c := range cases {
		if got := kNearestInt(c.in); got != c.want {
			t.Errorf("kNearestInt(%v) = %d, want %d", c.in, got, c.want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for k := 0; k < 100000; k++ {
		v := float32((rng.Float64()*2 - 1) * 1000)
		if got, want := kNearestInt(v), int(math.RoundToEven(float64(v))); got != want {
			t.Fatalf("kNearestInt(%v) = %d, want %d", v, got, want)
		}
	}
}

func TestScaleMinK4_UnpackAgreesWithPerIndexDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var s [12]byte
	var sc, mn [8]uint8
	for k := 0; k < 1000; k++ {
		for i := range s {
			s[i] = byte(rng.Uint32())
		}
		kScaleMinUnpack(s[:], &sc, &mn)
		for j := 0; j < 8; j++ {
			a, b := kScaleMinK4(j, s[:])
			ws, wm := kTestScaleMin(s[:], j)
			if a != sc[j] || b != mn[j] || int32(a) != ws || int32(b) != wm {
				t.Fatalf("scales % x sub-block %d: kScaleMinK4 (%d,%d) unpack (%d,%d) test decode (%d,%d)",
					s, j, a, b, sc[j], mn[j], ws, wm)
			}
		}
	}
}

func TestTraitsK_Registered(t *testing.T) {
	for _, typ := range []Type{Q4_K, Q5_K, Q6_K} {
		tr, err := TraitsOf(typ)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Type != typ || tr.VecDot != Q8_K || tr.Dequantize == nil || tr.Quantize == nil || tr.Dot == nil {
			t.Errorf("%s: incomplete traits %+v", typ, tr)
		}
	}
	tr, err := TraitsOf(Q8_K)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Quantize == nil || tr.Dequantize == nil {
		t.Errorf("Q8_K: needs Quantize and Dequantize")
	}
}

// BenchmarkDotK/<type>: one 4096-value row (a typical hidden size) per op;
// the bytes are the weight row's.
func BenchmarkDotK(b *testing.B) {
	const n = 4096
	for _, typ := range []Type{Q4_K, Q5_K, Q6_K} {
		b.Run(typ.String(), func(b *testing.B) {
			tr, _ := TraitsOf(typ)
			w, act := kDotFixture(b, typ, n, 1)
			b.SetBytes(int64(len(w)))
			var sink float32
			for b.Loop() {
				sink += tr.Dot(n, w, act)
			}
			_ = sink
		})
	}
}

// BenchmarkQuantizeK/<type>: one 4096-value row per op.
func BenchmarkQuantizeK(b *testing.B) {
	const n = 4096
	x := kRandomRows(2, 1, n)[0]
	for _, typ := range []Type{Q4_K, Q5_K, Q6_K, Q8_K} {
		b.Run(typ.String(), func(b *testing.B) {
			tr, _ := TraitsOf(typ)
			nb, _ := typ.RowBytes(n)
			dst := make([]byte, nb)
			b.SetBytes(4 * n)
			for b.Loop() {
				tr.Quantize(x, dst)
			}
		})
	}
}
