package cuda

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/quant"
)

// TestMatMulPath_MMVQNTNamesKernelPerLeverState (host): with MMVQNT and a
// Q8_1 scratch, 2..8 tokens of every mmvq type name minfer_mmvq_nt_<t> in
// the activation-quantization class; nt = 1 keeps minfer_mmvq_<t>, nt = 9
// the prefill path; the lever off, the type's mmvq lever set, no scratch
// (the in-kernel form alone) or a type without mmvq keep the mmv kernel.
func TestMatMulPath_MMVQNTNamesKernelPerLeverState(t *testing.T) {
	sc := MatMulOptions{ActQ8: 256, ActQ8Bytes: ActQ8Bytes(4096, mmvqntMaxNT)}
	on := sc
	on.MMVQNT = true
	for _, wt := range mmvqTypes {
		if mmvqNTMissing[wt] {
			continue // below
		}
		sfx := strings.TrimPrefix(mmvqTable[wt], "minfer_mmvq_")
		for nt := mmvqntMinNT; nt <= mmvqntMaxNT; nt++ {
			if got, want := MatMulPath(wt, nt, on), "minfer_mmvq_nt_"+sfx; got != want {
				t.Errorf("MatMulPath(%s, nt=%d, lever on) = %q, want %q", wt, nt, got, want)
			}
			if got := MatMulTolerance(wt, nt, on); got != "activation-quantization-q8_1" {
				t.Errorf("MatMulTolerance(%s, nt=%d, lever on) = %q", wt, nt, got)
			}
			if got, want := MatMulPath(wt, nt, sc), matmulTable[wt].mmv; got != want {
				t.Errorf("MatMulPath(%s, nt=%d, lever off) = %q, want %q", wt, nt, got, want)
			}
			if got := MatMulTolerance(wt, nt, sc); got != "f32-reorder" {
				t.Errorf("MatMulTolerance(%s, nt=%d, lever off) = %q", wt, nt, got)
			}
		}
		if got := MatMulPath(wt, 1, on); got != mmvqTable[wt] {
			t.Errorf("MatMulPath(%s, nt=1, lever on) = %q, want the decode kernel %q", wt, got, mmvqTable[wt])
		}
		if got := MatMulPath(wt, 9, on); got != matmulTable[wt].gemm {
			t.Errorf("MatMulPath(%s, nt=9, lever on) = %q, want %q", wt, got, matmulTable[wt].gemm)
		}
	}
	noScratch := MatMulOptions{MMVQNT: true}
	typeLever := on
	typeLever.NoKQMMVQ = true
	if got := MatMulPath(quant.Q5_K, 1, on); got != "minfer_mmvq_q5_k" {
		t.Errorf("MatMulPath(Q5_K, nt=1) = %q, want the decode kernel", got)
	}
	if got := MatMulTolerance(quant.Q5_K, 4, on); got != "f32-reorder" {
		t.Errorf("MatMulTolerance(Q5_K, nt=4) = %q: the mmv kernel's class", got)
	}
	for _, c := range []struct {
		wt   quant.Type
		opts MatMulOptions
		want string
	}{
		{quant.Q8_0, noScratch, "minfer_mmv_q8_0"},     // no scratch to quantize nt rows into
		{quant.Q4_K, typeLever, "minfer_mmv_q4_k"},     // MINFER_NO_KQ_MMVQ
		{quant.Q6_K, typeLever, "minfer_mmv_q6_k"},     // MINFER_NO_KQ_MMVQ
		{quant.Q8_0, typeLever, "minfer_mmvq_nt_q8_0"}, // another type's lever
		{quant.Q5_K, typeLever, "minfer_mmv_q5_k"},     // MINFER_NO_KQ_MMVQ
		{quant.Q5_K, on, "minfer_mmv_q5_k"},            // no multi-token kernel
		{quant.F16, on, "minfer_mmv_f16"},
	} {
		if got := MatMulPath(c.wt, 4, c.opts); got != c.want {
			t.Errorf("MatMulPath(%s, nt=4, %+v) = %q, want %q", c.wt, c.opts, got, c.want)
		}
	}
	if actQ8Rows(on) != mmvqntMaxNT || actQ8Rows(sc) != 1 {
		t.Errorf("actQ8Rows: lever on %d, off %d; want %d and 1", actQ8Rows(on), actQ8Rows(sc), mmvqntMaxNT)
	}
}

