package cuda

// Device tests of the tensor-core decode attention (MINFER_ATTN_DECODE_TC,
// attn_prefill2.cu's minfer_attn_decode_tc_* and their combine): the
// kernels against engine/cpu's attention for every KV format, and the
// combine's Q8_1 row (MINFER_FUSE_ATTN_Q8) against a separate
// quantization of the f32 row, through the whole model. Skip without a
// device.

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/synth"
)

// adDecodeTC is the tensor-core decode kernel for the shared adShape
// helpers: its partials in the prefill kernels' scratch, no counters, the
// f16 tile bar.
var adDecodeTC = adKernel{name: "attn_decode_tc",
	scratchBytes: func(p AttnParams, f kv.Format) (int, error) { return AttnPrefillTCScratchBytes(p.HeadDim, 132), nil },
	launch: func(k *Kernels, s *driver.Stream, out, q, kr, vr driver.DevicePtr, f kv.Format, win, scr driver.DevicePtr, scrB int, p AttnParams) error {
		if err := k.PrepareAttnPrefillTC(); err != nil {
			return err
		}
		if need := AttnPrefillTCScratchBytes(p.HeadDim, k.dev.Attr.SMCount); scrB < need {
			return fmt.Errorf("the test's scratch of %d bytes is short of %d on this device", scrB, need)
		}
		return k.AttentionDecodeTC(s, out, 0, 0, q, kr, vr, f, win, scr, scrB, p)
	},
	counterBytes: func(AttnParams, kv.Format) uint64 { return 0 },
	bar:          1e-2}

// TestAttnDecodeTCDevice_EveryFormatShapeWindowMatchesCPUWithinF16Bar: the
// tensor-core decode kernel and its combine against engine/cpu's attention
// over the lean kernel's sweep (every KV format, head_dim 64 and 128, G 1
// / 4 / 7 / 8, nt 1..8, windows, KV lengths 1 .. 4160: one split's worth
// to all of them), within the prefill kernels' f16 bar; a repeated launch
// is bitwise equal.
func TestAttnDecodeTCDevice_EveryFormatShapeWindowMatchesCPUWithinF16Bar(t *testing.T) {
	ms := mmtOpen(t)
	r := rand.New(rand.NewPCG(81, 82))
	const nkv, nCtx = 2, 4160
	lengths := []int{1, 2, 31, 63, 64, 65, 129, 600, 1000, 2047, 4096 + 37, nCtx}
	adSweepFormats(t, ms, r, adDecodeTC, nkv, nCtx, lengths, []int{0, 100, 300})
}

// TestAttnDecodeTCDevice_Q8RowBitwiseAndTheKernelsRun: synthetic
// qwen2-tiny and qwen2-0.5b Q4_K_M, prefill then 6 decode steps, CUDA
// graphs on and off, the tensor-core decode pinned on over an f16 cache
// (the small models' auto cache is f32, which stays lean): the combine's Q8_1
// row (MINFER_FUSE_ATTN_Q8=1) gives bitwise the logits of the f32 row and a
// separate quantization (=0). Census: minfer_attn_decode_tc_* and its
// combine run once a layer a step in both arms, the lean kernels never,
// and the arm with the Q8_1 row has one quantization a layer fewer.
func TestAttnDecodeTCDevice_Q8RowBitwiseAndTheKernelsRun(t *testing.T) {
	dsNeedDevice(t)
	models := []dsModel{{"qwen2-tiny", "Q4_K_M"}, {"qwen2-0.5b", "Q4_K_M"}}
	pin := append([]string{"MINFER_ATTN_DECODE_TC=1", "MINFER_CACHE_TYPE=f16", "MINFER_FUSE_RESIDUAL=1"}, dsMMVQ...)
	dsLeverDecodeOn(t, "MINFER_FUSE_ATTN_Q8", models, pin, func(t *testing.T, _ dsModel, sh synth.Shape, _ string, cOff, cOn map[string]int64, _ *Backend) {
		want := int64(sh.NLayer * frSteps)
		for arm, c := range map[string]map[string]int64{"off": cOff, "on": cOn} {
			k, names := rpMatching(c, "minfer_attn_decode_tc_hd*")
			comb, _ := rpMatching(c, "minfer_attn_decode_tc_combine")
			lean, _ := rpMatching(c, "minfer_attn_decode2*")
			t.Logf("%s: %d tensor-core decode launches %v, %d combines, %d lean", arm, k, names, comb, lean)
			if k != want || comb != want || lean != 0 {
				t.Errorf("MINFER_FUSE_ATTN_Q8 %s: %d kernel and %d combine launches (want %d each), %d lean (want 0)", arm, k, comb, want, lean)
			}
		}
		qOff, _ := rpMatching(cOff, "minfer_quantize_q8_1*")
		qOn, _ := rpMatching(cOn, "minfer_quantize_q8_1*")
		if qOff-qOn != want {
			t.Errorf("quantizations off %d, on %d: want %d fewer with the Q8_1 row", qOff, qOn, want)
		}
	})
}
