package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/quant"
)

// Device tests of the pipelined prefill MMQ (MINFER_MMQ_V2,
// minfer_mmq2_<type>); they skip with a message when no device answers.

// mmq2Shapes are the bitwise-comparison shapes: the qwen2-7b q/o (128-row
// tile, 8 token tiles), the 7b gate/up at an odd nt (128-row tile, last
// token tile 13 wide), the 0.5b down at nt = 9 (64-row tile split over k
// on a 132-SM H200: the last stage of a part, and a thin token tile), a
// tiny n = 152, k = 256 (one K-quant super-block, two stages, 64-row
// tile, rows past n). Every k is a multiple of 256, so all eight types run
// every shape. The 32-value types also run k = 4896 (153 blocks: a last
// stage of one block; 8-way split-K on 132 SMs, the last part shorter).
func mmq2Shapes(wt quant.Type) []mmqShape {
	s := []mmqShape{{512, 3584, 3584}, {77, 18944, 3584}, {9, 896, 4864}, {33, 152, 256}}
	if wt.BlockSize() == quant.QK {
		s = append(s, mmqShape{40, 200, 4896})
	}
	return s
}

// mmq2Weights is n random rows of k values quantized to wt. Above 1000
// rows it quantizes 1000 and repeats them (whole rows, so every row is a
// valid row of wt; 1000 is no multiple of a tile, so the tiles differ):
// the bitwise comparison needs no reference, and quantizing 68M K-quant
// values on the host would take ~10 s per type.
func mmq2Weights(t *testing.T, rng *rand.Rand, wt quant.Type, n, k int) []byte {
	t.Helper()
	const base = 1000
	wb, _ := mmtWeights(t, rng, wt, min(n, base), k, float32(1/math.Sqrt(float64(k))))
	if n <= base {
		return wb
	}
	rb := len(wb) / base
	out := make([]byte, 0, n*rb)
	for len(out) < n*rb {
		out = append(out, wb[:min(len(wb), n*rb-len(out))]...)
	}
	return out
}

// TestMMQ2Device_BitwiseEqualsV1EveryTypeAndShape: for every MMQ type and
// mmq2Shapes (bias on every other shape), MatMul with MMQ and MMQV2 names
// minfer_mmq2_<type> and gives bitwise v1's output (same plan, same
// per-output f32 operation order); the test prints, per case, the kernels
// run, the count of differing outputs, the first positions and
// max |v2 - v1|. The sweep must have run the 128-row, 64-row and split-K
// variants on this device.
func TestMMQ2Device_BitwiseEqualsV1EveryTypeAndShape(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(71))
	sms := ms.dev.Attr.SMCount
	seen := map[string]bool{}
	for _, wt := range mmqTypes {
		for si, sh := range mmq2Shapes(wt) {
			wb := mmq2Weights(t, rng, wt, sh.n, sh.k)
			x := make([]float32, 0, sh.nt*sh.k)
			for range sh.nt {
				x = append(x, mmvqActivation(rng, sh.k, false)...)
			}
			var bias []float32
			if si%2 == 1 {
				bias = make([]float32, sh.n)
				for i := range bias {
					bias[i] = 2*rng.Float32() - 1
				}
			}
			v1o, v2o := MatMulOptions{MMQ: true}, MatMulOptions{MMQ: true, MMQV2: true}
			if p := MatMulPath(wt, sh.nt, v2o); p != mmq2Table[wt] {
				t.Fatalf("%s nt=%d: MatMulPath with MMQV2 = %q, want %q", wt, sh.nt, p, mmq2Table[wt])
			}
			if c := MatMulTolerance(wt, sh.nt, v2o); c != "activation-quantization-q8_1" {
				t.Fatalf("%s nt=%d: MatMulTolerance with MMQV2 = %q", wt, sh.nt, c)
			}
			q1, v1 := mmqRun(t, ms, wt, wb, x, bias, sh, v1o)
			q2, v2 := mmqRun(t, ms, wt, wb, x, bias, sh, v2o)
			plan := mmqPlanFor(sh.n, sh.nt, sh.k, sms)
			seen[fmt.Sprintf("rows=%d split=%v", plan.rows, plan.splits > 1)] = true
			if string(q1) != string(q2) {
				t.Errorf("%s %+v: the Q8_1 activations of the two runs differ", wt, sh)
			}
			bad, nan := 0, 0
			maxd := 0.0
			var first []string
			for i := range v1 {
				if math.IsNaN(float64(v2[i])) {
					nan++
				}
				if math.Float32bits(v1[i]) == math.Float32bits(v2[i]) {
					continue
				}
				bad++
				maxd = max(maxd, math.Abs(float64(v2[i])-float64(v1[i])))
				if len(first) < 4 {
					first = append(first, fmt.Sprintf("tok %d row %d: v2 %v v1 %v", i/sh.n, i%sh.n, v2[i], v1[i]))
				}
			}
			t.Logf("%-5s nt=%-4d n=%-5d k=%-4d bias=%-5v v1 %v v2 %v: %d of %d outputs differ (max |v2-v1| %.3g), %d NaN",
				wt, sh.nt, sh.n, sh.k, bias != nil, MMQKernels(wt, sh.nt, sh.k, sh.n, sms),
				MMQKernelsOpts(wt, sh.nt, sh.k, sh.n, sms, v2o), bad, len(v1), maxd, nan)
			if bad > 0 || nan > 0 {
				t.Errorf("%s %+v: %d outputs differ from v1 bitwise (max |v2-v1| %.3g; first %s), %d NaN",
					wt, sh, bad, maxd, strings.Join(first, "; "), nan)
			}
		}
	}
	t.Logf("%d SMs: variants run %v", sms, seen)
	for _, v := range []string{"rows=128 split=false", "rows=64 split=false", "rows=64 split=true"} {
		if !seen[v] {
			t.Errorf("the sweep never ran variant %s on this %d-SM device (the shapes are chosen for 132 SMs)", v, sms)
		}
	}
}

