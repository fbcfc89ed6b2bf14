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
				if got := attnFamily(nt, nt, lv, kv.F16); got != wantDec {
					t.Errorf("nt %d, %+v: %s, want %s", nt, lv, got, wantDec)
				}
			}
			if got := attnFamily(512, 512, lv, kv.F16); got != wantPre {
				t.Errorf("nt 512, %+v: %s, want %s", lv, got, wantPre)
			}
			for nt := AttnDecodeMaxNT + 1; nt < AttnPrefillMinNT; nt++ {
				if got := attnFamily(nt, nt, lv, kv.F16); got != attnPlain {
					t.Errorf("nt %d, %+v: %s, want the plain kernel", nt, lv, got)
				}
			}
		}
	}
	def, err := levers.Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if attnFamily(1, 1, def, kv.F16) != attnDecode2 || attnFamily(512, 512, def, kv.F16) != attnPrefillTC {
		t.Errorf("defaults: decode %s, prefill %s; want decode2 and prefilltc (MINFER_FA_PREFILL_TC on by default)", attnFamily(1, 1, def, kv.F16), attnFamily(512, 512, def, kv.F16))
	}
}

// TestAttnFamily_DecodeRoutesByKVLengthFromTheThreshold (host): with
// MINFER_ATTN_DECODE_TC=1 a decode attention (nt 1..8) over an f16 cache
// takes the tensor cores when its window reads at least
// MINFER_ATTN_DECODE_TC_FROM cells (default 12288), the lean kernels below;
// FROM=0 takes them at every length, the lever off never; an f32 or q8_0
// cache stays lean at every length; prefill takes its family whatever the
// length.
func TestAttnFamily_DecodeRoutesByKVLengthFromTheThreshold(t *testing.T) {
	parse := func(env ...string) levers.Config {
		t.Helper()
		lv, err := levers.Parse(env)
		if err != nil {
			t.Fatal(err)
		}
		return lv
	}
	route := parse("MINFER_ATTN_DECODE_TC=1")
	if route.AttnDecodeTCFrom != 12288 {
		t.Fatalf("default MINFER_ATTN_DECODE_TC_FROM %d, want 12288", route.AttnDecodeTCFrom)
	}
	always := parse("MINFER_ATTN_DECODE_TC=1", "MINFER_ATTN_DECODE_TC_FROM=0")
	off := parse("MINFER_ATTN_DECODE_TC=0", "MINFER_ATTN_DECODE_TC_FROM=0")
	for _, nt := range []int{1, 2, AttnDecodeMaxNT} {
		for _, c := range []struct {
			kvLen int
			lv    levers.Config
			f     kv.Format
			want  string
		}{
			{nt, route, kv.F16, attnDecode2}, {8192, route, kv.F16, attnDecode2}, {12287, route, kv.F16, attnDecode2},
			{12288, route, kv.F16, attnDecodeTC}, {12289, route, kv.F16, attnDecodeTC}, {32768, route, kv.F16, attnDecodeTC},
			{0, always, kv.F16, attnDecodeTC}, {nt, always, kv.F16, attnDecodeTC}, {32768, always, kv.F16, attnDecodeTC},
			{nt, off, kv.F16, attnDecode2}, {32768, off, kv.F16, attnDecode2},
			{32768, route, kv.F32, attnDecode2}, {32768, route, kv.Q8_0, attnDecode2},
			{nt, always, kv.F32, attnDecode2}, {32768, always, kv.Q8_0, attnDecode2},
		} {
			if got := attnFamily(nt, c.kvLen, c.lv, c.f); got != c.want {
				t.Errorf("nt %d kv_len %d %s cache, TC %v from %d: %s, want %s", nt, c.kvLen, c.f, c.lv.AttnDecodeTC, c.lv.AttnDecodeTCFrom, got, c.want)
			}
		}
	}
	for _, kvLen := range []int{0, 64, 8192, 32768} {
		for _, lv := range []levers.Config{route, always, off} {
			for _, nt := range []int{AttnPrefillMinNT, 512} {
				if got := attnFamily(nt, kvLen, lv, kv.F16); got != attnPrefillTC {
					t.Errorf("prefill of %d at kv_len %d: %s, want %s", nt, kvLen, got, attnPrefillTC)
				}
			}
		}
	}
	if lv := parse("MINFER_ATTN_DECODE_TC=1", "MINFER_ATTN_DECODE_TC_FROM=48"); attnFamily(1, 47, lv, kv.F16) != attnDecode2 || attnFamily(1, 48, lv, kv.F16) != attnDecodeTC {
		t.Errorf("FROM=48: kv_len 47 %s, 48 %s; want lean then the tensor cores", attnFamily(1, 47, lv, kv.F16), attnFamily(1, 48, lv, kv.F16))
	}
}

// TestAttnDecodeFamilies_BothWhereTheThresholdFallsInsideTheContext
// (host): the decode families a context can take as it fills, whose
// scratch attnRoute and the memory plan hold: both where FROM lies in
// (1, n_ctx], the tensor cores alone from FROM=0 (or 1), the lean kernels
// alone past the context, with the lever off or over an f32 cache, and
// neither with the plain kernel.
func TestAttnDecodeFamilies_BothWhereTheThresholdFallsInsideTheContext(t *testing.T) {
	for _, c := range []struct {
		env      []string
		f        kv.Format
		lean, tc bool
	}{
		{[]string{"MINFER_ATTN_DECODE_TC=1"}, kv.F16, true, true},
		{[]string{"MINFER_ATTN_DECODE_TC=1", "MINFER_ATTN_DECODE_TC_FROM=32768"}, kv.F16, true, true},
		{[]string{"MINFER_ATTN_DECODE_TC=1", "MINFER_ATTN_DECODE_TC_FROM=0"}, kv.F16, false, true},
		{[]string{"MINFER_ATTN_DECODE_TC=1", "MINFER_ATTN_DECODE_TC_FROM=1"}, kv.F16, false, true},
		{[]string{"MINFER_ATTN_DECODE_TC=1", "MINFER_ATTN_DECODE_TC_FROM=32769"}, kv.F16, true, false},
		{[]string{"MINFER_ATTN_DECODE_TC=1"}, kv.F32, true, false},
		{nil, kv.F16, true, false},
		{[]string{"MINFER_NO_SPLITK_ATTN=1"}, kv.F16, false, false},
	} {
		lv, err := levers.Parse(c.env)
		if err != nil {
			t.Fatal(err)
		}
		if lean, tc := attnDecodeFamilies(1, 32768, lv, c.f); lean != c.lean || tc != c.tc {
			t.Errorf("%v over %s at 32768 cells: lean %v tc %v, want %v %v", c.env, c.f, lean, tc, c.lean, c.tc)
		}
	}
}
