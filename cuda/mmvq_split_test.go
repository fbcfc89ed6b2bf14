package cuda

import (
	"path"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/quant"
)

// TestMMVQSplitRule_PicksFewRowMatmulsOnly (host): on the 132-SM H200 the
// rule splits 7B's o-proj / ffn_down (3,584 rows) and fused q/k/v (4,608)
// and not its fused gate/up (18,944) or lm_head (152,064); the boundary is
// ceil(rows / 4) < 12 x SMs; nothing splits without a device, with the
// lever off, or for empty shapes.
func TestMMVQSplitRule_PicksFewRowMatmulsOnly(t *testing.T) {
	for _, c := range []struct {
		rows, sms int
		want      bool
	}{
		{3584, 132, true}, {4608, 132, true}, {896, 132, true}, {18944, 132, false}, {152064, 132, false},
		{4 * 12 * 132, 132, false}, {4*12*132 - 4, 132, true}, {4*12*132 - 3, 132, false},
		{3584, 0, false}, {0, 132, false}, {3584, 60, false}, {3584, 80, true},
	} {
		if got := mmvqSplitPick(c.rows, c.sms); got != c.want {
			t.Errorf("mmvqSplitPick(rows %d, SMs %d) = %v, want %v", c.rows, c.sms, got, c.want)
		}
	}
	k := &Kernels{}
	if k.MMVQSplit(3584, MatMulOptions{MMVQSplit: true}) {
		t.Error("Kernels without a device: MMVQSplit = true")
	}
	k.dev = &driver.Device{Attr: driver.Attributes{SMCount: 132}}
	if !k.MMVQSplit(3584, MatMulOptions{MMVQSplit: true}) || k.MMVQSplit(3584, MatMulOptions{}) ||
		k.MMVQSplit(18944, MatMulOptions{MMVQSplit: true}) {
		t.Error("MMVQSplit on 132 SMs: want true for 3584 rows with the lever on only, false for 18944")
	}
}

// TestMMVQSplitGeometry_MatchesKernelSource (host): the launcher's
// geometry is mmvq_split.cu's, every type of the tables is instantiated
// there, and the kernel names match the liveness glob minfer_mmvq*_s_*
// while no one-warp MMVQ name does.
func TestMMVQSplitGeometry_MatchesKernelSource(t *testing.T) {
	defs, src := kernelDefines(t, "kernels/mmvq_split.cu")
	if defs["MINFER_MMVQS_WARPS"] != mmvqsWarps {
		t.Errorf("mmvq_split.cu MINFER_MMVQS_WARPS = %d, launcher has %d", defs["MINFER_MMVQS_WARPS"], mmvqsWarps)
	}
	if mmvqsThreads != 32*mmvqsWarps || !strings.Contains(src, "#define MINFER_MMVQS_THREADS (32 * MINFER_MMVQS_WARPS)") {
		t.Errorf("mmvqsThreads = %d: want 32 x %d, as MINFER_MMVQS_THREADS", mmvqsThreads, mmvqsWarps)
	}
	if mmvqRows != 4 {
		t.Errorf("the rule counts one-warp blocks of %d rows; its 12 blocks per SM assume 4", mmvqRows)
	}
	const glob = "minfer_mmvq*_s_*"
	for ty, name := range mmvqTable {
		sfx := strings.TrimPrefix(name, "minfer_mmvq_")
		for _, want := range splitKernelNames(t, src, ty, "MINFER_MMVQS_KERNEL", "minfer_mmvq", sfx, false) {
			if ok, _ := path.Match(glob, want); !ok {
				t.Errorf("%s does not match %s", want, glob)
			}
		}
		for _, old := range []string{name, mmvqResKernel(ty), mmvqFusedKernel(ty, "qkv"), mmvqFusedKernel(ty, "ffn"),
			mmvqNTKernel(ty), mmvqrKernel(ty, ""), mmvqrResKernel(ty),
			mmvqrKernel(ty, "qkv"), mmvqrKernel(ty, "ffn")} {
			if ok, _ := path.Match(glob, old); ok && old != "" {
				t.Errorf("the one-warp kernel %s matches %s", old, glob)
			}
		}
	}
	for ty, sfx := range mmvqrTypes {
		splitKernelNames(t, src, ty, "MINFER_MMVQRS_KERNEL", "minfer_mmvqr", sfx, true)
	}
	if mmvqSplitKernel(quant.Q4_K, "", true) != "" || mmvqSplitKernel(quant.F16, "", false) != "" ||
		mmvqSplitKernel(quant.Q8_0, "ffn", false) != "" {
		t.Error("mmvqSplitKernel names a kernel that does not exist (repacked Q4_K, F16, or an ffn form)")
	}
}