// TestMMQ2Device_CensusNamesV2OnlyWithLeverOn: a 40-token prefill of the
// synthetic qwen2-tiny Q8_0 and Q4_K_M models (the fused q/k/v and FFN
// ops quantize once and call MatMulPreQ8_1; o and down go through MatMul)
// with the census on: with MINFER_MMQ_V2=1 the census names minfer_mmq2_*
// kernels and no v1 minfer_mmq_<type>; with it 0, the reverse. The
// prefill's last-token logits of the two arms are bitwise equal.
func TestMMQ2Device_CensusNamesV2OnlyWithLeverOn(t *testing.T) {
	dsNeedDevice(t)
	toks := make([]int32, 40)
	for i := range toks {
		toks[i] = int32(1 + (7*i+3)%31)
	}
	for _, m := range []struct{ shape, typ string }{{"qwen2-tiny", "Q8_0"}, {"qwen2-tiny", "Q4_K_M"}} {
		path := dsSynth(t, m.shape, m.typ)
		var logits [2][]float32
		for arm, v2 := range []bool{false, true} {
			lv := "MINFER_MMQ_V2=0"
			if v2 {
				lv = "MINFER_MMQ_V2=1"
			}
			e := dsEngine(t, path, "cuda", 64, "MINFER_LAUNCH_CENSUS=1", "MINFER_MMQ=1", lv)
			b := dsDeviceBackend(t, e)
			out, err := e.Forward(toks, false)
			if err != nil {
				t.Fatalf("%s/%s %s: %v", m.shape, m.typ, lv, err)
			}
			logits[arm] = out
			var n1, n2 int64
			for name, c := range b.Kernels().Census() {
				switch {
				case strings.HasPrefix(name, "minfer_mmq2_"):
					n2 += c
				case strings.HasPrefix(name, "minfer_mmq_") && name != mmqReduceKernel:
					n1 += c
				}
			}
			t.Logf("%s/%s %s: %d v2 and %d v1 MMQ launches; census %v", m.shape, m.typ, lv, n2, n1, b.Kernels().Census())
			if v2 && (n2 == 0 || n1 != 0) || !v2 && (n1 == 0 || n2 != 0) {
				t.Errorf("%s/%s %s: %d minfer_mmq2_* and %d minfer_mmq_<type> launches: want only the %s family",
					m.shape, m.typ, lv, n2, n1, map[bool]string{true: "v2", false: "v1"}[v2])
			}
		}
		bad := 0
		for i := range logits[0] {
			if math.Float32bits(logits[0][i]) != math.Float32bits(logits[1][i]) {
				if bad < 3 {
					t.Errorf("%s/%s logit %d: v1 %v, v2 %v (bitwise)", m.shape, m.typ, i, logits[0][i], logits[1][i])
				}
				bad++
			}
		}
		t.Logf("%s/%s: %d of %d prefill logits differ between MMQ v1 and v2", m.shape, m.typ, bad, len(logits[0]))
	}
}
