package cuda

import (
	"regexp"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
)

// TestQkNormRopeStoreLauncher_RefusesBadArgumentsNamingTheOp: every refusal
// happens on the host, before the module is touched (a Kernels without
// one); a head size the norm's one-value-per-thread layout does not cover
// is named.
func TestQkNormRopeStoreLauncher_RefusesBadArgumentsNamingTheOp(t *testing.T) {
	good := QkvRopeStoreParams{NT: 1, NHead: 16, NHeadKV: 8, HeadDim: 128, NRot: 128, Theta: 1e6, Neox: true, Format: kv.Q8_0, NCtx: 128}
	with := qrsWith(good)
	norms := QkNormRopeStoreBuffers{NormQ: 0x1000, NormK: 0x2000}
	// qnrsArgs are a QkNormRopeStore call's arguments.
	type qnrsArgs struct {
		p   QkvRopeStoreParams
		eps float32
		b   QkNormRopeStoreBuffers
	}
	qrsCheckRefusals(t, "qkv_norm_rope_store", []qrsRefusal[qnrsArgs]{
		{"no tokens", "0 tokens for 128 cells", qnrsArgs{with(func(p *QkvRopeStoreParams) { p.NT = 0 }), 1e-6, norms}},
		{"more tokens than cells", "129 tokens", qnrsArgs{with(func(p *QkvRopeStoreParams) { p.NT = 129 }), 1e-6, norms}},
		{"head_dim 96", "head_dim 96: the fused q/k norm supports head_dim 64 and 128 only", qnrsArgs{with(func(p *QkvRopeStoreParams) { p.HeadDim, p.NRot = 96, 96 }), 1e-6, norms}},
		{"head_dim 256", "head_dim 256", qnrsArgs{with(func(p *QkvRopeStoreParams) { p.HeadDim, p.NRot = 256, 256 }), 1e-6, norms}},
		{"n_rot above head_dim", "n_rot 130", qnrsArgs{with(func(p *QkvRopeStoreParams) { p.NRot = 130 }), 1e-6, norms}},
		{"odd n_rot", "n_rot 31", qnrsArgs{with(func(p *QkvRopeStoreParams) { p.NRot = 31 }), 1e-6, norms}},
		{"no kv heads", "over 0 KV heads", qnrsArgs{with(func(p *QkvRopeStoreParams) { p.NHeadKV = 0 }), 1e-6, norms}},
		{"bad theta", "theta", qnrsArgs{with(func(p *QkvRopeStoreParams) { p.Theta = 0 }), 1e-6, norms}},
		{"negative eps", "eps -1", qnrsArgs{good, -1, norms}},
		{"bad format", "KV format", qnrsArgs{with(func(p *QkvRopeStoreParams) { p.Format = kv.Format(9) }), 1e-6, norms}},
		{"no q norm", "norm weights are required", qnrsArgs{good, 1e-6, QkNormRopeStoreBuffers{NormK: 0x2000}}},
		{"no k norm", "norm weights are required", qnrsArgs{good, 1e-6, QkNormRopeStoreBuffers{NormQ: 0x1000}}},
	}, func(k *Kernels, s *driver.Stream, a qnrsArgs) error {
		return k.QkNormRopeStore(s, a.b, a.p, a.eps)
	})
}

