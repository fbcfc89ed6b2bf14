package cuda

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quant"
)

// Device tests of the in-kernel activation quantization of the decode
// mmvq path (minfer_mmvqx_<t>, minfer_mmvqx_qkv_<t>, minfer_mmvqx_ffn_<t>:
// MatMulOptions.InlineQ8). They skip with a message when no device answers.

// mxKs are the row lengths: qwen2-0.5b's width and FFN width, qwen2-7b's
// width and FFN width (ffn_down's k, the largest). K-quants need whole
// 256-value super-blocks, so 1792 stands in for 896.
func mxKs(wt quant.Type) []int {
	if wt.BlockSize() == quant.QKK {
		return []int{1792, 4864, 3584, 18944}
	}
	return []int{896, 4864, 3584, 18944}
}

// mxDiff counts the positions where two f32 vectors differ bitwise and
// reports the first few.
func mxDiff(t *testing.T, what string, got, want []float32) int {
	t.Helper()
	bad := 0
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if bad < 3 {
				t.Errorf("%s: out[%d] in-kernel %v (%#08x), two-launch %v (%#08x)", what, i, got[i],
					math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
			bad++
		}
	}
	return bad
}

// TestMMVQInlineDevice_BitwiseEqualTwoLaunch: for every mmvq type and k in
// {896 (1792 for K-quants), 4864, 3584, 18944}, one activation row (with
// all-zero blocks, one-spike blocks and exact rounding ties):
// (a) the Q8_1 row each in-kernel form writes to its test dump (block 0's
// shared-memory copy, s included) is byte-for-byte minfer_quantize_q8_1's,
// and (b) minfer_mmvqx_<t> (plain, with bias; at the first k with more
// rows than one residency, so blocks stride over rows), minfer_mmvqx_qkv_<t>
// (nq = 70, nk = nv = 18, q and v with a bias) and minfer_mmvqx_ffn_<t>
// (n_ff = 83) give bitwise the outputs of QuantizeQ8_1 + MatMulQ8_1 /
// MatMulQ8_1QKV / FFNQ8_1. The plain form also runs on x offset by one f32
// (not 16-byte aligned: the scalar-load prologue), bitwise equal too.
func TestMMVQInlineDevice_BitwiseEqualTwoLaunch(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(31))
	const nq, nkv, nff = 70, 18, 83
	sms := ms.dev.Attr.SMCount
	for _, wt := range mmvqTypes {
		for ki, k := range mxKs(wt) {
			n := 37
			if ki == 0 {
				n = sms*mmvqxWarpsPerSM + 77 // more rows than one residency at 16 warps: the row loop strides
			}
			scale := float32(1 / math.Sqrt(float64(k)))
			wp, _ := mmtWeights(t, rng, wt, n, k, scale)
			wq, _ := mmtWeights(t, rng, wt, nq, k, scale)
			wk, _ := mmtWeights(t, rng, wt, nkv, k, scale)
			wv, _ := mmtWeights(t, rng, wt, nkv, k, scale)
			wg, _ := mmtWeights(t, rng, wt, nff, k, scale)
			wu, _ := mmtWeights(t, rng, wt, nff, k, scale)
			bp, bq, bv := make([]float32, n), make([]float32, nq), make([]float32, nkv)
			for _, b := range [][]float32{bp, bq, bv} {
				for i := range b {
					b[i] = 2*rng.Float32() - 1
				}
			}
			x := mmvqActivation(rng, k, true)
			// x1 is x stored one f32 later (a 4- but not 16-byte aligned row).
			x1 := append([]float32{0}, x...)
			nqkv := nq + 2*nkv
			qb := ActQ8Bytes(k, 1)
			type pair struct{ ref, got []byte }
			plain, plainU := pair{make([]byte, 4*n), make([]byte, 4*n)}, make([]byte, 4*n)
			qkv, ffn := pair{make([]byte, 4*nqkv), make([]byte, 4*nqkv)}, pair{make([]byte, 4*nff), make([]byte, 4*nff)}
			refQ := make([]byte, qb)
			dumps := [4][]byte{make([]byte, qb), make([]byte, qb), make([]byte, qb), make([]byte, qb)}
			err := ms.dev.Do(func() error {
				var upErr error
				up := func(b []byte) driver.DevicePtr {
					p, e := ms.upload(b)
					if e != nil && upErr == nil {
						upErr = e
					}
					return p
				}
				pp, pq, pk, pv, pg, pu := up(wp), up(wq), up(wk), up(wv), up(wg), up(wu)
				pbp, pbq, pbv := up(driver.Float32Bytes(bp)), up(driver.Float32Bytes(bq)), up(driver.Float32Bytes(bv))
				px, px1, pa := up(driver.Float32Bytes(x)), up(driver.Float32Bytes(x1)), up(make([]byte, qb))
				var pd [4]driver.DevicePtr
				for i := range pd {
					pd[i] = up(make([]byte, qb))
				}
				op1, op2, op3 := up(make([]byte, 4*n)), up(make([]byte, 4*n)), up(make([]byte, 4*n))
				oq1, oq2 := up(make([]byte, 4*nqkv)), up(make([]byte, 4*nqkv))
				of1, of2 := up(make([]byte, 4*nff)), up(make([]byte, 4*nff))
				if upErr != nil {
					return upErr
				}
				// 0xff everywhere the in-kernel forms write: anything unwritten is a NaN / a byte mismatch.
				for _, c := range []struct {
					p driver.DevicePtr
					n int
				}{{op2, 4 * n}, {op3, 4 * n}, {oq2, 4 * nqkv}, {of2, 4 * nff}, {pd[0], int(qb)}, {pd[1], int(qb)}, {pd[2], int(qb)}, {pd[3], int(qb)}} {
					if err := ms.s.MemsetD8(c.p, 0xff, uint64(c.n)); err != nil {
						return err
					}
				}
				// Two-launch reference.
				if err := ms.k.QuantizeQ8_1(ms.s, pa, px, k, 1); err != nil {
					return err
				}
				if err := ms.k.MatMulQ8_1(ms.s, op1, pa, qb, pp, wt, pbp, k, n); err != nil {
					return err
				}
				if err := ms.k.MatMulQ8_1QKV(ms.s, oq1, pa, qb, [3]driver.DevicePtr{pq, pk, pv}, wt,
					[3]driver.DevicePtr{pbq, 0, pbv}, k, [3]int{nq, nkv, nkv}); err != nil {
					return err
				}
				if err := ms.k.FFNQ8_1(ms.s, of1, pa, qb, pg, pu, wt, k, nff); err != nil {
					return err
				}
				// In-kernel forms.
				if err := ms.k.mmvqxPlain(ms.s, op2, px, pp, wt, pbp, k, n, pd[0]); err != nil {
					return err
				}
				if err := ms.k.mmvqxPlain(ms.s, op3, px1.Add(4), pp, wt, pbp, k, n, pd[3]); err != nil {
					return err
				}
				if err := ms.k.mmvqxQKV(ms.s, oq2, px, [3]driver.DevicePtr{pq, pk, pv}, wt,
					[3]driver.DevicePtr{pbq, 0, pbv}, k, [3]int{nq, nkv, nkv}, pd[1]); err != nil {
					return err
				}
				if err := ms.k.mmvqxFFN(ms.s, of2, px, pg, pu, wt, k, nff, pd[2]); err != nil {
					return err
				}
				for _, c := range []struct {
					dst []byte
					src driver.DevicePtr
				}{{plain.ref, op1}, {plain.got, op2}, {plainU, op3}, {qkv.ref, oq1}, {qkv.got, oq2}, {ffn.ref, of1}, {ffn.got, of2},
					{refQ, pa}, {dumps[0], pd[0]}, {dumps[1], pd[1]}, {dumps[2], pd[2]}, {dumps[3], pd[3]}} {
					if err := ms.s.CopyDtoH(c.dst, c.src); err != nil {
						return err
					}
				}
				return ms.s.Synchronize()
			})
			if err != nil {
				t.Fatalf("%s k=%d: %v", wt, k, err)
			}
			name := fmt.Sprintf("%s k=%d", wt, k)
			for i, form := range []string{"plain", "qkv", "ffn", "plain (unaligned x)"} {
				if !bytes.Equal(dumps[i], refQ) {
					first := 0
					for first < len(refQ) && dumps[i][first] == refQ[first] {
						first++
					}
					t.Errorf("%s %s: in-kernel Q8_1 row differs from minfer_quantize_q8_1 first at byte %d (block %d, offset %d)",
						name, form, first, first/q8_1BlockBytes, first%q8_1BlockBytes)
				}
			}
			bp1 := mxDiff(t, name+" plain", mmtFloats(plain.got), mmtFloats(plain.ref))
			bpU := mxDiff(t, name+" plain (unaligned x)", mmtFloats(plainU), mmtFloats(plain.ref))
			bq1 := mxDiff(t, name+" qkv", mmtFloats(qkv.got), mmtFloats(qkv.ref))
			bf1 := mxDiff(t, name+" ffn", mmtFloats(ffn.got), mmtFloats(ffn.ref))
			w, blocks, ok := mmvqxGeom(k, n, sms)
			t.Logf("%s: plain n=%d (%d warps x %d blocks, backend takes it: %v) %d differ, unaligned %d; qkv %d/%d; ffn %d/%d differ",
				name, n, w, blocks, ok, bp1, bpU, bq1, nqkv, bf1, nff)
		}
	}
}

