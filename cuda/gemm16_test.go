package cuda

// Tests of the f16 prefill matmul of a Q8_0 weight's one repacked copy (its
// only prefill route there since MINFER_MMQ_F16 retired) and of Q4_K / Q6_K
// weights (MINFER_MMQ_F16_KQ: gemm16.go, kernels/gemm16.cu). The device
// tests skip with a message when no device answers; the others need none.

import (
	"fmt"
	"math/rand"
	randv2 "math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
)

// TestGemm16Device_MatchesTheF16GEMMWithin2e3AndCensus: a backend matmul of a
// Q8_0 weight (its one copy repacked) at prefill runs minfer_f32_to_f16 and
// minfer_gemm16_q8_0r and no MMQ, and its output is
// within 2e-3 rel L2 of the f16 GEMM's (MINFER_MMQ=0: the same f16 weights,
// activations carried to ~22 bits; f16 activations differ by ~3e-4), for
// whole and partial tiles of rows and tokens, with and without the k split.
func TestGemm16Device_MatchesTheF16GEMMWithin2e3AndCensus(t *testing.T) {
	dsNeedDevice(t)
	r := rand.New(rand.NewSource(31))
	// The first three fill few blocks (k split in two); the last 165 blocks
	// on 132 SMs (one k range).
	for _, sh := range []struct{ k, m, nt int }{{768, 200, 64}, {1024, 384, 200}, {256, 136, 9}, {256, 4200, 520}} {
		xv := make([]float32, sh.k*sh.nt)
		for i := range xv {
			xv[i] = 2*r.Float32() - 1
		}
		wb, _ := mmtWeights(t, r, quant.Q8_0, sh.m, sh.k, 0.05)
		var outs [2][]float32
		// The reference arm keeps two copies: MINFER_MMQ=0 reads the GGUF
		// bytes, which one copy does not keep (New refuses the pair).
		for arm, extra := range [][]string{{"MINFER_ONE_COPY=1"}, {"MINFER_MMQ=0", "MINFER_ONE_COPY=0"}} {
			name := fmt.Sprintf("gemm16/k%d/m%d/nt%d/arm%d", sh.k, sh.m, sh.nt, arm)
			got, dev := gemm16MatMul(t, name, xv, wb, sh.k, sh.m, sh.nt, extra...)
			outs[arm] = got
			census := dev.Kernels().Census()
			if arm == 0 && (census[gemm16Kernel] == 0 || census[f32ToF16] == 0 || ad2Census(dev, "minfer_mmq_") != 0) {
				t.Errorf("%s: census %v: want %s and %s, no MMQ", name, census, gemm16Kernel, f32ToF16)
			}
		}
		rel := mfRelL2(outs[0], outs[1])
		t.Logf("k %d m %d nt %d: rel L2 (f16 GEMM of the repacked copy vs MINFER_MMQ=0) = %.3g", sh.k, sh.m, sh.nt, rel)
		if !(rel <= 2e-3) {
			t.Errorf("k %d m %d nt %d: rel L2 %.3g, bar 2e-3", sh.k, sh.m, sh.nt, rel)
		}
	}
}

