package kv

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/quant"
)

func randRow(r *rand.Rand, n int, scale float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = scale * float32(r.NormFloat64())
	}
	return x
}

func TestParseFormat_RoundTripsNamesAndListsValidOnes(t *testing.T) {
	for _, f := range Formats() {
		g, err := ParseFormat(f.String())
		if err != nil || g != f {
			t.Fatalf("ParseFormat(%q) = %v, %v", f.String(), g, err)
		}
	}
	_, err := ParseFormat("q4_0")
	if err == nil || !strings.Contains(err.Error(), "f32, f16, q8_0") {
		t.Fatalf("ParseFormat(q4_0) error = %v, want one listing f32, f16, q8_0", err)
	}
}

func TestRowBytes_MatchesLayouts(t *testing.T) {
	cases := []struct {
		f    Format
		n    int
		want int
	}{{F32, 128, 512}, {F16, 128, 256}, {Q8_0, 128, 136}, {Q8_0, 32, 34}, {Q8_0, 33, -1}, {F32, -1, -1}}
	for _, c := range cases {
		if got := RowBytes(c.f, c.n); got != c.want {
			t.Errorf("RowBytes(%s, %d) = %d, want %d", c.f, c.n, got, c.want)
		}
	}
}

func TestF32_RoundTripIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	x := randRow(r, 256, 3)
	buf := make([]byte, RowBytes(F32, len(x)))
	StoreRow(F32, buf, x)
	y := make([]float32, len(x))
	LoadRow(F32, buf, y)
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			t.Fatalf("f32 round trip [%d]: %g -> %g", i, x[i], y[i])
		}
	}
}

// Bar: for values in f16's normal range, |x - f16(x)| <= 2^-11 |x|
// (round-to-nearest with an 11-bit significand).
func TestF16_RoundTripWithinRelative2Pow11(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := randRow(r, 4096, 10)
	buf := make([]byte, RowBytes(F16, len(x)))
	StoreRow(F16, buf, x)
	y := make([]float32, len(x))
	LoadRow(F16, buf, y)
	const rel = 1.0 / 2048
	for i := range x {
		if math.Abs(float64(x[i])) < 1.0/16384 {
			continue // subnormal in f16: absolute, not relative, error
		}
		if d := math.Abs(float64(x[i] - y[i])); d > rel*math.Abs(float64(x[i])) {
			t.Fatalf("f16 round trip [%d]: %g -> %g, |err| %g > 2^-11|x|", i, x[i], y[i], d)
		}
	}
}

// Bar: per 32-value block with stored f16 scale d, |x - d*q| <= d/2 plus the
// error of storing the scale in f16: q is rounded against the f32 scale
// amax/127, which differs from d by at most 2^-11 relative, times |q| <= 127.
func TestQ8_0_RoundTripWithinHalfScalePerBlock(t *testing.T) {
	if _, err := quant.TraitsOf(quant.Q8_0); err != nil {
		t.Fatalf("the Q8_0 quantizer of engine/quant is needed: %v", err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	const n = 32 * 64
	x := randRow(r, n, 2)
	x[7] = 0
	for i := 32; i < 64; i++ { // an all-zero block
		x[i] = 0
	}
	buf := make([]byte, RowBytes(Q8_0, n))
	StoreRow(Q8_0, buf, x)
	y := make([]float32, n)
	LoadRow(Q8_0, buf, y)
	for b := 0; b < n/32; b++ {
		d := float64(quant.FP16ToFP32(binary.LittleEndian.Uint16(buf[b*34:])))
		bound := d/2 + 127*d/2048 + 1e-7
		for j := 0; j < 32; j++ {
			i := b*32 + j
			if e := math.Abs(float64(x[i] - y[i])); e > bound {
				t.Fatalf("q8_0 block %d [%d]: %g -> %g, |err| %g > bound %g (d=%g)", b, j, x[i], y[i], e, bound, d)
			}
		}
	}
	// The KV row is byte-identical to a Q8_0 weight row.
	want := make([]byte, len(buf))
	if err := quant.Quantize(quant.Q8_0, x, want); err != nil {
		t.Fatal(err)
	}
	if string(want) != string(buf) {
		t.Fatal("q8_0 KV row differs from quant.Quantize(Q8_0)")
	}
}

func TestNew_RejectsBadShapes(t *testing.T) {
	cases := []struct {
		f                    Format
		nLayer, nCtx, rowLen int
		want                 string
	}{
		{Q8_0, 2, 16, 48, "multiple of 32"},
		{F32, 0, 16, 64, "positive"},
		{F16, 2, -1, 64, "positive"},
		{F32, 2, 16, 0, "positive"},
		{Format(7), 2, 16, 64, "invalid format"},
		{F32, 1 << 20, 1 << 20, 1 << 20, "exceeds"},
		{F32, math.MaxInt / 2, math.MaxInt / 2, math.MaxInt / 2, "exceeds"},
	}
	for _, c := range cases {
		_, err := New(c.f, c.nLayer, c.nCtx, c.rowLen)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%s, %d, %d, %d) error = %v, want %q", c.f, c.nLayer, c.nCtx, c.rowLen, err, c.want)
		}
	}
}

