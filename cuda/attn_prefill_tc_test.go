package cuda

// Tests of the tensor-core prefill attention (MINFER_FA_PREFILL_TC:
// AttentionPrefillTC, fatc:: in kernels/attn_prefill2.cu). The device test
// uses the cases and helpers of attn_prefill_device_test.go and skips with
// a message when no device answers.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
)

// TestAttnPrefillTCDevice_EveryKVFormatMatchesCPUWithinF16Bar: the
// tensor-core kernel against engine/cpu's attention on every KV format and
// every fapCases shape (nt 9..4096, hd 48/64/80/128, GQA 1..8, windows,
// starts 0..near n_ctx): NaN rows where the CPU has them, the others within
// 1e-2 (Q, K, V and P rounded to f16: ~5e-4 relative per value, summed over
// up to thousands of cells); the census shows the tensor-core kernel ran and
// neither FMA kernel did.
func TestAttnPrefillTCDevice_EveryKVFormatMatchesCPUWithinF16Bar(t *testing.T) {
	attnPrefillTCSweep(t, false)
}

// TestAttnPrefillTCDevice_LeanFormMatchesCPUWithinF16Bar: the same sweep
// and bar through the lean kernels (MINFER_FA_PREFILL_LEAN), and the
// census shows they ran in place of the plain tensor-core kernels.
func TestAttnPrefillTCDevice_LeanFormMatchesCPUWithinF16Bar(t *testing.T) {
	attnPrefillTCSweep(t, true)
}

func attnPrefillTCSweep(t *testing.T, lean bool) {
	dsNeedDevice(t)
	env := []string{"MINFER_FA_PREFILL_TC=1", "MINFER_FA_PREFILL_LEAN=0"}
	if lean {
		env[1] = "MINFER_FA_PREFILL_LEAN=1"
	}
	fapSweep(t, 75, env, func(t *testing.T, dev *Backend, c fapCase, w fapWorst) {
		kname, other := attnPrefillTCName(attnPrefillHD(c.hd), lean), attnPrefillTCName(attnPrefillHD(c.hd), !lean)
		t.Logf("%s: %s", kname, w)
		if w.nanMismatch > 0 || w.diff > 1e-2 {
			t.Errorf("%d NaN placements differ; %s > 1e-2", w.nanMismatch, w)
		}
		census := dev.Kernels().Census()
		v2 := 0
		for _, v := range attnPrefill2Variants {
			v2 += int(census[attnPrefill2Name(v[0], v[1])])
		}
		if census[kname] < 1 || census[other] != 0 || v2 != 0 || census["minfer_attn_f32"] != 0 {
			t.Errorf("census: %s ran %d times, %s %d, the FMA kernels %d and %d (want >= 1, 0, 0, 0)", kname, census[kname], other,
				census[other], v2, census["minfer_attn_f32"])
		}
	})
}

// The lever (on by default) routes prefill attention (nt >= 9) to the
// tensor-core kernels, off to the FMA tiles; MINFER_NO_FA_PREFILL still
// wins (the plain kernel); decode is untouched.
func TestAttnFamily_TensorCoreLeverRoutesPrefillOnly(t *testing.T) {
	on := levers.Default()
	fma := on
	fma.FAPrefillTC = false
	off := on
	off.NoFAPrefill = true
	for _, c := range []struct {
		nt   int
		lv   levers.Config
		want string
	}{
		{AttnPrefillMinNT, on, attnPrefillTC}, {512, on, attnPrefillTC}, {1, on, attnDecode2},
		{512, fma, attnPrefill2}, {AttnPrefillMinNT, fma, attnPrefill2}, {512, off, attnPlain},
	} {
		if got := attnFamily(c.nt, c.lv); got != c.want {
			t.Errorf("nt %d, FAPrefillTC %v NoFAPrefill %v: %s, want %s", c.nt, c.lv.FAPrefillTC, c.lv.NoFAPrefill, got, c.want)
		}
	}
}

