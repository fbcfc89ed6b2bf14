package cuda

// Device tests of qwen3's fused q/k norm + rope + KV store
// (minfer_qkv_norm_rope_store, graph.OpQkvBiasRopeStore with norm weights,
// lever MINFER_FUSE_QKNORM). They skip with a message when no device
// answers.

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/kv"
)

// qnShape is one fused-op geometry; bias adds q, k and v biases (qwen3 has
// none; the kernel keeps the rule general).
type qnShape struct {
	name              string
	nh, nkv, hd, nRot int
	bias              bool
}

// qnRun is one kernel-level comparison's outputs: the fused kernel's (F)
// and the unfused device chain's (C) q and K / V regions, and the inputs
// the host reference needs.
type qnRun struct {
	qF, qC         []float32
	kF, kC, vF, vC []byte
	q, bq, wq      []float32
	pos            []int32
}

// qnFusedVsChain runs minfer_qkv_norm_rope_store and the unfused chain the
// graph runs without the lever (bias add, RmsNorm per head row = qk_norm,
// Rope, KVStore for k; bias add, KVStore for v) on the same inputs.
func qnFusedVsChain(t *testing.T, ms *mmtSession, rng *rand.Rand, sh qnShape, f kv.Format, neox bool, nt, start, nCtx int, eps float32) qnRun {
	t.Helper()
	const theta = 1e6
	nq, nk := sh.nh*sh.hd, sh.nkv*sh.hd
	var r qnRun
	// Inputs of varied scale per head so the norms do something.
	r.q = rsRandF32(rng, nq*nt, 3)
	k := rsRandF32(rng, nk*nt, 0.3)
	v := rsRandF32(rng, nk*nt, 1)
	var bk, bv []float32
	if sh.bias {
		r.bq, bk, bv = rsRandF32(rng, nq, 0.5), rsRandF32(rng, nk, 0.5), rsRandF32(rng, nk, 0.5)
	}
	r.wq = rsRandF32(rng, sh.hd, 1)
	wk := rsRandF32(rng, sh.hd, 1)
	r.pos = make([]int32, nt)
	for i := range r.pos {
		r.pos[i] = int32(start + 5*i + 3)
	}
	win := []int32{int32(start), int32(start + nt)}
	rb, err := kvRowBytes("test", f, nk, nCtx)
	if err != nil {
		t.Fatal(err)
	}
	regBytes := rb * nCtx
	r.qF, r.qC = make([]float32, nq*nt), make([]float32, nq*nt)
	r.kF, r.kC, r.vF, r.vC = make([]byte, regBytes), make([]byte, regBytes), make([]byte, regBytes), make([]byte, regBytes)
	p := QkvRopeStoreParams{NT: nt, NHead: sh.nh, NHeadKV: sh.nkv, HeadDim: sh.hd, NRot: sh.nRot, Theta: theta,
		Neox: neox, Format: f, NCtx: nCtx}
	err = ms.dev.Do(func() error {
		up := func(b []byte) driver.DevicePtr {
			if err != nil || b == nil {
				return 0
			}
			var d driver.DevicePtr
			d, err = ms.upload(b)
			return d
		}
		f32 := func(v []float32) []byte {
			if v == nil {
				return nil
			}
			return driver.Float32Bytes(v)
		}
		dq, dk, dv := up(f32(r.q)), up(f32(k)), up(f32(v))
		dbq, dbk, dbv := up(f32(r.bq)), up(f32(bk)), up(f32(bv))
		dwq, dwk := up(f32(r.wq)), up(f32(wk))
		dpos, dwin := up(rsI32Bytes(r.pos)), up(rsI32Bytes(win))
		regs := make([]driver.DevicePtr, 4) // kF, vF, kC, vC
		for i := range regs {
			regs[i] = up(bytes.Repeat([]byte{0x5a}, regBytes)) // cells outside the window must stay as they are
		}
		outF, outC := up(make([]byte, 4*nq*nt)), up(make([]byte, 4*nq*nt))
		tq, tk, tv := up(make([]byte, 4*nq*nt)), up(make([]byte, 4*nk*nt)), up(make([]byte, 4*nk*nt))
		nqb, nkb, tkr := up(make([]byte, 4*nq*nt)), up(make([]byte, 4*nk*nt)), up(make([]byte, 4*nk*nt))
		if err != nil {
			return err
		}
		for _, o := range []driver.DevicePtr{outF, outC} {
			if err := ms.s.MemsetD8(o, 0xff, uint64(4*nq*nt)); err != nil { // NaN: unwritten outputs fail
				return err
			}
		}
		if err := ms.k.QkNormRopeStore(ms.s, QkNormRopeStoreBuffers{QkvRopeStoreBuffers: QkvRopeStoreBuffers{Out: outF,
			Q: dq, K: dk, V: dv, BQ: dbq, BK: dbk, BV: dbv, Pos: dpos, Win: dwin, KRegion: regs[0], VRegion: regs[1]},
			NormQ: dwq, NormK: dwk}, p, eps); err != nil {
			return err
		}
		// The unfused chain: the bias adds (the matmul epilogue's one
		// rounded add), qk_norm (rms_norm over head rows), rope, store.
		biased := func(dst, x, b driver.DevicePtr, n int) error {
			if b != 0 {
				return ms.k.AddBias(ms.s, dst, x, b, nt, n)
			}
			return ms.k.Copy(ms.s, dst, x, n*nt)
		}
		if err := biased(tq, dq, dbq, nq); err != nil {
			return err
		}
		if err := biased(tk, dk, dbk, nk); err != nil {
			return err
		}
		if err := biased(tv, dv, dbv, nk); err != nil {
			return err
		}
		if err := ms.k.RmsNorm(ms.s, nqb, tq, dwq, nt*sh.nh, sh.hd, eps); err != nil {
			return err
		}
		if err := ms.k.RmsNorm(ms.s, nkb, tk, dwk, nt*sh.nkv, sh.hd, eps); err != nil {
			return err
		}
		return rsChainRopeStore(ms, p, nqb, nkb, tv, outF, outC, tkr, dpos, dwin, regs,
			r.qF, r.qC, r.kF, r.vF, r.kC, r.vC)
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// qnKVDiff decodes both regions' cells [start, start+nt) (kv.LoadRow's
// arithmetic on the host) and returns max |diff| and its element, plus the
// first differing byte anywhere in the region (-1: byte-identical).
func qnKVDiff(f kv.Format, a, b []byte, rowLen, start, nt int) (worst float64, at, firstByte int) {
	firstByte, at = rsFirstByteDiff(a, b), -1
	rb := kv.RowBytes(f, rowLen)
	ra, rbv := make([]float32, rowLen), make([]float32, rowLen)
	for c := start; c < start+nt; c++ {
		kv.LoadRow(f, a[c*rb:(c+1)*rb], ra)
		kv.LoadRow(f, b[c*rb:(c+1)*rb], rbv)
		for i := range ra {
			if d := math.Abs(float64(ra[i]) - float64(rbv[i])); d > worst || math.IsNaN(d) {
				worst, at = d, (c-start)*rowLen+i
			}
		}
	}
	return worst, at, firstByte
}

// TestQkNormRopeStoreDevice_BitwiseEqualsNormRopeKVStoreChain: the fused
// kernel gives bitwise the roped, normed q and byte-identical K and V
// regions of the unfused device chain (bias add + rms_norm per head row +
// rope + kv_store) for f32, f16 and q8_0 KV, head_dim 64 and 128, neox and
// interleaved rope, nt 1 and 37, a window start > 0 (cells outside stay
// untouched); shapes of qwen3-0.6b (16/8 heads of 128), qwen3-tiny (4/2 of
// 128), 64-wide heads with q/k/v biases, odd head counts (partial blocks)
// and a partial rotation. The q output is also checked against the host
// reference (the device norm's reduction emulated, float64-angle rope)
// within 1e-5 relative. Every case logs max |diff| fused vs chain (0
// expected) and its position.
func TestQkNormRopeStoreDevice_BitwiseEqualsNormRopeKVStoreChain(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(67))
	shapes := []qnShape{
		{name: "qwen3-0.6b", nh: 16, nkv: 8, hd: 128, nRot: 128},
		{name: "qwen3-tiny", nh: 4, nkv: 2, hd: 128, nRot: 128},
		{name: "hd64-bias", nh: 14, nkv: 2, hd: 64, nRot: 64, bias: true},
		{name: "hd64-odd-heads", nh: 5, nkv: 3, hd: 64, nRot: 64},
		{name: "hd128-partial-rot", nh: 6, nkv: 3, hd: 128, nRot: 64},
	}
	const start, nCtx, eps = 37, 160, 1e-6
	for _, sh := range shapes {
		for _, f := range []kv.Format{kv.F32, kv.F16, kv.Q8_0} {
			for _, neox := range []bool{true, false} {
				for _, nt := range []int{1, 37} {
					name := fmt.Sprintf("%s/%s/neox=%v/nt%d", sh.name, f, neox, nt)
					r := qnFusedVsChain(t, ms, rng, sh, f, neox, nt, start, nCtx, eps)
					worst, at, firstBit := 0.0, -1, -1
					for i := range r.qF {
						if firstBit < 0 && math.Float32bits(r.qF[i]) != math.Float32bits(r.qC[i]) {
							firstBit = i
						}
						if d := math.Abs(float64(r.qF[i]) - float64(r.qC[i])); d > worst || math.IsNaN(d) {
							worst, at = d, i
						}
					}
					kw, kat, kb := qnKVDiff(f, r.kF, r.kC, sh.nkv*sh.hd, start, nt)
					vw, vat, vb := qnKVDiff(f, r.vF, r.vC, sh.nkv*sh.hd, start, nt)
					t.Logf("%s: fused vs chain max |diff| q %g at %d, K %g at %d, V %g at %d", name, worst, at, kw, kat, vw, vat)
					if firstBit >= 0 {
						i := firstBit
						t.Errorf("%s: q[%d] (token %d, head %d, dim %d) fused %v, chain %v (bitwise; max |diff| %g at %d)", name, i,
							i/(sh.nh*sh.hd), i/sh.hd%sh.nh, i%sh.hd, r.qF[i], r.qC[i], worst, at)
					}
					rowB := kv.RowBytes(f, sh.nkv*sh.hd)
					if kb >= 0 {
						t.Errorf("%s: K region byte %d (cell %d) fused %#x, chain %#x (max |diff| %g at %d)", name, kb, kb/rowB, r.kF[kb], r.kC[kb], kw, kat)
					}
					if vb >= 0 {
						t.Errorf("%s: V region byte %d (cell %d) fused %#x, chain %#x (max |diff| %g at %d)", name, vb, vb/rowB, r.vF[vb], r.vC[vb], vw, vat)
					}
					// The host reference: bias, the device norm's arithmetic
					// (rsOldRmsNorm), rope with float64 angles.
					qb := append([]float32(nil), r.q...)
					if r.bq != nil {
						nq := sh.nh * sh.hd
						for i := range qb {
							qb[i] += r.bq[i%nq]
						}
					}
					want := rsRopeRef(rsOldRmsNorm(qb, r.wq, sh.hd, eps), r.pos, sh.hd, sh.nh, sh.nRot, 1e6, neox)
					hw, hat := 0.0, -1
					for i := range want {
						if d := math.Abs(float64(r.qF[i])-float64(want[i])) / math.Max(1, math.Abs(float64(want[i]))); d > hw || math.IsNaN(d) {
							hw, hat = d, i
						}
					}
					if hw > 1e-5 || math.IsNaN(hw) {
						t.Errorf("%s: q vs host reference: max |diff| %g at %d (fused %v, host %v)", name, hw, hat, r.qF[hat], want[hat])
					}
				}
			}
		}
	}
}

// TestQkNormRopeStoreDevice_CellsOutsideTheRegionAreNotStored: a window
// whose cells run past n_ctx stores the rows inside and nothing beyond
// (the K and V blocks leave before any barrier), and q is still written.
func TestQkNormRopeStoreDevice_CellsOutsideTheRegionAreNotStored(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(68))
	sh := qnShape{name: "qwen3-tiny", nh: 4, nkv: 2, hd: 128, nRot: 128}
	// nt 5 from cell 62 of 64: tokens 2..4 fall outside; the chain's
	// kv_store skips them the same way.
	r := qnFusedVsChain(t, ms, rng, sh, kv.Q8_0, true, 5, 62, 64, 1e-6)
	for i := range r.qF {
		if math.Float32bits(r.qF[i]) != math.Float32bits(r.qC[i]) {
			t.Fatalf("q[%d] fused %v, chain %v", i, r.qF[i], r.qC[i])
		}
	}
	if i := rsFirstByteDiff(r.kF, r.kC); i >= 0 {
		t.Errorf("K region byte %d differs", i)
	}
	if i := rsFirstByteDiff(r.vF, r.vC); i >= 0 {
		t.Errorf("V region byte %d differs", i)
	}
}

// qnModels are the whole-model cases: the synthetic qwen3 shapes, KV
// formats on the tiny one.
var qnModels = []struct{ shape, typ, cache string }{
	{"qwen3-tiny", "Q8_0", "f32"}, {"qwen3-tiny", "F16", "f16"}, {"qwen3-tiny", "Q4_K_M", "q8_0"},
	{"qwen3-0.6b", "Q8_0", "auto"},
}

// TestWholeModel_QkNormRopeStoreLeverBitwiseEqualsUnfused: qwen3-tiny (f32,
// f16, q8_0 KV) and qwen3-0.6b, prefill + 8 decode steps with
// MINFER_FUSE_QKNORM=1 against =0, CUDA graphs on (captured at the 3rd
// decode, so the fused node replays with fresh positions and window) and
// off: every step's logits bitwise equal (the fused kernel runs the
// unfused arithmetic). MINFER_NO_FUSE_QKV=0 is pinned: the fused kernel
// exists only inside the QKV fusion (the lever's Requires), which an A/B's
// arm B may turn off.
func TestWholeModel_QkNormRopeStoreLeverBitwiseEqualsUnfused(t *testing.T) {
	dsNeedDevice(t)
	for _, m := range qnModels {
		for _, graphs := range []string{"0", "1"} {
			t.Run(fmt.Sprintf("%s/%s/kv_%s/no_cuda_graph=%s", m.shape, m.typ, m.cache, graphs), func(t *testing.T) {
				path := dsSynth(t, m.shape, m.typ)
				env := []string{"MINFER_CACHE_TYPE=" + m.cache, "MINFER_NO_CUDA_GRAPH=" + graphs, "MINFER_NO_FUSE_QKV=0"}
				on := dsEngine(t, path, "cuda", 64, append(env, "MINFER_FUSE_QKNORM=1")...)
				off := dsEngine(t, path, "cuda", 64, append(env, "MINFER_FUSE_QKNORM=0")...)
				got, want := dsSteps(t, on, 8), dsSteps(t, off, 8)
				for i := range want {
					first, worst := -1, 0.0
					for j := range want[i] {
						if first < 0 && math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
							first = j
						}
						worst = max(worst, math.Abs(float64(got[i][j])-float64(want[i][j])))
					}
					t.Logf("step %d: max |diff| %g (bitwise equal: %v)", i, worst, first < 0)
					if first >= 0 || math.IsNaN(worst) {
						t.Errorf("step %d: logit %d lever on %v, off %v (max |diff| %g): want bitwise equal", i, first, got[i][first], want[i][first], worst)
					}
				}
				if st := dsDeviceBackend(t, on).CaptureStats(); graphs == "0" && st.Replays < 1 {
					t.Errorf("lever on: no graph replay (%+v)", st)
				}
			})
		}
	}
}

