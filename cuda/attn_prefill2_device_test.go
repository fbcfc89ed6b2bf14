package cuda

// Tests of the v2 tiled prefill attention (attn_prefill2.go,
// kernels/attn_prefill2.cu). They use the cases and helpers of
// attn_prefill_device_test.go. The device tests
// skip with a message when no device answers; the host test pins the
// launcher's variant choice and shared-memory formula.

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/kv"
)

// TestAttnPrefill2Device_EveryKVFormatMatchesCPUWithin1e3: the v2 kernel
// against engine/cpu's attention, every KV format and every
// fapCases shape (nt 9..4096, hd 48/64/80/128, GQA 1..8, windows, starts
// 0..near n_ctx), max |diff| <= 1e-3; the census shows the chosen v2
// variant ran and the plain kernel did not. MINFER_FA_PREFILL_TC is pinned
// off: under an A/B's arm B (the suite gate runs with its settings) the
// tensor-core kernel would run instead, and its sweep with its own f16 bar
// is attn_prefill_tc_test.go's.
func TestAttnPrefill2Device_EveryKVFormatMatchesCPUWithin1e3(t *testing.T) {
	dsNeedDevice(t)
	fapSweep(t, 71, []string{"MINFER_FA_PREFILL_TC=0"}, func(t *testing.T, dev *Backend, c fapCase, w fapWorst) {
		kname := AttnPrefill2Kernel(AttnParams{NT: c.nt, NHead: c.nh, NHeadKV: c.nkv, HeadDim: c.hd}, dev.Device().SMCount)
		t.Logf("%s: %s", kname, w)
		if w.nanMismatch > 0 || w.diff > 1e-3 {
			t.Errorf("%d NaN placements differ; %s > 1e-3", w.nanMismatch, w)
		}
		census := dev.Kernels().Census()
		if census[kname] < 1 || census["minfer_attn_f32"] != 0 {
			t.Errorf("census: %s ran %d times, minfer_attn_f32 %d (want >= 1 and 0)", kname, census[kname], census["minfer_attn_f32"])
		}
	})
}