// The launcher's geometry is the kernel's: 64 rows and 128 threads per
// block, the shared-memory layout of fatc::Geo (pinned bytes, within the
// H200's 227 KiB opt-in), the f16 mma.sync, ldmatrix and cp.async
// (cpasync.cuh) it issues, and both kernels defined in the source.
func TestAttnPrefillTCGeometry_MatchesKernelSource(t *testing.T) {
	src, err := os.ReadFile("kernels/attn_prefill2.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		fmt.Sprintf(`constexpr int BM = %d, BN = %d, NT = %d;`, attnPrefillTCRows, attnPrefill2BN, attnPrefillTCThreads),
		`KLD = HD \+ 8;`, `TILE = BN \* KLD;`, `BYTES = 2 \* 2 \* TILE \* 2;`, `minfer_cp_async16\(`, `#include "cpasync.cuh"`,
		`mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32`, `ldmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared\.b16`,
		`minfer_attn_prefill_tc_hd64\(MINFER_PREFILL_ATTN_PARAMS, float\* part, int nsplit\)`,
		`minfer_attn_prefill_tc_hd128\(MINFER_PREFILL_ATTN_PARAMS, float\* part, int nsplit\)`, `minfer_attn_prefill_tc_combine\(`,
		`minfer_attn_prefill_tcl_hd64\(MINFER_PREFILL_ATTN_PARAMS, float\* part, int nsplit\)`,
		`minfer_attn_prefill_tcl_hd128\(MINFER_PREFILL_ATTN_PARAMS, float\* part, int nsplit\)`,
		`ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16`, `ex2\.approx\.ftz\.f32`,
		fmt.Sprintf(`__launch_bounds__\(%d\)\s+minfer_attn_decode_tc_hd128\(MINFER_PREFILL_ATTN_PARAMS, float\* part, int nsplit\)`, attnDecodeTCThreads),
		fmt.Sprintf(`attn_prefill_tc<128, true, %d>`, attnDecodeTCRows), `constexpr int THR = 2 \* ROWS;`,
	} {
		if !regexp.MustCompile(re).Match(src) {
			t.Errorf("kernels/attn_prefill2.cu has no %q", re)
		}
	}
	if hdr, err := os.ReadFile("kernels/cpasync.cuh"); err != nil || !regexp.MustCompile(`cp\.async\.cg\.shared\.global \[%0\], \[%1\], 16, %2;`).Match(hdr) {
		t.Errorf("kernels/cpasync.cuh does not issue cp.async.cg of 16 bytes (%v)", err)
	}
	for hd, want := range map[int]int{64: 36864, 128: 69632} {
		if got := attnPrefillTCSmem(hd); got != want || got > 227<<10 {
			t.Errorf("hd %d: %d bytes of shared memory, want %d", hd, got, want)
		}
	}
}

// The tensor-core kernel splits a block's KV range only where its tiles
// leave the H200's 264 resident blocks (132 SMs x 2) short of two waves,
// and the one scratch a backend allocates holds the partials of every
// shape that splits.
func TestAttnPrefillTCSplits_FillTwoWavesWithinTheScratchBound(t *testing.T) {
	const sms = 132
	for _, c := range []struct {
		nt, nh, nkv, hd, want int
	}{
		{512, 28, 4, 128, 3},  // 7B pp512: 224 tiles
		{512, 14, 2, 64, 5},   // qwen2-0.5b pp512: 112
		{4096, 28, 4, 128, 1}, // 1,792 tiles fill the waves alone
		{9, 28, 4, 128, 8},    // 4 tiles: the cap
	} {
		p := AttnParams{NT: c.nt, NHead: c.nh, NHeadKV: c.nkv, HeadDim: c.hd}
		if got := attnPrefillTCSplits(p, sms); got != c.want {
			t.Errorf("nt %d heads %d/%d: %d splits, want %d", c.nt, c.nh, c.nkv, got, c.want)
		}
	}
	for _, h := range [][3]int{{28, 4, 128}, {14, 2, 64}, {16, 8, 128}, {32, 32, 128}, {12, 2, 80}} {
		for nt := 1; nt <= 4096; nt++ {
			p := AttnParams{NT: nt, NHead: h[0], NHeadKV: h[1], HeadDim: h[2]}
			ns := attnPrefillTCSplits(p, sms)
			need := ns * h[1] * nt * (h[0] / h[1]) * (attnPrefillHD(h[2]) + 2) * 4
			if ns > 1 && need > AttnPrefillTCScratchBytes(h[2], sms) {
				t.Fatalf("nt %d heads %d/%d hd %d: %d splits need %d bytes, the scratch holds %d", nt, h[0], h[1], h[2], ns, need,
					AttnPrefillTCScratchBytes(h[2], sms))
			}
		}
	}
}