// TestMMVQNT_LaunchersRefuseBadArgumentsBeforeLaunch (host): an nt outside
// 2..8, a short or misaligned scratch, a misaligned weight, a type without
// mmvq are errors from the checks (a Kernels without a module would fail
// any launch), through MatMulQ8_1NT and through MatMul.
func TestMMVQNT_LaunchersRefuseBadArgumentsBeforeLaunch(t *testing.T) {
	k := &Kernels{}
	const kd, n = 896, 128
	full := ActQ8Bytes(kd, mmvqntMaxNT)
	cases := []struct {
		err  error
		want string
	}{
		{k.MatMulQ8_1NT(nil, 0x1000, 0x2000, full, 0x3000, quant.Q8_0, 0, 1, kd, n), "takes 2..8 tokens"},
		{k.MatMulQ8_1NT(nil, 0x1000, 0x2000, full, 0x3000, quant.Q8_0, 0, 9, kd, n), "takes 2..8 tokens"},
		{k.MatMulQ8_1NT(nil, 0x1000, 0x2000, ActQ8Bytes(kd, 4)-1, 0x3000, quant.Q8_0, 0, 4, kd, n), "Q8_1 activation"},
		{k.MatMulQ8_1NT(nil, 0x1000, 0x2002, full, 0x3000, quant.Q8_0, 0, 4, kd, n), "Q8_1 activation"},
		{k.MatMulQ8_1NT(nil, 0x1000, 0x2000, full, 0x3008, quant.Q4_K, 0, 4, 1024, n), "16-byte aligned"},
		{k.MatMulQ8_1NT(nil, 0x1000, 0x2000, full, 0x3000, quant.Q5_K, 0, 4, 1024, n), "no multi-token mmvq kernel"},
		{k.MatMulQ8_1NT(nil, 0x1000, 0x2000, full, 0x3000, quant.F16, 0, 4, 1024, n), "no multi-token mmvq kernel"},
		{k.MatMulQ8_1NT(nil, 0x1000, 0x2000, full, 0x3000, quant.Q8_0, 0, 4, 100, n), "block size"},
		{k.MatMulQ8_1NT(nil, 0x1002, 0x2000, full, 0x3000, quant.Q8_0, 0, 4, kd, n), "misaligned output"},
		{k.launchMMVQNT(nil, quant.Q8_0, 0x1000, 0x4000, 0x3000, 0, 9, kd, n,
			MatMulOptions{MMVQNT: true, ActQ8: 0x2000, ActQ8Bytes: full}), "takes 2..8 tokens"},
		{k.MatMul(nil, 0x1000, 0x4000, 0x3000, quant.Q8_0, 0, 5, kd, n,
			MatMulOptions{MMVQNT: true, ActQ8: 0x2000, ActQ8Bytes: ActQ8Bytes(kd, 5) - 1}), "activation scratch"},
		{k.MatMul(nil, 0x1000, 0x4000, 0x3000, quant.Q6_K, 0, 8, 1792, n,
			MatMulOptions{MMVQNT: true, ActQ8: 0x2000, ActQ8Bytes: ActQ8Bytes(1792, 1)}), "activation scratch"},
	}
	for i, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("case %d: err %v, want one containing %q", i, c.err, c.want)
		}
	}
}

// TestMMVQNTGeometry_MatchesKernelSource (host): the launcher's geometry,
// nt range and kernel names are those of cuda/kernels/mmvq_nt.cu, and the
// nt range is the one the mmv kernels it replaces cover above decode.
func TestMMVQNTGeometry_MatchesKernelSource(t *testing.T) {
	defs, src := kernelDefines(t, "kernels/mmvq_nt.cu")
	for name, want := range map[string]int{"MINFER_MMVQNT_ROWS": mmvqntRows, "MINFER_MMVQNT_MIN_NT": mmvqntMinNT,
		"MINFER_MMVQNT_MAX_NT": mmvqntMaxNT} {
		if defs[name] != want {
			t.Errorf("mmvq_nt.cu %s = %d, launcher has %d", name, defs[name], want)
		}
	}
	if mmvqntThreads != 32*mmvqntRows {
		t.Errorf("mmvqntThreads = %d, want 32 * %d", mmvqntThreads, mmvqntRows)
	}
	if mmvqntMaxNT != mmvMaxNT || mmvqntMinNT != 2 {
		t.Errorf("nt range %d..%d, the mmv kernels take up to %d", mmvqntMinNT, mmvqntMaxNT, mmvMaxNT)
	}
	if !strings.Contains(src, "minfer_mmvq_nt_##name(") {
		t.Errorf("mmvq_nt.cu's MINFER_MMVQNT_KERNEL does not define minfer_mmvq_nt_##name")
	}
	for ty, name := range mmvqTable {
		sfx := strings.TrimPrefix(name, "minfer_mmvq_")
		if mmvqNTMissing[ty] {
			if m := "MINFER_MMVQNT_KERNEL(" + sfx + ","; strings.Contains(src, m) {
				t.Errorf("%s: mmvq_nt.cu has %s but mmvqNTMissing lists it", ty, m)
			}
			continue
		}
		if m := "MINFER_MMVQNT_KERNEL(" + sfx + ","; !strings.Contains(src, m) {
			t.Errorf("%s: mmvq_nt.cu has no %s", ty, m)
		}
		if got, want := mmvqNTKernel(ty), "minfer_mmvq_nt_"+sfx; got != want {
			t.Errorf("mmvqNTKernel(%s) = %q, want %q", ty, got, want)
		}
	}
	if got := mmvqNTKernel(quant.Q5_K); got != "" {
		t.Errorf("mmvqNTKernel(Q5_K) = %q, want none", got)
	}
}
