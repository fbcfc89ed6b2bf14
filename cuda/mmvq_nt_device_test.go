package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quant"
)

// Device tests of MINFER_MMVQ_NT (mmvq_nt.go, kernels/mmvq_nt.cu):
// minfer_mmvq_nt_<t> bitwise against minfer_mmvq_<t> per token, and whole
// models with the lever on against off, the CPU and themselves without CUDA
// graphs. They skip with a message when no device answers.

// ntShapes are the (n, k) shapes: qwen2-0.5b's attention / FFN up / FFN
// down, qwen2-7b's FFN down, and an odd row count over one super-block. A
// K-quant row needs whole 256-value super-blocks, so 1792 stands in for 896.
func ntShapes(wt quant.Type) [][2]int {
	k896 := 896
	if wt.BlockSize() == quant.QKK {
		k896 = 1792
	}
	return [][2]int{{896, k896}, {4864, k896}, {896, 4864}, {3584, 18944}, {257, 256}}
}

// ntWeight is n rows of k values of wt as GGUF blocks: random quant bytes
// with finite random scales, built from at most 61 distinct rows repeated
// (a 7B FFN-down weight is 72 MB: generating it whole would dominate).
func ntWeight(rng *rand.Rand, wt quant.Type, k, n int) []byte {
	bb, nbRow := wt.BlockBytes(), k/wt.BlockSize()
	rowBytes := bb * nbRow
	distinct := min(n, 61)
	base := make([]byte, rowBytes*distinct)
	rng.Read(base)
	put := func(b []byte, off int) {
		d := rpF16(rng)
		b[off], b[off+1] = byte(d), byte(d>>8)
	}
	for i := range nbRow * distinct {
		b := base[i*bb : (i+1)*bb]
		switch wt {
		case quant.Q8_0, quant.Q4_0, quant.Q5_0:
			put(b, 0)
		case quant.Q4_1, quant.Q5_1, quant.Q4_K, quant.Q5_K:
			put(b, 0)
			put(b, 2)
		case quant.Q6_K:
			put(b, 208)
		}
	}
	w := make([]byte, rowBytes*n)
	for r := range n {
		copy(w[r*rowBytes:], base[(r%distinct)*rowBytes:(r%distinct+1)*rowBytes])
	}
	return w
}