// MINFER_FA_PREFILL_LEAN=1 beside the FMA tiles or the plain kernel is
// refused by name before the device opens (it would switch nothing); the
// device tests' levers drop it for a test that leaves the tensor cores (an
// A/B's suite gate under arm B) and keep it otherwise; the launcher names
// the lean kernels only with the lever.
func TestFAPrefillLean_RefusedWhereTheTensorCoresDoNotRun(t *testing.T) {
	for _, c := range []struct {
		set     []string
		refused bool
	}{
		{[]string{"MINFER_FA_PREFILL_LEAN=1"}, false},
		{[]string{"MINFER_FA_PREFILL_LEAN=1", "MINFER_FA_PREFILL_TC=0"}, true},
		{[]string{"MINFER_FA_PREFILL_LEAN=1", "MINFER_NO_FA_PREFILL=1"}, true},
		{[]string{"MINFER_FA_PREFILL_TC=0"}, false},
	} {
		lv, err := levers.Parse(c.set)
		if err != nil {
			t.Fatal(err)
		}
		err = attnOptInConflict(lv, "MINFER_FA_PREFILL_LEAN")
		if (err != nil) != c.refused || err != nil && !strings.Contains(err.Error(), "MINFER_FA_PREFILL_LEAN") {
			t.Errorf("%v: %v, want refused %v naming the lever", c.set, err, c.refused)
		}
		if !c.refused {
			continue
		}
		if _, err := New(Options{Levers: lv}); err == nil || !strings.Contains(err.Error(), "MINFER_FA_PREFILL_LEAN") {
			t.Errorf("New with %v: %v, want the refusal", c.set, err)
		}
	}
	t.Setenv("MINFER_FA_PREFILL_LEAN", "1")
	if lv := dsLevers(t, "MINFER_FA_PREFILL_TC=0"); lv.FAPrefillLean || attnOptInConflict(lv, "MINFER_FA_PREFILL_LEAN") != nil {
		t.Errorf("an FMA-tile test under MINFER_FA_PREFILL_LEAN=1: lean %v, conflict %v; want it dropped", lv.FAPrefillLean, attnOptInConflict(lv, "MINFER_FA_PREFILL_LEAN"))
	}
	if lv := dsLevers(t, "MINFER_LAUNCH_CENSUS=1"); !lv.FAPrefillLean {
		t.Error("a tensor-core test under MINFER_FA_PREFILL_LEAN=1 lost the setting")
	}
	if a, b := attnPrefillTCName(128, false), attnPrefillTCName(128, true); a != "minfer_attn_prefill_tc_hd128" || b != "minfer_attn_prefill_tcl_hd128" {
		t.Errorf("kernel names %s, %s", a, b)
	}
}