// TestQkNormRopeStoreGeometry_KThenVThenQBlocksOfWholeHeads: a block holds
// 256/head_dim whole heads, one value per thread; the K head blocks come
// first, as many V blocks (256 values of the row each), then the q blocks.
func TestQkNormRopeStoreGeometry_KThenVThenQBlocksOfWholeHeads(t *testing.T) {
	for _, c := range []struct {
		nt, nh, nkv, hd int
		grid            [3]uint32
		gkv             int
	}{
		{1, 16, 8, 128, [3]uint32{1, 4 + 4 + 8, 1}, 4},     // qwen3-0.6b decode: 16 blocks
		{7, 4, 2, 128, [3]uint32{7, 1 + 1 + 2, 1}, 1},      // qwen3-tiny prefill
		{1, 14, 2, 64, [3]uint32{1, 1 + 1 + 4, 1}, 1},      // 64-wide heads: 4 a block
		{3, 32, 8, 128, [3]uint32{3, 4 + 4 + 16, 1}, 4},    // qwen3-8b-like
		{1, 5, 3, 64, [3]uint32{1, 1 + 1 + 2, 1}, 1},       // partial last blocks
		{2, 40, 40, 64, [3]uint32{2, 10 + 10 + 10, 1}, 10}, // MHA
	} {
		p := QkvRopeStoreParams{NT: c.nt, NHead: c.nh, NHeadKV: c.nkv, HeadDim: c.hd, NRot: c.hd, Theta: 1e6, Format: kv.Q8_0, NCtx: 64}
		grid, gkv, rb, err := qkNormRopeStoreGeometry(p, 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		if grid != c.grid || gkv != c.gkv || rb != kv.RowBytes(kv.Q8_0, c.nkv*c.hd) {
			t.Errorf("%+v: grid %v, %d K blocks, row bytes %d; want %v, %d, %d", c, grid, gkv, rb, c.grid, c.gkv, kv.RowBytes(kv.Q8_0, c.nkv*c.hd))
		}
	}
}

// TestQkNormRopeStoreSources_ConstantsSignatureAndSharedArithmetic: the
// launcher's block size and argument list are the kernel's, and the
// bitwise claim's ingredients are in the source: the scale expression of
// norm.cu's rms_row character for character, warp_sum (block_sum's fold),
// rope.cuh and kvput.cuh.
func TestQkNormRopeStoreSources_ConstantsSignatureAndSharedArithmetic(t *testing.T) {
	src, norm := kernelSource(t, "qkv_rope_store.cu"), kernelSource(t, "norm.cu")
	if m := regexp.MustCompile(`constexpr int QNRS_THREADS = (\d+);`).FindStringSubmatch(src); m == nil || m[1] != "256" || qnrsThreads != 256 {
		t.Errorf("QNRS_THREADS in the source %v, launcher qnrsThreads %d", m, qnrsThreads)
	}
	sig := regexp.MustCompile(`extern "C" __global__ void __launch_bounds__\(mops::QNRS_THREADS\)\s*` + qkNormRopeStoreKernel + `\(([^)]*)\)`).FindStringSubmatch(src)
	if sig == nil {
		t.Fatalf("no extern \"C\" %s with __launch_bounds__(mops::QNRS_THREADS) in qkv_rope_store.cu", qkNormRopeStoreKernel)
	}
	var types []string
	for _, a := range strings.Split(sig[1], ",") {
		f := strings.Fields(a)
		types = append(types, strings.Join(f[:len(f)-1], " "))
	}
	// The argument list QkNormRopeStore passes, in order.
	want := []string{"float*", "const float*", "const float*", "const float*", "const float*", "const float*",
		"const float*", "const float*", "const float*", "const int*", "const int*", "uint8_t*", "uint8_t*", "int",
		"long long", "int", "int", "int", "int", "int", "float", "int", "float", "int"}
	if strings.Join(types, "|") != strings.Join(want, "|") {
		t.Errorf("kernel parameters %v, the launcher passes %v", types, want)
	}
	for _, line := range []string{
		"const float mean = __fdiv_rn(s, (float)n);",
		"const float scale = __fdiv_rn(1.0f, (float)sqrt((double)__fadd_rn(mean, eps)));",
		"s = __fadd_rn(s, __fmul_rn(xv[m], xv[m]));",
	} {
		if !strings.Contains(norm, line) {
			t.Errorf("norm.cu no longer has %q: re-check the fused kernel's norm against it", line)
		}
	}
	for _, w := range []string{
		"const float mean = __fdiv_rn(tot, (float)hd);",
		"const float scale = __fdiv_rn(1.0f, (float)sqrt((double)__fadd_rn(mean, eps)));",
		"warp_sum(__fadd_rn(0.0f, __fmul_rn(x, x)))", "xs[tid] = __fmul_rn(__fmul_rn(x, scale), w);",
		"rope_angle(", "rope_rotate(", "kv_put(",
	} {
		if !strings.Contains(src, w) {
			t.Errorf("qkv_rope_store.cu does not contain %q", w)
		}
	}
}

// TestSupportsFused_IsTheCapabilityTheLeversAreParams: the backend offers
// every fused kind it has kernels for, whatever MINFER_FUSE_QKNORM says:
// the lever switches the rewrite through graph.Params (engine/model's
// GraphParams), so a backend answer never hides a lever.
func TestSupportsFused_IsTheCapabilityTheLeversAreParams(t *testing.T) {
	for _, v := range []string{"0", "1"} {
		lv, err := levers.Parse([]string{"MINFER_FUSE_QKNORM=" + v})
		if err != nil {
			t.Fatal(err)
		}
		b := &Backend{lv: lv}
		for _, k := range []graph.FuseKind{graph.FuseQkNormRopeStore, graph.FuseQkvBiasRopeStore, graph.FuseQKV, graph.FuseFFN} {
			if !b.SupportsFused(k) {
				t.Errorf("MINFER_FUSE_QKNORM=%s: SupportsFused(%s) = false", v, k)
			}
		}
	}
	if !levers.Default().FuseQKNorm {
		t.Error("MINFER_FUSE_QKNORM is off by default; it is opt-out since reports/MINFER_FUSE_QKNORM (tg128 +15.2%)")
	}
}