// mxEngine loads path on the device with the census on; inline sets the
// backend's MatMulOptions.InlineQ8 before the engine plans anything.
func mxEngine(t *testing.T, path string, inline bool) (*model.Engine, *Backend) {
	t.Helper()
	// The repacked Q8_0 / Q6_K path (on by default) takes precedence over
	// the in-kernel form: pin it off, this test is about mmvqx.
	cfg := dsLevers(t, "MINFER_LAUNCH_CENSUS=1", "MINFER_MMVQ_REPACK=0")
	var be *Backend
	opts := model.Options{Device: "cuda", NCtx: 256, Levers: cfg, Logf: t.Logf,
		NewDevice: func(lv levers.Config, logf func(string, ...any)) (graph.Backend, error) {
			b, err := New(Options{Levers: lv, Logf: logf})
			if err != nil {
				return nil, err
			}
			b.mm.InlineQ8 = inline
			be = b
			return b, nil
		}}
	e, err := model.Load(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if be == nil || dsDeviceBackend(t, e) != be {
		t.Fatalf("engine does not run on the test's backend")
	}
	return e, be
}

// TestMMVQInlineDevice_DecodeLaunchesNoQuantize: synthetic models, prefill
// then 6 decode steps, with in-kernel quantization (the backend default)
// and with InlineQ8 off (two-launch). Logits bitwise equal at every step.
// Census of the decode steps: in-kernel, no minfer_quantize_q8_1 at all and
// minfer_mmvqx_* launches, fused qkv and ffn included (every decode matmul
// of these shapes fits the prologue budget); two-launch, quantize launches
// and no mmvqx kernel. Logs the launches per decode step of both.
func TestMMVQInlineDevice_DecodeLaunchesNoQuantize(t *testing.T) {
	dsNeedDevice(t)
	for _, m := range []struct{ shape, typ string }{
		{"qwen2-tiny", "Q8_0"}, {"qwen2-0.5b", "Q8_0"}, {"qwen2-0.5b", "Q4_K_M"}, {"qwen3-tiny", "Q4_K_M"},
	} {
		t.Run(m.shape+"/"+m.typ, func(t *testing.T) {
			path := dsSynth(t, m.shape, m.typ)
			run := func(inline bool) ([][]float32, map[string]int64) {
				e, b := mxEngine(t, path, inline)
				l, err := e.Forward(dsPrompt, false)
				if err != nil {
					t.Fatal(err)
				}
				out := [][]float32{l}
				census := mfCensusDelta(b, func() {
					for i := range 6 {
						if l, err = e.Forward([]int32{int32(100 + 7*i)}, false); err != nil {
							t.Fatal(err)
						}
						out = append(out, l)
					}
				})
				return out, census
			}
			gIn, cIn := run(true)
			gTwo, cTwo := run(false)
			for i := range gIn {
				if bad := mxDiff(t, fmt.Sprintf("step %d logits", i), gIn[i], gTwo[i]); bad != 0 {
					t.Errorf("step %d: %d of %d logits differ between in-kernel and two-launch", i, bad, len(gIn[i]))
				}
			}
			count := func(c map[string]int64) (total, quantize, mx, mxFused int64) {
				for k, n := range c {
					total += n
					switch {
					case k == quantizeQ8_1Kernel, k == quantizeQ8_1X4Kernel:
						quantize += n
					case strings.HasPrefix(k, "minfer_mmvqx_qkv_"), strings.HasPrefix(k, "minfer_mmvqx_ffn_"):
						mx += n
						mxFused += n
					case strings.HasPrefix(k, "minfer_mmvqx_"):
						mx += n
					}
				}
				return
			}
			tIn, qIn, mxIn, fIn := count(cIn)
			tTwo, qTwo, mxTwo, _ := count(cTwo)
			t.Logf("per decode step: in-kernel %.1f launches (%.1f quantize, %.1f mmvqx of which %.1f fused); two-launch %.1f launches (%.1f quantize, %.1f mmvqx)",
				float64(tIn)/6, float64(qIn)/6, float64(mxIn)/6, float64(fIn)/6, float64(tTwo)/6, float64(qTwo)/6, float64(mxTwo)/6)
			if qIn != 0 || mxIn == 0 || fIn == 0 {
				t.Errorf("in-kernel: %d minfer_quantize_q8_1, %d mmvqx (%d fused) launches; want 0 and > 0", qIn, mxIn, fIn)
			}
			if qTwo == 0 || mxTwo != 0 {
				t.Errorf("two-launch: %d quantize, %d mmvqx launches; want > 0 and 0", qTwo, mxTwo)
			}
			if tIn >= tTwo {
				t.Errorf("in-kernel decode launched %d kernels, two-launch %d: want fewer", tIn, tTwo)
			}
		})
	}
}

// TestMMVQXGeom_ShapesAndKernelSources (host): the launcher's constants
// match mmvq.cu, every type has the three in-kernel forms, and on an H200
// (132 SMs) every decode matmul of qwen2-0.5b and all but ffn_down of
// qwen2-7b take the in-kernel form (ffn_down's 74 KiB f32 row re-read by
// 448 blocks is over the prologue budget: two launches stay cheaper).
func TestMMVQXGeom_ShapesAndKernelSources(t *testing.T) {
	defs, src := kernelDefines(t, "kernels/mmvq.cu")
	if defs["MINFER_MMVQX_MAX_THREADS"] != 32*mmvqxMaxWarps {
		t.Errorf("MINFER_MMVQX_MAX_THREADS = %d, launcher has %d warps", defs["MINFER_MMVQX_MAX_THREADS"], mmvqxMaxWarps)
	}
	if !strings.Contains(src, "#define MINFER_MMVQX_SMEM(k) ((k) + 4 * ((k) / 32))") || mmvqxSmem(18944) != 18944+4*592 {
		t.Errorf("MINFER_MMVQX_SMEM and mmvqxSmem disagree")
	}
	for ty := range mmvqTable {
		for _, form := range []string{"", "qkv", "ffn"} {
			name := mmvqxKernel(ty, form)
			if name == "" || !strings.Contains(src, strings.TrimSuffix(strings.Replace(name, strings.TrimPrefix(mmvqTable[ty], "minfer_mmvq_"), "##name(", 1), "")) {
				t.Errorf("%s form %q: kernel %q not instantiated by mmvq.cu's macro", ty, form, name)
			}
		}
	}
	if mmvqxKernel(quant.Q5_K, "") != "" {
		t.Errorf("Q5_K has an mmvqx kernel name")
	}
	const sms = 132
	for _, c := range []struct {
		name    string
		k, rows int
		want    bool
	}{
		{"0.5b qkv", 896, 1152, true}, {"0.5b attn_output", 896, 896, true}, {"0.5b ffn gate/up", 896, 4864, true},
		{"0.5b ffn_down", 4864, 896, true}, {"0.5b lm_head", 896, 151936, true},
		{"7b qkv", 3584, 4608, true}, {"7b attn_output", 3584, 3584, true}, {"7b ffn gate/up", 3584, 18944, true},
		{"7b ffn_down", 18944, 3584, false}, {"7b lm_head", 3584, 152064, true},
		{"k over 48 KiB of smem", 45056, 4, false},
	} {
		w, blocks, ok := mmvqxGeom(c.k, c.rows, sms)
		extra := float64(blocks) * float64(c.k) * 4
		t.Logf("%-22s k=%-6d rows=%-6d: %2d warps x %4d blocks, f32 re-read %.2f MB (%.1f KiB per SM), in-kernel %v",
			c.name, c.k, c.rows, w, blocks, extra/1e6, extra/sms/1024, ok)
		if ok != c.want {
			t.Errorf("%s: in-kernel %v, want %v", c.name, ok, c.want)
		}
		if ok && (blocks*w < min(c.rows, sms*mmvqxWarpsPerSM) || w < mmvqxMinWarps || w > mmvqxMaxWarps) {
			t.Errorf("%s: %d warps x %d blocks cannot cover %d rows at full residency", c.name, w, blocks, c.rows)
		}
	}
}