// fap2Run sets the window start and returns the plain kernel's output and
// each v2 variant's of fd's head_dim (in attnPrefill2Variants order).
func fap2Run(t *testing.T, fd *fapDirect, start int) (plain []float32, v2 map[int][]float32) {
	t.Helper()
	n := fd.p.HeadDim * fd.p.NHead * fd.p.NT
	hd := attnPrefillHD(fd.p.HeadDim)
	v2 = map[int][]float32{}
	err := fd.ms.dev.Do(func() error {
		w := make([]byte, 8)
		binary.LittleEndian.PutUint32(w, uint32(int32(start)))
		binary.LittleEndian.PutUint32(w[4:], uint32(int32(start+fd.p.NT)))
		if err := fd.ms.s.CopyHtoD(fd.win, w); err != nil {
			return err
		}
		run := func(launch func(o driver.DevicePtr) error) ([]float32, error) {
			o, err := fd.ms.upload(make([]byte, 4*n))
			if err != nil {
				return nil, err
			}
			if err := launch(o); err != nil {
				return nil, err
			}
			if err := fd.ms.s.Synchronize(); err != nil {
				return nil, err
			}
			b := make([]byte, 4*n)
			if err := fd.ms.s.CopyDtoH(b, o); err != nil {
				return nil, err
			}
			return mmtFloats(b), nil
		}
		var err error
		plain, err = run(func(o driver.DevicePtr) error {
			return fd.ms.k.Attention(fd.ms.s, o, fd.q, fd.kr, fd.vr, fd.f, fd.win, fd.p)
		})
		if err != nil {
			return err
		}
		for _, v := range attnPrefill2Variants {
			if v[0] != hd {
				continue
			}
			bm := v[1]
			if v2[bm], err = run(func(o driver.DevicePtr) error {
				return fd.ms.k.attentionPrefill2BM(fd.ms.s, o, fd.q, fd.kr, fd.vr, fd.f, fd.win, fd.p, bm)
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return plain, v2
}

// TestAttnPrefill2Device_NaNRowsAndVariantsAgreeWithPlainKernel: on the
// same device buffers, every v2 variant of the head_dim against the plain
// kernel: NaN rows exactly where the plain kernel has them (a negative
// start; cells at or beyond n_ctx), the other rows within 1e-3, and the BM
// variants bitwise equal to each other (the SM-count-dependent choice
// never changes a value).
func TestAttnPrefill2Device_NaNRowsAndVariantsAgreeWithPlainKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(73, 74))
	for _, f := range kv.Formats() {
		for _, c := range []struct {
			p      AttnParams
			starts []int
		}{
			{AttnParams{NT: 100, NHead: 14, NHeadKV: 2, HeadDim: 128, NCtx: 256}, []int{0, 100, 200, -1}},
			{AttnParams{NT: 130, NHead: 16, NHeadKV: 8, HeadDim: 64, NCtx: 256, Window: 50}, []int{0, 126, 180, -5}},
			{AttnParams{NT: 77, NHead: 7, NHeadKV: 7, HeadDim: 64, NCtx: 300, Scale: 0.3}, []int{223, 250}},
			{AttnParams{NT: 40, NHead: 12, NHeadKV: 4, HeadDim: 96, NCtx: 128, Window: 9}, []int{0, 70, 100}},
		} {
			fd := fapDirectOpen(t, r, f, c.p)
			if err := fd.ms.dev.Do(fd.ms.k.PrepareAttnPrefill2); err != nil {
				t.Fatal(err)
			}
			for _, start := range c.starts {
				name := fmt.Sprintf("%s/nt%d/hd%d/heads%d-%d/win%d/start%d/ctx%d", f, c.p.NT, c.p.HeadDim, c.p.NHead, c.p.NHeadKV,
					c.p.Window, start, c.p.NCtx)
				plain, v2 := fap2Run(t, fd, start)
				wantNaN := 0
				for tok := range c.p.NT {
					if start < 0 || start+tok >= c.p.NCtx {
						wantNaN += c.p.HeadDim * c.p.NHead
					}
				}
				nans := 0
				for _, v := range plain {
					if math.IsNaN(float64(v)) {
						nans++
					}
				}
				if nans != wantNaN {
					t.Errorf("%s: plain kernel has %d NaN values, want %d", name, nans, wantNaN)
				}
				var ref []float32
				refBM := 0
				for _, v := range attnPrefill2Variants {
					got, ok := v2[v[1]]
					if v[0] != attnPrefillHD(c.p.HeadDim) || !ok {
						continue
					}
					w := fapCompare(got, plain, c.p.HeadDim, c.p.NHead)
					t.Logf("%s: %d NaN values in the plain output; bm%d vs plain %s", name, nans, v[1], w)
					if w.nanMismatch > 0 || w.diff > 1e-3 {
						t.Errorf("%s bm%d: %d NaN placements differ; %s > 1e-3", name, v[1], w.nanMismatch, w)
					}
					if ref == nil {
						ref, refBM = got, v[1]
						continue
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(ref[i]) &&
							!(math.IsNaN(float64(got[i])) && math.IsNaN(float64(ref[i]))) {
							t.Errorf("%s: bm%d and bm%d differ at %d: %v vs %v", name, refBM, v[1], i, ref[i], got[i])
							break
						}
					}
				}
			}
		}
	}
}

// TestAttnPrefill2Device_CaptureReplayBitwiseEqualsDirectAtMovingStarts:
// five 24-token chunks forwarded one after another after a 5-token prefix,
// so the chunk split is captured at its 3rd run and replayed with the window
// start read from the device (5, 29, 53, ...): bitwise the direct launches'.
// (One shape throughout: a new activation shape grows the exact-size pool,
// and a pool growth invalidates the captured graphs, cuda/capture.go.)
// The tiled kernel is the one the suite's levers route to: the v2 kernel by
// default, the tensor-core one under MINFER_FA_PREFILL_TC=1 (an A/B's arm B),
// so the suite gate checks the capture of the path under test.
func TestAttnPrefill2Device_CaptureReplayBitwiseEqualsDirectAtMovingStarts(t *testing.T) {
	prefix := "minfer_attn_prefill2_"
	if attnFamily(AttnPrefillMinNT, AttnPrefillMinNT, dsLevers(t, "MINFER_NO_FA_PREFILL=0"), kv.F16) == attnPrefillTC {
		prefix = "minfer_attn_prefill_tc_"
	}
	fapCaptureReplayAtMovingStarts(t, "MINFER_NO_FA_PREFILL=0", prefix)
}

// TestAttnPrefill2Kernel_VariantAndSharedMemory: head_dim <= 64 takes the
// HD 64 kernels, larger the HD 128 ones; the largest BM whose grid gives
// every SM three blocks, else the smallest; every variant's shared memory
// fits the H100/H200 opt-in limit (227 KiB) and matches the kernel's layout.
func TestAttnPrefill2Kernel_VariantAndSharedMemory(t *testing.T) {
	for _, c := range []struct {
		p    AttnParams
		sms  int
		want string
	}{
		{AttnParams{NT: 512, NHead: 14, NHeadKV: 2, HeadDim: 64}, 132, "minfer_attn_prefill2_hd64_bm16"},
		{AttnParams{NT: 4096, NHead: 14, NHeadKV: 2, HeadDim: 64}, 132, "minfer_attn_prefill2_hd64_bm64"},
		{AttnParams{NT: 512, NHead: 16, NHeadKV: 8, HeadDim: 128}, 132, "minfer_attn_prefill2_hd128_bm32"},
		{AttnParams{NT: 4096, NHead: 16, NHeadKV: 8, HeadDim: 128}, 132, "minfer_attn_prefill2_hd128_bm64"},
		{AttnParams{NT: 512, NHead: 28, NHeadKV: 4, HeadDim: 128}, 132, "minfer_attn_prefill2_hd128_bm32"},
		{AttnParams{NT: 4096, NHead: 28, NHeadKV: 4, HeadDim: 128}, 132, "minfer_attn_prefill2_hd128_bm64"},
		{AttnParams{NT: 64, NHead: 8, NHeadKV: 2, HeadDim: 80}, 132, "minfer_attn_prefill2_hd128_bm32"},
		{AttnParams{NT: 33, NHead: 6, NHeadKV: 2, HeadDim: 48}, 1, "minfer_attn_prefill2_hd64_bm64"},
	} {
		if got := AttnPrefill2Kernel(c.p, c.sms); got != c.want {
			t.Errorf("%+v on %d SMs: %s, want %s", c.p, c.sms, got, c.want)
		}
	}
	// (BM + 2 BN) rows of HD+4 floats (Q, K, V) + BN rows of BM+4 (P).
	want := map[string]int{
		"minfer_attn_prefill2_hd64_bm16": 44288, "minfer_attn_prefill2_hd64_bm32": 52736, "minfer_attn_prefill2_hd64_bm64": 69632,
		"minfer_attn_prefill2_hd128_bm32": 93696, "minfer_attn_prefill2_hd128_bm64": 118784,
	}
	for _, v := range attnPrefill2Variants {
		name, smem := attnPrefill2Name(v[0], v[1]), attnPrefill2Smem(v[0], v[1])
		if smem != want[name] || smem > 227<<10 {
			t.Errorf("%s: %d bytes of shared memory, want %d (at most 227 KiB)", name, smem, want[name])
		}
		if th := attnPrefill2Threads(v[1]); th != 8*v[1] || th%32 != 0 || th > 1024 {
			t.Errorf("%s: %d threads", name, th)
		}
	}
}
