package cuda

import (
	"fmt"
	"slices"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
)

// ocForwards runs a 24-token prompt, a 5-token forward (the 2..8 token
// path) and 6 decode steps on a fresh engine with the census on, and
// returns every forward's logits, the launches of the whole run and the
// backend. prefill: the prompt is one forward (a prefill matmul shape);
// else three forwards of 8 tokens (the 2..8 token path only).
func ocForwards(t *testing.T, path string, prefill bool, extra ...string) ([][]float32, map[string]int64, *Backend) {
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
		if prefill {
			step(prompt)
		} else {
			for i := 0; i < len(prompt); i += 8 {
				step(prompt[i : i+8])
			}
		}
		step([]int32{300, 301, 302, 303, 304})
		for i := range 6 {
			step([]int32{int32(100 + 7*i)})
		}
	})
	return out, census, b
}

// TestOneCopyDevice_ModelBitwiseOneCopyAndCensus: MINFER_ONE_COPY=1 gives
// bitwise the logits of =0 on qwen2-tiny Q8_0 (tied: the gather reads the
// copy) and qwen3-tiny Q4_K_M (Q6_K matrices, untied). The Q6_K model runs
// a prefill (the int8 MMQ: minfer_mmq_q6_kr over the one copy), the Q8_0
// model its prompt in 8-token forwards: a Q8_0 prefill over the one copy
// runs the f16 GEMM, and over the GGUF bytes the int8 MMQ, which are not
// bitwise (TestGemm16Device_MatchesTheF16GEMMWithin2e3AndCensus bounds the
// GEMM). Then a 5-token forward (mmvq_nt) and decode. With the lever on the
// census names the repacked MMQ (Q6_K), mmvq_nt and (tied) gather kernels
// and no GGUF kernel of those types, and a Q8_0 prefill of the one copy
// names minfer_gemm16_q8_0r and no int8 MMQ; the derived class is empty and
// the device holds the matrices once (weights + derived on = weights off).
func TestOneCopyDevice_ModelBitwiseOneCopyAndCensus(t *testing.T) {
	dsNeedDevice(t)
	for _, m := range []struct {
		shape, typ, sfx string
		tied, prefill   bool
	}{{"qwen2-tiny", "Q8_0", "q8_0", true, false}, {"qwen3-tiny", "Q4_K_M", "q6_k", false, true}} {
		t.Run(m.shape+"/"+m.typ, func(t *testing.T) {
			path := dsSynth(t, m.shape, m.typ)
			// Both arms pin the lever's Requires (an A/B's arm B, the suite
			// gate's settings, may set any of them), and the int8 MMQ of
			// Q6_K: the f16 GEMM of MINFER_MMQ_F16_KQ takes its prefill.
			l, _ := levers.Lookup("MINFER_ONE_COPY")
			pin := append(slices.Clone(l.Requires), "MINFER_MMQ_F16_KQ=0")
			gOff, cOff, bOff := ocForwards(t, path, m.prefill, append(slices.Clone(pin), "MINFER_ONE_COPY=0")...)
			gOn, cOn, bOn := ocForwards(t, path, m.prefill, append(slices.Clone(pin), "MINFER_ONE_COPY=1")...)
			for i := range gOff {
				if bad := rpDiff(t, fmt.Sprintf("forward %d logits (one copy)", i), gOn[i], gOff[i]); bad != 0 {
					t.Errorf("forward %d: %d of %d logits differ between MINFER_ONE_COPY=1 and =0", i, bad, len(gOff[i]))
				}
			}
			want := []string{"minfer_mmvq_nt_" + m.sfx + "r", "minfer_mmvqr_*"}
			gone := []string{"minfer_mmq_" + m.sfx, "minfer_mmq_" + m.sfx + "_r64", "minfer_mmvq_nt_" + m.sfx}
			if m.prefill {
				want = append(want, "minfer_mmq_"+m.sfx+"r*")
			}
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
			if !m.prefill {
				// The one copy's prefill: the f16 GEMM, no int8 MMQ of the type.
				_, cPre, _ := ocForwards(t, path, true, append(slices.Clone(pin), "MINFER_ONE_COPY=1")...)
				if n, _ := rpMatching(cPre, gemm16Kernel); n == 0 {
					t.Errorf("one copy, prefill: no %s launch (census %v)", gemm16Kernel, cPre)
				}
				if n, names := rpMatching(cPre, "minfer_mmq_"+m.sfx+"*"); n != 0 {
					t.Errorf("one copy, prefill: int8 MMQ %v launched", names)
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
