package cuda

// The device test of MINFER_FUSE_NORM_MMVQ (mmvq_norm.go,
// kernels/mmvq_znorm.cu); it skips with a message when no device answers.
// The host tests are in mmvq_norm_test.go.

import (
	"slices"
	"testing"

	"github.com/minfer-go/minfer/engine/synth"
)

// TestFuseNormMMVQDevice_LogitsBitwiseAndTwoLaunchesFewer: synthetic
// qwen2-tiny Q8_0 (repacked Q8_0) and Q4_K_M, qwen2-0.5b Q4_K_M (Q5_0, the
// Q5_0 / repacked Q8_0 pair), prefill then 6 decode steps, CUDA graphs on
// and off, the q/k/v matvec with and without the rope/store folded in
// (MINFER_FUSE_QKV_ROPE): MINFER_FUSE_NORM_MMVQ=1 gives bitwise the logits
// of =0 at every step. Census of the decode steps: minfer_mmvqn* runs only
// with the lever on, twice a layer a step (q/k/v, gate/up);
// minfer_rms_norm_q8_1 drops by exactly that (what stays is at most the
// output norm before the lm head, once a step), and so do all launches.
// The lever's Requires, the fusions it reads and the one-warp MMVQ path
// are pinned in both arms (an A/B's arm B may set any of them).
func TestFuseNormMMVQDevice_LogitsBitwiseAndTwoLaunchesFewer(t *testing.T) {
	dsNeedDevice(t)
	models := []dsModel{{"qwen2-tiny", "Q8_0"}, {"qwen2-tiny", "Q4_K_M"}, {"qwen2-0.5b", "Q4_K_M"}}
	for _, rope := range []string{"0", "1"} {
		t.Run("qkv_rope="+rope, func(t *testing.T) {
			pin := slices.Concat([]string{"MINFER_FUSE_NORM_Q8=1", "MINFER_NO_FUSE_QKV=0", "MINFER_NO_FUSE_FFN=0",
				"MINFER_FUSE_QKV_ROPE=" + rope}, dsOneWarpDecode)
			dsLeverDecodeOn(t, "MINFER_FUSE_NORM_MMVQ", models, pin, func(t *testing.T, _ dsModel, sh synth.Shape, _ string, cOff, cOn map[string]int64, _ *Backend) {
				on, names := rpMatching(cOn, "minfer_mmvqn*")
				off, _ := rpMatching(cOff, "minfer_mmvqn*")
				rmsOff, rmsOn := cOff[normQ8Kernel], cOn[normQ8Kernel]
				total := func(c map[string]int64) (n int64) {
					for _, x := range c {
						n += x
					}
					return n
				}
				tOff, tOn := total(cOff), total(cOn)
				want := int64(2 * sh.NLayer * frSteps)
				t.Logf("decode launches over %d steps: minfer_mmvqn* on %d %v, off %d (want %d); %s off %d, on %d; all off %d, on %d",
					frSteps, on, names, off, want, normQ8Kernel, rmsOff, rmsOn, tOff, tOn)
				if on != want || off != 0 {
					t.Errorf("minfer_mmvqn* on %d (want 2 x %d layers x %d steps = %d), off %d (want 0)", on, sh.NLayer, frSteps, want, off)
				}
				if rmsOff-rmsOn != want || rmsOn > int64(frSteps) {
					t.Errorf("%s dropped by %d (want %d), %d left (want at most the output norm, %d)", normQ8Kernel, rmsOff-rmsOn, want, rmsOn, frSteps)
				}
				if tOff-tOn != want {
					t.Errorf("decode launches dropped by %d, want %d", tOff-tOn, want)
				}
			})
		})
	}
}