// adDecodeTC is the tensor-core decode kernel (MINFER_ATTN_DECODE_TC) for
// the shared adShape helpers: its partials in the prefill kernels' scratch,
// no counters, the f16 tile bar.
var adDecodeTC = adKernel{name: "attn_decode_tc",
	scratchBytes: func(p AttnParams, f kv.Format) (int, error) { return AttnPrefillTCScratchBytes(p.HeadDim, 132), nil },
	launch: func(k *Kernels, s *driver.Stream, out, q, kr, vr driver.DevicePtr, f kv.Format, win, scr driver.DevicePtr, scrB int, p AttnParams) error {
		if err := k.PrepareAttnPrefillTC(); err != nil {
			return err
		}
		if need := AttnPrefillTCScratchBytes(p.HeadDim, k.dev.Attr.SMCount); scrB < need {
			return fmt.Errorf("the test's scratch of %d bytes is short of %d on this device", scrB, need)
		}
		return k.AttentionDecodeTC(s, out, q, kr, vr, f, win, scr, scrB, p)
	},
	counterBytes: func(AttnParams, kv.Format) uint64 { return 0 },
	bar:          1e-2}

// TestAttnDecodeTCDevice_EveryFormatShapeWindowMatchesCPUWithinF16Bar: the
// tensor-core decode kernel against engine/cpu's attention over the lean
// kernel's sweep (every KV format, head_dim 64 and 128, G 1 / 4 / 7 / 8,
// nt 1..8, windows, KV lengths 1 .. 4160: one split to all of them), within
// the prefill kernels' f16 bar; a repeated launch is bitwise equal.
func TestAttnDecodeTCDevice_EveryFormatShapeWindowMatchesCPUWithinF16Bar(t *testing.T) {
	ms := mmtOpen(t)
	r := rand.New(rand.NewPCG(81, 82))
	const nkv, nCtx = 2, 4160
	lengths := []int{1, 2, 31, 63, 64, 65, 129, 600, 1000, 2047, 4096 + 37, nCtx}
	adSweepFormats(t, ms, r, adDecodeTC, nkv, nCtx, lengths, []int{0, 100, 300})
}

