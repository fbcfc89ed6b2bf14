package cuda

// Tests of the tensor-core prefill attention (MINFER_FA_PREFILL_TC:
// AttentionPrefillTC, fatc:: in kernels/attn_prefill2.cu). The device test
// uses the cases and helpers of attn_prefill_device_test.go and skips with
// a message when no device answers.

import (
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
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
	dsNeedDevice(t)
	fapSweep(t, 75, []string{"MINFER_FA_PREFILL_TC=1"}, func(t *testing.T, dev *Backend, c fapCase, w fapWorst) {
		kname := attnPrefillTCName(attnPrefillHD(c.hd))
		t.Logf("%s: %s", kname, w)
		if w.nanMismatch > 0 || w.diff > 1e-2 {
			t.Errorf("%d NaN placements differ; %s > 1e-2", w.nanMismatch, w)
		}
		census := dev.Kernels().Census()
		v2 := 0
		for _, v := range attnPrefill2Variants {
			v2 += int(census[attnPrefill2Name(v[0], v[1])])
		}
		if census[kname] < 1 || v2 != 0 || census["minfer_attn_f32"] != 0 {
			t.Errorf("census: %s ran %d times, the FMA kernels %d and %d (want >= 1, 0, 0)", kname, census[kname], v2, census["minfer_attn_f32"])
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
		if got := attnFamily(c.nt, c.nt, c.lv, kv.F16); got != c.want {
			t.Errorf("nt %d, FAPrefillTC %v NoFAPrefill %v: %s, want %s", c.nt, c.lv.FAPrefillTC, c.lv.NoFAPrefill, got, c.want)
		}
	}
}

// The launcher's geometry is the kernel's: 64 rows and 128 threads per
// block, the shared-memory layout of fatc::Geo (pinned bytes, within the
// H200's 227 KiB opt-in), the f16 mma.sync, both ldmatrix forms, ex2 and
// cp.async (cpasync.cuh) it issues, and both kernels defined in the source.
func TestAttnPrefillTCGeometry_MatchesKernelSource(t *testing.T) {
	src, err := os.ReadFile("kernels/attn_prefill2.cu")
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := os.ReadFile("kernels/mma.cuh") // the wrappers it shares with gemm16.cu
	if err != nil {
		t.Fatal(err)
	}
	src = append(src, hdr...)
	for _, re := range []string{
		`#include "mma.cuh"`,
		fmt.Sprintf(`constexpr int BM = %d, BN = %d, NT = %d;`, attnPrefillTCRows, attnPrefill2BN, attnPrefillTCThreads),
		`KLD = HD \+ 8;`, `TILE = BNT \* KLD;`, `BYTES = 2 \* 2 \* TILE \* 2;`, `template <int HD, int BNT = BN> struct Geo`, `minfer_cp_async16\(`, `#include "cpasync.cuh"`,
		`mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32`, `ldmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared\.b16`,
		`minfer_attn_prefill_tc_hd64\(MINFER_PREFILL_ATTN_PARAMS, float\* part, int nsplit\)`,
		`minfer_attn_prefill_tc_hd128\(MINFER_PREFILL_ATTN_PARAMS, float\* part, int nsplit\)`, `minfer_attn_prefill_tc_combine\(`,
		`ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16`, `ex2\.approx\.ftz\.f32`,
		fmt.Sprintf(`__launch_bounds__\(%d, 2\)\s+minfer_attn_prefill_tc_hd128\(`, attnPrefillTCThreads),
		// The decode form: one warp and 16 rows, and its combine.
		fmt.Sprintf(`__launch_bounds__\(%d\)\s+minfer_attn_decode_tc_hd128\(MINFER_PREFILL_ATTN_PARAMS, float\* part, int nsplit\)`, attnDecodeTCThreads),
		fmt.Sprintf(`attn_prefill_tc<128, %d>`, attnDecodeTCRows), `constexpr int THR = 2 \* ROWS;`,
		fmt.Sprintf(`constexpr int DC_WARPS = %d, DC_MAXS = %d,`, attnDecodeTCCombineTh/32, attnDecodeTCMaxSplits),
		`minfer_attn_decode_tc_combine\(\s+float\* out, uint8_t\* q8, const float\* part, const int\* win, int nt, int n_head, int n_head_kv, int hd, int n_ctx,\s+int window, int nsplit, int ld\)`,
	} {
		if !regexp.MustCompile(re).Match(src) {
			t.Errorf("kernels/attn_prefill2.cu (with mma.cuh) has no %q", re)
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

// The tensor-core launcher refuses, by its op's name and before any
// launch, a split launch whose scratch is missing or short of its partials.
func TestAttnTCLaunchers_RefuseBadCalls(t *testing.T) {
	k := &Kernels{dev: &driver.Device{Attr: driver.Attributes{SMCount: 132}}}
	const p0 = driver.DevicePtr(0x1000)
	pre := AttnParams{NT: 512, NHead: 28, NHeadKV: 4, HeadDim: 128, NCtx: 32768}
	dec := AttnParams{NT: 1, NHead: 28, NHeadKV: 4, HeadDim: 128, NCtx: 32768}
	need := func(p AttnParams, ns int) int { return ns * p.NHeadKV * p.NT * (p.NHead / p.NHeadKV) * (128 + 2) * 4 }
	for _, c := range []struct {
		name, op, want string
		err            error
	}{
		{"prefill, no scratch", "attn_prefill_tc", "3 splits need", k.AttentionPrefillTC(nil, p0, p0, p0, p0, kv.F16, p0, 0, 1<<30, pre)},
		{"prefill, short scratch", "attn_prefill_tc", "3 splits need", k.AttentionPrefillTC(nil, p0, p0, p0, p0, kv.F16, p0, p0, need(pre, 3)-1, pre)},
		{"decode, short scratch", "attn_decode_tc", "99 splits need", k.AttentionDecodeTC(nil, p0, 0, 0, p0, p0, p0, kv.F16, p0, p0, need(dec, 99)-1, dec)},
		{"decode, no output", "attn_decode_tc", "no output", k.AttentionDecodeTC(nil, 0, 0, 0, p0, p0, p0, kv.F16, p0, p0, 1<<30, dec)},
		{"decode, short Q8_1 row", "attn_decode_tc", "short of", k.AttentionDecodeTC(nil, 0, p0, 100, p0, p0, p0, kv.F16, p0, p0, 1<<30, dec)},
		{"decode, Q8_1 at head_dim 80", "attn_decode_tc", "head_dim 80", k.AttentionDecodeTC(nil, 0, p0, 1<<20, p0, p0, p0, kv.F32, p0, p0, 1<<30,
			AttnParams{NT: 1, NHead: 4, NHeadKV: 2, HeadDim: 80, NCtx: 4096})},
		{"decode, nt 9", "attn_decode_tc", "at most", k.AttentionDecodeTC(nil, p0, 0, 0, p0, p0, p0, kv.F16, p0, p0, 1<<30,
			AttnParams{NT: 9, NHead: 28, NHeadKV: 4, HeadDim: 128, NCtx: 32768})},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.op) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %s and %q", c.name, c.err, c.op, c.want)
		}
	}
}

// The decode kernels' run-time split rule (attnDecodeTCSplitPlan, which
// attn_prefill2.cu's fatc::dec_split_plan states) at the 7B's 99 splits:
// a range of up to 2 tiles (depth 0 to 127) runs one split a block, no
// tiles none; past 2 tiles a split the plan is the equal share it was
// (depth 32128: 6 tiles, 84 splits); and for every range and grid the
// active splits fit the grid and cover the tiles exactly once.
func TestAttnDecodeTCSplitPlan_ShortRangesRunOneSplitAndDepthKeepsItsShare(t *testing.T) {
	tiles := func(cells int) int { return (cells + attnPrefillBN - 1) / attnPrefillBN }
	for _, c := range []struct {
		what              string
		ntiles, per, used int
	}{
		{"no cell (NaN rows)", 0, 2, 0},
		{"depth 0: 1 cell", tiles(1), 2, 1},
		{"2 tiles (128 cells)", 2, 2, 1},
		{"3 tiles", 3, 2, 2},
		{"depth 4096: 4097 cells", tiles(4097), 2, 33},
		{"depth 32128: 32129 cells", tiles(32129), 6, 84},
	} {
		if per, used := attnDecodeTCSplitPlan(c.ntiles, 99); per != c.per || used != c.used {
			t.Errorf("%s (%d tiles) at 99 splits: per %d used %d, want %d and %d", c.what, c.ntiles, per, used, c.per, c.used)
		}
	}
	for nsplit := 2; nsplit <= attnDecodeTCMaxSplits; nsplit++ {
		for ntiles := 0; ntiles <= 2048; ntiles++ {
			per, used := attnDecodeTCSplitPlan(ntiles, nsplit)
			share := (ntiles + nsplit - 1) / nsplit
			switch {
			case used > nsplit || (used > 0 && ((used-1)*per >= ntiles || used*per < ntiles)) || (used == 0) != (ntiles == 0):
				t.Fatalf("%d tiles, %d splits: %d splits of %d tiles do not cover them exactly in the grid", ntiles, nsplit, used, per)
			case per < attnDecodeTCWide.minTiles() || (share >= attnDecodeTCWide.minTiles() && per != share):
				t.Fatalf("%d tiles, %d splits: %d tiles a split, want max(%d, %d)", ntiles, nsplit, per, share, attnDecodeTCWide.minTiles())
			}
		}
	}
	src, err := os.ReadFile("kernels/attn_prefill2.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("constexpr int DEC_MIN_CELLS = %d;", attnDecodeTCMinCells), "constexpr int DEC_MIN_TILES = DEC_MIN_CELLS / BNT;",
		"per = max((ntiles + nsplit - 1) / nsplit, DEC_MIN_TILES);", "used = (ntiles + per - 1) / per;",
	} {
		if !strings.Contains(string(src), want) {
			t.Errorf("attn_prefill2.cu no longer states %q (attnDecodeTCSplitPlan's rule)", want)
		}
	}
	// The kernel (its inactive splits exit) and the combine (it reads the
	// first used) both take the plan, each at its tile width.
	if n := strings.Count(string(src), "dec_split_plan<BNT>(span_tiles<BNT>("); n != 2 {
		t.Errorf("attn_prefill2.cu calls dec_split_plan<BNT>(span_tiles<BNT>(...)) %d times, want 2 (the kernel and its combine)", n)
	}
}

// The tensor-core decode kernels' splits fill one wave of the blocks an SM
// holds (its shared memory), at least 2 (the combine always runs), never
// more than the context's 64-cell tiles or the combine's 128, and every
// shape's partials fit the prefill kernels' scratch; MINFER_ATTN_DECODE_TC
// routes decode (nt <= 8) only, and is refused beside the plain kernel.
func TestAttnDecodeTC_SplitsFillOneWaveAndTheLeverRoutesDecodeOnly(t *testing.T) {
	const sms = 132
	for _, c := range []struct {
		nt, nh, nkv, hd, nctx, want int
	}{
		{1, 28, 4, 128, 32768, 99}, // 7B: 3 blocks an SM x 132 / 4 KV heads
		{1, 14, 2, 64, 32768, 128}, // qwen2-0.5b: 6 an SM, the cap
		{1, 28, 4, 128, 300, 5},    // a short context: its 5 tiles
		{1, 28, 4, 128, 64, 2},     // one tile: still 2 (the combine writes the row)
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
			need := ns * h[1] * nt * (h[0] / h[1]) * (attnPrefillHD(h[2]) + 2) * 4
			if ns < 2 || ns > attnDecodeTCMaxSplits || need > AttnPrefillTCScratchBytes(h[2], sms) {
				t.Fatalf("nt %d heads %d/%d hd %d: %d splits need %d bytes, the scratch holds %d", nt, h[0], h[1], h[2], ns, need,
					AttnPrefillTCScratchBytes(h[2], sms))
			}
		}
	}
	on, err := levers.Parse([]string{"MINFER_ATTN_DECODE_TC=1", "MINFER_ATTN_DECODE_TC_FROM=0"}) // at any depth (the route: attention_test.go)
	if err != nil {
		t.Fatal(err)
	}
	for nt, want := range map[int]string{1: attnDecodeTC, AttnDecodeMaxNT: attnDecodeTC, AttnPrefillMinNT: attnPrefillTC} {
		if got := attnFamily(nt, nt, on, kv.F16); got != want {
			t.Errorf("nt %d with the lever: %s, want %s", nt, got, want)
		}
	}
	for _, f := range []kv.Format{kv.F32, kv.Q8_0} { // the lean kernels keep an f32 cache's precision and read q8_0 directly
		if got := attnFamily(1, 1, on, f); got != attnDecode2 {
			t.Errorf("decode over a %s cache with the lever: %s, want %s", f, got, attnDecode2)
		}
	}
	for _, f := range []kv.Format{kv.F32, kv.Q8_0} { // not taken: said, not silent
		if line := attnDecodeTCYielded(on, f); !strings.Contains(line, "stays on the lean kernels") {
			t.Errorf("lever on over a %s cache: log line %q", f, line)
		}
	}
	if line := attnDecodeTCYielded(on, kv.F16); line != "" {
		t.Errorf("lever on over an f16 cache: log line %q, want none", line)
	}
	if attnFamily(1, 1<<20, levers.Default(), kv.F16) != attnDecode2 {
		t.Error("the lever is off by default: decode must stay on minfer_attn_decode2*")
	}
	lv, err := levers.Parse([]string{"MINFER_ATTN_DECODE_TC=1", "MINFER_NO_SPLITK_ATTN=1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := optInConflict(lv, "MINFER_ATTN_DECODE_TC"); err == nil || !strings.Contains(err.Error(), "MINFER_NO_SPLITK_ATTN") {
		t.Errorf("MINFER_ATTN_DECODE_TC=1 beside MINFER_NO_SPLITK_ATTN=1: %v, want the refusal", err)
	}
	if attnDecodeTCName(128) != "minfer_attn_decode_tc_hd128" {
		t.Error(attnDecodeTCName(128))
	}
}

// The narrow decode form (MINFER_ATTN_DECODE_TC_NARROW, 32-cell tiles):
// half the 64-cell form's shared memory, so twice the one-warp blocks an
// SM (6 at head_dim 128, 12 at 64) and twice the splits (the 7B on 132
// SMs: 198), capped at the narrow combine's 256; the run-time plan keeps
// 128 cells a split (4 tiles): at depth 0 one split a block runs, at 4096
// 33, at 32128 168 of 6 tiles (the 64-cell form's 84 of 6); the active
// splits cover the tiles exactly once for every range and grid; every
// shape's partials fit the prefill kernels' scratch; and the source states
// the same width, cap, floor and kernels.
func TestAttnDecodeTCNarrow_SplitsFillSixBlocksAnSMAndThePlanKeeps128Cells(t *testing.T) {
	const sms = 132
	nw := attnDecodeTCNarrow
	for _, c := range []struct {
		f                 attnDecodeTCForm
		hd, smem, perSM   int
		name, combineName string
	}{
		{nw, 128, 34816, 6, "minfer_attn_decode_tc32_hd128", "minfer_attn_decode_tc32_combine"},
		{nw, 64, 18432, 12, "minfer_attn_decode_tc32_hd64", "minfer_attn_decode_tc32_combine"},
		{attnDecodeTCWide, 128, attnPrefillTCSmem(128), 3, "minfer_attn_decode_tc_hd128", "minfer_attn_decode_tc_combine"},
		{attnDecodeTCWide, 64, attnPrefillTCSmem(64), 6, "minfer_attn_decode_tc_hd64", "minfer_attn_decode_tc_combine"},
	} {
		if c.f.smem(c.hd) != c.smem || c.f.perSM(c.hd) != c.perSM || c.f.name(c.hd) != c.name || c.f.combine() != c.combineName {
			t.Errorf("%d-cell tiles hd %d: %d bytes, %d blocks an SM, %s, %s; want %d, %d, %s, %s", c.f.bn, c.hd, c.f.smem(c.hd), c.f.perSM(c.hd),
				c.f.name(c.hd), c.f.combine(), c.smem, c.perSM, c.name, c.combineName)
		}
	}
	for _, c := range []struct {
		nt, nh, nkv, hd, nctx, want int
	}{
		{1, 28, 4, 128, 32768, 198}, // 7B: 6 blocks an SM x 132 / 4 KV heads
		{1, 14, 2, 64, 32768, 256},  // qwen2-0.5b: 12 an SM x 132 / 2 = 792, the cap
		{1, 28, 4, 128, 300, 10},    // a short context: its 10 tiles
		{1, 28, 4, 128, 32, 2},      // one tile: still 2 (the combine writes the row)
		{8, 28, 4, 128, 32768, 49},  // 56 rows: 4 row tiles a KV head
	} {
		p := AttnParams{NT: c.nt, NHead: c.nh, NHeadKV: c.nkv, HeadDim: c.hd, NCtx: c.nctx}
		if got := nw.splits(p, sms); got != c.want {
			t.Errorf("narrow: nt %d heads %d/%d hd %d n_ctx %d: %d splits, want %d", c.nt, c.nh, c.nkv, c.hd, c.nctx, got, c.want)
		}
	}
	tiles := func(cells int) int { return (cells + nw.bn - 1) / nw.bn }
	ns := nw.splits(AttnParams{NT: 1, NHead: 28, NHeadKV: 4, HeadDim: 128, NCtx: 32768}, sms)
	for _, c := range []struct {
		what              string
		ntiles, per, used int
	}{
		{"no cell (NaN rows)", 0, 4, 0},
		{"depth 0: 1 cell", tiles(1), 4, 1},
		{"4 tiles (128 cells)", 4, 4, 1},
		{"5 tiles", 5, 4, 2},
		{"depth 4096: 4097 cells", tiles(4097), 4, 33},
		{"depth 32128: 32129 cells", tiles(32129), 6, 168},
	} {
		if per, used := nw.splitPlan(c.ntiles, ns); per != c.per || used != c.used {
			t.Errorf("narrow %s (%d tiles) at %d splits: per %d used %d, want %d and %d", c.what, c.ntiles, ns, per, used, c.per, c.used)
		}
	}
	if per, used := attnDecodeTCSplitPlan(503, 99); per != 6 || used != 84 { // the 64-cell form at depth 32128, as it was
		t.Errorf("64-cell form at depth 32128: per %d used %d, want 6 and 84", per, used)
	}
	for nsplit := 2; nsplit <= nw.maxSplits; nsplit++ {
		for ntiles := 0; ntiles <= 4096; ntiles++ {
			per, used := nw.splitPlan(ntiles, nsplit)
			share := (ntiles + nsplit - 1) / nsplit
			switch {
			case used > nsplit || (used > 0 && ((used-1)*per >= ntiles || used*per < ntiles)) || (used == 0) != (ntiles == 0):
				t.Fatalf("narrow: %d tiles, %d splits: %d splits of %d tiles do not cover them exactly in the grid", ntiles, nsplit, used, per)
			case per < 4 || (share >= 4 && per != share):
				t.Fatalf("narrow: %d tiles, %d splits: %d tiles a split, want max(%d, 4)", ntiles, nsplit, per, share)
			}
		}
	}
	for _, h := range [][3]int{{28, 4, 128}, {14, 2, 64}, {16, 8, 128}, {32, 32, 128}, {12, 2, 80}, {64, 8, 128}} {
		for nt := 1; nt <= AttnDecodeMaxNT; nt++ {
			p := AttnParams{NT: nt, NHead: h[0], NHeadKV: h[1], HeadDim: h[2], NCtx: 131072}
			ns := nw.splits(p, sms)
			need := ns * h[1] * nt * (h[0] / h[1]) * (attnPrefillHD(h[2]) + 2) * 4
			if ns < 2 || ns > attnDecodeTCNarrowMaxSplits || need > AttnPrefillTCScratchBytes(h[2], sms) {
				t.Fatalf("narrow: nt %d heads %d/%d hd %d: %d splits need %d bytes, the scratch holds %d", nt, h[0], h[1], h[2], ns, need,
					AttnPrefillTCScratchBytes(h[2], sms))
			}
		}
	}
	src, err := os.ReadFile("kernels/attn_prefill2.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		fmt.Sprintf(`constexpr int BN_NARROW = %d;`, nw.bn),
		fmt.Sprintf(`constexpr int DC_MAXS_NARROW = %d;`, attnDecodeTCNarrowMaxSplits),
		fmt.Sprintf(`__launch_bounds__\(%d\)\s+minfer_attn_decode_tc32_hd128\(MINFER_PREFILL_ATTN_PARAMS, float\* part, int nsplit\)\s+\{\s+fatc::attn_prefill_tc<128, %d, fatc::BN_NARROW>`, attnDecodeTCThreads, attnDecodeTCRows),
		fmt.Sprintf(`__launch_bounds__\(%d\)\s+minfer_attn_decode_tc32_hd64\(MINFER_PREFILL_ATTN_PARAMS, float\* part, int nsplit\)\s+\{\s+fatc::attn_prefill_tc<64, %d, fatc::BN_NARROW>`, attnDecodeTCThreads, attnDecodeTCRows),
		`minfer_attn_decode_tc32_combine\(\s+float\* out, uint8_t\* q8, const float\* part, const int\* win, int nt, int n_head, int n_head_kv, int hd, int n_ctx,\s+int window, int nsplit, int ld\) \{\s+fatc::combine_dec<fatc::BN_NARROW, fatc::DC_MAXS_NARROW>`,
		`minfer_attn_decode_tc_combine\([^{]*\{\s+fatc::combine_dec<fatc::BN, fatc::DC_MAXS>`,
	} {
		if !regexp.MustCompile(re).Match(src) {
			t.Errorf("kernels/attn_prefill2.cu has no %q", re)
		}
	}
}

// MINFER_ATTN_DECODE_TC_NARROW picks the kernels: a backend with it set
// sizes the narrow form's splits and its Kernels (KernelsOptions, as New
// passes it) launch minfer_attn_decode_tc32_* (a refusal before any launch
// names the kernel and its 198 splits), one without it the 64-cell form's;
// the lever's liveness pattern matches the narrow kernels and their
// combine only, MINFER_ATTN_DECODE_TC's none of them.
func TestAttnDecodeTCNarrow_TheLeverPicksTheNarrowKernels(t *testing.T) {
	const p0 = driver.DevicePtr(0x1000)
	dec := AttnParams{NT: 1, NHead: 28, NHeadKV: 4, HeadDim: 128, NCtx: 32768}
	for _, c := range []struct {
		env        []string
		kernel     string
		splits     int
		wantNarrow bool
	}{
		{[]string{"MINFER_ATTN_DECODE_TC=1"}, "minfer_attn_decode_tc_hd128", 99, false},
		{[]string{"MINFER_ATTN_DECODE_TC=1", "MINFER_ATTN_DECODE_TC_NARROW=0"}, "minfer_attn_decode_tc_hd128", 99, false},
		{[]string{"MINFER_ATTN_DECODE_TC=1", "MINFER_ATTN_DECODE_TC_NARROW=1"}, "minfer_attn_decode_tc32_hd128", 198, true},
	} {
		lv, err := levers.Parse(c.env)
		if err != nil {
			t.Fatal(err)
		}
		if lv.DecodeTCNarrow != c.wantNarrow || optInConflict(lv, "MINFER_ATTN_DECODE_TC_NARROW") != nil {
			t.Errorf("%v: DecodeTCNarrow %v (want %v), refusal %v", c.env, lv.DecodeTCNarrow, c.wantNarrow, optInConflict(lv, "MINFER_ATTN_DECODE_TC_NARROW"))
		}
		b := &Backend{lv: lv, dev: &driver.Device{Attr: driver.Attributes{SMCount: 132}}}
		if got := b.decodeTCForm().splits(dec, 132); got != c.splits {
			t.Errorf("%v: the backend sizes %d splits, want %d", c.env, got, c.splits)
		}
		k := &Kernels{dev: b.dev, dtcNarrow: lv.DecodeTCNarrow}
		err = k.AttentionDecodeTC(nil, p0, 0, 0, p0, p0, p0, kv.F16, p0, p0, 100, dec)
		if want := fmt.Sprintf("%s: %d splits need", c.kernel, c.splits); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v, want a refusal naming %q", c.env, err, want)
		}
	}
	src, err := os.ReadFile("backend.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "DecodeTCNarrow: opts.Levers.DecodeTCNarrow") {
		t.Error("backend.go: New does not pass MINFER_ATTN_DECODE_TC_NARROW to LoadKernels (KernelsOptions.DecodeTCNarrow)")
	}
	rule := func(name string) []string {
		l, ok := levers.Lookup(name)
		if !ok || l.Liveness == nil || l.Liveness.CUDA == nil {
			t.Fatalf("%s: no CUDA liveness rule", name)
		}
		return l.Liveness.CUDA.Census
	}
	matches := func(pats []string, name string) bool {
		for _, p := range pats {
			if ok, _ := path.Match(p, name); ok {
				return true
			}
		}
		return false
	}
	narrow, wide := rule("MINFER_ATTN_DECODE_TC_NARROW"), rule("MINFER_ATTN_DECODE_TC")
	for _, f := range []attnDecodeTCForm{attnDecodeTCNarrow, attnDecodeTCWide} {
		for _, name := range []string{f.name(64), f.name(128), f.combine()} {
			if isNarrow := f == attnDecodeTCNarrow; matches(narrow, name) != isNarrow || matches(wide, name) == isNarrow {
				t.Errorf("%s: the narrow lever's census %v matches it %v, MINFER_ATTN_DECODE_TC's %v %v", name, narrow, matches(narrow, name), wide, matches(wide, name))
			}
		}
	}
}

// MINFER_ATTN_DECODE_TC_NARROW=1 switches the tensor-core decode's tiles:
// set where that decode does not run (MINFER_ATTN_DECODE_TC unset or 0,
// or the split-K attention off), New refuses it (or, beside the split-K
// attention off, MINFER_ATTN_DECODE_TC=1 first) by name before opening a
// device; unset or 0, nothing is refused.
func TestAttnDecodeTCNarrow_SetWithoutTheTensorCoreDecodeIsRefused(t *testing.T) {
	for _, c := range []struct {
		env      []string
		want, by string // the unmet setting; the lever New refuses
	}{
		{[]string{"MINFER_ATTN_DECODE_TC_NARROW=1"}, "MINFER_ATTN_DECODE_TC=0 (needs 1)", "MINFER_ATTN_DECODE_TC_NARROW=1"},
		{[]string{"MINFER_ATTN_DECODE_TC_NARROW=1", "MINFER_ATTN_DECODE_TC=0"}, "MINFER_ATTN_DECODE_TC=0 (needs 1)", "MINFER_ATTN_DECODE_TC_NARROW=1"},
		{[]string{"MINFER_ATTN_DECODE_TC_NARROW=1", "MINFER_ATTN_DECODE_TC=1", "MINFER_NO_SPLITK_ATTN=1"}, "MINFER_NO_SPLITK_ATTN=1 (needs 0)", "MINFER_ATTN_DECODE_TC=1"},
		{[]string{"MINFER_ATTN_DECODE_TC_NARROW=1", "MINFER_ATTN_DECODE_TC=1"}, "", ""},
		{[]string{"MINFER_ATTN_DECODE_TC_NARROW=0"}, "", ""},
	} {
		lv := checkOptInRefusal(t, "MINFER_ATTN_DECODE_TC_NARROW", c.env, c.want)
		if c.want == "" {
			continue
		}
		// New refuses before it looks for a device (none here).
		b, err := New(Options{Levers: lv})
		if b != nil {
			b.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "cuda: "+c.by+" switches") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New with %v: %v, want %s refused, naming %q", c.env, err, c.by, c.want)
		}
	}
	i, j := slices.Index(optInRequires, "MINFER_ATTN_DECODE_TC"), slices.Index(optInRequires, "MINFER_ATTN_DECODE_TC_NARROW")
	if i < 0 || j <= i {
		t.Errorf("optInRequires %v: want MINFER_ATTN_DECODE_TC_NARROW after MINFER_ATTN_DECODE_TC (dsLevers drops them in order)", optInRequires)
	}
}