// TestCensus_Qwen3DecodeRunsQkNormRopeStoreOnlyWithTheLever: liveness and
// the launch saving. With MINFER_FUSE_QKNORM=1 a qwen3 run (prefill +
// decodes) launches minfer_qkv_norm_rope_store (n_layer per replayed decode
// step) and never minfer_rope_f32 or minfer_kv_store; with it off the new
// kernel never runs and a step runs 2*n_layer ropes and 2*n_layer KV
// stores. A decode step launches 5*n_layer kernels fewer with the lever on
// (2 qk_norm + 2 rope + 2 kv_store -> 1); both counts are logged. Pinned, as
// an A/B's arm B may move them: MINFER_NO_FUSE_QKV=0 (the lever's Requires)
// and graphs on (dsGraphsOn: the step counted is a replay).
func TestCensus_Qwen3DecodeRunsQkNormRopeStoreOnlyWithTheLever(t *testing.T) {
	dsNeedDevice(t)
	for _, m := range []struct {
		shape  string
		nLayer int
	}{{"qwen3-tiny", 2}, {"qwen3-0.6b", 28}} {
		path := dsSynth(t, m.shape, "Q8_0")
		perStep := map[string]int64{}
		for _, lever := range []string{"0", "1"} {
			e := dsEngine(t, path, "cuda", 64, append([]string{"MINFER_LAUNCH_CENSUS=1", "MINFER_NO_FUSE_QKV=0", "MINFER_FUSE_QKNORM=" + lever}, dsGraphsOn...)...)
			b := dsDeviceBackend(t, e)
			dsSteps(t, e, 4) // prefill + 4 decodes: the decode split is captured at the 3rd
			step := mfCensusDelta(b, func() {
				if _, err := e.Forward([]int32{9}, false); err != nil {
					t.Fatal(err)
				}
			})
			run := b.Kernels().Census()
			var total int64
			for _, n := range step {
				total += n
			}
			perStep[lever] = total
			t.Logf("%s MINFER_FUSE_QKNORM=%s: one decode step: %d launches (qkv_norm_rope_store %d, rms_norm_f32 %d, rope %d, kv_store %d); whole run: %d, %d, %d, %d",
				m.shape, lever, total, step[qkNormRopeStoreKernel], step["minfer_rms_norm_f32"], step["minfer_rope_f32"], step["minfer_kv_store"],
				run[qkNormRopeStoreKernel], run["minfer_rms_norm_f32"], run["minfer_rope_f32"], run["minfer_kv_store"])
			if b.CaptureStats().Replays < 1 {
				t.Errorf("%s MINFER_FUSE_QKNORM=%s: the decode step was not replayed: %+v", m.shape, lever, b.CaptureStats())
			}
			if lever == "1" {
				if step[qkNormRopeStoreKernel] != int64(m.nLayer) || run["minfer_rope_f32"] != 0 || run["minfer_kv_store"] != 0 {
					t.Errorf("%s lever on: one step ran %d fused launches (want %d); the run ran %d rope and %d kv_store launches (want 0)",
						m.shape, step[qkNormRopeStoreKernel], m.nLayer, run["minfer_rope_f32"], run["minfer_kv_store"])
				}
				continue
			}
			if run[qkNormRopeStoreKernel] != 0 || step["minfer_rope_f32"] != int64(2*m.nLayer) || step["minfer_kv_store"] != int64(2*m.nLayer) {
				t.Errorf("%s lever off: %d fused launches (want 0); one step ran %d rope and %d kv_store launches (want %d each)",
					m.shape, run[qkNormRopeStoreKernel], step["minfer_rope_f32"], step["minfer_kv_store"], 2*m.nLayer)
			}
		}
		t.Logf("%s: launches per decode step %d (lever off) -> %d (lever on), saved %d = %d per layer",
			m.shape, perStep["0"], perStep["1"], perStep["0"]-perStep["1"], (perStep["0"]-perStep["1"])/int64(m.nLayer))
		if perStep["0"]-perStep["1"] != int64(5*m.nLayer) {
			t.Errorf("%s: the lever saves %d launches a decode step, want 5 per layer (%d)", m.shape, perStep["0"]-perStep["1"], 5*m.nLayer)
		}
	}
}
