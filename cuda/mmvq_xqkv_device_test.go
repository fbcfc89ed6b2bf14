package cuda

// Device tests of MINFER_MMVQ_QKV_MIXED (mmvq_xqkv.go,
// kernels/mmvq_xqkv.cu): the mixed kernel against the three launches it
// replaces, and whole-model decode with the lever on against off. They
// skip with a message when no device answers.

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
)

// TestMMVQQKVMixedDevice_OneLaunchBitwiseTheThreeLaunches: for every pair
// of the table, one Q8_1 row quantized on the device, the mixed kernel
// (MatMulQ8_1QKVMixed) writes bitwise what the separate launches write
// into the same places: MatMulQ8_1 of q (with a bias) and k (without),
// then MatMulQ8_1R of v's repacked copy or MatMulQ8_1 of its GGUF bytes
// (with a bias). Shapes: the models' (qwen2-0.5b's k 896, 896 / 128 / 128
// rows for the 32-value q/k types; qwen2-7b's k 3584, 3584 / 512 / 512 for
// the K-quants) and a small one, k 512, 64 / 28 / 30 rows (v's last block
// partial and v's rows not k's). Outputs start as NaN, so an unwritten row
// fails.
func TestMMVQQKVMixedDevice_OneLaunchBitwiseTheThreeLaunches(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(31))
	for pair, name := range xqkvTable {
		shapes := [][4]int{{896, 896, 128, 128}, {512, 64, 28, 30}}
		if pair.qk.BlockSize() == quant.QKK {
			shapes[0] = [4]int{3584, 3584, 512, 512}
		}
		for _, sh := range shapes {
			k, n := sh[0], [3]int{sh[1], sh[2], sh[3]}
			what := fmt.Sprintf("%s k=%d n=%v", name, k, n)
			wq, _ := mmtWeights(t, rng, pair.qk, n[0], k, 0.05)
			wk, _ := mmtWeights(t, rng, pair.qk, n[1], k, 0.05)
			wv, _ := mmtWeights(t, rng, pair.v, n[2], k, 0.05)
			bq, bv := xqBias(rng, n[0]), xqBias(rng, n[2])
			x := mmvqActivation(rng, k, false)
			total := n[0] + n[1] + n[2]
			var sep, mixed []float32
			err := ms.dev.Do(func() error {
				u := ms.uploads()
				pq, pk, pv := u.bytes(wq), u.bytes(wk), u.bytes(wv)
				pbq, pbv, px := u.f32(bq), u.f32(bv), u.f32(x)
				qb := ActQ8Bytes(k, 1)
				pa := u.zeros(int(qb))
				vr := pv
				if pair.vRepacked {
					vr = u.zeros(int(MMVQRepackBytes(pair.v, k, n[2])))
				}
				if u.err != nil {
					return u.err
				}
				if pair.vRepacked {
					if err := ms.k.RepackMMVQ(ms.s, vr, pv, pair.v, k, n[2]); err != nil {
						return err
					}
				}
				if err := ms.k.QuantizeQ8_1(ms.s, pa, px, k, 1); err != nil {
					return err
				}
				var err error
				if sep, err = rpOut(ms, total, func(o driver.DevicePtr) error {
					if err := ms.k.MatMulQ8_1(ms.s, o, pa, qb, pq, pair.qk, pbq, k, n[0]); err != nil {
						return err
					}
					if err := ms.k.MatMulQ8_1(ms.s, o.Add(uint64(4*n[0])), pa, qb, pk, pair.qk, 0, k, n[1]); err != nil {
						return err
					}
					ov := o.Add(uint64(4 * (n[0] + n[1])))
					if pair.vRepacked {
						return ms.k.MatMulQ8_1R(ms.s, ov, pa, qb, vr, pair.v, pbv, k, n[2])
					}
					return ms.k.MatMulQ8_1(ms.s, ov, pa, qb, pv, pair.v, pbv, k, n[2])
				}); err != nil {
					return err
				}
				mixed, err = rpOut(ms, total, func(o driver.DevicePtr) error {
					return ms.k.MatMulQ8_1QKVMixed(ms.s, o, pa, qb, [3]driver.DevicePtr{pq, pk, vr}, pair,
						[3]driver.DevicePtr{pbq, 0, pbv}, k, n)
				})
				return err
			})
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if bad := frDiff(t, what, mixed, sep); bad == 0 {
				t.Logf("%s: %d outputs bitwise the three launches'", what, total)
			}
		}
	}
}

// xqBias is n values in [-1, 1).
func xqBias(rng *rand.Rand, n int) []float32 {
	b := make([]float32, n)
	for i := range b {
		b[i] = 2*rng.Float32() - 1
	}
	return b
}

// xqModel is a synthetic model of the whole-model test with what the
// lever should do to its decode: the layers whose q/k/v types are mixed,
// the mixed kernel that runs there (repacked v, the default), and the
// separate kernels it replaces (q/k's, v's).
type xqModel struct {
	shape, typ    string
	mixed         int
	kernel        string
	qkKernel, vKr string
}

