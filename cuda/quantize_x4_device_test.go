package cuda

import (
	"bytes"
	"math"
	"math/rand"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/quant"
)

// TestQuantizeX4Device_BytesEqualCPUQuantizerAndScalarKernel: for k from
// one block to the 7B FFN width and nt from 1 to 512 (block counts that are
// and are not multiples of 4), minfer_quantize_q8_1_x4 writes byte for byte
// what quant.Quantize(Q8_1) and minfer_quantize_q8_1 write (all-zero and
// tie-valued blocks included), the same bytes as the scalar kernel for
// blocks carrying an infinity or a NaN (judged against the kernel only: the
// CPU quantizer's max over a NaN is its own contract), and nothing past the
// last block (a 0xa5 tail stays).
func TestQuantizeX4Device_BytesEqualCPUQuantizerAndScalarKernel(t *testing.T) {
	ms := mmtOpen(t)
	kx := mmtLoadKernels(t, ms, KernelsOptions{Census: true, QuantizeX4: true}, false)
	defer func() { _ = ms.dev.Do(kx.Close) }()
	rng := rand.New(rand.NewSource(17))
	const tail = 64
	cases := []struct{ k, nt int }{{32, 1}, {32, 3}, {96, 1}, {896, 1}, {896, 7}, {4864, 1}, {896, 512}, {4864, 512}, {3584, 77}, {18944, 9}, {160, 5}}
	for _, c := range cases {
		x := make([]float32, 0, c.k*c.nt)
		for range c.nt {
			x = append(x, mmvqActivation(rng, c.k, true)...)
		}
		// Specials: an all-zero block, a block with an infinity and one
		// with a NaN (clamped / mapped as the Go quantizer maps them).
		if len(x) >= 128 {
			for i := 32; i < 64; i++ {
				x[i] = 0
			}
			x[70] = float32(math.Inf(1))
			x[100] = float32(math.NaN())
		}
		want := make([]byte, ActQ8Bytes(c.k, c.nt))
		if err := quant.Quantize(quant.Q8_1, x, want); err != nil {
			t.Fatal(err)
		}
		got, scalar := make([]byte, len(want)+tail), make([]byte, len(want))
		err := ms.dev.Do(func() error {
			up := ms.uploads()
			dx := up.f32(x)
			dq := up.zeros(len(got))
			ds := up.zeros(len(scalar))
			if up.err != nil {
				return up.err
			}
			if err := ms.s.MemsetD8(dq, 0xa5, uint64(len(got))); err != nil {
				return err
			}
			if err := kx.QuantizeQ8_1(ms.s, dq, dx, c.k, c.nt); err != nil {
				return err
			}
			if err := ms.k.QuantizeQ8_1(ms.s, ds, dx, c.k, c.nt); err != nil {
				return err
			}
			return ms.downloadSync(mmtD2H{got, dq}, mmtD2H{scalar, ds})
		})
		if err != nil {
			t.Fatalf("k=%d nt=%d: %v", c.k, c.nt, err)
		}
		bad := 0
		for b := 0; b < len(want)/q8_1BlockBytes; b++ {
			g := got[b*q8_1BlockBytes : (b+1)*q8_1BlockBytes]
			w := want[b*q8_1BlockBytes : (b+1)*q8_1BlockBytes]
			sc := scalar[b*q8_1BlockBytes : (b+1)*q8_1BlockBytes]
			special := len(x) >= 128 && (b == 2 || b == 3)
			if (!special && !bytes.Equal(g, w)) || !bytes.Equal(g, sc) {
				if bad < 3 {
					t.Errorf("k=%d nt=%d block %d: x4 % x, CPU % x, scalar kernel % x", c.k, c.nt, b, g, w, sc)
				}
				bad++
			}
		}
		if !bytes.Equal(got[len(want):], bytes.Repeat([]byte{0xa5}, tail)) {
			t.Errorf("k=%d nt=%d: bytes written past the last block: % x", c.k, c.nt, got[len(want):])
		}
		t.Logf("k=%d nt=%d: %d of %d Q8_1 blocks differ", c.k, c.nt, bad, len(want)/q8_1BlockBytes)
	}
	if n := kx.Census()[quantizeQ8_1X4Kernel]; n != int64(len(cases)) {
		t.Errorf("census: %s ran %d times, want %d", quantizeQ8_1X4Kernel, n, len(cases))
	}
	if n := kx.Census()[quantizeQ8_1Kernel]; n != 0 {
		t.Errorf("census: the scalar kernel ran %d times with QuantizeX4 set", n)
	}
}

