package cuda

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	randv2 "math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
)

// Device tests of the prefill MMQ path (minfer_quantize_q8_1 +
// minfer_mmq_<type>); they skip with a message when no device answers.

// mmqTypes are the weight types with an MMQ kernel, in a fixed order (the
// qwen2 Q4_K_M / Q8_0 types first).
var mmqTypes = []quant.Type{quant.Q8_0, quant.Q5_0, quant.Q4_K, quant.Q6_K, quant.Q4_0, quant.Q4_1, quant.Q5_1, quant.Q5_K}

// mmqShape is one matmul shape of the sweep.
type mmqShape struct{ nt, n, k int }

// mmqShapes covers nt in {9, 16, 40, 64, 65, 512, 1000}, n in {147, 200,
// 896, 1000, 3584, 4864} and k in {896, 3584, 4864, 4896}; a K-quant needs
// whole 256-value super-blocks, so 1792 stands in for 896 and 4608 for 4896
// there. On a 132-SM H200 the sweep runs every launch variant (mmqPlanFor):
// the 128-row tile ({512, 4864, 896}), the 64-row tile ({9, 896, 896},
// {1000, 896, 4864}) and the 64-row tile split over k ({16, 1000, 4864}: 8
// parts; {40, 200, 4896}: 8 parts over 39 stages, the last stage one
// 32-block, the last part shorter).
func mmqShapes(wt quant.Type) []mmqShape {
	k896, kOdd := 896, 4896
	if wt.BlockSize() == quant.QKK {
		k896, kOdd = 1792, 4608
	}
	return []mmqShape{
		{9, 896, k896}, {16, 1000, 4864}, {64, 4864, k896}, {65, 3584, 3584},
		{512, 1000, 3584}, {1000, 896, 4864}, {130, 147, k896}, {512, 4864, k896}, {40, 200, kOdd},
	}
}

// mmqSample lists the indices below n that the exact reference checks:
// all of them for small n, else both edges of every 64 / 128 tile boundary
// near the ends and a stride through the middle (the device computes every
// output; the host float64 reference of all of them would take minutes).
func mmqSample(n int) []int {
	if n <= 300 {
		s := make([]int, n)
		for i := range s {
			s[i] = i
		}
		return s
	}
	var s []int
	for i := 0; i < n; i++ {
		if i < 136 || i >= n-136 || i%29 == 0 {
			s = append(s, i)
		}
	}
	return s
}

// mmqRun uploads weight, activation and bias and runs MatMul with opts
// (a fresh scratch of exactly MMQScratchBytes(k, nt, n, SMs) bytes replaces
// opts.MMQAct when opts.MMQ is set); it returns the Q8_1 activation bytes
// and the output.
func mmqRun(t *testing.T, ms *mmtSession, wt quant.Type, wb []byte, x, bias []float32, sh mmqShape,
	opts MatMulOptions) ([]byte, []float32) {
	t.Helper()
	qbytes := max(ActQ8Bytes(sh.k, sh.nt), MMQScratchBytes(sh.k, sh.nt, sh.n, ms.dev.Attr.SMCount))
	q := make([]byte, ActQ8Bytes(sh.k, sh.nt))
	got := make([]byte, sh.nt*sh.n*4)
	err := ms.dev.Do(func() error {
		up := ms.uploads()
		dw := up.bytes(wb)
		dx := up.f32(x)
		db := up.optF32(bias)
		dout := up.zeros(len(got))
		dq := up.bytes(make([]byte, qbytes))
		if up.err != nil {
			return up.err
		}
		if err := ms.s.MemsetD8(dout, 0xff, uint64(len(got))); err != nil { // NaN: unwritten outputs fail
			return err
		}
		if opts.MMQ {
			opts.MMQAct, opts.MMQActBytes = dq, qbytes
		}
		if err := ms.k.MatMul(ms.s, dout, dx, dw, wt, db, sh.nt, sh.k, sh.n, opts); err != nil {
			return err
		}
		if !opts.MMQ {
			if err := ms.k.QuantizeQ8_1(ms.s, dq, dx, sh.k, sh.nt); err != nil {
				return err
			}
		}
		return ms.downloadSync(mmtD2H{q, dq}, mmtD2H{got, dout})
	})
	if err != nil {
		t.Fatalf("%s %+v %s: %v", wt, sh, MatMulPath(wt, sh.nt, opts), err)
	}
	return q, mmtFloats(got)
}