// The decode kernels' splits fill one wave of the blocks an SM holds, never
// more than the context's 64-cell tiles, and every shape's partials fit the
// prefill kernels' scratch; MINFER_ATTN_DECODE_TC routes decode (nt <= 8)
// only, and is refused beside the plain or the grouped decode kernels.
func TestAttnDecodeTC_SplitsFillOneWaveAndTheLeverRoutesDecode(t *testing.T) {
	const sms = 132
	for _, c := range []struct {
		nt, nh, nkv, hd, nctx, want int
	}{
		{1, 28, 4, 128, 32768, 99}, // 7B: 3 blocks an SM x 132 / 4 KV heads
		{1, 14, 2, 64, 32768, 128}, // qwen2-0.5b: 6 an SM, the cap
		{1, 28, 4, 128, 300, 5},    // a short context: its 5 tiles
		{8, 28, 4, 128, 32768, 24}, // 56 rows: 4 row tiles a KV head
	} {
		p := AttnParams{NT: c.nt, NHead: c.nh, NHeadKV: c.nkv, HeadDim: c.hd, NCtx: c.nctx}
		if got := attnDecodeTCSplits(p, sms); got != c.want {
			t.Errorf("nt %d heads %d/%d hd %d n_ctx %d: %d splits, want %d", c.nt, c.nh, c.nkv, c.hd, c.nctx, got, c.want)
		}
	}
	for _, h := range [][3]int{{28, 4, 128}, {14, 2, 64}, {16, 8, 128}, {32, 32, 128}, {12, 2, 80}, {64, 8, 128}} {
		for nt := 1; nt <= AttnDecodeMaxNT; nt++ {
			p := AttnParams{NT: nt, NHead: h[0], NHeadKV: h[1], HeadDim: h[2], NCtx: 131072}
			ns := attnDecodeTCSplits(p, sms)
			if need := ns * h[1] * nt * (h[0] / h[1]) * (attnPrefillHD(h[2]) + 2) * 4; ns < 1 || need > AttnPrefillTCScratchBytes(h[2], sms) {
				t.Fatalf("nt %d heads %d/%d hd %d: %d splits need %d bytes, the scratch holds %d", nt, h[0], h[1], h[2], ns, need,
					AttnPrefillTCScratchBytes(h[2], sms))
			}
		}
	}
	on, err := levers.Parse([]string{"MINFER_ATTN_DECODE_TC=1"})
	if err != nil {
		t.Fatal(err)
	}
	for nt, want := range map[int]string{1: attnDecodeTC, AttnDecodeMaxNT: attnDecodeTC, AttnPrefillMinNT: attnPrefillTC} {
		if got := attnFamily(nt, on); got != want {
			t.Errorf("nt %d with the lever: %s, want %s", nt, got, want)
		}
	}
	if attnFamily(1, levers.Default()) != attnDecode2 {
		t.Error("the lever is off by default: decode must stay on minfer_attn_decode2_*")
	}
	for _, other := range []string{"MINFER_NO_SPLITK_ATTN=1", "MINFER_ATTN_DECODE_GQA=1"} {
		lv, err := levers.Parse([]string{"MINFER_ATTN_DECODE_TC=1", other})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := New(Options{Levers: lv}); err == nil || !strings.Contains(err.Error(), "MINFER_ATTN_DECODE_TC") {
			t.Errorf("New with %s: %v, want the refusal", other, err)
		}
	}
	t.Setenv("MINFER_ATTN_DECODE_TC", "1")
	if lv := dsLevers(t, "MINFER_NO_SPLITK_ATTN=1"); lv.AttnDecodeTC || attnOptInConflict(lv, "MINFER_ATTN_DECODE_TC") != nil {
		t.Errorf("a plain-kernel test under MINFER_ATTN_DECODE_TC=1: tc %v, conflict %v; want it dropped", lv.AttnDecodeTC, attnOptInConflict(lv, "MINFER_ATTN_DECODE_TC"))
	}
	if attnDecodeTCName(128) != "minfer_attn_decode_tc_hd128" {
		t.Error(attnDecodeTCName(128))
	}
}

// The tensor-core launchers refuse, by their op's name and before any
// launch, a decode call of more than 8 tokens and a split launch whose
// scratch is missing or short of its partials.
func TestAttnTCLaunchers_RefuseBadCalls(t *testing.T) {
	k := &Kernels{dev: &driver.Device{Attr: driver.Attributes{SMCount: 132}}}
	const p0 = driver.DevicePtr(0x1000)
	dec := AttnParams{NT: 1, NHead: 28, NHeadKV: 4, HeadDim: 128, NCtx: 32768}
	pre := dec
	pre.NT = 512
	need := func(p AttnParams, ns int) int { return ns * p.NHeadKV * p.NT * (p.NHead / p.NHeadKV) * (128 + 2) * 4 }
	nine := dec
	nine.NT = 9
	for _, c := range []struct {
		name, op, want string
		err            error
	}{
		{"decode, nine tokens", "attn_decode_tc", "at most 8", k.AttentionDecodeTC(nil, p0, p0, p0, p0, kv.F16, p0, p0, 1<<30, nine)},
		{"decode, no scratch", "attn_decode_tc", "99 splits need", k.AttentionDecodeTC(nil, p0, p0, p0, p0, kv.F16, p0, 0, 1<<30, dec)},
		{"decode, short scratch", "attn_decode_tc", "99 splits need", k.AttentionDecodeTC(nil, p0, p0, p0, p0, kv.F16, p0, p0, need(dec, 99)-1, dec)},
		{"prefill, short scratch", "attn_prefill_tc", "3 splits need", k.AttentionPrefillTC(nil, p0, p0, p0, p0, kv.F16, p0, p0, need(pre, 3)-1, pre)},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.op) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %s and %q", c.name, c.err, c.op, c.want)
		}
	}
}
