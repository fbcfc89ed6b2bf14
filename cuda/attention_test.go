package cuda

import (
	"testing"

	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
)

// TestAttnFamily_KillSwitchesGiveThePlainKernel (host): at decode and
// prefill sizes the split-K and tiled kernels run unless
// MINFER_NO_SPLITK_ATTN=1 / MINFER_NO_FA_PREFILL=1 send them to the plain
// kernel; sizes between the decode and the prefill ranges always take the
// plain kernel.
func TestAttnFamily_KillSwitchesGiveThePlainKernel(t *testing.T) {
	for _, noDec := range []bool{false, true} {
		for _, noPre := range []bool{false, true} {
			lv := levers.Config{NoSplitKAttn: noDec, NoFAPrefill: noPre}
			wantDec, wantPre := attnDecode2, attnPrefill2
			if noDec {
				wantDec = attnPlain
			}
			if noPre {
				wantPre = attnPlain
			}
			for _, nt := range []int{1, AttnDecodeMaxNT} {
				if got := attnFamily(nt, lv, kv.F16); got != wantDec {
					t.Errorf("nt %d, %+v: %s, want %s", nt, lv, got, wantDec)
				}
			}
			if got := attnFamily(512, lv, kv.F16); got != wantPre {
				t.Errorf("nt 512, %+v: %s, want %s", lv, got, wantPre)
			}
			for nt := AttnDecodeMaxNT + 1; nt < AttnPrefillMinNT; nt++ {
				if got := attnFamily(nt, lv, kv.F16); got != attnPlain {
					t.Errorf("nt %d, %+v: %s, want the plain kernel", nt, lv, got)
				}
			}
		}
	}
	def, err := levers.Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if attnFamily(1, def, kv.F16) != attnDecode2 || attnFamily(512, def, kv.F16) != attnPrefillTC {
		t.Errorf("defaults: decode %s, prefill %s; want decode2 and prefilltc (MINFER_FA_PREFILL_TC on by default)", attnFamily(1, def, kv.F16), attnFamily(512, def, kv.F16))
	}
}
