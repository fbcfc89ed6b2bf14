package cuda

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/kv"
)

// adLeanGQA is the lean kernel's grouped form (MINFER_ATTN_DECODE_GQA).
var adLeanGQA = adLeanWith("attn_decode2 (grouped)", func(p *AttnParams) { p.Grouped = true })

// TestAttnDecodeGQADevice_BitwiseTheOneWarpBlocks: the grouped kernels
// change which warps share a block, not what a warp computes, so their
// output is bitwise the one-warp blocks' for every KV format, head_dim 64
// and 128, groups of 1, 2, 7 and 8 query heads, one split up to 128
// active splits (4,160 cells at MINFER_ATTN_SPLITS' cap), a window, and 1
// and 3 tokens; every launch leaves its counters at 0.
func TestAttnDecodeGQADevice_BitwiseTheOneWarpBlocks(t *testing.T) {
	ms := mmtOpen(t)
	r := rand.New(rand.NewPCG(91, 92))
	const nkv, nCtx = 2, 4160
	for _, f := range kv.Formats() {
		for _, hd := range []int{64, 128} {
			k, v := adFill(r, f, nCtx, nkv*hd), adFill(r, f, nCtx, nkv*hd)
			adUpload(t, ms, &k, &v)
			for _, g := range []int{1, 2, 7, 8} {
				plain := adOpenKernelShape(t, ms, adLean, f, k, v, g*nkv, nkv, hd, nCtx)
				grouped := adOpenKernelShape(t, ms, adLeanGQA, f, k, v, g*nkv, nkv, hd, nCtx)
				for _, c := range []struct{ nt, start, w int }{{1, 0, 0}, {1, 64, 0}, {1, 3000, 0}, {1, nCtx - 1, 0}, {3, 2047, 0}, {1, 3500, 700}} {
					q := dsRand(r, hd*g*nkv*c.nt, 2)
					a, b := plain.run(t, q, c.nt, c.start, c.w), grouped.run(t, q, c.nt, c.start, c.w)
					for j := range a {
						if math.Float32bits(a[j]) != math.Float32bits(b[j]) {
							t.Fatalf("%s hd %d G %d nt %d start %d window %d elem %d: one-warp blocks %v, grouped %v",
								f, hd, g, c.nt, c.start, c.w, j, a[j], b[j])
						}
					}
				}
				plain.zeroCounters(t, f.String())
				grouped.zeroCounters(t, f.String())
			}
		}
	}
}

// TestAttnDecodeGQA_WholeModelBitwiseAndCensus: a whole model decoding at
// 100+ cells with MINFER_ATTN_DECODE_GQA=1 gives bitwise the logits of the
// one-warp blocks, and its census names minfer_attn_decode2g_* and no
// minfer_attn_decode2_* (the lever's liveness), with graphs on (their
// replays included).
func TestAttnDecodeGQA_WholeModelBitwiseAndCensus(t *testing.T) {
	dsNeedDevice(t)
	// The lean form is pinned off: the grouped kernels equal the one-warp
	// blocks bitwise, not its ex2 sums (an A/B of it runs this test too).
	base := append([]string{"MINFER_NO_SPLITK_ATTN=0", "MINFER_ATTN_DECODE_LEAN=0"}, dsGraphsOn...)
	for _, m := range []struct{ name, path string }{
		{"qwen2-tiny Q8_0", dsSynth(t, "qwen2-tiny", "Q8_0")}, {"qwen3-tiny Q8_0", dsSynth(t, "qwen3-tiny", "Q8_0")},
	} {
		off := ad2LongSteps(t, m.path, 8, append(base, "MINFER_ATTN_DECODE_GQA=0")...)
		on := ad2LongSteps(t, m.path, 8, append(base, "MINFER_ATTN_DECODE_GQA=1")...)
		dsBitwise(t, m.name+": grouped vs one-warp blocks", on, off)
	}
	_, b := adBackendRun(t, dsLevers(t, append([]string{"MINFER_LAUNCH_CENSUS=1", "MINFER_ATTN_DECODE_GQA=1"}, base...)...), kv.F16, 0)
	if grouped, plain := ad2Census(b, "minfer_attn_decode2g_"), ad2Census(b, "minfer_attn_decode2_"); grouped == 0 || plain != 0 {
		t.Errorf("%d grouped launches (want > 0), %d one-warp (want 0); census %v", grouped, plain, b.Kernels().Census())
	}
}

// TestAttnDecode2Geometry_GroupedBlocksAreAKVHeadsQueryHeads (no device):
// grouped, the grid is one block per (token, KV head) of 32 threads per
// query head, the kernel is the minfer_attn_decode2g_ one of the same class
// and the scratch is the one-warp blocks'; more than adec2::GMAX query
// heads per KV head is refused with the lever's name.
func TestAttnDecode2Geometry_GroupedBlocksAreAKVHeadsQueryHeads(t *testing.T) {
	p := AttnParams{NT: 3, NHead: 28, NHeadKV: 4, HeadDim: 128, NCtx: 32768}
	plain := attnDecode2Geometry(p, kv.F16)
	p.Grouped = true
	g := attnDecode2Geometry(p, kv.F16)
	if g.gridX != 3*4 || g.threads != 32*7 || g.name != "minfer_attn_decode2g_hd128_f16" || g.nsplit != plain.nsplit ||
		g.bytes != plain.bytes || g.mlOff != plain.mlOff || g.accOff != plain.accOff {
		t.Errorf("grouped %+v, one-warp %+v", g, plain)
	}
	if plain.gridX != 3*28 || plain.threads != 32 || plain.name != "minfer_attn_decode2_hd128_f16" {
		t.Errorf("one-warp %+v", plain)
	}
	for _, c := range []struct {
		nh, nkv int
		ok      bool
	}{{16, 2, true}, {18, 2, false}, {64, 8, true}, {8, 8, true}} {
		p := AttnParams{NT: 1, NHead: c.nh, NHeadKV: c.nkv, HeadDim: 64, NCtx: 640, Grouped: true}
		_, err := AttnDecode2ScratchBytes(p, kv.F32)
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), "MINFER_ATTN_DECODE_GQA")) {
			t.Errorf("%d heads over %d: %v", c.nh, c.nkv, err)
		}
	}
}
