package cuda

import (
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
)

// TestAttnFamily_SwitchOffLeversWinOverVersionLevers (host): every
// combination of the four attention levers at a decode and a prefill size.
// MINFER_NO_SPLITK_ATTN=1 / MINFER_NO_FA_PREFILL=1 give the plain kernel
// whatever the v2 levers say (with v2 first, as before this test, the two
// switch-off levers did nothing once v2 was on by default); sizes between
// the decode and the prefill ranges always take the plain kernel.
func TestAttnFamily_SwitchOffLeversWinOverVersionLevers(t *testing.T) {
	for _, noSplit := range []bool{false, true} {
		for _, v2 := range []bool{false, true} {
			lv := levers.Config{NoSplitKAttn: noSplit, AttnDecodeV2: v2, NoFAPrefill: noSplit, FAPrefillV2: v2}
			wantDec, wantPre := attnDecode1, attnPrefill1
			if v2 {
				wantDec, wantPre = attnDecode2, attnPrefill2
			}
			if noSplit {
				wantDec, wantPre = attnPlain, attnPlain
			}
			if got := attnFamily(1, lv); got != wantDec {
				t.Errorf("nt 1, %+v: %s, want %s", lv, got, wantDec)
			}
			if got := attnFamily(AttnDecodeMaxNT, lv); got != wantDec {
				t.Errorf("nt %d, %+v: %s, want %s", AttnDecodeMaxNT, lv, got, wantDec)
			}
			if got := attnFamily(512, lv); got != wantPre {
				t.Errorf("nt 512, %+v: %s, want %s", lv, got, wantPre)
			}
			for nt := AttnDecodeMaxNT + 1; nt < AttnPrefillMinNT; nt++ {
				if got := attnFamily(nt, lv); got != attnPlain {
					t.Errorf("nt %d, %+v: %s, want the plain kernel", nt, lv, got)
				}
			}
		}
	}
	// The registry's defaults: v2 for both.
	def, err := levers.Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if attnFamily(1, def) != attnDecode2 || attnFamily(512, def) != attnPrefill2 {
		t.Errorf("defaults: decode %s, prefill %s; want decode2 and prefill2", attnFamily(1, def), attnFamily(512, def))
	}
}