// TestGemm16KQDevice_MatchesTheF16GEMMWithin2e3AndCensus: with
// MINFER_MMQ_F16_KQ=1 a prefill matmul of a Q4_K weight (its GGUF bytes)
// or a Q6_K weight (its one copy repacked: mmqLevers keeps two unless told) runs minfer_gemm16_q4_k /
// minfer_gemm16_q6_kr and no MMQ, within 2e-3 rel L2 of the f16 GEMM's
// (MINFER_MMQ=0), for whole and partial tiles, with and without the k
// split (the first two shapes fill few blocks).
func TestGemm16KQDevice_MatchesTheF16GEMMWithin2e3AndCensus(t *testing.T) {
	dsNeedDevice(t)
	r := rand.New(rand.NewSource(41))
	for _, wt := range []quant.Type{quant.Q4_K, quant.Q6_K} {
		kernel := gemm16Names[wt]
		for _, sh := range []struct{ k, m, nt int }{{768, 200, 64}, {256, 136, 9}, {1024, 4200, 520}} {
			xv := make([]float32, sh.k*sh.nt)
			for i := range xv {
				xv[i] = 2*r.Float32() - 1
			}
			wb, _ := mmtWeights(t, r, wt, sh.m, sh.k, 0.05)
			var outs [2][]float32
			for arm, extra := range [][]string{{"MINFER_MMQ_F16_KQ=1", "MINFER_ONE_COPY=1"}, {"MINFER_MMQ=0", "MINFER_ONE_COPY=0"}} {
				name := fmt.Sprintf("%s/k%d/m%d/nt%d/arm%d", kernel, sh.k, sh.m, sh.nt, arm)
				got, dev := gemm16MatMulOf(t, name, wt, xv, wb, sh.k, sh.m, sh.nt, extra...)
				outs[arm] = got
				census := dev.Kernels().Census()
				if arm == 0 && (census[kernel] == 0 || census[f32ToF16] == 0 || ad2Census(dev, "minfer_mmq_") != 0) {
					t.Errorf("%s: census %v: want %s and %s, no MMQ", name, census, kernel, f32ToF16)
				}
			}
			rel := mfRelL2(outs[0], outs[1])
			t.Logf("%s k %d m %d nt %d: rel L2 (f16 GEMM vs MINFER_MMQ=0) = %.3g", wt, sh.k, sh.m, sh.nt, rel)
			if !(rel <= 2e-3) {
				t.Errorf("%s k %d m %d nt %d: rel L2 %.3g, bar 2e-3", wt, sh.k, sh.m, sh.nt, rel)
			}
		}
	}
}

// TestGemm16KQDevice_MixedFusedOpsOneLaunchATypeBitwiseEqualUnfused: a fused
// q/k/v of a Q4_K_M layer (q, k Q4_K, v Q6_K) with MINFER_MMQ_F16_KQ=1
// converts x once and runs one launch a type, bitwise the unfused graph's
// three; the FFN's gate and up (Q4_K) one launch.
func TestGemm16KQDevice_MixedFusedOpsOneLaunchATypeBitwiseEqualUnfused(t *testing.T) {
	dsNeedDevice(t)
	r := randv2.New(randv2.NewPCG(73, 74))
	extra := []string{"MINFER_LAUNCH_CENSUS=1", "MINFER_NO_PREFILL_GEMM=0", "MINFER_MMQ_F16_KQ=1", "MINFER_ONE_COPY=1"}
	for _, ffn := range []bool{false, true} {
		g := &mfGraph{ffn: ffn, k: 512, m: 200, nt: 64}
		mfWeights(t, r, g, quant.Q4_K, quant.Q4_K, quant.Q6_K)
		name := fmt.Sprintf("gemm16kq/ffn=%v", ffn)
		cf, cu := gemm16FusedVsUnfused(t, name, g, extra)
		want6 := map[bool]int64{true: 0, false: 1}[ffn]
		if cf[gemm16Q4K] != 1 || cf[gemm16Q6KR] != want6 || cf[f32ToF16] != 1 || cu[f32ToF16] != map[bool]int64{true: 2, false: 3}[ffn] {
			t.Errorf("%s: census fused %v, unfused %v: want one %s, %d %s and one %s fused", name, cf, cu, gemm16Q4K, want6, gemm16Q6KR, f32ToF16)
		}
	}
}

