package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/synth"
)

// Device tests of MINFER_FUSE_RESIDUAL (graph.FuseMatMulAdd, matmul.go opMatMulAdd, the _res_ forms in
// kernels/mmvq.cu and kernels/mmvq_repack.cu). They skip with a message
// when no device answers.

// frTypes are the weight types with an mmvq kernel.
var frTypes = []quant.Type{quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q4_K, quant.Q5_K, quant.Q6_K}

// frWeight is n rows of k values of wt as GGUF blocks: random quants and
// random finite f16 scales (and mins) at each type's scale offsets.
func frWeight(rng *rand.Rand, wt quant.Type, k, n int) []byte {
	bb, nb := wt.BlockBytes(), k/wt.BlockSize()*n
	w := make([]byte, nb*bb)
	rng.Read(w)
	var offs []int
	switch wt {
	case quant.Q8_0, quant.Q4_0, quant.Q5_0:
		offs = []int{0}
	case quant.Q4_1, quant.Q5_1, quant.Q4_K, quant.Q5_K:
		offs = []int{0, 2}
	case quant.Q6_K:
		offs = []int{208}
	}
	for i := range nb {
		for _, o := range offs {
			d := rpF16(rng)
			w[i*bb+o], w[i*bb+o+1] = byte(d), byte(d>>8)
		}
	}
	return w
}

// frDiff counts the positions where got and want differ bitwise, reporting
// the first few and the largest |diff|.
func frDiff(t *testing.T, what string, got, want []float32) int {
	t.Helper()
	bad, worst, at := 0, 0.0, -1
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if bad < 3 {
				t.Errorf("%s: [%d] fused %v (%#08x), unfused %v (%#08x)", what, i, got[i], math.Float32bits(got[i]),
					want[i], math.Float32bits(want[i]))
			}
			bad++
			if d := math.Abs(float64(got[i]) - float64(want[i])); d > worst || at < 0 {
				worst, at = d, i
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values differ, max |diff| %g at %d", what, bad, len(want), worst, at)
	}
	return bad
}

// frDownload copies n f32 at p to the host (inside Do).
func frDownload(ms *mmtSession, p driver.DevicePtr, n int) ([]float32, error) {
	b := make([]byte, 4*n)
	if err := ms.s.CopyDtoH(b, p); err != nil {
		return nil, err
	}
	return mmtFloats(b), ms.s.Synchronize()
}

// TestFuseResidualDevice_KernelBitwiseEqualMMVQPlusAdd: over one
// device-quantized Q8_1 activation row, minfer_mmvq_res_<t> (with and
// without a bias) writes bitwise what minfer_mmvq_<t> followed by
// minfer_add_f32 (residual first, as the graph's add) gives, for every mmvq
// type, the 0.5b widths (k = 896 or 1792 for the K-quants, and 4864: the
// ffn_down row) and n = 896 and 257 (a partial last block), into a fresh
// output and in place (residual = output); minfer_mmvqr_res_<t> likewise
// against minfer_mmvqr_<t> + add for Q8_0 and Q6_K.
func TestFuseResidualDevice_KernelBitwiseEqualMMVQPlusAdd(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(63))
	for _, wt := range frTypes {
		ks := []int{896, 4864}
		if wt.BlockSize() == quant.QKK {
			ks = []int{1792, 4864}
		}
		for _, k := range ks {
			x := mmvqActivation(rng, k, true)
			for _, n := range []int{896, 257} {
				for _, withBias := range []bool{false, true} {
					frKernelCase(t, ms, rng, wt, k, n, x, withBias)
				}
			}
		}
	}
}

