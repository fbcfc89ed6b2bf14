package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// blkRandomRows returns seeded rows of n values drawn from a mix of
// distributions and magnitudes (normal, uniform, skewed, sparse), all within
// the normal f16 range.
func blkRandomRows(seed uint64, nrows, n int) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	scales := []float64{1e-3, 0.02, 1, 7.5, 300}
	rows := make([][]float32, nrows)
	for r := range rows {
		s := scales[r%len(scales)]
		row := make([]float32, n)
		for i := range row {
			var v float64
			switch r % 4 {
			case 0:
				v = rng.NormFloat64()
			case 1:
				v = 2*rng.Float64() - 1
			case 2:
				v = rng.Float64() + 0.25 // all positive
			case 3:
				if rng.IntN(8) == 0 {
					v = 4 * rng.NormFloat64()
				}
			}
			row[i] = float32(v * s)
		}
		rows[r] = row
	}
	return rows
}

func blkH(b []byte, off int) float64 {
	return float64(FP16ToFP32(binary.LittleEndian.Uint16(b[off:])))
}

// blkBounds returns, for one 32-value block x and its encoding blk, the
// largest error |x_j - dq_j| each value may have. The bounds follow from the
// quantizer's grid: half a step of the unrounded scale d (or one step where
// the asymmetric Q4_0/Q5_0 grid clamps its top value), plus the effect of
// storing d (and m) as f16, plus f32 rounding slack.
func blkBounds(typ Type, x []float32, blk []byte) []float64 {
	b := make([]float64, len(x))
	var amax, max, lo, hi float64 = 0, 0, math.Inf(1), math.Inf(-1)
	for _, v := range x {
		fv := float64(v)
		if math.Abs(fv) > amax {
			amax, max = math.Abs(fv), fv
		}
		lo, hi = math.Min(lo, fv), math.Max(hi, fv)
	}
	slack := func(d float64) float64 { return 1e-4*math.Abs(d) + 1e-6*amax }
	switch typ {
	case Q8_0, Q8_1:
		d := float64(float32(amax) / 127)
		dh := blkH(blk, 0)
		for j := range b {
			b[j] = d/2 + 127*math.Abs(d-dh) + slack(d)
		}
	case Q4_0, Q5_0:
		half := 8.0
		if typ == Q5_0 {
			half = 16
		}
		d := float64(float32(max) / float32(-half))
		dh := blkH(blk, 0)
		for j := range b {
			steps := 0.5
			if d != 0 {
				// values beyond the top of the grid (q clamps at 2*half-1)
				steps = math.Max(0.5, float64(x[j])/d-(half-1))
			}
			b[j] = math.Abs(d)*steps + half*math.Abs(d-dh) + slack(d)
		}
	case Q4_1, Q5_1:
		top := 15.0
		if typ == Q5_1 {
			top = 31
		}
		d := float64(float32(hi-lo) / float32(top))
		dh, mh := blkH(blk, 0), blkH(blk, 2)
		for j := range b {
			b[j] = d/2 + top*math.Abs(d-dh) + math.Abs(lo-mh) + slack(d) + 1e-6*math.Abs(lo)
		}
	case F16:
		for j := range b {
			b[j] = math.Abs(float64(x[j]))*0x1p-11 + 0x1p-25
		}
	case BF16:
		for j := range b {
			b[j] = math.Abs(float64(x[j])) * 0x1p-8
		}
	case F32:
		// exact
	}
	return b
}

