package cuda

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/minfer-go/minfer/engine/quant"
)

// Device tests of the decode mmvq path (minfer_quantize_q8_1 +
// minfer_mmvq_<type>); they skip with a message when no device answers.

// mmvqTypes are the weight types with an mmvq kernel, in a fixed order.
var mmvqTypes = []quant.Type{quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q4_K, quant.Q5_K, quant.Q6_K}

// mmvqAllOn are options that take every mmvq type's decode kernel: every
// kill switch off.
var mmvqAllOn = MatMulOptions{}

// mmvqKs are the row lengths tested per type: 256, 896 (qwen2-0.5b's width)
// and 4864 (its FFN width) for the 32-value formats; a K-quant needs whole
// 256-value super-blocks, so 1792 stands in for 896.
func mmvqKs(wt quant.Type) []int {
	if wt.BlockSize() == quant.QKK {
		return []int{256, 1792, 4864}
	}
	return []int{256, 896, 4864}
}

// mmvqActivation is an activation row of k values in [-1, 1] whose 32-value
// blocks vary in magnitude (every 5th block all zero: d = 0; another with a
// single value 3 among tiny ones). With ties, a third kind of block holds
// half-integers up to 127 (d = 1: every value is an exact rounding tie);
// those are far from unit scale, so only the byte-exact tests use them.
func mmvqActivation(rng *rand.Rand, k int, ties bool) []float32 {
	x := make([]float32, k)
	for i := range x {
		x[i] = 2*rng.Float32() - 1
	}
	nb := k / quant.QK
	for b := 0; b < nb; b++ {
		blk := x[b*quant.QK : (b+1)*quant.QK]
		switch b % 5 {
		case 1:
			for i := range blk {
				blk[i] = 0
			}
		case 2:
			for i := range blk {
				blk[i] *= 1e-3
			}
			blk[7] = 3
		case 3:
			if !ties {
				continue
			}
			// amax 127 gives d = 1 and id = 1: x.5 values are exact ties.
			for i := range blk {
				blk[i] = float32(int(rng.Int31n(253))-126) + 0.5
			}
			blk[0] = 127
		}
	}
	return x
}

// mmvqRun uploads the weight, activation and bias, quantizes the
// activation on the device (QuantizeQ8_1) and runs MatMul (nt = 1) with
// opts and the scratch; it returns the device Q8_1 bytes and the output.
func mmvqRun(t *testing.T, ms *mmtSession, wt quant.Type, wb []byte, x, bias []float32, k, n int,
	opts MatMulOptions) ([]byte, []float32) {
	t.Helper()
	qbytes := ActQ8Bytes(k, 1)
	q := make([]byte, qbytes)
	got := make([]byte, n*4)
	err := ms.dev.Do(func() error {
		up := ms.uploads()
		dw := up.bytes(wb)
		dx := up.f32(x)
		db := up.optF32(bias)
		dout := up.zeros(n * 4)
		dq := up.bytes(make([]byte, qbytes))
		if up.err != nil {
			return up.err
		}
		if err := ms.s.MemsetD8(dq, 0xa5, qbytes); err != nil { // unwritten bytes differ
			return err
		}
		if err := ms.s.MemsetD8(dout, 0xff, uint64(n*4)); err != nil { // NaN: unwritten outputs fail
			return err
		}
		if opts.ActQ8 != 0 {
			opts.ActQ8, opts.ActQ8Bytes = dq, qbytes
		}
		if err := ms.k.MatMul(ms.s, dout, dx, dw, wt, db, 1, k, n, opts); err != nil {
			return err
		}
		if opts.ActQ8 == 0 {
			// The mmv path leaves the scratch alone: quantize explicitly.
			if err := ms.k.QuantizeQ8_1(ms.s, dq, dx, k, 1); err != nil {
				return err
			}
		}
		return ms.downloadSync(mmtD2H{q, dq}, mmtD2H{got, dout})
	})
	if err != nil {
		t.Fatalf("%s k=%d n=%d %s: %v", wt, k, n, MatMulPath(wt, 1, opts), err)
	}
	return q, mmtFloats(got)
}

// mmvqScratchOn is an options value whose scratch is a placeholder:
// mmvqRun replaces it with a real buffer of the right size.
func mmvqScratchOn(o MatMulOptions) MatMulOptions {
	o.ActQ8, o.ActQ8Bytes = 1<<12, 1<<30
	return o
}

