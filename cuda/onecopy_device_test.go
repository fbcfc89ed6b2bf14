package cuda

import (
	"fmt"
	"slices"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
)

// ocForwards runs a 24-token prefill (MMQ), a 5-token forward (the 2..8
// token path) and 6 decode steps on a fresh engine with the census on, and
// returns every forward's logits, the launches of the whole run and the
// backend.
func ocForwards(t *testing.T, path string, extra ...string) ([][]float32, map[string]int64, *Backend) {
	t.Helper()
	e := dsEngine(t, path, "cuda", 256, append([]string{"MINFER_LAUNCH_CENSUS=1"}, extra...)...)
	b := dsDeviceBackend(t, e)
	var out [][]float32
	census := mfCensusDelta(b, func() {
		step := func(ids []int32) {
			l, err := e.Forward(ids, false)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		prompt := make([]int32, 24)
		for i := range prompt {
			prompt[i] = int32(10 + 13*i)
		}
		step(prompt)
		step([]int32{300, 301, 302, 303, 304})
		for i := range 6 {
			step([]int32{int32(100 + 7*i)})
		}
	})
	return out, census, b
}

// TestOneCopyDevice_ModelBitwiseOneCopyAndCensus: MINFER_ONE_COPY=1 gives
// bitwise the logits of =0 over prefill (MMQ), a 5-token forward (mmvq_nt)
// and decode, on qwen2-tiny Q8_0 (tied: the gather reads the copy) and
// qwen3-tiny Q4_K_M (Q6_K matrices, untied). With it on the census names
// the repacked MMQ, mmvq_nt and (tied) gather kernels and no GGUF kernel of
// those types; the derived class is empty and the device holds the matrices
// once (weights + derived on = weights off).
func TestOneCopyDevice_ModelBitwiseOneCopyAndCensus(t *testing.T) {
	dsNeedDevice(t)
	for _, m := range []struct {
		shape, typ, sfx string
		tied            bool
	}{{"qwen2-tiny", "Q8_0", "q8_0", true}, {"qwen3-tiny", "Q4_K_M", "q6_k", false}} {
		t.Run(m.shape+"/"+m.typ, func(t *testing.T) {
			path := dsSynth(t, m.shape, m.typ)
			// Both arms pin the lever's Requires (an A/B's arm B, the suite
			// gate's settings, may set any of them), and the int8 MMQ: the f16
			// GEMMs (MINFER_MMQ_F16, _KQ) take the prefill matmuls.
			l, _ := levers.Lookup("MINFER_ONE_COPY")
			pin := append(slices.Clone(l.Requires), "MINFER_MMQ_F16=0", "MINFER_MMQ_F16_KQ=0")
			gOff, cOff, bOff := ocForwards(t, path, append(slices.Clone(pin), "MINFER_ONE_COPY=0")...)
			gOn, cOn, bOn := ocForwards(t, path, append(slices.Clone(pin), "MINFER_ONE_COPY=1")...)
			for i := range gOff {
				if bad := rpDiff(t, fmt.Sprintf("forward %d logits (one copy)", i), gOn[i], gOff[i]); bad != 0 {
					t.Errorf("forward %d: %d of %d logits differ between MINFER_ONE_COPY=1 and =0", i, bad, len(gOff[i]))
				}
			}
			want := []string{"minfer_mmq_" + m.sfx + "r*", "minfer_mmvq_nt_" + m.sfx + "r", "minfer_mmvqr_*"}
			gone := []string{"minfer_mmq_" + m.sfx, "minfer_mmq_" + m.sfx + "_r64", "minfer_mmvq_nt_" + m.sfx}
			if m.tied {
				want = append(want, "minfer_get_rows_r")
			}
			for _, p := range want {
				if n, _ := rpMatching(cOn, p); n == 0 {
					t.Errorf("one copy: no %s launch (census %v)", p, cOn)
				}
				if n, names := rpMatching(cOff, p); n != 0 && p != "minfer_mmvqr_*" {
					t.Errorf("two copies: %s launched %v", p, names)
				}
			}
			for _, p := range gone {
				if n, _ := rpMatching(cOn, p); n != 0 {
					t.Errorf("one copy: %s launched %d times over the GGUF bytes it does not have", p, n)
				}
			}
			mOn, err1 := bOn.DeviceMemory()
			mOff, err2 := bOff.DeviceMemory()
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			t.Logf("weights off %d + derived %d; on %d + derived %d", mOff.Weights, mOff.Derived, mOn.Weights, mOn.Derived)
			if mOn.Derived != 0 || mOff.Derived == 0 || mOn.Weights != mOff.Weights {
				t.Errorf("derived on %d (want 0), off %d (want > 0); weights on %d, off %d (want equal: the copy replaces the GGUF bytes)",
					mOn.Derived, mOff.Derived, mOn.Weights, mOff.Weights)
			}
		})
	}
}