// TestMMVQQKVMixedDevice_LogitsBitwiseAndTwoLaunchesFewerPerMixedLayer:
// synthetic qwen2-tiny, qwen3-tiny and qwen2-0.5b Q4_K_M and qwen2-0.5b
// Q5_K_M, prefill then 6 decode steps, with MINFER_MMVQ_QKV_MIXED=1 and
// =0: the logits are bitwise equal at every step, with CUDA graphs off and
// on, with the decode norm writing the Q8_1 row (MINFER_FUSE_NORM_Q8=1,
// whose fused q/k/v node the mixed launch reads it in), and (qwen2-0.5b
// Q4_K_M) without the repacked copies (the GGUF v kernel). Census of the
// decode steps: the mixed kernel runs once a mixed layer a step with the
// lever on and never off; the q/k type's plain kernel drops by two and
// v's by one a mixed layer a step, and all launches by two (qwen2-0.5b
// Q4_K_M: 24 a token). The lever's Requires and the one-warp MMVQ path are
// pinned in both arms (an A/B's arm B may set any of them), and so is the
// unroped q/k/v form (MINFER_FUSE_QKV_ROPE=0): its mixed kernels also take
// the rope/store launch, so they save three launches, not two
// (TestFuseQKVRopeDevice_LogitsBitwiseAndOneLaunchFewer counts that form on
// the same qwen2-0.5b layers), and the plain one (MINFER_FUSE_NORM_MMVQ=0:
// its normed mixed kernels are named minfer_mmvqn_xqkv_*).
func TestMMVQQKVMixedDevice_LogitsBitwiseAndTwoLaunchesFewerPerMixedLayer(t *testing.T) {
	dsNeedDevice(t)
	const lever = "MINFER_MMVQ_QKV_MIXED"
	l, _ := levers.Lookup(lever)
	pin := slices.Concat(l.Requires, dsOneWarpDecode, []string{"MINFER_FUSE_QKV_ROPE=0", "MINFER_FUSE_NORM_MMVQ=0"})
	models := []xqModel{
		{"qwen2-tiny", "Q4_K_M", 1, "minfer_mmvq_xqkv_q4_k_q6_kr", "minfer_mmvq_q4_k", "minfer_mmvqr_q6_k"},
		{"qwen3-tiny", "Q4_K_M", 1, "minfer_mmvq_xqkv_q4_k_q6_kr", "minfer_mmvq_q4_k", "minfer_mmvqr_q6_k"},
		{"qwen2-0.5b", "Q4_K_M", 12, "minfer_mmvq_xqkv_q5_0_q8_0r", "minfer_mmvq_q5_0", "minfer_mmvqr_q8_0"},
		{"qwen2-0.5b", "Q5_K_M", 12, "minfer_mmvq_xqkv_q5_1_q8_0r", "minfer_mmvq_q5_1", "minfer_mmvqr_q8_0"},
	}
	for _, m := range models {
		variants := [][]string{{"MINFER_NO_CUDA_GRAPH=1"}, {"MINFER_NO_CUDA_GRAPH=0"}, {"MINFER_NO_CUDA_GRAPH=0", "MINFER_FUSE_NORM_Q8=1"}}
		if m.shape == "qwen2-0.5b" && m.typ == "Q4_K_M" {
			variants = append(variants, []string{"MINFER_NO_CUDA_GRAPH=0", "MINFER_MMVQ_REPACK=0", "MINFER_ONE_COPY=0"})
		}
		for _, v := range variants {
			t.Run(fmt.Sprintf("%s/%s/%v", m.shape, m.typ, v), func(t *testing.T) {
				p := dsSynth(t, m.shape, m.typ)
				base := slices.Concat(pin, v)
				lOff, cOff, _ := dsDecodeCensus(t, p, frSteps, append(slices.Clone(base), lever+"=0")...)
				lOn, cOn, _ := dsDecodeCensus(t, p, frSteps, append(slices.Clone(base), lever+"=1")...)
				for i := range lOff {
					if bad := frDiff(t, fmt.Sprintf("step %d logits", i), lOn[i], lOff[i]); bad != 0 {
						t.Errorf("step %d: %d of %d logits differ between %s=1 and =0", i, bad, len(lOff[i]), lever)
					}
				}
				kernel, vk := m.kernel, m.vKr
				if slices.Contains(v, "MINFER_MMVQ_REPACK=0") {
					kernel, vk = kernel[:len(kernel)-1], "minfer_mmvq_"+vk[len("minfer_mmvqr_"):]
				}
				total := func(c map[string]int64) (n int64) {
					for _, x := range c {
						n += x
					}
					return n
				}
				want := int64(m.mixed * frSteps)
				tOff, tOn := total(cOff), total(cOn)
				t.Logf("decode launches over %d steps: off %d, on %d (saved %d, want %d); %s on %d, off %d; %s off %d, on %d; %s off %d, on %d",
					frSteps, tOff, tOn, tOff-tOn, 2*want, kernel, cOn[kernel], cOff[kernel], m.qkKernel, cOff[m.qkKernel], cOn[m.qkKernel],
					vk, cOff[vk], cOn[vk])
				if cOn[kernel] != want || cOff[kernel] != 0 {
					t.Errorf("%s: on %d (want %d x %d steps = %d), off %d (want 0)", kernel, cOn[kernel], m.mixed, frSteps, want, cOff[kernel])
				}
				if xs, names := rpMatching(cOn, "minfer_mmvq_xqkv_*"); xs != cOn[kernel] {
					t.Errorf("lever on: mixed kernels %v, want only %s", names, kernel)
				}
				if cOff[m.qkKernel]-cOn[m.qkKernel] != 2*want || cOff[vk]-cOn[vk] != want {
					t.Errorf("%s dropped by %d (want %d), %s by %d (want %d)", m.qkKernel, cOff[m.qkKernel]-cOn[m.qkKernel], 2*want,
						vk, cOff[vk]-cOn[vk], want)
				}
				if tOff-tOn != 2*want {
					t.Errorf("decode launches dropped by %d, want 2 x %d mixed layers x %d steps = %d", tOff-tOn, m.mixed, frSteps, 2*want)
				}
			})
		}
	}
}
