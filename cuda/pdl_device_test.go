package cuda

import "testing"

// TestPDL_DecodeAndPrefillBitwiseEqualPlainLaunches: programmatic dependent
// launch changes when a kernel may be scheduled, never what it computes (each
// kernel waits in MINFER_KERNEL_ENTRY for its predecessor): logits with PDL
// on are bitwise those with MINFER_PDL=0, through prefill, direct decode
// steps and graph replays, and the PDL arm's launches carried the attribute.
func TestPDL_DecodeAndPrefillBitwiseEqualPlainLaunches(t *testing.T) {
	dsNeedDevice(t)
	for _, typ := range []string{"Q8_0", "Q4_K_M"} {
		path := dsSynth(t, "qwen2-tiny", typ)
		plainE := dsEngine(t, path, "cuda", 128, "MINFER_PDL=0")
		plain := dsSteps(t, plainE, 8)
		e := dsEngine(t, path, "cuda", 128, "MINFER_PDL=1")
		pdl := dsSteps(t, e, 8)
		dsBitwise(t, typ+": PDL vs plain launches", pdl, plain)
		b, bp := dsDeviceBackend(t, e), dsDeviceBackend(t, plainE)
		st := b.CaptureStats()
		t.Logf("%s: PDL launches %d (plain arm %d), capture stats %+v", typ, b.Kernels().PDLLaunches(), bp.Kernels().PDLLaunches(), st)
		if b.Kernels().PDLLaunches() == 0 || bp.Kernels().PDLLaunches() != 0 {
			t.Errorf("%s: PDL launches %d with PDL on, %d with MINFER_PDL=0: want > 0 and 0", typ, b.Kernels().PDLLaunches(), bp.Kernels().PDLLaunches())
		}
		if st.Replays < 3 {
			t.Errorf("%s: %d replays: want the decode graph (with PDL edges) replayed", typ, st.Replays)
		}
	}
}
