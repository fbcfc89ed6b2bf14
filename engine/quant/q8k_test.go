package quant

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func kQ8KRows(t *testing.T) [][]float32 {
	rows := kRandomRows(21, 32, QKK)
	rows = append(rows, kRandomRows(22, 4, 4*QKK)...)
	if b, err := os.ReadFile(filepath.Join(kRefDir, "input.f32")); err == nil && len(b)%(4*QKK) == 0 {
		rows = append(rows, kLoadRefInput(t)...)
	}
	return rows
}

// testQuantizeQ8KBlock is the test's own statement of the reference
// semantics for one block: iscale = -127/max (max the signed value of
// largest magnitude, first one on ties), level = min(127, round-half-even
// of float32(iscale*x)), d = 1/iscale; all-zero -> d = 0.
func testQuantizeQ8KBlock(x []float32) (d float32, q [QKK]int8) {
	var mx, amax float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, mx = a, v
		}
	}
	if amax == 0 {
		return 0, q
	}
	iscale := -127 / mx
	for j, v := range x {
		q[j] = int8(min(127, math.RoundToEven(float64(float32(iscale*v)))))
	}
	return 1 / iscale, q
}

func TestQuantizeQ8K_MatchesReferenceSemantics(t *testing.T) {
	for r, x := range kQ8KRows(t) {
		b := make([]byte, len(x)/QKK*292)
		if err := Quantize(Q8_K, x, b); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(x)/QKK; i++ {
			wd, wq := testQuantizeQ8KBlock(x[i*QKK : (i+1)*QKK])
			blk := b[i*292 : (i+1)*292]
			if gd := math.Float32frombits(binary.LittleEndian.Uint32(blk)); math.Float32bits(gd) != math.Float32bits(wd) {
				t.Fatalf("row %d block %d: d %v, want %v", r, i, gd, wd)
			}
			for j := range wq {
				if g := int8(blk[4+j]); g != wq[j] {
					t.Fatalf("row %d block %d: qs[%d] = %d, want %d", r, i, j, g, wq[j])
				}
			}
		}
	}
}

func TestQuantizeQ8K_BsumsEqualGroupSums(t *testing.T) {
	for r, x := range kQ8KRows(t) {
		b := make([]byte, len(x)/QKK*292)
		quantizeQ8K(x, b)
		for i := 0; i < len(x)/QKK; i++ {
			blk := b[i*292 : (i+1)*292]
			for g := 0; g < 16; g++ {
				var s int
				for j := 0; j < 16; j++ {
					s += int(int8(blk[4+16*g+j]))
				}
				if got := int(int16(binary.LittleEndian.Uint16(blk[260+2*g:]))); got != s {
					t.Fatalf("row %d block %d: bsums[%d] = %d, group sum %d", r, i, g, got, s)
				}
			}
		}
	}
}

func TestQuantizeQ8K_ZeroRowGivesZeroScaleAndNoNaN(t *testing.T) {
	x := make([]float32, 3*QKK)
	for j := QKK; j < 2*QKK; j++ { // middle block non-zero, neighbours zero
		x[j] = float32(j%7) - 3
	}
	b := make([]byte, 3*292)
	for k := range b {
		b[k] = 0xAB // stale bytes must be overwritten
	}
	quantizeQ8K(x, b)
	for _, i := range []int{0, 2} {
		for k, v := range b[i*292 : (i+1)*292] {
			if v != 0 {
				t.Fatalf("zero block %d: byte %d = %#02x, want 0 (d, qs and bsums all zero)", i, k, v)
			}
		}
	}
	y := make([]float32, 3*QKK)
	dequantizeQ8K(b, y)
	for j, v := range y {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("value %d dequantizes to %v", j, v)
		}
		if (j < QKK || j >= 2*QKK) && v != 0 {
			t.Fatalf("zero block value %d dequantizes to %v", j, v)
		}
	}
}

// Bound: every value within half a step (|d|/2, plus 1e-6 relative slack
// for the f32 rounding of d*q), so RMS error is also within |d|/2.
func TestRoundTripQ8K_ErrorWithinHalfStep(t *testing.T) {
	for r, x := range kQ8KRows(t) {
		b := make([]byte, len(x)/QKK*292)
		quantizeQ8K(x, b)
		y := make([]float32, len(x))
		dequantizeQ8K(b, y)
		for j := range x {
			d := math.Abs(float64(math.Float32frombits(binary.LittleEndian.Uint32(b[j/QKK*292:]))))
			if e := math.Abs(float64(x[j]) - float64(y[j])); e > d/2*(1+1e-6)+1e-6*math.Abs(float64(x[j])) {
				t.Fatalf("row %d value %d: %v -> %v, error %g > half step %g", r, j, x[j], y[j], e, d/2)
			}
		}
	}
}