func frKernelCase(t *testing.T, ms *mmtSession, rng *rand.Rand, wt quant.Type, k, n int, x []float32, withBias bool) {
	t.Helper()
	wb := frWeight(rng, wt, k, n)
	res := make([]float32, n)
	for i := range res {
		res[i] = 8*rng.Float32() - 4
	}
	res[0] = float32(math.Copysign(0, -1))
	var bias []float32
	if withBias {
		bias = make([]float32, n)
		for i := range bias {
			bias[i] = 2*rng.Float32() - 1
		}
	}
	repack := MMVQRepackable(wt)
	var want, got, inPlace, wantR, gotR []float32
	err := ms.dev.Do(func() error {
		var w, wr driver.DevicePtr
		var err error
		if repack {
			if w, wr, err = rpRepack(ms, wt, wb, k, n); err != nil {
				return err
			}
		} else if w, err = ms.upload(wb); err != nil {
			return err
		}
		dq, qb, err := rpQuantize(ms, x, k)
		if err != nil {
			return err
		}
		var db driver.DevicePtr
		if withBias {
			if db, err = ms.upload(driver.Float32Bytes(bias)); err != nil {
				return err
			}
		}
		up := ms.uploads()
		dr := up.f32(res)
		mm := up.zeros(4 * n)
		if up.err != nil {
			return up.err
		}
		// The unfused chain: matmul, then out = residual + matmul.
		unfused := func(mat func(o driver.DevicePtr) error) ([]float32, error) {
			return rpOut(ms, n, func(o driver.DevicePtr) error {
				if err := mat(mm); err != nil {
					return err
				}
				return ms.k.Add(ms.s, o, dr, mm, n)
			})
		}
		if want, err = unfused(func(o driver.DevicePtr) error { return ms.k.MatMulQ8_1(ms.s, o, dq, qb, w, wt, db, k, n) }); err != nil {
			return err
		}
		if got, err = rpOut(ms, n, func(o driver.DevicePtr) error {
			return ms.k.MatMulQ8_1Res(ms.s, o, dq, qb, w, wt, db, dr, k, n)
		}); err != nil {
			return err
		}
		ip, err := ms.upload(driver.Float32Bytes(res))
		if err != nil {
			return err
		}
		if err := ms.k.MatMulQ8_1Res(ms.s, ip, dq, qb, w, wt, db, ip, k, n); err != nil {
			return err
		}
		if inPlace, err = frDownload(ms, ip, n); err != nil {
			return err
		}
		if !repack {
			return nil
		}
		if wantR, err = unfused(func(o driver.DevicePtr) error { return ms.k.MatMulQ8_1R(ms.s, o, dq, qb, wr, wt, db, k, n) }); err != nil {
			return err
		}
		gotR, err = rpOut(ms, n, func(o driver.DevicePtr) error {
			return ms.k.MatMulQ8_1RRes(ms.s, o, dq, qb, wr, wt, db, dr, k, n)
		})
		return err
	})
	what := fmt.Sprintf("%s k=%d n=%d bias=%v", wt, k, n, withBias)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	bad := frDiff(t, what+" minfer_mmvq_res", got, want)
	bad += frDiff(t, what+" minfer_mmvq_res in place", inPlace, want)
	if repack {
		bad += frDiff(t, what+" minfer_mmvqr_res", gotR, wantR)
	}
	if bad == 0 {
		t.Logf("%s: %d outputs bitwise equal (fresh, in place%s)", what, n, map[bool]string{true: ", repacked"}[repack])
	}
}

const frSteps = 6

// dsModel is a synthetic model of the decode lever tests: shape and type.
type dsModel struct{ shape, typ string }

// dsLeverDecode runs each model, with CUDA graphs off and on, through a
// prefill and frSteps decode steps with lever=0 and lever=1 (the MMVQ path
// pinned on: dsMMVQ), fails where any step's logits differ bitwise, and
// hands check the model's shape and both arms' decode censuses.
func dsLeverDecode(t *testing.T, lever string, models []dsModel,
	check func(t *testing.T, m dsModel, sh synth.Shape, graphs string, cOff, cOn map[string]int64, bOn *Backend)) {
	t.Helper()
	dsLeverDecodeOn(t, lever, models, dsMMVQ, check)
}

// dsLeverDecodeOn is dsLeverDecode with pin (settings both arms hold)
// instead of dsMMVQ.
func dsLeverDecodeOn(t *testing.T, lever string, models []dsModel, pin []string,
	check func(t *testing.T, m dsModel, sh synth.Shape, graphs string, cOff, cOn map[string]int64, bOn *Backend)) {
	t.Helper()
	dsLeverDecodeCmp(t, lever, models, pin, func(t *testing.T, i int, on, off []float32) {
		if bad := frDiff(t, fmt.Sprintf("step %d logits", i), on, off); bad != 0 {
			t.Errorf("step %d: %d of %d logits differ between %s=1 and =0", i, bad, len(off), lever)
		}
	}, check)
}