// fill writes a distinct byte pattern per (layer, K/V, cell).
func fill(c *Cache) {
	rb := c.RowBytes()
	for l := 0; l < c.NLayer(); l++ {
		for kv, buf := range [2][]byte{c.K(l), c.V(l)} {
			for cell := 0; cell < c.NCtx(); cell++ {
				for j := 0; j < rb; j++ {
					buf[cell*rb+j] = byte(l*31 + kv*101 + cell*7 + j)
				}
			}
		}
	}
}

func snapshot(c *Cache) [][2][]byte {
	out := make([][2][]byte, c.NLayer())
	for l := range out {
		out[l] = [2][]byte{append([]byte(nil), c.K(l)...), append([]byte(nil), c.V(l)...)}
	}
	return out
}

func checkMove(t *testing.T, f Format, src, dst, n int) {
	t.Helper()
	c, err := New(f, 3, 20, 64)
	if err != nil {
		t.Fatal(err)
	}
	fill(c)
	before := snapshot(c)
	if err := c.MoveCells(src, dst, n); err != nil {
		t.Fatalf("MoveCells(%d, %d, %d): %v", src, dst, n, err)
	}
	rb := c.RowBytes()
	for l := 0; l < c.NLayer(); l++ {
		for kv, buf := range [2][]byte{c.K(l), c.V(l)} {
			for cell := 0; cell < c.NCtx(); cell++ {
				from := cell
				if cell >= dst && cell < dst+n {
					from = src + cell - dst
				}
				got := buf[cell*rb : (cell+1)*rb]
				want := before[l][kv][from*rb : (from+1)*rb]
				if string(got) != string(want) {
					t.Fatalf("%s move(%d,%d,%d): layer %d kv %d cell %d holds the wrong row", f, src, dst, n, l, kv, cell)
				}
			}
		}
	}
}

func TestMoveCells_OverlappingForwardAndBackwardIsMemmove(t *testing.T) {
	for _, f := range []Format{F32, F16} {
		checkMove(t, f, 2, 5, 10)  // forward, overlapping
		checkMove(t, f, 8, 3, 10)  // backward, overlapping
		checkMove(t, f, 0, 10, 10) // disjoint, to the end
		checkMove(t, f, 4, 4, 6)   // no-op
		checkMove(t, f, 19, 0, 1)  // single cell
		checkMove(t, f, 0, 0, 20)  // whole cache
		checkMove(t, f, 3, 7, 0)   // empty
	}
}

func TestMoveCells_RejectsOutOfRange(t *testing.T) {
	c, err := New(F16, 2, 16, 32)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range [][3]int{{-1, 0, 1}, {0, -1, 1}, {0, 0, -1}, {10, 0, 7}, {0, 10, 7}, {16, 0, 1}, {0, 0, 17}, {math.MaxInt, 0, 2}} {
		if err := c.MoveCells(a[0], a[1], a[2]); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("MoveCells%v error = %v, want out of range", a, err)
		}
	}
}