// TestMMVQDevice_Q8_1ActivationBytesEqualCPUQuantizerExactly: the device
// quantization of an activation row (minfer_quantize_q8_1, as the mmvq path
// runs it) equals quant.Quantize(quant.Q8_1, x) byte for byte (d, s and qs),
// for every mmvq type's k; also nt = 3 rows in one launch.
func TestMMVQDevice_Q8_1ActivationBytesEqualCPUQuantizerExactly(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(11))
	seen := map[int]bool{}
	for _, wt := range mmvqTypes {
		for _, k := range mmvqKs(wt) {
			if seen[k] {
				continue
			}
			seen[k] = true
			for _, nt := range []int{1, 3} {
				x := make([]float32, 0, nt*k)
				for range nt {
					x = append(x, mmvqActivation(rng, k, true)...)
				}
				want := make([]byte, ActQ8Bytes(k, nt))
				if err := quant.Quantize(quant.Q8_1, x, want); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(want))
				err := ms.dev.Do(func() error {
					up := ms.uploads()
					dx := up.f32(x)
					dq := up.zeros(len(want))
					if up.err != nil {
						return up.err
					}
					if err := ms.s.MemsetD8(dq, 0xa5, uint64(len(want))); err != nil {
						return err
					}
					if err := ms.k.QuantizeQ8_1(ms.s, dq, dx, k, nt); err != nil {
						return err
					}
					return ms.downloadSync(mmtD2H{got, dq})
				})
				if err != nil {
					t.Fatalf("k=%d nt=%d: %v", k, nt, err)
				}
				bad := 0
				for b := 0; b < len(want)/q8_1BlockBytes; b++ {
					g, w := got[b*q8_1BlockBytes:(b+1)*q8_1BlockBytes], want[b*q8_1BlockBytes:(b+1)*q8_1BlockBytes]
					if !bytes.Equal(g, w) {
						if bad < 3 {
							t.Errorf("k=%d nt=%d block %d: device % x, CPU % x", k, nt, b, g, w)
						}
						bad++
					}
				}
				t.Logf("k=%d nt=%d: %d of %d Q8_1 blocks differ from the CPU quantizer", k, nt, bad, len(want)/q8_1BlockBytes)
			}
		}
	}
}

// TestMMVQDevice_MatchesExactQ8_1ReferenceWithin1e4Relative: for every
// mmvq type and k (n = 147, bias on the Q4_0 / Q5_0 k=896 cases), (a) the scratch
// holds quant.Quantize(quant.Q8_1, x) byte for byte, (b) every output is
// within 1e-4 * sum_i |w_i a_i| (+1e-6) of the float64 dot of the CPU-
// dequantized weight and the dequantized Q8_1 activation, and (c) within
// 1e-2 absolute of the f32-activation mmv path on unit-scale outputs
// (weights of magnitude 1/sqrt(k), activations in [-1, 1]).
func TestMMVQDevice_MatchesExactQ8_1ReferenceWithin1e4Relative(t *testing.T) {
	ms := mmtOpen(t)
	const n = 147
	rng := rand.New(rand.NewSource(12))
	for _, wt := range mmvqTypes {
		for _, k := range mmvqKs(wt) {
			wb, deq := mmtWeights(t, rng, wt, n, k, float32(1/math.Sqrt(float64(k))))
			x := mmvqActivation(rng, k, false)
			var bias []float32
			if (wt == quant.Q4_0 || wt == quant.Q5_0) && k == 896 {
				bias = make([]float32, n)
				for i := range bias {
					bias[i] = 2*rng.Float32() - 1
				}
			}
			opts := mmvqScratchOn(mmvqAllOn)
			path := MatMulPath(wt, 1, opts)
			if path != mmvqTable[wt] {
				t.Fatalf("%s: MatMulPath = %q, want %q", wt, path, mmvqTable[wt])
			}
			q, got := mmvqRun(t, ms, wt, wb, x, bias, k, n, opts)
			_, f32 := mmvqRun(t, ms, wt, wb, x, bias, k, n, MatMulOptions{})

			// (a) the activation bytes.
			wantQ := make([]byte, ActQ8Bytes(k, 1))
			if err := quant.Quantize(quant.Q8_1, x, wantQ); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(q, wantQ) {
				t.Errorf("%s k=%d: the device Q8_1 activation differs from quant.Quantize(Q8_1)", wt, k)
			}
			a := make([]float32, k)
			if err := quant.Dequantize(quant.Q8_1, wantQ, a); err != nil {
				t.Fatal(err)
			}

			// (b) exact-reference and (c) mmv comparisons.
			var worstRel, maxVsMMV, maxVsF32Ref float64
			for j := 0; j < n; j++ {
				var ref, mag, refX float64
				for i := 0; i < k; i++ {
					w := float64(deq[j*k+i])
					ref += w * float64(a[i])
					mag += math.Abs(w * float64(a[i]))
					refX += w * float64(x[i])
				}
				if bias != nil {
					ref += float64(bias[j])
					refX += float64(bias[j])
				}
				g := float64(got[j])
				rel := math.Abs(g-ref) / (mag + 1e-6)
				if math.IsNaN(rel) {
					rel = math.Inf(1)
				}
				worstRel = max(worstRel, rel)
				d := math.Abs(g - float64(f32[j]))
				if math.IsNaN(d) {
					d = math.Inf(1)
				}
				maxVsMMV = max(maxVsMMV, d)
				maxVsF32Ref = max(maxVsF32Ref, math.Abs(g-refX))
			}
			t.Logf("%-5s k=%-4d n=%d %s (bias=%v): max |mmvq-ref|/sum|wa| = %.3g (bar 1e-4), max|mmvq-mmv| = %.3g (bar 1e-2), max|mmvq - f32 ref| = %.3g",
				wt, k, n, path, bias != nil, worstRel, maxVsMMV, maxVsF32Ref)
			if !(worstRel <= 1e-4) {
				t.Errorf("%s k=%d: max |mmvq-ref|/sum|wa| = %.3g, bar 1e-4", wt, k, worstRel)
			}
			if !(maxVsMMV <= 1e-2) {
				t.Errorf("%s k=%d: max |mmvq-mmv| = %.3g, bar 1e-2", wt, k, maxVsMMV)
			}
		}
	}
}