// ntDiff compares got ([nt][n]) with want (per token, n each) bitwise; it
// reports the count, the first few positions (token, row) and max |diff|.
func ntDiff(t *testing.T, what string, got []float32, want [][]float32, nt, n int) int {
	t.Helper()
	bad, worst := 0, 0.0
	for tok := range nt {
		for j := range n {
			g, w := got[tok*n+j], want[tok][j]
			if math.Float32bits(g) == math.Float32bits(w) {
				continue
			}
			if bad < 4 {
				t.Errorf("%s: token %d row %d: nt kernel %v (%#08x), nt=1 kernel %v (%#08x)", what, tok, j, g,
					math.Float32bits(g), w, math.Float32bits(w))
			}
			bad++
			d := math.Abs(float64(g) - float64(w))
			if math.IsNaN(d) {
				d = math.Inf(1)
			}
			worst = max(worst, d)
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d outputs differ bitwise, max |diff| %g", what, bad, nt*n, worst)
	}
	return bad
}

// ntBitwise reports where got and want differ bitwise (count, first
// positions, max |diff|).
func ntBitwise(t *testing.T, what string, got, want []float32) {
	t.Helper()
	bad, worst := 0, 0.0
	for i := range want {
		if math.Float32bits(got[i]) == math.Float32bits(want[i]) {
			continue
		}
		if bad < 3 {
			t.Errorf("%s: [%d] %v, want %v", what, i, got[i], want[i])
		}
		bad++
		worst = max(worst, math.Abs(float64(got[i])-float64(want[i])))
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values differ bitwise, max |diff| %g", what, bad, len(want), worst)
	}
}

// TestMMVQNTDevice_BitwiseEqualsNT1PerToken: for every mmvq type, every
// shape of ntShapes and nt = 2..8, minfer_mmvq_nt_<t> over nt device-
// quantized activation rows (zero blocks, spikes, rounding ties), with a
// bias, gives for token t bitwise what minfer_mmvq_<t> gives on token t's
// Q8_1 row alone; and the whole MatMul path with MMVQNT on (quantize the
// f32 rows + the nt kernel, nt = 5) gives bitwise the same.
func TestMMVQNTDevice_BitwiseEqualsNT1PerToken(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(71))
	for _, wt := range mmvqTypes {
		if mmvqNTMissing[wt] {
			t.Logf("%s: no multi-token kernel (mmvqNTMissing): 2..8 tokens keep minfer_mmv_<t>", wt)
			continue
		}
		for _, sh := range ntShapes(wt) {
			n, k := sh[0], sh[1]
			wb := ntWeight(rng, wt, k, n)
			x := make([]float32, 0, mmvqntMaxNT*k)
			for range mmvqntMaxNT {
				x = append(x, mmvqActivation(rng, k, true)...)
			}
			bias := make([]float32, n)
			for i := range bias {
				bias[i] = 2*rng.Float32() - 1
			}
			rowQ := ActQ8Bytes(k, 1)
			want := make([][]float32, mmvqntMaxNT)
			got := map[int][]float32{}
			var viaMatMul []float32
			const ntMatMul = 5
			err := ms.dev.Do(func() error {
				up := ms.uploads()
				dw := up.bytes(wb)
				dx := up.f32(x)
				db := up.f32(bias)
				if up.err != nil {
					return up.err
				}
				qb := ActQ8Bytes(k, mmvqntMaxNT)
				dq, err := ms.upload(make([]byte, qb))
				if err != nil {
					return err
				}
				if err := ms.k.QuantizeQ8_1(ms.s, dq, dx, k, mmvqntMaxNT); err != nil {
					return err
				}
				for tok := range mmvqntMaxNT {
					if want[tok], err = rpOut(ms, n, func(o driver.DevicePtr) error {
						return ms.k.MatMulQ8_1(ms.s, o, dq.Add(uint64(tok)*rowQ), rowQ, dw, wt, db, k, n)
					}); err != nil {
						return fmt.Errorf("nt=1 token %d: %w", tok, err)
					}
				}
				for nt := mmvqntMinNT; nt <= mmvqntMaxNT; nt++ {
					if got[nt], err = rpOut(ms, nt*n, func(o driver.DevicePtr) error {
						return ms.k.MatMulQ8_1NT(ms.s, o, dq, ActQ8Bytes(k, nt), dw, wt, db, nt, k, n)
					}); err != nil {
						return fmt.Errorf("nt=%d: %w", nt, err)
					}
				}
				// The MatMul path: its own scratch, quantized from f32.
				scr, err := ms.upload(make([]byte, qb))
				if err != nil {
					return err
				}
				opts := MatMulOptions{MMVQNT: true, ActQ8: scr, ActQ8Bytes: qb}
				if p := MatMulPath(wt, ntMatMul, opts); p != mmvqNTKernel(wt) {
					return fmt.Errorf("MatMulPath(%s, nt=%d) = %q, want %q", wt, ntMatMul, p, mmvqNTKernel(wt))
				}
				viaMatMul, err = rpOut(ms, ntMatMul*n, func(o driver.DevicePtr) error {
					return ms.k.MatMul(ms.s, o, dx, dw, wt, db, ntMatMul, k, n, opts)
				})
				return err
			})
			if err != nil {
				t.Fatalf("%s n=%d k=%d: %v", wt, n, k, err)
			}
			bad := 0
			for nt := mmvqntMinNT; nt <= mmvqntMaxNT; nt++ {
				bad += ntDiff(t, fmt.Sprintf("%s n=%d k=%d nt=%d", wt, n, k, nt), got[nt], want, nt, n)
			}
			bad += ntDiff(t, fmt.Sprintf("%s n=%d k=%d MatMul nt=%d", wt, n, k, ntMatMul), viaMatMul, want, ntMatMul, n)
			t.Logf("%-5s n=%-5d k=%-5d: nt 2..8 and MatMul nt=%d vs per-token minfer_mmvq: %d outputs differ bitwise",
				wt, n, k, ntMatMul, bad)
		}
	}
}

// ntQuantSuffixes are the kernel-name suffixes of the mmvq types: with the
// lever on no minfer_mmv_<suffix> launch may remain for nt 2..8.
func ntQuantSuffixes() []string {
	var s []string
	for ty, name := range mmvqTable {
		if !mmvqNTMissing[ty] { // those keep minfer_mmv_<t> for nt 2..8
			s = append(s, strings.TrimPrefix(name, "minfer_mmvq_"))
		}
	}
	return s
}