// mmqPar runs f(i) for i < n on all CPUs.
func mmqPar(n int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// TestMMQDevice_MatchesExactQ8_1ReferenceWithin1e4Relative: for every MMQ
// type and shape, (a) the scratch holds quant.Quantize(quant.Q8_1, x) byte
// for byte; (b) every sampled output is within 1e-4 * sum_i |w_i a_i|
// (+1e-6) of the float64 dot of the CPU-dequantized weight and the
// dequantized Q8_1 activation (the integer sums are exact, so the kernel's
// only roundings are d_w * d_a and the f32 accumulation); (c) the whole
// output is within rel L2 0.05 (the pre-registered activation-quantization
// class of MINFER_MMQ) of the f16 GEMM (MMQ off), and the sampled outputs'
// max |mmq - gemm| / sum|w x| is printed. (d) the sweep ran every launch
// variant of mmqPlanFor on this device (128-row, 64-row, 64-row split-K),
// and a split-K shape run twice gives the same bits (fixed-order reduce).
// (e) the async kernels (MINFER_MMQ_ASYNC) give the plain ones' bits on
// every shape and variant.
func TestMMQDevice_MatchesExactQ8_1ReferenceWithin1e4Relative(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(21))
	sms := ms.dev.Attr.SMCount
	seen := map[string]bool{}
	for _, wt := range mmqTypes {
		for si, sh := range mmqShapes(wt) {
			wb, deq := mmtWeights(t, rng, wt, sh.n, sh.k, float32(1/math.Sqrt(float64(sh.k))))
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
			opts := MatMulOptions{MMQ: true}
			if p := MatMulPath(wt, sh.nt, opts); p != mmqTable[wt] {
				t.Fatalf("%s nt=%d: MatMulPath = %q, want %q", wt, sh.nt, p, mmqTable[wt])
			}
			if c := MatMulTolerance(wt, sh.nt, opts); c != "activation-quantization-q8_1" {
				t.Fatalf("%s nt=%d: MatMulTolerance = %q", wt, sh.nt, c)
			}
			q, got := mmqRun(t, ms, wt, wb, x, bias, sh, opts)
			_, gemm := mmqRun(t, ms, wt, wb, x, bias, sh, MatMulOptions{})
			plan := mmqPlanFor(sh.n, sh.nt, sh.k, sms)
			seen[fmt.Sprintf("rows=%d split=%v", plan.rows, plan.splits > 1)] = true
			// (e) the async variant (MINFER_MMQ_ASYNC) gives the same bits.
			if _, async := mmqRun(t, ms, wt, wb, x, bias, sh, MatMulOptions{MMQ: true, MMQAsync: true}); !bytes.Equal(driver.Float32Bytes(got), driver.Float32Bytes(async)) {
				t.Errorf("%s %+v plan %+v: the async MMQ differs from the plain one (want bitwise equal)", wt, sh, plan)
			}
			if plan.splits > 1 {
				_, again := mmqRun(t, ms, wt, wb, x, bias, sh, opts)
				if !bytes.Equal(driver.Float32Bytes(got), driver.Float32Bytes(again)) {
					t.Errorf("%s %+v plan %+v: two runs differ (split-K must be deterministic)", wt, sh, plan)
				}
			}

			wantQ := make([]byte, ActQ8Bytes(sh.k, sh.nt))
			if err := quant.Quantize(quant.Q8_1, x, wantQ); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(q, wantQ) {
				t.Errorf("%s %+v: the device Q8_1 activation differs from quant.Quantize(Q8_1)", wt, sh)
			}
			a := make([]float32, len(x))
			if err := quant.Dequantize(quant.Q8_1, wantQ, a); err != nil {
				t.Fatal(err)
			}

			// (c) rel L2 against the f16 GEMM over every output.
			var num, den float64
			nan := 0
			for i := range got {
				if math.IsNaN(float64(got[i])) {
					nan++
					continue
				}
				d := float64(got[i]) - float64(gemm[i])
				num += d * d
				den += float64(gemm[i]) * float64(gemm[i])
			}
			relL2 := math.Sqrt(num / (den + 1e-30))

			// (b) exact reference on sampled rows x tokens.
			rows, toks := mmqSample(sh.n), mmqSample(sh.nt)
			type worst struct {
				rel, vsGemm float64
				tok, row    int
			}
			perTok := make([]worst, len(toks))
			mmqPar(len(toks), func(ti int) {
				tok := toks[ti]
				w := worst{tok: -1, row: -1}
				ax, xx := a[tok*sh.k:(tok+1)*sh.k], x[tok*sh.k:(tok+1)*sh.k]
				for _, j := range rows {
					wr := deq[j*sh.k : (j+1)*sh.k]
					var ref, mag, magX float64
					for i := range wr {
						p := float64(wr[i]) * float64(ax[i])
						ref += p
						mag += math.Abs(p)
						magX += math.Abs(float64(wr[i]) * float64(xx[i]))
					}
					if bias != nil {
						ref += float64(bias[j])
					}
					g := float64(got[tok*sh.n+j])
					rel := math.Abs(g-ref) / (mag + 1e-6)
					if math.IsNaN(rel) {
						rel = math.Inf(1)
					}
					if rel > w.rel || w.tok < 0 {
						w.rel, w.tok, w.row = rel, tok, j
					}
					w.vsGemm = max(w.vsGemm, math.Abs(g-float64(gemm[tok*sh.n+j]))/(magX+1e-6))
				}
				perTok[ti] = w
			})
			var wst worst
			for i, w := range perTok {
				if i == 0 || w.rel > wst.rel {
					wst.rel, wst.tok, wst.row = w.rel, w.tok, w.row
				}
				wst.vsGemm = max(wst.vsGemm, w.vsGemm)
			}
			t.Logf("%-5s nt=%-4d n=%-4d k=%-4d bias=%-5v %v: max |mmq-ref|/sum|wa| = %.3g at tok %d row %d (bar 1e-4); "+
				"rel L2 vs f16 GEMM = %.3g (bar 0.05); max |mmq-gemm|/sum|wx| = %.3g; NaN outputs %d",
				wt, sh.nt, sh.n, sh.k, bias != nil, MMQKernels(wt, sh.nt, sh.k, sh.n, sms, false), wst.rel, wst.tok, wst.row, relL2, wst.vsGemm, nan)
			if !(wst.rel <= 1e-4) {
				t.Errorf("%s %+v: max |mmq-ref|/sum|wa| = %.3g at tok %d row %d, bar 1e-4", wt, sh, wst.rel, wst.tok, wst.row)
			}
			if nan > 0 || !(relL2 <= 0.05) {
				t.Errorf("%s %+v: rel L2 vs the f16 GEMM = %.3g (bar 0.05), %d NaN outputs", wt, sh, relL2, nan)
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

// TestMMQDevice_PathCensusAndScratchErrors: with MMQ set, MatMulPath names
// minfer_mmq_<type> for every MMQ type at nt = 9 and the launch census shows
// exactly minfer_quantize_q8_1 + the planned kernels (MMQKernels: the tile
// variant, + minfer_mmq_reduce when split); with MMQ off it shows
// only minfer_gemm_<type>; NoPrefillGEMM keeps the mmv path; F32 / F16 /
// BF16 keep the GEMM. A missing or too-small scratch is an error.
func TestMMQDevice_PathCensusAndScratchErrors(t *testing.T) {
	ms := mmtOpen(t)
	kc := mmtLoadKernels(t, ms, KernelsOptions{Census: true}, true)
	defer func() { _ = ms.dev.Do(kc.Close) }()
	for _, wt := range []quant.Type{quant.F32, quant.F16, quant.BF16} {
		if p := MatMulPath(wt, 64, MatMulOptions{MMQ: true}); p != matmulTable[wt].gemm {
			t.Errorf("%s: MatMulPath with MMQ = %q, want the GEMM", wt, p)
		}
	}
	const nt, n = 9, 37
	rng := rand.New(rand.NewSource(22))
	for _, wt := range mmqTypes {
		k := mmtK(wt)
		if p := MatMulPath(wt, nt, MatMulOptions{MMQ: true, NoPrefillGEMM: true}); p != matmulTable[wt].mmv {
			t.Errorf("%s: MatMulPath with MMQ and NoPrefillGEMM = %q, want the mmv kernel", wt, p)
		}
		if p := MatMulPath(wt, mmvMaxNT, MatMulOptions{MMQ: true}); p == mmqTable[wt] {
			t.Errorf("%s: MatMulPath at nt=%d = %q: MMQ is prefill-only", wt, mmvMaxNT, p)
		}
		wb, _ := mmtWeights(t, rng, wt, n, k, 0.0625)
		x := make([]float32, nt*k)
		for i := range x {
			x[i] = 2*rng.Float32() - 1
		}
		for _, on := range []bool{true, false} {
			opts := MatMulOptions{MMQ: on}
			var census map[string]int64
			err := ms.dev.Do(func() error {
				up := ms.uploads()
				dw := up.bytes(wb)
				dx := up.f32(x)
				dout := up.zeros(nt * n * 4)
				if up.err != nil {
					return up.err
				}
				need := MMQScratchBytes(k, nt, n, ms.dev.Attr.SMCount)
				dq, err := ms.upload(make([]byte, need))
				if err != nil {
					return err
				}
				if on {
					for _, bad := range []MatMulOptions{{MMQ: true}, {MMQ: true, MMQAct: dq, MMQActBytes: need - 1}} {
						if err := kc.MatMul(ms.s, dout, dx, dw, wt, 0, nt, k, n, bad); err == nil {
							return fmt.Errorf("a scratch of %d bytes (needs %d) was accepted", bad.MMQActBytes, need)
						}
					}
					opts.MMQAct, opts.MMQActBytes = dq, need
				}
				before := kc.Census()
				if err := kc.MatMul(ms.s, dout, dx, dw, wt, 0, nt, k, n, opts); err != nil {
					return err
				}
				census = map[string]int64{}
				for name, c := range kc.Census() {
					if d := c - before[name]; d != 0 {
						census[name] = d
					}
				}
				return ms.s.Synchronize()
			})
			if err != nil {
				t.Fatalf("%s MMQ=%v: %v", wt, on, err)
			}
			census = qactMerged(census)
			want := map[string]int64{matmulTable[wt].gemm: 1}
			if on {
				want = map[string]int64{quantizeQ8_1Kernel: 1}
				for _, name := range MMQKernels(wt, nt, k, n, ms.dev.Attr.SMCount, opts.MMQAsync) {
					want[name]++
				}
			}
			t.Logf("%s MMQ=%v: path %s, census %v", wt, on, MatMulPath(wt, nt, opts), census)
			if len(census) != len(want) {
				t.Errorf("%s MMQ=%v: census %v, want %v", wt, on, census, want)
				continue
			}
			for name, c := range want {
				if census[name] != c {
					t.Errorf("%s MMQ=%v: census %v, want %v", wt, on, census, want)
				}
			}
		}
	}
}

// mmqLevers parses the environment without any MINFER_MMQ,
// MINFER_MMQ_F16_KQ or MINFER_ONE_COPY setting, plus MINFER_MMQ_F16_KQ=0
// and MINFER_ONE_COPY=0 unless extra sets them, plus extra: these tests
// name the int8 MMQ kernels of the GGUF bytes, and the f16 GEMM takes the
// prefill of Q4_K / Q6_K under MINFER_MMQ_F16_KQ and of Q8_0 over its one
// repacked copy (the repacked int8 kernel is onecopy_device_test.go's, the
// f16 GEMM gemm16_test.go's, which set these). A setting the environment
// holds for a lever whose Requires a pin or an extra contradicts is dropped
// too: an A/B's arm B runs the suite with its lever set (session 19:
// MINFER_MMQ_WIDE_LOADS=1, which the backend refused beside the MINFER_MMQ=0
// of an off arm; MINFER_MMQ_ASYNC=1 would switch nothing there).
func mmqLevers(t *testing.T, extra ...string) levers.Config {
	t.Helper()
	set := slices.Clone(extra)
	for _, pin := range []string{"MINFER_MMQ_F16_KQ=0", "MINFER_ONE_COPY=0"} {
		name, _, _ := strings.Cut(pin, "=")
		if !slices.ContainsFunc(extra, func(x string) bool { return strings.HasPrefix(x, name+"=") }) {
			set = append([]string{pin}, set...)
		}
	}
	var drop []string
	for _, l := range levers.All() {
		for _, r := range l.Requires {
			name, want, _ := strings.Cut(r, "=")
			for _, x := range set {
				if n, v, _ := strings.Cut(x, "="); n == name && v != want {
					drop = append(drop, l.Name+"=")
				}
			}
		}
	}
	env := slices.DeleteFunc(os.Environ(), func(e string) bool {
		return strings.HasPrefix(e, "MINFER_MMQ=") || strings.HasPrefix(e, "MINFER_MMQ_F16_KQ=") || strings.HasPrefix(e, "MINFER_ONE_COPY=") ||
			slices.ContainsFunc(drop, func(p string) bool { return strings.HasPrefix(e, p) })
	})
	cfg, err := levers.Parse(append(env, set...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestMMQDevice_BackendCensusNamesMMQUnlessLeverOff: a prefill matmul
// (nt = 64, k = 768 or 1792) through the Backend, with the census on: with
// MINFER_MMQ unset the census names minfer_mmq_<type> (the Backend grew its
// Q8_1 scratch on its own; mmqLevers keeps the GGUF bytes of Q8_0 and Q6_K,
// whose one copy the f16 GEMM or minfer_mmq_q6_kr would read) and no
// minfer_gemm_<type>; with MINFER_MMQ=0 the reverse.
// Both outputs agree within rel L2 0.05. MINFER_NO_PREFILL_GEMM=0 is pinned
// in both arms: with it set (an A/B's arm B may) the prefill takes neither
// kernel.
func TestMMQDevice_BackendCensusNamesMMQUnlessLeverOff(t *testing.T) {
	dsNeedDevice(t)
	r := rand.New(rand.NewSource(23))
	for _, wt := range []quant.Type{quant.Q8_0, quant.Q5_0, quant.Q4_K, quant.Q6_K} {
		k := 768
		if wt.BlockSize() == quant.QKK {
			k = 1792
		}
		const nt, m = 64, 200
		xv := make([]float32, k*nt)
		for i := range xv {
			xv[i] = 2*r.Float32() - 1
		}
		wb, _ := mmtWeights(t, r, wt, m, k, 0.05)
		var outs [2][]float32
		for arm, extra := range [][]string{{"MINFER_LAUNCH_CENSUS=1", "MINFER_NO_PREFILL_GEMM=0"}, {"MINFER_LAUNCH_CENSUS=1", "MINFER_NO_PREFILL_GEMM=0", "MINFER_MMQ=0"}} {
			var c dsCase
			c.nt = nt
			x := dsOperand(&c, "x", xv, k)
			w := graph.Weight{Name: "w", Type: wt, Dims: []int{k, m}, Data: wb}
			c.weights = append(c.weights, w)
			c.name = fmt.Sprintf("mmq/%s/k%d/m%d/nt%d/arm%d", wt, k, m, nt, arm)
			c.build = func(b *graph.Builder, ids, pos, kvw int) int { return b.MatMul("y", x(b, ids), "w", "", m) }
			dev := dsBackend(t, mmqLevers(t, extra...))
			got, err := dsRun(t, c, dev)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			outs[arm] = got
			census := dev.Kernels().Census()
			on := arm == 0
			t.Logf("%s: MMQ=%v census %v (path %s)", c.name, on, census, MatMulPath(wt, nt, dev.MatMulOptions()))
			// The Backend's weight is its one copy (repacked) where MINFER_ONE_COPY holds
			// (mmqLevers pins it off: the GGUF kernel).
			p := mmqPlanFor(m, nt, k, dev.dev.Attr.SMCount)
			p.async = dev.MatMulOptions().MMQAsync
			p.repacked = dev.oneCopyWanted(w)
			mk := p.kernel(wt)
			if on != (census[mk] > 0) || on == (census[matmulTable[wt].gemm] > 0) {
				t.Errorf("%s: MMQ=%v, census %v: want %s iff MMQ and %s iff not", c.name, on, census, mk, matmulTable[wt].gemm)
			}
		}
		rel := mfRelL2(outs[0], outs[1])
		t.Logf("%s: rel L2 (MMQ vs MINFER_MMQ=0) = %.3g (bar 0.05)", wt, rel)
		if !(rel <= 0.05) {
			t.Errorf("%s: rel L2 (MMQ vs MINFER_MMQ=0) = %.3g, bar 0.05", wt, rel)
		}
	}
}

// TestMMQDevice_FusedOpsQuantizeOnceBitwiseEqualUnfused: the backend's fused
// q/k/v and FFN ops at prefill (nt = 64, k = 256, 133 rows per weight: the
// 64-row tile; nt = 200, k = 1024, 1100 rows: 2-way split-K on 132 SMs) equal the
// unfused graph bitwise (one quantization of x gives the bytes each
// unfused matmul's own quantization gives), and, when every weight takes
// MMQ, the fused op quantizes x once: the census shows one
// minfer_quantize_q8_1 per fused op (3 or 2 unfused) and the MMQ kernels.
// A mix with an F16 weight keeps the per-matmul path (no MMQ for F16).
// MINFER_NO_PREFILL_GEMM=0 is pinned (with it set, as an A/B's arm B may,
// no prefill matmul takes MMQ).
func TestMMQDevice_FusedOpsQuantizeOnceBitwiseEqualUnfused(t *testing.T) {
	dsNeedDevice(t)
	r := randv2.New(randv2.NewPCG(61, 62))
	mixes := []struct {
		name string
		ts   []quant.Type
	}{{"q8_0", []quant.Type{quant.Q8_0, quant.Q8_0, quant.Q8_0}}, {"q4_k", []quant.Type{quant.Q4_K, quant.Q4_K, quant.Q4_K}},
		{"mixed", []quant.Type{quant.Q5_0, quant.Q4_K, quant.Q6_K}}, {"with-f16", []quant.Type{quant.Q8_0, quant.F16, quant.Q6_K}}}
	for _, ffn := range []bool{false, true} {
		for _, mx := range mixes {
			for _, sh := range []struct{ nt, m, k int }{{64, 133, 256}, {200, 1100, 1024}} {
				g := &mfGraph{ffn: ffn, k: sh.k, m: sh.m, nt: sh.nt}
				mfWeights(t, r, g, mx.ts...)
				extra := []string{"MINFER_LAUNCH_CENSUS=1", "MINFER_NO_PREFILL_GEMM=0"}
				unfusedDev := dsBackend(t, mmqLevers(t, extra...))
				name := fmt.Sprintf("ffn=%v/%s/nt%d/m%d/k%d %v", ffn, mx.name, sh.nt, sh.m, sh.k,
					MMQKernels(mx.ts[0], sh.nt, sh.k, sh.m, unfusedDev.dev.Attr.SMCount, unfusedDev.MatMulOptions().MMQAsync))
				var unfused, fused []float32
				cu := qactMerged(mfCensusDelta(unfusedDev, func() { unfused = mfRun(t, g, unfusedDev, false) }))
				dev := dsBackend(t, mmqLevers(t, extra...))
				cf := qactMerged(mfCensusDelta(dev, func() { fused = mfRun(t, g, dev, true) }))
				bad := mfBitwiseBad(t, name, fused, unfused)
				t.Logf("%s: %d of %d differ; census fused %v, unfused %v", name, bad, len(fused), cf, cu)
				nw := 3
				if ffn {
					nw = 2
				}
				allMMQ := true
				for _, ty := range mx.ts[:nw] {
					_, ok := mmqTable[ty]
					allMMQ = allMMQ && ok
				}
				mmqLaunches := int64(0)
				for name, c := range cf {
					if strings.HasPrefix(name, "minfer_mmq_") && name != mmqReduceKernel {
						mmqLaunches += c
					}
				}
				if want := map[bool]int64{true: 1, false: cu[quantizeQ8_1Kernel]}[allMMQ]; cf[quantizeQ8_1Kernel] != want {
					t.Errorf("%s: %d activation quantizations in the fused op, want %d", name, cf[quantizeQ8_1Kernel], want)
				}
				if allMMQ && mmqLaunches != int64(nw) {
					t.Errorf("%s: %d MMQ launches, want %d", name, mmqLaunches, nw)
				}
			}
		}
	}
}

// TestMMQLevers_OffArmDropsSettingsThatNeedTheMMQ: the helper the census
// tests build their arms with runs under an A/B's arm B environment (session
// 19's suite gate failed on MINFER_MMQ_WIDE_LOADS=1, since retired; here
// MINFER_MMQ_ASYNC=1, whose Requires name MINFER_MMQ=1 too): its
// MINFER_MMQ=0 arm must drop the setting and come out a configuration the
// backend accepts, and its MMQ arm must keep the setting under test.
func TestMMQLevers_OffArmDropsSettingsThatNeedTheMMQ(t *testing.T) {
	t.Setenv("MINFER_MMQ_ASYNC", "1")
	off := mmqLevers(t, "MINFER_MMQ=0")
	if err := oneCopyConflict(off); err != nil || off.MMQAsync {
		t.Errorf("MINFER_MMQ=0 arm: async %v, conflict %v; want the async setting dropped", off.MMQAsync, err)
	}
	if on := mmqLevers(t, "MINFER_NO_PREFILL_GEMM=0"); !on.MMQAsync || oneCopyConflict(on) != nil {
		t.Errorf("MMQ arm: async %v, conflict %v; want the setting kept and accepted", on.MMQAsync, oneCopyConflict(on))
	}
}

// TestMMQDevice_KQuantModel16ByteLoadsBitwiseThe4ByteLoads: the plain Q4_K
// / Q5_K MMQ kernels (16-byte loads, the only ones since
// MINFER_MMQ_WIDE_LOADS retired) give bitwise the logits of the async ones
// (MINFER_MMQ_ASYNC=1, which keep the 4-byte loads) over prefill (MMQ), a
// 5-token forward and decode, on qwen2-tiny Q4_K and qwen3-tiny Q5_K_M. The
// census names the plain kernels of the type in the default arm and only
// the async ones with MINFER_MMQ_ASYNC=1. Both arms pin the MMQ on, the
// f16 GEMM off and the GGUF bytes (an A/B's arm B may set any of these: the
// MINFER_MMQ_F16_KQ A/B of session 26 failed its suite here, the Q4_K
// matmuls having taken the f16 GEMM).
func TestMMQDevice_KQuantModel16ByteLoadsBitwiseThe4ByteLoads(t *testing.T) {
	dsNeedDevice(t)
	pin := []string{"MINFER_MMQ=1", "MINFER_NO_PREFILL_GEMM=0", "MINFER_ONE_COPY=0", "MINFER_MMQ_F16_KQ=0"}
	for _, m := range []struct{ shape, typ, sfx string }{{"qwen2-tiny", "Q4_K", "q4_k"}, {"qwen3-tiny", "Q5_K_M", "q5_k"}} {
		t.Run(m.shape+"/"+m.typ, func(t *testing.T) {
			path := dsSynth(t, m.shape, m.typ)
			gPlain, cPlain, _ := ocForwards(t, path, true, append(slices.Clone(pin), "MINFER_MMQ_ASYNC=0")...)
			gAsync, cAsync, _ := ocForwards(t, path, true, append(slices.Clone(pin), "MINFER_MMQ_ASYNC=1")...)
			for i := range gPlain {
				if bad := rpDiff(t, fmt.Sprintf("forward %d logits (16-byte vs 4-byte loads)", i), gPlain[i], gAsync[i]); bad != 0 {
					t.Errorf("forward %d: %d of %d logits differ between the plain (16-byte loads) and async (4-byte) MMQ", i, bad, len(gPlain[i]))
				}
			}
			plain := []string{"minfer_mmq_" + m.sfx, "minfer_mmq_" + m.sfx + "_r64"}
			async := []string{"minfer_mmq_" + m.sfx + "_async", "minfer_mmq_" + m.sfx + "_async_r64"}
			count := func(c map[string]int64, names []string) (n int64) {
				for _, name := range names {
					n += c[name]
				}
				return n
			}
			if count(cPlain, plain) == 0 || count(cPlain, async) != 0 {
				t.Errorf("default arm: %d plain, %d async launches of %s (census %v); want plain only", count(cPlain, plain), count(cPlain, async), m.sfx, cPlain)
			}
			if count(cAsync, async) == 0 || count(cAsync, plain) != 0 {
				t.Errorf("async arm: %d plain, %d async launches of %s (census %v); want async only", count(cAsync, plain), count(cAsync, async), m.sfx, cAsync)
			}
		})
	}
}
