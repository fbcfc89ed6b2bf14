package cuda

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/quant"
)

func TestMatMulPath_DispatchesByTypeAndTokenCount(t *testing.T) {
	cases := []struct {
		t    quant.Type
		nt   int
		opts MatMulOptions
		want string
	}{
		{quant.Q4_K, 1, MatMulOptions{}, "minfer_mmv_q4_k"},
		{quant.Q4_K, 8, MatMulOptions{}, "minfer_mmv_q4_k"},
		{quant.Q4_K, 9, MatMulOptions{}, "minfer_gemm_q4_k"},
		{quant.Q4_K, 512, MatMulOptions{NoPrefillGEMM: true}, "minfer_mmv_q4_k"},
		{quant.Q6_K, 3, MatMulOptions{}, "minfer_mmv_q6_k"},
		{quant.Q8_0, 64, MatMulOptions{}, "minfer_gemm_q8_0"},
		{quant.F16, 1, MatMulOptions{}, "minfer_mmv_f16"},
		{quant.BF16, 17, MatMulOptions{}, "minfer_gemm_bf16"},
		{quant.F32, 2, MatMulOptions{}, "minfer_mmv_f32"},
		{quant.Q5_1, 9, MatMulOptions{NoPrefillGEMM: true}, "minfer_mmv_q5_1"},
		{quant.Q2_K, 1, MatMulOptions{}, ""},
		{quant.Q8_K, 1, MatMulOptions{}, ""},
		{quant.Q4_0, 0, MatMulOptions{}, ""},
	}
	for _, c := range cases {
		if got := MatMulPath(c.t, c.nt, c.opts); got != c.want {
			t.Errorf("MatMulPath(%s, nt=%d, %+v) = %q, want %q", c.t, c.nt, c.opts, got, c.want)
		}
	}
	// The mmvq decode path: nt = 1, a scratch given, the type's lever off.
	sc := MatMulOptions{ActQ8: 256, ActQ8Bytes: ActQ8Bytes(4096, 1)}
	mmvq := []struct {
		t    quant.Type
		nt   int
		opts MatMulOptions
		want string
	}{
		{quant.Q8_0, 1, sc, "minfer_mmvq_q8_0"},
		{quant.Q4_0, 1, sc, "minfer_mmvq_q4_0"},
		{quant.Q4_1, 1, sc, "minfer_mmvq_q4_1"},
		{quant.Q5_0, 1, sc, "minfer_mmvq_q5_0"},
		{quant.Q5_1, 1, sc, "minfer_mmvq_q5_1"},
		{quant.Q4_K, 1, sc, "minfer_mmvq_q4_k"},
		{quant.Q6_K, 1, sc, "minfer_mmvq_q6_k"},
		{quant.Q8_0, 1, MatMulOptions{}, "minfer_mmv_q8_0"}, // no scratch: the mmv path
		{quant.Q8_0, 2, sc, "minfer_mmv_q8_0"},              // nt = 1 only
		{quant.Q4_K, 9, sc, "minfer_gemm_q4_k"},
		{quant.Q5_K, 1, sc, "minfer_mmvq_q5_k"},
		{quant.Q5_K, 1, MatMulOptions{ActQ8: sc.ActQ8, ActQ8Bytes: sc.ActQ8Bytes, NoKQMMVQ: true}, "minfer_mmv_q5_k"},
		{quant.Q5_K, 1, MatMulOptions{}, "minfer_mmv_q5_k"}, // no scratch
		{quant.Q5_K, 2, sc, "minfer_mmv_q5_k"},              // nt = 1 only
		{quant.Q5_K, 9, sc, "minfer_gemm_q5_k"},
		{quant.F16, 1, sc, "minfer_mmv_f16"},
		{quant.Q8_0, 1, MatMulOptions{ActQ8: sc.ActQ8, ActQ8Bytes: sc.ActQ8Bytes, NoQ80MMVQ: true}, "minfer_mmv_q8_0"},
		{quant.Q4_0, 1, MatMulOptions{ActQ8: sc.ActQ8, ActQ8Bytes: sc.ActQ8Bytes, NoQ80MMVQ: true}, "minfer_mmvq_q4_0"},
		{quant.Q4_0, 1, MatMulOptions{ActQ8: sc.ActQ8, ActQ8Bytes: sc.ActQ8Bytes, NoQ40MMVQ: true}, "minfer_mmv_q4_0"},
		// The legacy 32-value formats all sit under MINFER_NO_Q40_MMVQ.
		{quant.Q4_1, 1, MatMulOptions{ActQ8: sc.ActQ8, ActQ8Bytes: sc.ActQ8Bytes, NoQ40MMVQ: true}, "minfer_mmv_q4_1"},
		{quant.Q5_0, 1, MatMulOptions{ActQ8: sc.ActQ8, ActQ8Bytes: sc.ActQ8Bytes, NoQ40MMVQ: true}, "minfer_mmv_q5_0"},
		{quant.Q5_1, 1, MatMulOptions{ActQ8: sc.ActQ8, ActQ8Bytes: sc.ActQ8Bytes, NoQ40MMVQ: true}, "minfer_mmv_q5_1"},
		{quant.Q5_0, 1, MatMulOptions{ActQ8: sc.ActQ8, ActQ8Bytes: sc.ActQ8Bytes, NoQ80MMVQ: true, NoKQMMVQ: true}, "minfer_mmvq_q5_0"},
		{quant.Q4_K, 1, MatMulOptions{ActQ8: sc.ActQ8, ActQ8Bytes: sc.ActQ8Bytes, NoKQMMVQ: true}, "minfer_mmv_q4_k"},
		{quant.Q6_K, 1, MatMulOptions{ActQ8: sc.ActQ8, ActQ8Bytes: sc.ActQ8Bytes, NoKQMMVQ: true}, "minfer_mmv_q6_k"},
		{quant.Q8_0, 1, MatMulOptions{ActQ8: sc.ActQ8, ActQ8Bytes: sc.ActQ8Bytes, NoKQMMVQ: true}, "minfer_mmvq_q8_0"},
	}
	for _, c := range mmvq {
		if got := MatMulPath(c.t, c.nt, c.opts); got != c.want {
			t.Errorf("MatMulPath(%s, nt=%d, %+v) = %q, want %q", c.t, c.nt, c.opts, got, c.want)
		}
	}
	if got := MatMulTolerance(quant.Q4_K, 1, sc); got != "activation-quantization-q8_1" {
		t.Errorf("mmvq tolerance class = %q", got)
	}
	if got := MatMulTolerance(quant.Q4_K, 1, MatMulOptions{ActQ8: sc.ActQ8, ActQ8Bytes: sc.ActQ8Bytes, NoKQMMVQ: true}); got != "f32-reorder" {
		t.Errorf("mmv (NoKQMMVQ) tolerance class = %q", got)
	}
	if got := ActQ8Bytes(896, 1); got != 28*36 {
		t.Errorf("ActQ8Bytes(896, 1) = %d, want %d", got, 28*36)
	}
	if got := ActQ8Bytes(100, 1); got != 0 {
		t.Errorf("ActQ8Bytes(100, 1) = %d, want 0", got)
	}
	if got := MatMulTolerance(quant.Q4_K, 9, MatMulOptions{}); got != "f16-weight-tile" {
		t.Errorf("gemm tolerance class = %q", got)
	}
	if got := MatMulTolerance(quant.Q4_K, 9, MatMulOptions{NoPrefillGEMM: true}); got != "f32-reorder" {
		t.Errorf("mmv tolerance class = %q", got)
	}
}