// ntForward runs the 5-token prompt then five 3-token chunks and returns
// each step's (last-token) logits.
func ntForward(t *testing.T, e *model.Engine) [][]float32 {
	t.Helper()
	steps := [][]int32{{11, 22, 33, 44, 55}}
	for i := range 5 {
		steps = append(steps, []int32{int32(100 + 7*i), int32(101 + 7*i), int32(102 + 7*i)})
	}
	var out [][]float32
	for _, toks := range steps {
		l, err := e.Forward(toks, false)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// TestMMVQNTDevice_WholeModelCensusAndLogits: synthetic qwen2-tiny and
// qwen2-0.5b at Q8_0 and Q4_K_M, a 5-token prompt then 3-token chunks.
// Liveness (launch census): MINFER_MMVQ_NT=1 launches minfer_mmvq_nt_* and
// no minfer_mmv_<t> of an mmvq type; =0 no minfer_mmvq_nt_*. Logits, lever
// on vs off and vs the CPU backend, in the activation-quantization class:
// rel L2 and max |diff| / max |ref| <= 5e-2, top-1 equal wherever the
// reference's top-2 margin is above what that bar can close
// (dsClassFlipMargin). With CUDA graphs off the lever-on logits are bitwise the same.
// The MMVQ path the multi-token kernels need is pinned on (dsMMVQ): an
// A/B's arm B may send a type to the f32 kernels.
func TestMMVQNTDevice_WholeModelCensusAndLogits(t *testing.T) {
	dsNeedDevice(t)
	for _, m := range []struct{ shape, typ string }{
		{"qwen2-tiny", "Q8_0"}, {"qwen2-tiny", "Q4_K_M"}, {"qwen2-0.5b", "Q8_0"}, {"qwen2-0.5b", "Q4_K_M"},
	} {
		t.Run(m.shape+"/"+m.typ, func(t *testing.T) {
			p := dsSynth(t, m.shape, m.typ)
			on := dsEngine(t, p, "cuda", 256, append([]string{"MINFER_LAUNCH_CENSUS=1", "MINFER_MMVQ_NT=1"}, dsMMVQ...)...)
			off := dsEngine(t, p, "cuda", 256, append([]string{"MINFER_LAUNCH_CENSUS=1", "MINFER_MMVQ_NT=0"}, dsMMVQ...)...)
			noGraph := dsEngine(t, p, "cuda", 256, append([]string{"MINFER_MMVQ_NT=1", "MINFER_NO_CUDA_GRAPH=1"}, dsMMVQ...)...)
			host := dsEngine(t, p, "cpu", 256)
			bOn, bOff := dsDeviceBackend(t, on), dsDeviceBackend(t, off)
			if !bOn.MatMulOptions().MMVQNT || bOff.MatMulOptions().MMVQNT {
				t.Fatalf("MMVQNT option: on %v, off %v", bOn.MatMulOptions().MMVQNT, bOff.MatMulOptions().MMVQNT)
			}
			var gOn, gOff [][]float32
			cOn := mfCensusDelta(bOn, func() { gOn = ntForward(t, on) })
			cOff := mfCensusDelta(bOff, func() { gOff = ntForward(t, off) })
			gNoGraph := ntForward(t, noGraph)
			gCPU := ntForward(t, host)

			ntOn, namesOn := rpMatching(cOn, "minfer_mmvq_nt_*")
			ntOff, _ := rpMatching(cOff, "minfer_mmvq_nt_*")
			var mmvLeft []string
			for _, sfx := range ntQuantSuffixes() {
				if c := cOn["minfer_mmv_"+sfx]; c != 0 {
					mmvLeft = append(mmvLeft, fmt.Sprintf("minfer_mmv_%s x%d", sfx, c))
				}
			}
			t.Logf("census: lever on %d minfer_mmvq_nt_* %v, mmv of mmvq types left %v; lever off %d minfer_mmvq_nt_*; capture stats on %+v",
				ntOn, namesOn, mmvLeft, ntOff, bOn.CaptureStats())
			if ntOn == 0 {
				t.Errorf("lever on: no minfer_mmvq_nt_* launch (census %v)", cOn)
			}
			if len(mmvLeft) != 0 {
				t.Errorf("lever on: f32 mmv kernels of mmvq types still launched: %v", mmvLeft)
			}
			if ntOff != 0 {
				t.Errorf("lever off: %d minfer_mmvq_nt_* launches, want 0", ntOff)
			}

			for i := range gOn {
				for _, ref := range []struct {
					name string
					v    []float32
				}{{"lever off", gOff[i]}, {"cpu", gCPU[i]}} {
					rl := mfRelL2(gOn[i], ref.v)
					a, _ := mfTop2(gOn[i])
					b, margin := mfTop2(ref.v)
					t.Logf("step %d vs %s: rel L2 %.3g (bar 5e-2), top-1 %d / %d (ref margin %.3g), max |diff| / max |ref| %.3g",
						i, ref.name, rl, a, b, margin, dsLogitDiff(gOn[i], ref.v))
					if !(rl <= 5e-2) {
						t.Errorf("step %d vs %s: rel L2 %.3g > 5e-2", i, ref.name, rl)
					}
					if d := dsLogitDiff(gOn[i], ref.v); !(d <= 5e-2) {
						t.Errorf("step %d vs %s: max |diff| / max |ref| %.3g > 5e-2", i, ref.name, d)
					}
					if fm := dsClassFlipMargin(ref.v, 5e-2); a != b && margin > fm {
						t.Errorf("step %d vs %s: top-1 %d, reference %d with margin %.3g > %.3g", i, ref.name, a, b, margin, fm)
					}
				}
				ntBitwise(t, fmt.Sprintf("step %d logits (lever on), CUDA graphs on vs off", i), gOn[i], gNoGraph[i])
			}
		})
	}
}
