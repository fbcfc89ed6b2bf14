package quant

import (
	"encoding/binary"
	"math"
	"testing"
)

var blkAllTypes = []Type{F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1}

func blkQuantDequant(t *testing.T, typ Type, row []float32) (enc []byte, dq []float32) {
	t.Helper()
	nb, err := typ.RowBytes(len(row))
	if err != nil {
		t.Fatal(err)
	}
	enc, dq = make([]byte, nb), make([]float32, len(row))
	if err := Quantize(typ, row, enc); err != nil {
		t.Fatal(err)
	}
	if err := Dequantize(typ, enc, dq); err != nil {
		t.Fatal(err)
	}
	return enc, dq
}

// An all-zero row stores scale +-0 (and min 0), dequantizes to exact zeros and
// dots to exactly 0: no 0/0.
func TestQuantizeZeroRow_ScaleZeroDequantZeroNoNaN(t *testing.T) {
	row := make([]float32, 128)
	act := blkRandomRows(11, 1, 128)[0]
	for _, typ := range blkAllTypes {
		enc, dq := blkQuantDequant(t, typ, row)
		for i, v := range dq {
			if v != 0 {
				t.Fatalf("%s: dq[%d] = %v, want 0", typ, i, v)
			}
		}
		if typ.BlockSize() == QK {
			for b := 0; b < len(row)/QK; b++ {
				blk := enc[b*typ.BlockBytes():]
				// Q4_0/Q5_0 store d = max/-8 = -0, as the reference does
				if d := binary.LittleEndian.Uint16(blk); d&0x7fff != 0 {
					t.Fatalf("%s block %d: d = %#04x, want +-0", typ, b, d)
				}
				if typ == Q4_1 || typ == Q5_1 || typ == Q8_1 {
					if m := binary.LittleEndian.Uint16(blk[2:]); m != 0 {
						t.Fatalf("%s block %d: m/s = %#04x, want 0", typ, b, m)
					}
				}
			}
		}
		tr, _ := TraitsOf(typ)
		if tr.Dot == nil {
			continue
		}
		_, w, a := blkDotFixture(t, typ, row, act)
		if got := tr.Dot(len(row), w, a); got != 0 {
			t.Fatalf("%s: zero-row dot = %v, want 0", typ, got)
		}
		_, w, a = blkDotFixture(t, typ, act, row)
		if got := tr.Dot(len(row), w, a); got != 0 {
			t.Fatalf("%s: dot with zero activations = %v, want 0", typ, got)
		}
	}
}

// Constant rows: every value hits a grid point of the symmetric and min/delta
// formats, so the round trip is exact up to the f16 rounding of the scale:
// |c - dq| <= (levels)*|d - fp16(d)| + |c - fp16(c)| (within the step bounds).
func TestQuantizeConstantRows_WithinStepBoundsAndUniform(t *testing.T) {
	for _, c := range []float32{0.125, -3, 1000, -1e-6, 65000} {
		row := make([]float32, 64)
		for i := range row {
			row[i] = c
		}
		for _, typ := range blkAllTypes {
			t.Run(typ.String(), func(t *testing.T) {
				blkCheckRoundTrip(t, typ, [][]float32{row})
				_, dq := blkQuantDequant(t, typ, row)
				for i, v := range dq {
					if v != dq[0] {
						t.Fatalf("c=%v: dq[%d]=%v differs from dq[0]=%v", c, i, v, dq[0])
					}
				}
			})
		}
	}
}

// One huge outlier among small values: the outlier's block is bounded by its
// own (large) step, the other blocks keep their small steps, nothing is NaN.
func TestQuantizeSingleOutlier_OnlyItsBlockLosesPrecision(t *testing.T) {
	row := make([]float32, 256)
	for i := range row {
		row[i] = 0.01 * float32(math.Cos(float64(i)))
	}
	row[77] = 50
	for _, typ := range blkAllTypes {
		t.Run(typ.String(), func(t *testing.T) {
			blkCheckRoundTrip(t, typ, [][]float32{row})
			_, dq := blkQuantDequant(t, typ, row)
			if e := math.Abs(float64(dq[77] - 50)); e > 50*0x1p-8 {
				t.Fatalf("outlier dequantizes to %v", dq[77])
			}
			for i, v := range dq {
				if i/QK == 77/QK {
					continue
				}
				if e := math.Abs(float64(v - row[i])); e > 0.01/7 {
					t.Fatalf("value %d outside the outlier's block: x=%v dq=%v", i, row[i], v)
				}
			}
		})
	}
}