// blkCheckRoundTrip quantizes each row, dequantizes it and checks every value
// against blkBounds.
func blkCheckRoundTrip(t *testing.T, typ Type, rows [][]float32) {
	t.Helper()
	bs, bb := typ.BlockSize(), typ.BlockBytes()
	if bs == 1 {
		bs = QK // check plain types in chunks of 32 as well
	}
	for r, row := range rows {
		nbytes, err := typ.RowBytes(len(row))
		if err != nil {
			t.Fatal(err)
		}
		enc := make([]byte, nbytes)
		if err := Quantize(typ, row, enc); err != nil {
			t.Fatal(err)
		}
		dq := make([]float32, len(row))
		if err := Dequantize(typ, enc, dq); err != nil {
			t.Fatal(err)
		}
		for i0 := 0; i0 < len(row); i0 += bs {
			x := row[i0 : i0+bs]
			var blk []byte
			if typ.BlockSize() == QK {
				blk = enc[i0/QK*bb : (i0/QK+1)*bb]
			}
			bound := blkBounds(typ, x, blk)
			for j, v := range x {
				got := dq[i0+j]
				if math.IsNaN(float64(got)) {
					t.Fatalf("row %d value %d: NaN", r, i0+j)
				}
				if e := math.Abs(float64(v) - float64(got)); e > bound[j] {
					t.Fatalf("row %d value %d (block %d): x=%g dq=%g |err|=%g > bound %g",
						r, i0+j, i0/bs, v, got, e, bound[j])
				}
			}
		}
	}
}

func blkRoundTripCases() []struct {
	typ  Type
	name string
} {
	return []struct {
		typ  Type
		name string
	}{
		{F32, "Exact"},
		{F16, "ErrAtMostRel2^-11"},
		{BF16, "ErrAtMostRel2^-8"},
		{Q4_0, "ErrAtMostHalfStepOrOneStepAtClampedTop"},
		{Q4_1, "ErrAtMostHalfStepPlusF16MinRounding"},
		{Q5_0, "ErrAtMostHalfStepOrOneStepAtClampedTop"},
		{Q5_1, "ErrAtMostHalfStepPlusF16MinRounding"},
		{Q8_0, "ErrAtMostHalfStep"},
		{Q8_1, "ErrAtMostHalfStep"},
	}
}

// The bounds carry the f16 rounding of the stored scale: |q| * |d - fp16(d)|.
func TestRoundTripBlockTypes_ReferenceInputs_WithinStepBounds(t *testing.T) {
	rows := blkRefInput(t)
	for _, c := range blkRoundTripCases() {
		t.Run(fmt.Sprintf("%s_%s", c.typ, c.name), func(t *testing.T) {
			blkCheckRoundTrip(t, c.typ, rows)
		})
	}
}

func TestRoundTripBlockTypes_RandomRows_WithinStepBounds(t *testing.T) {
	rows := blkRandomRows(1, 40, 512)
	for _, c := range blkRoundTripCases() {
		t.Run(fmt.Sprintf("%s_%s", c.typ, c.name), func(t *testing.T) {
			blkCheckRoundTrip(t, c.typ, rows)
		})
	}
}

// Q8_1's s field must be the f16 of d * sum(q), as the reference stores it.
func TestQuantizeQ8_1_SumFieldIsF16OfDTimesSumQ(t *testing.T) {
	for r, row := range blkRandomRows(2, 10, 256) {
		enc := make([]byte, 8*36)
		if err := Quantize(Q8_1, row, enc); err != nil {
			t.Fatal(err)
		}
		for b := 0; b < 8; b++ {
			blk := enc[b*36 : (b+1)*36]
			d := float32(0)
			var amax float32
			for _, v := range row[b*32 : (b+1)*32] {
				amax = float32(math.Max(float64(amax), math.Abs(float64(v))))
			}
			d = amax / 127
			sum := 0
			for _, q := range blk[4:] {
				sum += int(int8(q))
			}
			want := FP32ToFP16(float32(sum) * d)
			if got := binary.LittleEndian.Uint16(blk[2:]); got != want {
				t.Fatalf("row %d block %d: s=%#04x want %#04x", r, b, got, want)
			}
			// the quants equal Q8_0's
			q0 := make([]byte, 34)
			if err := Quantize(Q8_0, row[b*32:(b+1)*32], q0); err != nil {
				t.Fatal(err)
			}
			if string(q0[2:]) != string(blk[4:]) || string(q0[:2]) != string(blk[:2]) {
				t.Fatalf("row %d block %d: Q8_1 d/quants differ from Q8_0", r, b)
			}
		}
	}
}