// TestGemm16Device_FusedOpsOneLaunchBitwiseEqualUnfused: the fused q/k/v
// and FFN ops over Q8_0 weights' one copy convert x once and run their matmuls in
// one launch, bitwise the unfused graph's separate launches (shapes whose
// fused and unfused launches take the same k split: all under 132 blocks).
func TestGemm16Device_FusedOpsOneLaunchBitwiseEqualUnfused(t *testing.T) {
	dsNeedDevice(t)
	r := randv2.New(randv2.NewPCG(71, 72))
	kernel, extra := gemm16Kernel, []string{"MINFER_LAUNCH_CENSUS=1", "MINFER_NO_PREFILL_GEMM=0", "MINFER_ONE_COPY=1"}
	for _, ffn := range []bool{false, true} {
		for _, sh := range []struct{ nt, m, k int }{{64, 133, 256}, {200, 1100, 1024}} {
			g := &mfGraph{ffn: ffn, k: sh.k, m: sh.m, nt: sh.nt}
			mfWeights(t, r, g, quant.Q8_0, quant.Q8_0, quant.Q8_0)
			name := fmt.Sprintf("%s/ffn=%v/nt%d/m%d/k%d", kernel, ffn, sh.nt, sh.m, sh.k)
			cf, cu := gemm16FusedVsUnfused(t, name, g, extra)
			nw := map[bool]int64{true: 2, false: 3}[ffn]
			if cf[kernel] != 1 || cf[f32ToF16] != 1 || cu[kernel] != nw || cu[f32ToF16] != nw {
				t.Errorf("%s: census fused %v, unfused %v: want one %s and one %s fused, %d of each unfused", name, cf, cu,
					kernel, f32ToF16, nw)
			}
		}
	}
}

// gemm16MatMul runs y = W x on a backend with the census, prefill GEMMs and
// the settings extra: x nt rows of k values, W the Q8_0 bytes wb of m rows.
func gemm16MatMul(t *testing.T, name string, xv []float32, wb []byte, k, m, nt int, extra ...string) ([]float32, *Backend) {
	t.Helper()
	return gemm16MatMulOf(t, name, quant.Q8_0, xv, wb, k, m, nt, extra...)
}

// gemm16MatMulOf is gemm16MatMul of a weight of type wt.
func gemm16MatMulOf(t *testing.T, name string, wt quant.Type, xv []float32, wb []byte, k, m, nt int, extra ...string) ([]float32, *Backend) {
	t.Helper()
	var c dsCase
	c.nt, c.name = nt, name
	x := dsOperand(&c, "x", xv, k)
	c.weights = append(c.weights, graph.Weight{Name: "w", Type: wt, Dims: []int{k, m}, Data: wb})
	c.build = func(b *graph.Builder, ids, pos, kvw int) int { return b.MatMul("y", x(b, ids), "w", "", m) }
	dev := dsBackend(t, mmqLevers(t, append([]string{"MINFER_LAUNCH_CENSUS=1", "MINFER_NO_PREFILL_GEMM=0"}, extra...)...))
	got, err := dsRun(t, c, dev)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return got, dev
}