// NaN and infinite input (a corrupt source) never panics anywhere.
func TestQuantizeNonFiniteInput_DoesNotPanic(t *testing.T) {
	specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, -math.MaxFloat32}
	for _, s := range specials {
		row := blkRandomRows(12, 1, 96)[0]
		row[5], row[40] = s, -s
		for _, typ := range blkAllTypes {
			enc, _ := blkQuantDequant(t, typ, row)
			if tr, _ := TraitsOf(typ); tr.Dot != nil {
				_, _, act := blkDotFixture(t, typ, row, row)
				_ = tr.Dot(len(row), enc, act)
			}
		}
	}
}

// Any bytes dequantize without panic (a weight read from a file).
func TestDequantizeArbitraryBytes_DoesNotPanic(t *testing.T) {
	src := make([]byte, 36*8)
	for i := range src {
		src[i] = byte(i*131 + 7)
	}
	for _, typ := range blkAllTypes {
		n := 64
		nb, _ := typ.RowBytes(n)
		dst := make([]float32, n)
		if err := Dequantize(typ, src[:nb], dst); err != nil {
			t.Fatal(err)
		}
		// the traits' routines themselves stop at the shorter buffer
		tr, _ := TraitsOf(typ)
		tr.Dequantize(src[:nb/2], dst)
		tr.Quantize(dst, src[:nb/2])
		tr.Dequantize(nil, dst)
		tr.Quantize(dst[:3], src)
	}
}

func TestQuantizeDequantize_BadLengthsAreErrors(t *testing.T) {
	for _, typ := range blkAllTypes {
		if typ.BlockSize() == QK {
			if err := Quantize(typ, make([]float32, 33), make([]byte, 1024)); err == nil {
				t.Errorf("%s: 33 values: want error", typ)
			}
			if err := Dequantize(typ, make([]byte, 1024), make([]float32, 40)); err == nil {
				t.Errorf("%s: dequantize 40 values: want error", typ)
			}
		}
		nb, _ := typ.RowBytes(64)
		if err := Quantize(typ, make([]float32, 64), make([]byte, nb-1)); err == nil {
			t.Errorf("%s: short dst: want error", typ)
		}
		if err := Dequantize(typ, make([]byte, nb-1), make([]float32, 64)); err == nil {
			t.Errorf("%s: short src: want error", typ)
		}
	}
}

// The C conversions the reference relies on: roundf rounds halves away from
// zero; the truncating cast rounds toward zero.
func TestBlockRounding_RoundfHalfAwayAndTruncation(t *testing.T) {
	round := []struct {
		in   float32
		want int32
	}{
		{0.5, 1}, {-0.5, -1}, {1.5, 2}, {2.5, 3}, {-2.5, -3}, {0.49999997, 0}, {-0.49999997, 0},
		{126.5, 127}, {127.4, 127}, {-127.5, -128}, {1e9, 127}, {-1e9, -128}, {float32(math.NaN()), -128},
	}
	for _, c := range round {
		if got := blockRoundAway(c.in); got != c.want {
			t.Errorf("blockRoundAway(%v) = %d, want %d", c.in, got, c.want)
		}
	}
	trunc := []struct {
		in   float32
		want int32
	}{
		{8.5, 8}, {15.99, 15}, {16.5, 15}, {0.4999, 0}, {-0.7, 0}, {1e20, 15}, {float32(math.Inf(-1)), 0}, {float32(math.NaN()), 0},
	}
	for _, c := range trunc {
		if got := blockTrunc(c.in, 0, 15); got != c.want {
			t.Errorf("blockTrunc(%v, 0, 15) = %d, want %d", c.in, got, c.want)
		}
	}
}
