package cuda

import (
	"fmt"
	"slices"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
)

// TestMMQWideLoadsDevice_ModelBitwiseAndCensus: MINFER_MMQ_WIDE_LOADS=1
// gives bitwise the logits of =0 over prefill (MMQ), a 5-token forward and
// decode, on qwen2-tiny Q4_K and qwen3-tiny Q5_K_M. With it on, the
// census names the 16-byte-load kernel of the type and no plain MMQ kernel
// of it; off, none of the wide ones. Both arms pin the lever's Requires (an
// A/B's arm B may set any of them).
func TestMMQWideLoadsDevice_ModelBitwiseAndCensus(t *testing.T) {
	dsNeedDevice(t)
	l, _ := levers.Lookup("MINFER_MMQ_WIDE_LOADS")
	for _, m := range []struct{ shape, typ, sfx string }{{"qwen2-tiny", "Q4_K", "q4_k"}, {"qwen3-tiny", "Q5_K_M", "q5_k"}} {
		t.Run(m.shape+"/"+m.typ, func(t *testing.T) {
			path := dsSynth(t, m.shape, m.typ)
			gOff, cOff, _ := ocForwards(t, path, append(slices.Clone(l.Requires), "MINFER_MMQ_WIDE_LOADS=0")...)
			gOn, cOn, _ := ocForwards(t, path, append(slices.Clone(l.Requires), "MINFER_MMQ_WIDE_LOADS=1")...)
			for i := range gOff {
				if bad := rpDiff(t, fmt.Sprintf("forward %d logits (wide loads)", i), gOn[i], gOff[i]); bad != 0 {
					t.Errorf("forward %d: %d of %d logits differ between MINFER_MMQ_WIDE_LOADS=1 and =0", i, bad, len(gOff[i]))
				}
			}
			wide := "minfer_mmq_" + m.sfx + "w*"
			if n, _ := rpMatching(cOn, wide); n == 0 {
				t.Errorf("wide loads: no %s launch (census %v)", wide, cOn)
			}
			for _, plain := range []string{"minfer_mmq_" + m.sfx, "minfer_mmq_" + m.sfx + "_r64"} {
				if n, _ := rpMatching(cOn, plain); n != 0 {
					t.Errorf("wide loads: %s launched %d times", plain, n)
				}
			}
			if n, names := rpMatching(cOff, wide); n != 0 {
				t.Errorf("lever off: %v launched", names)
			}
		})
	}
}