// The route: a Q8_0 weight whose repacked copy is its only one, at an MMQ
// shape, takes the f16 GEMM (a decode row keeps minfer_mmvqr); with its GGUF
// bytes kept (two copies, or none repacked) the int8 MMQ. MINFER_MMQ_F16_KQ
// beside MINFER_MMQ=0, MINFER_MMVQ_REPACK=0 or MINFER_NO_PREFILL_GEMM=1 is
// refused before the device opens; the plan's scratch holds the f16 rows;
// the Go geometry is the kernel's; the launchers refuse bad shapes and
// pointers by name; k is split in two exactly when the blocks would not
// fill the SMs once and k has two steps.
func TestGemm16_RouteRefusalsPlanAndSource(t *testing.T) {
	on := MatMulOptions{MMQ: true, MMVQNT: true, ActQ8: 0x2000, ActQ8Bytes: 1 << 20}
	b := &Backend{mm: on}
	// copies: 0 GGUF bytes only, 1 GGUF bytes and the repacked copy, 2 the
	// repacked copy only (MINFER_ONE_COPY).
	weight := func(typ quant.Type, copies int) *devWeight {
		w := &devWeight{typ: typ}
		if copies > 0 {
			w.rp = 0x1000
		}
		w.rpOnly = copies == 2
		return w
	}
	for _, c := range []struct {
		typ        quant.Type
		copies, nt int
		want       mmRoute
	}{
		{quant.Q8_0, 2, 64, routeGEMM16}, {quant.Q8_0, 1, 64, routeMMQ}, {quant.Q8_0, 0, 64, routeMMQ}, {quant.Q6_K, 2, 64, routeMMQ},
		{quant.Q8_0, 2, 1, routeMMVQR}, {quant.Q8_0, 2, 8, routeMMVQNT},
	} {
		if got := b.matmulRoute(weight(c.typ, c.copies), c.nt); got != c.want {
			t.Errorf("%s copies %d nt %d: route %d, want %d", c.typ, c.copies, c.nt, got, c.want)
		}
	}
	if (&Backend{mm: MatMulOptions{MMQ: true, NoPrefillGEMM: true}}).matmulRoute(weight(quant.Q8_0, 2), 64) == routeGEMM16 {
		t.Error("MINFER_NO_PREFILL_GEMM: a Q8_0 prefill must not take the f16 GEMM")
	}
	// MINFER_MMQ_F16_KQ: Q4_K from its GGUF bytes, Q6_K from its repacked
	// copy (none: MMQ); Q8_0 and the other types keep their routes.
	kq := &Backend{mm: MatMulOptions{MMQ: true, MMQF16KQ: true, MMVQNT: true}}
	for _, c := range []struct {
		typ    quant.Type
		copies int
		want   mmRoute
	}{
		{quant.Q4_K, 0, routeGEMM16}, {quant.Q6_K, 1, routeGEMM16}, {quant.Q6_K, 2, routeGEMM16}, {quant.Q6_K, 0, routeMMQ},
		{quant.Q8_0, 1, routeMMQ}, {quant.Q8_0, 2, routeGEMM16}, {quant.Q5_K, 0, routeMMQ},
	} {
		if got := kq.matmulRoute(weight(c.typ, c.copies), 64); got != c.want {
			t.Errorf("MINFER_MMQ_F16_KQ: %s copies %d: route %d, want %d", c.typ, c.copies, got, c.want)
		}
	}
	checkDefaultYieldsRefusedSet(t, "MINFER_MMQ_F16_KQ", []string{"MINFER_MMQ=0", "MINFER_MMVQ_REPACK=0", "MINFER_NO_PREFILL_GEMM=1"},
		func(c levers.Config) bool { return c.MMQF16KQ })
	const nt = 512
	// Two copies (MINFER_ONE_COPY=0): the int8 MMQ's Q8_1 scratch alone.
	base, f16 := planOf(t, "qwen2-7b", quant.Q8_0, 4096, kv.F16, "MINFER_ONE_COPY=0").Scratch, planOf(t, "qwen2-7b", quant.Q8_0, 4096, kv.F16).Scratch
	if want := 2 * Gemm16ActBytes(18944, nt); f16 < want || f16 <= base {
		t.Errorf("plan scratch %d with the one copy's f16 GEMM (%d with two copies): want more, and at least twice the widest f16 rows (%d)", f16, base, want)
	}
	kbase, kf16 := planOf(t, "qwen2-7b", quant.Q4_K, 4096, kv.F16, "MINFER_MMQ_F16_KQ=0").Scratch, planOf(t, "qwen2-7b", quant.Q4_K, 4096, kv.F16).Scratch
	if want := 2 * Gemm16ActBytes(18944, nt); kf16 < want || kf16 <= kbase {
		t.Errorf("Q4_K_M plan scratch %d with MINFER_MMQ_F16_KQ (%d without): want more, and at least twice the widest f16 rows (%d)", kf16, kbase, want)
	}
	src, err := os.ReadFile("kernels/gemm16.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		fmt.Sprintf(`constexpr int BM = %d, BN = %d, BK = 32, NT = %d;`, gemm16Toks, gemm16Rows, gemm16Threads),
		fmt.Sprintf(`constexpr int SEGS = %d;`, gemm16Segs),
		`const __half \*x16, int k, int nt, int ksplit, float \*out0, const uint8_t \*w0, const float \*bias0, int n0,\s+\\\s+float \*out1,`,
		`__launch_bounds__\(g16::NT, 2\) ` + gemm16Kernel + `\(MINFER_GEMM16_PARAMS\)`,
		f32ToF16 + `\(__half\* y, const float\* x, long long count\)`,
		`constexpr int WRS = BK \+ 16;`,
		`__launch_bounds__\(g16::NT, 2\) ` + gemm16Q4K + `\(MINFER_GEMM16_PARAMS\)`,
		`__launch_bounds__\(g16::NT, 2\) ` + gemm16Q6KR + `\(MINFER_GEMM16_PARAMS\)`,
	} {
		if !regexp.MustCompile(re).Match(src) {
			t.Errorf("kernels/gemm16.cu has no %q", re)
		}
	}
	for _, c := range []struct{ blocks, sms, k, want int }{
		{112, 132, 3584, 2}, {132, 132, 64, 2}, {133, 132, 3584, 1}, {144, 132, 3584, 1}, {16, 132, 32, 1}, {4 * 296, 132, 3584, 1},
	} {
		if got := gemm16Split(c.blocks, c.sms, c.k); got != c.want {
			t.Errorf("gemm16Split(%d blocks, %d SMs, k %d) = %d, want %d", c.blocks, c.sms, c.k, got, c.want)
		}
	}
	k := &Kernels{dev: &driver.Device{Attr: driver.Attributes{SMCount: 132}}}
	const p = driver.DevicePtr(0x1000)
	for _, c := range []struct {
		name, want string
		err        error
	}{
		{"k not a multiple of 32", "k=48", k.MatMulF16(nil, p, 64, 48, quant.Q8_0, []Gemm16Seg{{Out: p, W: p, N: 128}})},
		{"misaligned weight", "gemm16", k.MatMulF16(nil, p, 64, 64, quant.Q8_0, []Gemm16Seg{{Out: p, W: p + 8, N: 128}})},
		{"misaligned f16 rows", "gemm16", k.MatMulF16(nil, p+8, 64, 64, quant.Q8_0, []Gemm16Seg{{Out: p, W: p, N: 128}})},
		{"no output", "gemm16", k.MatMulF16(nil, p, 64, 64, quant.Q8_0, []Gemm16Seg{{W: p, N: 128}})},
		{"a bad second matmul", "gemm16", k.MatMulF16(nil, p, 64, 64, quant.Q8_0, []Gemm16Seg{{Out: p, W: p, N: 128}, {Out: p, W: p + 4, N: 64}})},
		{"no matmul", "1 to 3", k.MatMulF16(nil, p, 64, 64, quant.Q8_0, nil)},
		{"four matmuls", "1 to 3", k.MatMulF16(nil, p, 64, 64, quant.Q8_0, make([]Gemm16Seg, 4))},
		{"too many weight tiles", "65,535", k.MatMulF16(nil, p, 64, 64, quant.Q8_0, []Gemm16Seg{{Out: p, W: p, N: 128 * 65536}})},
		{"Q4_K k not a multiple of 256", "k=288", k.MatMulF16(nil, p, 64, 288, quant.Q4_K, []Gemm16Seg{{Out: p, W: p, N: 128}})},
		{"a type it does not take", "no f16 GEMM for Q5_K", k.MatMulF16(nil, p, 64, 256, quant.Q5_K, []Gemm16Seg{{Out: p, W: p, N: 128}})},
		{"count not a multiple of 4", "f32_to_f16", k.ConvertF16(nil, p, p, 6)},
		{"misaligned f32 rows", "f32_to_f16", k.ConvertF16(nil, p, p+4, 8)},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want a refusal naming %q", c.name, c.err, c.want)
		}
	}
}

// gemm16FusedVsUnfused runs g fused and unfused on backends of the settings
// extra, fails the test where any output differs bitwise, and returns each
// run's census delta.
func gemm16FusedVsUnfused(t *testing.T, name string, g *mfGraph, extra []string) (fusedCensus, unfusedCensus map[string]int64) {
	t.Helper()
	unfusedDev := dsBackend(t, mmqLevers(t, extra...))
	var unfused, fused []float32
	unfusedCensus = mfCensusDelta(unfusedDev, func() { unfused = mfRun(t, g, unfusedDev, false) })
	dev := dsBackend(t, mmqLevers(t, extra...))
	fusedCensus = mfCensusDelta(dev, func() { fused = mfRun(t, g, dev, true) })
	if bad := mfBitwiseBad(t, name, fused, unfused); bad != 0 {
		t.Errorf("%s: %d of %d outputs differ from the unfused graph's", name, bad, len(fused))
	}
	return fusedCensus, unfusedCensus
}
