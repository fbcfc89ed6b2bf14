package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/quant"
)

// refMatmul is the matmul as it was before the multi-token kernels: every
// activation row quantized to the weight's VecDot format, then one quant Dot
// per (weight row, token), plus the bias. The new matmul must agree with it
// bitwise.
func refMatmul(t testing.TB, x []float32, nt int, ws []*weight, bias [][]float32) []float32 {
	t.Helper()
	k := len(x) / nt
	var y []float32
	for w, wt := range ws {
		vt := wt.tr.VecDot
		var act []byte
		arb := 4 * k
		if vt == quant.F32 {
			act = f32bytes(x)
		} else {
			rb, err := vt.RowBytes(k)
			if err != nil {
				t.Fatal(err)
			}
			arb = rb
			act = make([]byte, rb*nt)
			tr, err := quant.TraitsOf(vt)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < nt; i++ {
				tr.Quantize(x[i*k:(i+1)*k], act[i*rb:(i+1)*rb])
			}
		}
		out := make([]float32, nt*wt.rows)
		for r := 0; r < wt.rows; r++ {
			row := wt.data[r*wt.rowBytes : (r+1)*wt.rowBytes]
			for i := 0; i < nt; i++ {
				v := wt.tr.Dot(k, row, act[i*arb:(i+1)*arb])
				if bias != nil && bias[w] != nil {
					v += bias[w][r]
				}
				out[i*wt.rows+r] = v
			}
		}
		y = append(y, out...)
	}
	return y
}

// matmulTypes are the weight types with a CPU Dot.
var matmulTypes = []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q4_0, quant.Q4_1,
	quant.Q5_0, quant.Q5_1, quant.Q8_0, quant.Q4_K, quant.Q5_K, quant.Q6_K}

// testWeight quantizes m rows of k random values (scaled per row, some rows
// extreme) to typ and registers it in b.
func testWeight(t testing.TB, b *Backend, name string, typ quant.Type, k, m int, seed uint64) *weight {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, uint64(typ)))
	vals := randVals(r, k*m)
	for row := 0; row < m; row++ {
		s := float32(math.Exp2(float64(r.IntN(9) - 4)))
		for i := 0; i < k; i++ {
			vals[row*k+i] *= s
		}
	}
	nb, err := typ.RowBytes(k * m)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, nb)
	if err := quant.Quantize(typ, vals, data); err != nil {
		t.Fatalf("%s: %v", typ, err)
	}
	if err := b.RegisterWeight(graph.Weight{Name: name, Type: typ, Dims: []int{k, m}, Data: data}); err != nil {
		t.Fatal(err)
	}
	return b.weights[name]
}

func bitwiseEqual(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: value %d: %v (%#08x), reference %v (%#08x)", what, i,
				got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// TestMatMul_BitwiseEqualsPerRowDotReference: for every weight type, token
// count and thread count, the matmul (with and without bias, one weight and
// the fused three-weight form) gives exactly the bits of one quant Dot per
// (row, token).
func TestMatMul_BitwiseEqualsPerRowDotReference(t *testing.T) {
	const m = 37
	for _, typ := range matmulTypes {
		k := 512 // two K-quant blocks, 16 Q8_0 blocks
		if typ == quant.F32 || typ == quant.F16 || typ == quant.BF16 {
			k = 203 // not a multiple of 8: the plain dots' tail
		}
		for _, threads := range []int{1, 2, 3, 8} {
			b := New(Options{Threads: threads})
			w0 := testWeight(t, b, "w0", typ, k, m, 1)
			w1 := testWeight(t, b, "w1", typ, k, 5, 2)
			w2 := testWeight(t, b, "w2", quant.Q8_0, 512, 19, 3)
			if k != 512 {
				w2 = testWeight(t, b, "w2", quant.F32, k, 19, 3)
			}
			r := rand.New(rand.NewPCG(uint64(threads), 9))
			bias := [][]float32{randVals(r, m), nil, randVals(r, 19)}
			for _, nt := range []int{1, 2, 3, 8, 17, 64} {
				x := randVals(r, k*nt)
				for i := 0; i < k; i += 7 {
					x[i] *= 100 // a few large activations: extreme quants
				}
				what := fmt.Sprintf("%s threads=%d nt=%d", typ, threads, nt)
				y := make([]float32, m*nt)
				if err := b.matmul(x, nt, [3]*weight{w0}, [3][]float32{}, y); err != nil {
					t.Fatal(err)
				}
				bitwiseEqual(t, what, y, refMatmul(t, x, nt, []*weight{w0}, nil))

				y = make([]float32, (m+5+19)*nt)
				if err := b.matmul(x, nt, [3]*weight{w0, w1, w2}, [3][]float32(bias), y); err != nil {
					t.Fatal(err)
				}
				bitwiseEqual(t, what+" fused", y, refMatmul(t, x, nt, []*weight{w0, w1, w2}, bias))
			}
			b.Close()
		}
	}
}

var benchWeights sync.Map // "typ/k/m" -> graph.Weight

func BenchmarkMatMul(b *testing.B) {
	// k x m: rows of k values, m rows. The K-quants need k a multiple of
	// 256: their shape is the FFN down projection of a 0.5B model.
	shapes := []struct{ k, m int }{{896, 896}, {896, 4864}}
	kshapes := []struct{ k, m int }{{4864, 896}}
	types := []quant.Type{quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.F16}
	for _, typ := range types {
		shs := shapes
		if typ == quant.Q4_K || typ == quant.Q5_K || typ == quant.Q6_K {
			shs = kshapes
		}
		for _, sh := range shs {
			for _, nt := range []int{1, 8, 64} {
				b.Run(fmt.Sprintf("%s/nt=%d/%dx%d", typ, nt, sh.k, sh.m), func(b *testing.B) {
					be := New(Options{})
					defer be.Close()
					key := fmt.Sprintf("%s/%d/%d", typ, sh.k, sh.m)
					var w *weight
					if v, ok := benchWeights.Load(key); ok {
						if err := be.RegisterWeight(v.(graph.Weight)); err != nil {
							b.Fatal(err)
						}
						w = be.weights["w"]
					} else {
						w = testWeight(b, be, "w", typ, sh.k, sh.m, 1)
						benchWeights.Store(key, graph.Weight{Name: "w", Type: typ, Dims: []int{sh.k, sh.m}, Data: w.data})
					}
					r := rand.New(rand.NewPCG(4, 5))
					x := randVals(r, sh.k*nt)
					y := make([]float32, sh.m*nt)
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if err := be.matmul(x, nt, [3]*weight{w}, [3][]float32{}, y); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
