package cuda

// Tests of MINFER_FUSE_FFN_Q8 (graph.FuseFFNQ8: the decode fused FFN
// writes the down projection's Q8_1 activation, matmul.go ffnQ8Route and
// opFFNMatMulAdd, mmvq.go FFNQ8_1Q, mmvq_repack.go FFNQ8_1RQ). The device
// tests skip with a message when no device answers; the route test needs
// none. The kernels' bytes are checked on the CPU, their blocks
// interleaved, by scripts/kernel-emu/ffnq-emu.sh (kernels/emu_test.go).

import (
	"fmt"
	"math/rand"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/synth"
)

// TestFuseFFNQ8_RouteOnlyADecodeRowOfWholeGroupsBeforeAnMMVQDownProjection:
// the backend offers the fusion for one decode row of a fused gate/up whose
// two weights take one decode MMVQ route of one type (GGUF or repacked),
// n_ff whole Q8_1 blocks, read by a matmul-add whose weight takes a decode
// MMVQ route over n_ff values; it declines two tokens, n_ff 4880, gate and
// up of two types, an f16 gate or down projection, a down projection of
// another row length, a plain matmul, an unregistered weight and Q5_0 with
// its MMVQ kill switch set. The launchers refuse what the kernel cannot
// take, by name; the memory plan holds the Q8_1 output and counters.
func TestFuseFFNQ8_RouteOnlyADecodeRowOfWholeGroupsBeforeAnMMVQDownProjection(t *testing.T) {
	w := func(typ quant.Type, rowLen, rows int, rp bool) *devWeight {
		d := &devWeight{typ: typ, rowLen: rowLen, rows: rows, ptr: 0x1000}
		if rp {
			d.rp = 0x2000
		}
		return d
	}
	mm := MatMulOptions{MMQ: true, MMVQNT: true, ActQ8: 0x3000, ActQ8Bytes: 1 << 20}
	b := &Backend{mm: mm, weights: map[string]*devWeight{
		"g": w(quant.Q5_0, 896, 4864, false), "u": w(quant.Q5_0, 896, 4864, false), "d": w(quant.Q4_K, 4864, 896, false),
		"g8r": w(quant.Q8_0, 896, 4864, true), "u8r": w(quant.Q8_0, 896, 4864, true), "d6r": w(quant.Q6_K, 4864, 896, true),
		"g4880": w(quant.Q5_0, 896, 4880, false), "u4880": w(quant.Q5_0, 896, 4880, false), "d4880": w(quant.Q8_0, 4880, 896, false),
		"u8": w(quant.Q8_0, 896, 4864, false), "gf16": w(quant.F16, 896, 4864, false), "df16": w(quant.F16, 4864, 896, false),
		"d3072": w(quant.Q4_K, 3072, 896, false),
	}}
	ffn := func(nff, nt int, gate, up string) *graph.Node {
		return &graph.Node{Op: graph.OpFusedFFN, Shape: graph.Sh(nff, nt), Weights: []string{gate, up}}
	}
	down := func(weight string, nt int) *graph.Node {
		return &graph.Node{Op: graph.OpMatMulAdd, Shape: graph.Sh(896, nt), Weight: weight}
	}
	for _, c := range []struct {
		name string
		mm   MatMulOptions
		f, m *graph.Node
		want bool
	}{
		{"Q5_0 gate/up, Q4_K down (qwen2-0.5b Q4_K_M)", mm, ffn(4864, 1, "g", "u"), down("d", 1), true},
		{"repacked Q8_0 gate/up, repacked Q6_K down", mm, ffn(4864, 1, "g8r", "u8r"), down("d6r", 1), true},
		{"two tokens", mm, ffn(4864, 2, "g", "u"), down("d", 2), false},
		{"n_ff 4880 (not whole Q8_1 blocks)", mm, ffn(4880, 1, "g4880", "u4880"), down("d4880", 1), false},
		{"gate and up of two types", mm, ffn(4864, 1, "g", "u8"), down("d", 1), false},
		{"an f16 gate", mm, ffn(4864, 1, "gf16", "u"), down("d", 1), false},
		{"an f16 down projection", mm, ffn(4864, 1, "g", "u"), down("df16", 1), false},
		{"a down projection of another row length", mm, ffn(4864, 1, "g", "u"), down("d3072", 1), false},
		{"a plain matmul", mm, ffn(4864, 1, "g", "u"), &graph.Node{Op: graph.OpMatMul, Shape: graph.Sh(896, 1), Weight: "d"}, false},
		{"an unregistered down projection", mm, ffn(4864, 1, "g", "u"), down("gone", 1), false},
		{"Q5_0 off MMVQ (MINFER_NO_Q40_MMVQ)", MatMulOptions{MMQ: true, ActQ8: 0x3000, ActQ8Bytes: 1 << 20, NoQ40MMVQ: true},
			ffn(4864, 1, "g", "u"), down("d", 1), false},
	} {
		b.mm = c.mm
		if got := b.SupportsFused(graph.FuseFFNQ8, c.f, c.m); got != c.want {
			t.Errorf("%s: SupportsFused %v, want %v", c.name, got, c.want)
		}
	}

	k := &Kernels{dev: &driver.Device{Attr: driver.Attributes{SMCount: 132}}}
	const xq, out, wg, wu = driver.DevicePtr(0x10000), driver.DevicePtr(0x20000), driver.DevicePtr(0x40000), driver.DevicePtr(0x80000)
	xqb := ActQ8Bytes(896, 1)
	ok := func(n int) FFNQ8Out {
		return FFNQ8Out{Q8: 0x100000, Q8Bytes: ActQ8Bytes(n, 1), Counters: 0x200000, CounterBytes: 4 * uint64(FFNQ8Counters(n))}
	}
	short := ok(4864)
	short.Q8Bytes -= 36
	fewCounters := ok(4864)
	fewCounters.CounterBytes -= 4
	onX := ok(4864)
	onX.Q8 = xq
	onOut := ok(4864)
	onOut.Q8 = out.Add(64)
	cntOnOut := ok(4864)
	cntOnOut.Counters = out.Add(4 * 4860)
	for _, c := range []struct {
		name string
		n    int
		q    FFNQ8Out
	}{
		{"n_ff 4880", 4880, ok(4880)},
		{"no Q8_1 output", 4864, FFNQ8Out{}},
		{"a Q8_1 output 2 bytes off", 4864, FFNQ8Out{Q8: 0x100002, Q8Bytes: 1 << 20, Counters: 0x200000, CounterBytes: 1 << 20}},
		{"a Q8_1 output one block short", 4864, short},
		{"one counter short", 4864, fewCounters},
		{"no counters", 4864, FFNQ8Out{Q8: 0x100000, Q8Bytes: 1 << 20}},
		{"the Q8_1 output on the activation it reads", 4864, onX},
		{"the Q8_1 output on the f32 row", 4864, onOut},
		{"the counters on the f32 row's end", 4864, cntOnOut},
	} {
		for _, r := range []struct {
			op   string
			call func() error
		}{
			{"ffn_q8_1q", func() error { return k.FFNQ8_1Q(nil, out, xq, xqb, wg, wu, quant.Q5_0, 896, c.n, c.q) }},
			{"ffn_q8_1rq", func() error { return k.FFNQ8_1RQ(nil, out, xq, xqb, wg, wu, quant.Q8_0, 896, c.n, c.q) }},
		} {
			if err := r.call(); err == nil || !strings.Contains(err.Error(), r.op) {
				t.Errorf("%s %s: %v, want a refusal naming %s", r.op, c.name, err, r.op)
			}
		}
	}

	if got := FFNQ8OutBytes(4864); got != 5472+608 {
		t.Errorf("FFNQ8OutBytes(4864) = %d, want 5,472 Q8_1 bytes + 152 counters = 6,080", got)
	}
	if got := FFNQ8OutBytes(18944); got != 21312+2368 {
		t.Errorf("FFNQ8OutBytes(18944) = %d, want 21,312 Q8_1 bytes + 592 counters = 23,680", got)
	}
	p := graph.Params{NHead: 14, NHeadKV: 2, HeadDim: 64, NFF: 4864, NCtx: 256}
	off, on := levers.Default(), levers.Default()
	on.FuseFFNQ8 = true
	if d := MemoryRules(on, 132).Scratch(p, nil, 1) - MemoryRules(off, 132).Scratch(p, nil, 1); d != FFNQ8OutBytes(4864) {
		t.Errorf("the memory plan's scratch grows by %d bytes with the lever, want FFNQ8OutBytes(4864) = %d", d, FFNQ8OutBytes(4864))
	}
}