// splitKernelNames checks that mmvq_split.cu instantiates macro for sfx
// and that mmvqSplitKernel names ty's plain, res and qkv split kernels
// prefix_s_sfx, prefix_res_s_sfx and prefix_qkv_s_sfx; it returns those
// names.
func splitKernelNames(t *testing.T, src string, ty quant.Type, macro, prefix, sfx string, repacked bool) []string {
	t.Helper()
	if m := macro + "(" + sfx + ","; !strings.Contains(src, m) {
		t.Errorf("%s: mmvq_split.cu has no %s", ty, m)
	}
	layout := map[bool]string{false: "GGUF", true: "repacked"}[repacked]
	var names []string
	for form, want := range map[string]string{"": prefix + "_s_" + sfx, "res": prefix + "_res_s_" + sfx,
		"qkv": prefix + "_qkv_s_" + sfx} {
		if got := mmvqSplitKernel(ty, form, repacked); got != want {
			t.Errorf("mmvqSplitKernel(%s, %q, %s) = %q, want %q", ty, form, layout, got, want)
		}
		names = append(names, want)
	}
	return names
}

// TestMMVQSplit_LaunchersRefuseBadArguments (host): the checks run before
// any launch: a misaligned weight, a type without a (repacked) kernel, a
// short activation, a partly overlapping residual, a missing qkv weight.
func TestMMVQSplit_LaunchersRefuseBadArguments(t *testing.T) {
	k := &Kernels{}
	cases := []struct {
		err  error
		want string
	}{
		{k.MatMulQ8_1S(nil, 0x1000, 0x2000, 1<<20, 0x3008, quant.Q4_K, 0, 0, 1024, 128), "16-byte aligned"},
		{k.MatMulQ8_1S(nil, 0x1000, 0x2000, 1<<20, 0x3000, quant.F16, 0, 0, 1024, 128), "no mmvq kernel"},
		{k.MatMulQ8_1S(nil, 0x1000, 0x2000, 100, 0x3000, quant.Q8_0, 0, 0, 896, 128), "Q8_1 activation"},
		{k.MatMulQ8_1S(nil, 0x1000, 0x2000, 1<<20, 0x3000, quant.Q8_0, 0, 0x1004, 896, 128), "overlaps"},
		{k.MatMulQ8_1RS(nil, 0x1000, 0x2000, 1<<20, 0x3008, quant.Q8_0, 0, 0, 896, 128), "16-byte aligned"},
		{k.MatMulQ8_1RS(nil, 0x1000, 0x2000, 1<<20, 0x3000, quant.Q4_K, 0, 0, 1024, 128), "no repacked kernel"},
		{k.MatMulQ8_1RS(nil, 0x1000, 0x2000, 100, 0x3000, quant.Q8_0, 0, 0, 896, 128), "Q8_1 activation"},
		{k.MatMulQ8_1QKVS(nil, 0x1000, 0x2000, 1<<20, [3]driver.DevicePtr{0x3000, 0x4000, 0}, quant.Q8_0,
			[3]driver.DevicePtr{}, 896, [3]int{896, 128, 128}, false), "weight 2"},
		{k.MatMulQ8_1QKVS(nil, 0x1000, 0x2000, 1<<20, [3]driver.DevicePtr{0x3000, 0x4008, 0x5000}, quant.Q8_0,
			[3]driver.DevicePtr{}, 896, [3]int{896, 128, 128}, true), "weight 1"},
		{k.MatMulQ8_1QKVS(nil, 0x1000, 0x2000, 100, [3]driver.DevicePtr{0x3000, 0x4000, 0x5000}, quant.Q8_0,
			[3]driver.DevicePtr{}, 896, [3]int{896, 128, 128}, true), "Q8_1 activation"},
	}
	for i, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("case %d: err %v, want one containing %q", i, c.err, c.want)
		}
	}
}