// TestQuantizeX4Device_WholeModelBitwiseAndCensus: synthetic qwen2-tiny and
// qactMerged is c with the launches of minfer_quantize_q8_1_x4 counted as
// minfer_quantize_q8_1: tests of other paths count activation quantizes,
// whichever of the two kernels MINFER_QUANTIZE_X4 (default on) selected.
// The x4 kernel's own liveness is judged above, on the raw census.
func qactMerged(c map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(c))
	for k, n := range c {
		if k == quantizeQ8_1X4Kernel {
			k = quantizeQ8_1Kernel
		}
		out[k] += n
	}
	return out
}

// qwen2-0.5b (Q8_0) prefill and decode with MINFER_QUANTIZE_X4=1 give
// bitwise the logits of =0; the census names only the x4 quantize with the
// lever on and only the scalar one off. The MMVQ path, whose activations
// are quantized, is pinned on (dsMMVQ): an A/B's arm B may turn it off.
func TestQuantizeX4Device_WholeModelBitwiseAndCensus(t *testing.T) {
	dsNeedDevice(t)
	for _, shape := range []string{"qwen2-tiny", "qwen2-0.5b"} {
		path := dsSynth(t, shape, "Q8_0")
		run := func(v string) ([][]float32, map[string]int64) {
			e := dsEngine(t, path, "cuda", 256, append([]string{"MINFER_LAUNCH_CENSUS=1", "MINFER_QUANTIZE_X4=" + v}, dsMMVQ...)...)
			steps := dsSteps(t, e, 4)
			return steps, dsDeviceBackend(t, e).Kernels().Census()
		}
		on, cOn := run("1")
		off, cOff := run("0")
		dsBitwise(t, shape+": MINFER_QUANTIZE_X4=1 vs 0", on, off)
		if cOn[quantizeQ8_1X4Kernel] == 0 || cOn[quantizeQ8_1Kernel] != 0 {
			t.Errorf("%s lever on: x4 %d, scalar %d launches; want > 0 and 0", shape, cOn[quantizeQ8_1X4Kernel], cOn[quantizeQ8_1Kernel])
		}
		if cOff[quantizeQ8_1X4Kernel] != 0 || cOff[quantizeQ8_1Kernel] == 0 {
			t.Errorf("%s lever off: x4 %d, scalar %d launches; want 0 and > 0", shape, cOff[quantizeQ8_1X4Kernel], cOff[quantizeQ8_1Kernel])
		}
	}
}

// TestQuantizeX4_GeometryMatchesKernelAndUnalignedXRefused (host): the Go
// constants are the kernel's #defines, and an x that is not 16-byte
// aligned is refused before any launch (no device needed to see it).
func TestQuantizeX4_GeometryMatchesKernelAndUnalignedXRefused(t *testing.T) {
	src, err := os.ReadFile("kernels/quantize_act_x4.cu")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"MINFER_QACTX4_WARPS": qactX4Warps, "MINFER_QACTX4_PER_WARP": qactX4PerWarp} {
		m := regexp.MustCompile(`#define ` + name + ` (\d+)`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("%s not defined in quantize_act_x4.cu", name)
		}
		if v, _ := strconv.Atoi(string(m[1])); v != want {
			t.Errorf("%s = %d in the kernel, %d in Go", name, v, want)
		}
	}
	if !regexp.MustCompile(`void __launch_bounds__\([^)]*\)\s*` + quantizeQ8_1X4Kernel + `\(`).Match(src) {
		t.Errorf("kernel %s not found in the source", quantizeQ8_1X4Kernel)
	}
	k := &Kernels{qx4: true}
	err = k.QuantizeQ8_1(nil, driver.DevicePtr(0x10000), driver.DevicePtr(0x10004), 896, 1)
	if err == nil || !regexp.MustCompile(`16-byte aligned`).MatchString(err.Error()) {
		t.Errorf("unaligned x: %v, want the 16-byte alignment error", err)
	}
}