// dsLeverDecodeCmp is dsLeverDecodeOn with cmp judging each step's logits
// of lever=1 (on) against lever=0 (off) in place of bitwise equality.
func dsLeverDecodeCmp(t *testing.T, lever string, models []dsModel, pin []string, cmp func(t *testing.T, step int, on, off []float32),
	check func(t *testing.T, m dsModel, sh synth.Shape, graphs string, cOff, cOn map[string]int64, bOn *Backend)) {
	t.Helper()
	for _, m := range models {
		sh, err := synth.ShapeByName(m.shape)
		if err != nil {
			t.Fatal(err)
		}
		for _, graphs := range []string{"0", "1"} {
			t.Run(fmt.Sprintf("%s/%s/no_cuda_graph=%s", m.shape, m.typ, graphs), func(t *testing.T) {
				p := dsSynth(t, m.shape, m.typ)
				base := slices.Clip(append([]string{"MINFER_NO_CUDA_GRAPH=" + graphs}, pin...)) // each append copies
				lOff, cOff, _ := dsDecodeCensus(t, p, frSteps, append(base, lever+"=0")...)
				lOn, cOn, bOn := dsDecodeCensus(t, p, frSteps, append(base, lever+"=1")...)
				for i := range lOff {
					cmp(t, i, lOn[i], lOff[i])
				}
				check(t, m, sh, graphs, cOff, cOn, bOn)
			})
		}
	}
}

// TestFuseResidualDevice_LogitsBitwiseAndFewerAddLaunches: synthetic
// qwen2-tiny and qwen2-0.5b at Q8_0 and Q4_K_M (repacked Q8_0 / Q6_K and
// GGUF Q4_K kernels), prefill then 6 decode steps, CUDA graphs on and off:
// MINFER_FUSE_RESIDUAL=1 gives bitwise the logits of =0 at every step. Census of the
// decode steps: minfer_add_f32 launches drop by exactly 2 per layer per
// step, and minfer_mmvq*_res_* runs that many times with the lever on and
// never with it off. The MMVQ path, the only route with a residual form,
// is pinned on (dsMMVQ): an A/B's arm B may turn it off.
func TestFuseResidualDevice_LogitsBitwiseAndFewerAddLaunches(t *testing.T) {
	dsNeedDevice(t)
	models := []dsModel{{"qwen2-tiny", "Q8_0"}, {"qwen2-tiny", "Q4_K_M"}, {"qwen2-0.5b", "Q8_0"}, {"qwen2-0.5b", "Q4_K_M"}}
	dsLeverDecode(t, "MINFER_FUSE_RESIDUAL", models, func(t *testing.T, _ dsModel, sh synth.Shape, graphs string, cOff, cOn map[string]int64, bOn *Backend) {
		if graphs == "0" {
			if st := bOn.CaptureStats(); st.Captures < 1 || st.Replays < 3 {
				t.Errorf("lever on: capture stats %+v: want a decode capture and replays", st)
			}
		}
		want := int64(2 * sh.NLayer * frSteps)
		addOff, addOn := cOff["minfer_add_f32"], cOn["minfer_add_f32"]
		resOn, namesOn := rpMatching(cOn, "minfer_mmvq*_res_*")
		resOff, _ := rpMatching(cOff, "minfer_mmvq*_res_*")
		t.Logf("decode launches over %d steps: minfer_add_f32 off %d, on %d (saved %d, want %d); "+
			"minfer_mmvq*_res_* on %d %v, off %d", frSteps, addOff, addOn, addOff-addOn, want, resOn, namesOn, resOff)
		if addOff-addOn != want {
			t.Errorf("minfer_add_f32 launches dropped by %d, want 2 x %d layers x %d steps = %d", addOff-addOn, sh.NLayer, frSteps, want)
		}
		if resOn != want || resOff != 0 {
			t.Errorf("minfer_mmvq*_res_* launches: on %d (want %d), off %d (want 0)", resOn, want, resOff)
		}
	})
}