// TestMMVQDevice_LeverSwitchesToMMVKernel: with each type's lever set
// (NoQ80MMVQ / NoQ40MMVQ for Q4_0, Q4_1, Q5_0, Q5_1 / NoKQMMVQ for Q4_K,
// Q5_K, Q6_K) and a scratch given, MatMulPath names
// the mmv kernel and the launch census shows exactly that kernel ran (and
// no quantize); with the lever off it shows quantize + mmvq. The lever-on
// output is bitwise the scratch-less mmv output. A too-small scratch is an
// error, not a fallback.
func TestMMVQDevice_LeverSwitchesToMMVKernel(t *testing.T) {
	ms := mmtOpen(t)
	kc := mmtLoadKernels(t, ms, KernelsOptions{Census: true}, false)
	defer func() { _ = ms.dev.Do(kc.Close) }()
	levered := map[quant.Type]MatMulOptions{
		quant.Q8_0: {NoQ80MMVQ: true}, quant.Q4_0: {NoQ40MMVQ: true}, quant.Q4_1: {NoQ40MMVQ: true},
		quant.Q5_0: {NoQ40MMVQ: true}, quant.Q5_1: {NoQ40MMVQ: true},
		quant.Q4_K: {NoKQMMVQ: true}, quant.Q6_K: {NoKQMMVQ: true}, quant.Q5_K: {NoKQMMVQ: true},
	}
	const k, n = 256, 37
	rng := rand.New(rand.NewSource(13))
	for _, wt := range mmvqTypes {
		wb, _ := mmtWeights(t, rng, wt, n, k, 0.0625)
		x := mmvqActivation(rng, k, true)
		for _, lever := range []bool{false, true} {
			opts := mmvqAllOn
			if lever {
				opts = levered[wt]
			}
			var census map[string]int64
			out := make([]byte, n*4)
			err := ms.dev.Do(func() error {
				up := ms.uploads()
				dw := up.bytes(wb)
				dx := up.f32(x)
				dout := up.zeros(n * 4)
				dq := up.bytes(make([]byte, ActQ8Bytes(k, 1)))
				if up.err != nil {
					return up.err
				}
				small := opts
				small.ActQ8, small.ActQ8Bytes = dq, ActQ8Bytes(k, 1)-1
				if MatMulPath(wt, 1, small) == mmvqTable[wt] {
					if err := kc.MatMul(ms.s, dout, dx, dw, wt, 0, 1, k, n, small); err == nil {
						return fmt.Errorf("a scratch of %d bytes for k=%d was accepted", small.ActQ8Bytes, k)
					}
				}
				before := kc.Census()
				opts.ActQ8, opts.ActQ8Bytes = dq, ActQ8Bytes(k, 1)
				if err := kc.MatMul(ms.s, dout, dx, dw, wt, 0, 1, k, n, opts); err != nil {
					return err
				}
				census = map[string]int64{}
				for name, c := range kc.Census() {
					if d := c - before[name]; d != 0 {
						census[name] = d
					}
				}
				return ms.downloadSync(mmtD2H{out, dout})
			})
			if err != nil {
				t.Fatalf("%s lever=%v: %v", wt, lever, err)
			}
			census = qactMerged(census)
			path := MatMulPath(wt, 1, opts)
			want := map[string]int64{matmulTable[wt].mmv: 1}
			if !lever {
				want = map[string]int64{quantizeQ8_1Kernel: 1, mmvqTable[wt]: 1}
			}
			if lever && path != matmulTable[wt].mmv || !lever && path != mmvqTable[wt] {
				t.Errorf("%s lever=%v: MatMulPath = %q", wt, lever, path)
			}
			if len(census) != len(want) {
				t.Errorf("%s lever=%v: census %v, want %v", wt, lever, census, want)
			}
			for name, c := range want {
				if census[name] != c {
					t.Errorf("%s lever=%v: census %v, want %v", wt, lever, census, want)
				}
			}
			t.Logf("%s lever=%v: path %s, census %v", wt, lever, path, census)
			if lever {
				_, ref := mmvqRun(t, ms, wt, wb, x, nil, k, n, MatMulOptions{})
				got := mmtFloats(out)
				for j := range got {
					if math.Float32bits(got[j]) != math.Float32bits(ref[j]) {
						t.Errorf("%s lever on: out[%d] = %v, the mmv path gives %v", wt, j, got[j], ref[j])
						break
					}
				}
			}
		}
	}
}