// TestFFNQ8Device_Q8RowIsTheQuantizedFFNRowAndCountersZero: for every
// mmvq type over the GGUF bytes and the repacked Q8_0 / Q6_K copies, at
// n_ff 4864 and 96: FFNQ8_1Q (FFNQ8_1RQ) writes bitwise the f32 row of
// FFNQ8_1 (FFNQ8_1R) and, in its Q8_1 output, bitwise QuantizeQ8_1 of that
// row, over 50 launches on the same counters, each with a fresh
// activation row and stale outputs (the groups complete in whatever order
// the SMs finish); after the last launch every counter is 0.
func TestFFNQ8Device_Q8RowIsTheQuantizedFFNRowAndCountersZero(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(29))
	const launches = 50
	for _, wt := range frTypes {
		for _, rp := range []bool{false, true} {
			if rp && !MMVQRepackable(wt) {
				continue
			}
			k := 256
			if wt.BlockSize() != quant.QKK {
				k = 896
			}
			for _, n := range []int{4864, 96} {
				t.Run(fmt.Sprintf("%s/repacked=%v/n_ff=%d", wt, rp, n), func(t *testing.T) {
					ffnQ8DeviceCase(t, ms, rng, wt, rp, k, n, launches)
				})
			}
		}
	}
}

func ffnQ8DeviceCase(t *testing.T, ms *mmtSession, rng *rand.Rand, wt quant.Type, rp bool, k, n, launches int) {
	wg, wu := frWeight(rng, wt, k, n), frWeight(rng, wt, k, n)
	xs := make([][]float32, launches)
	for i := range xs {
		xs[i] = mmvqActivation(rng, k, i%2 == 1)
	}
	qb, q8b, cb := ActQ8Bytes(k, 1), ActQ8Bytes(n, 1), 4*uint64(FFNQ8Counters(n))
	var badRow, badQ8, badCnt, firstBad int
	firstBad = -1
	err := ms.dev.Do(func() error {
		up := ms.uploads()
		pg, pu := up.bytes(wg), up.bytes(wu)
		if rp {
			rg, ru := up.zeros(len(wg)), up.zeros(len(wu))
			if up.err != nil {
				return up.err
			}
			if err := ms.k.RepackMMVQ(ms.s, rg, pg, wt, k, n); err != nil {
				return err
			}
			if err := ms.k.RepackMMVQ(ms.s, ru, pu, wt, k, n); err != nil {
				return err
			}
			pg, pu = rg, ru
		}
		px, pa := up.zeros(4*k), up.zeros(int(qb))
		ref, got := up.zeros(4*n), up.zeros(4*n)
		refQ, gotQ, cnt := up.zeros(int(q8b)), up.zeros(int(q8b)), up.zeros(int(cb))
		if up.err != nil {
			return up.err
		}
		q := FFNQ8Out{Q8: gotQ, Q8Bytes: q8b, Counters: cnt, CounterBytes: cb}
		for i, x := range xs {
			if err := ms.s.CopyHtoD(px, driver.Float32Bytes(x)); err != nil {
				return err
			}
			if err := ms.s.MemsetD8(got, 0xff, uint64(4*n)); err != nil { // NaN: a row read before it is written shows
				return err
			}
			if err := ms.s.MemsetD8(gotQ, 0xab, q8b); err != nil {
				return err
			}
			if err := ms.k.QuantizeQ8_1(ms.s, pa, px, k, 1); err != nil {
				return err
			}
			var err error
			if rp {
				if err = ms.k.FFNQ8_1R(ms.s, ref, pa, qb, pg, pu, wt, k, n); err == nil {
					err = ms.k.FFNQ8_1RQ(ms.s, got, pa, qb, pg, pu, wt, k, n, q)
				}
			} else if err = ms.k.FFNQ8_1(ms.s, ref, pa, qb, pg, pu, wt, k, n); err == nil {
				err = ms.k.FFNQ8_1Q(ms.s, got, pa, qb, pg, pu, wt, k, n, q)
			}
			if err != nil {
				return err
			}
			if err := ms.k.QuantizeQ8_1(ms.s, refQ, ref, n, 1); err != nil {
				return err
			}
			rb, gb, rq, gq, cs := make([]byte, 4*n), make([]byte, 4*n), make([]byte, q8b), make([]byte, q8b), make([]byte, cb)
			if err := ms.downloadSync(mmtD2H{rb, ref}, mmtD2H{gb, got}, mmtD2H{rq, refQ}, mmtD2H{gq, gotQ}, mmtD2H{cs, cnt}); err != nil {
				return err
			}
			r, g, c := !slices.Equal(rb, gb), !slices.Equal(rq, gq), slices.ContainsFunc(cs, func(b byte) bool { return b != 0 })
			if (r || g || c) && firstBad < 0 {
				firstBad = i
			}
			badRow, badQ8, badCnt = badRow+b2i(r), badQ8+b2i(g), badCnt+b2i(c)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d launches: f32 row differs in %d, Q8_1 bytes in %d, counters not all 0 after %d", launches, badRow, badQ8, badCnt)
	if badRow+badQ8+badCnt > 0 {
		t.Errorf("launch %d first: f32 row differs in %d launches, Q8_1 bytes in %d, counters left non-zero after %d; want none",
			firstBad, badRow, badQ8, badCnt)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestFuseFFNQ8Device_LogitsBitwiseAndOneLaunchFewer: synthetic
// qwen2-tiny Q8_0 (repacked Q8_0 gate/up) and Q4_K_M (Q4_K), qwen3-tiny
// Q4_K_M (n_ff 768) and qwen2-0.5b Q4_K_M (Q5_0 gate/up, n_ff 4864),
// prefill then 6 decode steps, CUDA graphs on and off, the residual and
// FFN fusions pinned on (its Requires): MINFER_FUSE_FFN_Q8=1 gives bitwise
// the logits of =0 at every step. Census of the decode steps:
// minfer_mmvq*_ffnq_* runs only with the lever on, once a layer a step,
// and each launch replaces one minfer_mmvq*_ffn_* launch and one
// quantization. The MMVQ path is pinned on (dsMMVQ).
func TestFuseFFNQ8Device_LogitsBitwiseAndOneLaunchFewer(t *testing.T) {
	dsNeedDevice(t)
	models := []dsModel{{"qwen2-tiny", "Q8_0"}, {"qwen2-tiny", "Q4_K_M"}, {"qwen3-tiny", "Q4_K_M"}, {"qwen2-0.5b", "Q4_K_M"}}
	pin := append([]string{"MINFER_FUSE_RESIDUAL=1", "MINFER_NO_FUSE_FFN=0"}, dsMMVQ...)
	dsLeverDecodeOn(t, "MINFER_FUSE_FFN_Q8", models, pin, func(t *testing.T, _ dsModel, sh synth.Shape, _ string, cOff, cOn map[string]int64, _ *Backend) {
		fused, names := rpMatching(cOn, "minfer_mmvq*_ffnq_*")
		fusedOff, _ := rpMatching(cOff, "minfer_mmvq*_ffnq_*")
		fOff, _ := rpMatching(cOff, "minfer_mmvq*_ffn_*")
		fOn, _ := rpMatching(cOn, "minfer_mmvq*_ffn_*")
		qOff, _ := rpMatching(cOff, "minfer_quantize_q8_1*")
		qOn, _ := rpMatching(cOn, "minfer_quantize_q8_1*")
		t.Logf("decode launches over %d steps: minfer_mmvq*_ffnq_* on %d %v, off %d; minfer_mmvq*_ffn_* off %d, on %d; quantizations off %d, on %d",
			frSteps, fused, names, fusedOff, fOff, fOn, qOff, qOn)
		if want := int64(sh.NLayer * frSteps); fused != want || fusedOff != 0 || fOff-fOn != fused || qOff-qOn != fused {
			t.Errorf("minfer_mmvq*_ffnq_* on %d (want %d layers x %d steps = %d), off %d; fused FFN dropped by %d, quantizations by %d: want both drops equal to on",
				fused, sh.NLayer, frSteps, want, fusedOff, fOff-fOn, qOff-qOn)
		}
	})
}

// TestFuseFFNQ8_SetBesideAnUnmetRequireIsRefused: MINFER_FUSE_FFN_Q8=1 with
// the residual fusion off or the FFN fusion off would switch nothing (the
// fuse pass needs both nodes): the backend refuses the pair by name, and
// takes it with both fusions at their defaults.
func TestFuseFFNQ8_SetBesideAnUnmetRequireIsRefused(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"MINFER_FUSE_FFN_Q8=1"}, ""},
		{[]string{"MINFER_FUSE_FFN_Q8=1", "MINFER_FUSE_RESIDUAL=0"}, "MINFER_FUSE_RESIDUAL=0"},
		{[]string{"MINFER_FUSE_FFN_Q8=1", "MINFER_NO_FUSE_FFN=1"}, "MINFER_NO_FUSE_FFN=1"},
		{[]string{"MINFER_FUSE_FFN_Q8=0", "MINFER_FUSE_RESIDUAL=0"}, ""},
	} {
		checkOptInRefusal(t, "MINFER_FUSE_FFN_Q8", c.env, c.want)
	}
	checkOptInRequiresListed(t, "MINFER_FUSE_FFN_Q8")
}

// TestFFNQ8Kernels_NamesGroupsAndLivenessMatchTheSources: every mmvq type's
// _ffnq_ kernel (and the repacked Q8_0 / Q6_K one) is instantiated under the
// name the launchers use, with the extra q8 and counters arguments; the
// lever's liveness pattern matches each of them and none of the _ffn_
// kernels; a group is the rows of 32 / MINFER_MMVQ_ROWS blocks in both
// families (FFNQ8Counters counts one per 32 rows).
func TestFFNQ8Kernels_NamesGroupsAndLivenessMatchTheSources(t *testing.T) {
	mmvq, src := kernelDefines(t, "kernels/mmvq.cu")
	rpd, rpSrc := kernelDefines(t, "kernels/mmvq_repack.cu")
	if mmvq["MINFER_MMVQ_ROWS"] != mmvqRows || rpd["MINFER_MMVQR_ROWS"] != mmvqRows || 32%mmvqRows != 0 ||
		!strings.Contains(src, "#define MINFER_MMVQ_GROUP_BLOCKS (MINFER_QK / MINFER_MMVQ_ROWS)") || FFNQ8Counters(4864) != 152 {
		t.Errorf("groups: MINFER_MMVQ_ROWS %d, MINFER_MMVQR_ROWS %d, launcher %d; FFNQ8Counters(4864) = %d: want 4-row blocks, 8 a group, 152 groups",
			mmvq["MINFER_MMVQ_ROWS"], rpd["MINFER_MMVQR_ROWS"], mmvqRows, FFNQ8Counters(4864))
	}
	l, ok := levers.Lookup("MINFER_FUSE_FFN_Q8")
	if !ok || l.Liveness == nil || l.Liveness.CUDA == nil || len(l.Liveness.CUDA.Census) != 1 {
		t.Fatalf("MINFER_FUSE_FFN_Q8's liveness: %+v", l.Liveness)
	}
	glob := l.Liveness.CUDA.Census[0]
	const args = "(float* out, const uint8_t* a, const uint8_t* wg, const uint8_t* wu, int k, int n,"
	check := func(name, macro, file, body string) {
		if !strings.Contains(body, macro+args) {
			t.Errorf("%s: %s has no %s%s", name, file, macro, args)
		}
		if m, _ := path.Match(glob, name); !m {
			t.Errorf("%s does not match the liveness pattern %s", name, glob)
		}
	}
	for ty := range mmvqTable {
		check(mmvqFusedKernel(ty, "ffnq"), "minfer_mmvq_ffnq_##name", "mmvq.cu", src)
		for _, old := range []string{mmvqFusedKernel(ty, "ffn"), mmvqrKernel(ty, "ffn")} {
			if m, _ := path.Match(glob, old); m && old != "" {
				t.Errorf("the plain FFN kernel %s matches %s", old, glob)
			}
		}
	}
	for ty := range mmvqrTypes {
		check(mmvqrKernel(ty, "ffnq"), "minfer_mmvqr_ffnq_##name", "mmvq_repack.cu", rpSrc)
	}
}