func TestMatMulTypes_CoverEveryDeviceWeightType(t *testing.T) {
	want := []quant.Type{quant.F32, quant.F16, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q8_0,
		quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.BF16}
	got := MatMulTypes()
	if len(got) != len(want) {
		t.Fatalf("MatMulTypes() = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("MatMulTypes() = %v, want %v", got, want)
		}
	}
}

func TestValidateMatMul_ErrorsNameTheOpAndValues(t *testing.T) {
	cases := []struct {
		t         quant.Type
		nt, k, n  int
		wantParts []string // "" = no error
	}{
		{quant.Q4_K, 1, 4096, 896, nil},
		{quant.Q4_0, 17, 544, 100, nil},
		{quant.F16, 9, 547, 33, nil}, // plain types: any k
		{quant.Q4_K, 1, 4000, 896, []string{"matmul", "k=4000", "Q4_K", "256"}},
		{quant.Q8_0, 1, 100, 8, []string{"matmul", "k=100", "Q8_0", "32"}},
		{quant.Q2_K, 1, 256, 8, []string{"matmul", "Q2_K", "no device kernel"}},
		{quant.Q4_0, 0, 32, 8, []string{"matmul", "nt=0"}},
		{quant.Q4_0, 1, 32, 0, []string{"matmul", "n=0"}},
	}
	for _, c := range cases {
		err := validateMatMul(c.t, c.nt, c.k, c.n)
		if c.wantParts == nil {
			if err != nil {
				t.Errorf("validateMatMul(%s, nt=%d, k=%d, n=%d) = %v, want nil", c.t, c.nt, c.k, c.n, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("validateMatMul(%s, nt=%d, k=%d, n=%d) = nil, want an error", c.t, c.nt, c.k, c.n)
			continue
		}
		for _, p := range c.wantParts {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("validateMatMul(%s, nt=%d, k=%d, n=%d) = %q, missing %q", c.t, c.nt, c.k, c.n, err, p)
			}
		}
	}
}

// kernelDefines reads the integer #defines of a kernel source.
func kernelDefines(t *testing.T, path string) (map[string]int, string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	defs := map[string]int{}
	re := regexp.MustCompile(`(?m)^#define (MINFER_[A-Z0-9_]+) +(-?[0-9]+)\b`)
	for _, m := range re.FindAllStringSubmatch(src, -1) {
		v, _ := strconv.Atoi(m[2])
		defs[m[1]] = v
	}
	return defs, src
}

func TestMatmulGeometry_MatchesKernelSources(t *testing.T) {
	mmv, mmvSrc := kernelDefines(t, "kernels/mmv.cu")
	gemm, gemmSrc := kernelDefines(t, "kernels/gemm.cu")
	for name, want := range map[string]int{"MINFER_MMV_ROWS": mmvRows, "MINFER_MMV_MAX_NT": mmvMaxNT} {
		if mmv[name] != want {
			t.Errorf("mmv.cu %s = %d, launcher has %d", name, mmv[name], want)
		}
	}
	if mmvThreads != 32*mmvRows {
		t.Errorf("mmvThreads = %d, want 32 * %d", mmvThreads, mmvRows)
	}
	for name, want := range map[string]int{"MINFER_GEMM_BM": gemmBM, "MINFER_GEMM_BN": gemmBN, "MINFER_GEMM_BK": gemmBK,
		"MINFER_GEMM_PAD": gemmPad, "MINFER_GEMM_CPAD": gemmCPad, "MINFER_GEMM_THREADS": gemmThreads} {
		if gemm[name] != want {
			t.Errorf("gemm.cu %s = %d, launcher has %d", name, gemm[name], want)
		}
	}
	mmvq, mmvqSrc := kernelDefines(t, "kernels/mmvq.cu")
	qact, qactSrc := kernelDefines(t, "kernels/quantize_act.cu")
	if mmvq["MINFER_MMVQ_ROWS"] != mmvqRows || mmvqThreads != 32*mmvqRows {
		t.Errorf("mmvq.cu MINFER_MMVQ_ROWS = %d, launcher has %d rows, %d threads", mmvq["MINFER_MMVQ_ROWS"], mmvqRows, mmvqThreads)
	}
	if qact["MINFER_QACT_BLOCKS"] != qactBlocks || qactThreads != 32*qactBlocks {
		t.Errorf("quantize_act.cu MINFER_QACT_BLOCKS = %d, launcher has %d blocks, %d threads", qact["MINFER_QACT_BLOCKS"], qactBlocks, qactThreads)
	}
	q81, _ := kernelDefines(t, "kernels/q8_1.cuh") // quantize_act.cu's and norm.cu's
	if mmvq["MINFER_MMVQ_Q8_1_BYTES"] != q8_1BlockBytes || q81["MINFER_Q8_1_BYTES"] != q8_1BlockBytes {
		t.Errorf("Q8_1 block bytes: mmvq.cu %d, q8_1.cuh %d, launcher %d", mmvq["MINFER_MMVQ_Q8_1_BYTES"], q81["MINFER_Q8_1_BYTES"], q8_1BlockBytes)
	}
	if !strings.Contains(qactSrc, quantizeQ8_1Kernel+"(") {
		t.Errorf("quantize_act.cu has no %s", quantizeQ8_1Kernel)
	}
	for ty, name := range mmvqTable {
		if m := "MINFER_MMVQ_KERNEL(" + strings.TrimPrefix(name, "minfer_mmvq_") + ","; !strings.Contains(mmvqSrc, m) {
			t.Errorf("%s: mmvq.cu has no %s", ty, m)
		}
		// The macro instantiates the fused forms under these names.
		for _, form := range []string{"qkv", "ffn"} {
			if got, want := mmvqFusedKernel(ty, form), "minfer_mmvq_"+form+"_"+strings.TrimPrefix(name, "minfer_mmvq_"); got != want {
				t.Errorf("%s: mmvqFusedKernel(%s) = %q, want %q", ty, form, got, want)
			}
			if m := "minfer_mmvq_" + form + "_##name("; !strings.Contains(mmvqSrc, m) {
				t.Errorf("mmvq.cu's MINFER_MMVQ_KERNEL has no %s", m)
			}
		}
	}
	if got := mmvqFusedKernel(quant.F16, "ffn"); got != "" {
		t.Errorf("mmvqFusedKernel(F16) = %q, want none", got)
	}
	// The kernel's smem layout, recomputed from its own constants.
	ldk := gemm["MINFER_GEMM_BK"] + gemm["MINFER_GEMM_PAD"]
	ldc := gemm["MINFER_GEMM_BN"] + gemm["MINFER_GEMM_CPAD"]
	kernelSmem := gemm["MINFER_GEMM_BN"]*ldk*2 + 2*gemm["MINFER_GEMM_BM"]*ldk*2 + gemm["MINFER_GEMM_BM"]*ldc*4
	if gemmSmemBytes() != kernelSmem {
		t.Errorf("gemmSmemBytes() = %d, the kernel layout is %d", gemmSmemBytes(), kernelSmem)
	}
	if gemmSmemBytes() <= defaultDynSmem {
		t.Logf("gemm smem %d bytes fits the default; PrepareMatmul opts nothing in", gemmSmemBytes())
	}
	// Every table entry is instantiated in the sources.
	for _, ty := range MatMulTypes() {
		ks := matmulTable[ty]
		mm := "MINFER_MMV_KERNEL(" + strings.TrimPrefix(ks.mmv, "minfer_mmv_") + ","
		gm := "MINFER_GEMM_KERNEL(" + strings.TrimPrefix(ks.gemm, "minfer_gemm_") + ","
		if !strings.Contains(mmvSrc, mm) {
			t.Errorf("%s: mmv.cu has no %s", ty, mm)
		}
		if !strings.Contains(gemmSrc, gm) {
			t.Errorf("%s: gemm.cu has no %s", ty, gm)
		}
	}
}

// The opt-in record lives on each Kernels (it used to be a process-wide
// sync.Map): a Kernels that did not run PrepareMatmul refuses the GEMM
// before touching its module, whatever another Kernels was opted in to.
func TestMatMulGEMM_UnpreparedKernelsRefusesAndOptInIsPerKernels(t *testing.T) {
	if gemmSmemBytes() <= defaultDynSmem {
		t.Skip("the GEMM needs no opt-in")
	}
	name := matmulTable[quant.Q8_0].gemm
	prepared, fresh := &Kernels{}, &Kernels{}
	prepared.setOptIn(name, gemmSmemBytes())
	if got := prepared.optedIn(name); got != gemmSmemBytes() {
		t.Fatalf("prepared.optedIn(%s) = %d, want %d", name, got, gemmSmemBytes())
	}
	if got := fresh.optedIn(name); got != 0 {
		t.Fatalf("fresh Kernels sees opt-in %d from another Kernels", got)
	}
	const p = driver.DevicePtr(0x1000)
	err := fresh.MatMul(nil, p, p, p, quant.Q8_0, 0, 64, 32, 16, MatMulOptions{})
	if err == nil || !strings.Contains(err.Error(), "not opted in") || !strings.Contains(err.Error(), name) {
		t.Fatalf("unprepared GEMM: error %v, want a refusal naming %s and the missing opt-in", err, name)
	}
}

// TestMatmulRoute_OneChoiceBehindEveryPathName (host): for every device
// weight type, token count and lever setting, the route the matmul ops
// take (routeFor) is the family of the kernel MatMulPath names, and a
// repacked copy changes the route only at decode.
func TestMatmulRoute_OneChoiceBehindEveryPathName(t *testing.T) {
	scratch := MatMulOptions{ActQ8: 0x10000, ActQ8Bytes: 1 << 20}
	optss := map[string]MatMulOptions{"none": {}, "scratch": scratch}
	for name, edit := range map[string]func(*MatMulOptions){
		"mmq": func(o *MatMulOptions) { o.MMQ = true }, "nt": func(o *MatMulOptions) { o.MMVQNT = true },
		"no-gemm": func(o *MatMulOptions) { o.NoPrefillGEMM, o.MMQ = true, true }, "no-q80": func(o *MatMulOptions) { o.NoQ80MMVQ = true },
	} {
		o := scratch
		edit(&o)
		optss[name] = o
	}
	for on, opts := range optss {
		for _, wt := range MatMulTypes() {
			for _, nt := range []int{1, 2, 8, 9, 512} {
				r, path := routeFor(wt, nt, opts), MatMulPath(wt, nt, opts)
				want := map[mmRoute]string{routeGEMM: matmulTable[wt].gemm, routeMMV: matmulTable[wt].mmv, routeMMQ: mmqTable[wt],
					routeMMVQNT: mmvqNTKernel(wt), routeMMVQ: mmvqTable[wt]}[r]
				if path == "" || path != want {
					t.Errorf("%s %s nt=%d: route %d names %q, MatMulPath %q", on, wt, nt, r, want, path)
				}
				b := &Backend{mm: opts}
				rp := b.matmulRoute(&devWeight{typ: wt, rp: 0x20000}, nt)
				if (rp == routeMMVQR) != (r == routeMMVQ) || (r != routeMMVQ && rp != r) {
					t.Errorf("%s %s nt=%d: with a repacked copy route %d, without %d", on, wt, nt, rp, r)
				}
			}
		}
	}
}
