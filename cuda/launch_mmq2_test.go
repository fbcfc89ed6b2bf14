package cuda

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/quant"
)

// TestMMQ2Geometry_MatchesKernelSource pins the v2 launcher to
// cuda/kernels/mmq2.cu: its tile #defines equal v1's launcher constants
// (the same plan and split-K serve both), its stage layout is v1's
// (MINFER_MMQ2_STAGE_BYTES is mmqSmemBytes' sum), the dynamic shared memory
// is mmq2Stages of it (the 128-row tile above 48 KiB, so opted in; two
// blocks of either tile fit an SM's 227 KiB), and every mmq2Table kernel,
// both tiles and their launch bounds are in the source.
func TestMMQ2Geometry_MatchesKernelSource(t *testing.T) {
	defs, src := kernelDefines(t, "kernels/mmq2.cu")
	for name, want := range map[string]int{"MINFER_MMQ2_ROWS": mmqRows, "MINFER_MMQ2_ROWS_SMALL": mmqRowsSmall,
		"MINFER_MMQ2_TOKS": mmqToks, "MINFER_MMQ2_KB": mmqKB, "MINFER_MMQ2_THREADS": mmqThreads,
		"MINFER_MMQ2_THREADS_SMALL": mmqThreadsSmall, "MINFER_MMQ2_Q8_1_BYTES": q8_1BlockBytes,
		"MINFER_MMQ2_STAGES": mmq2Stages} {
		if defs[name] != want {
			t.Errorf("mmq2.cu %s = %d, launcher has %d", name, defs[name], want)
		}
	}
	for _, m := range []string{
		"#define MINFER_MMQ2_LD (MINFER_MMQ2_KB + 16)",
		"(((R) + (M)) * MINFER_MMQ2_LD + 3 * (R) * MINFER_MMQ2_NB * 4 + 2 * (M) * MINFER_MMQ2_NB * 4)",
		"minfer_mmq2_body<T, 4, 2>", "minfer_mmq2_body<T, 2, 2>", "minfer_mmq2_##name##_r64(",
		"__launch_bounds__(MINFER_MMQ2_THREADS, 2)", "__launch_bounds__(MINFER_MMQ2_THREADS_SMALL, 4)",
		"Stage* sm = reinterpret_cast<Stage*>(minfer_mmq2_smem)",
	} {
		if !strings.Contains(src, m) {
			t.Errorf("mmq2.cu has no %q", m)
		}
	}
	if got, want := mmq2SmemBytes(mmqRows), 2*((128+64)*144+3*128*4*4+2*64*4*4); got != want || got != 71680 {
		t.Errorf("mmq2SmemBytes(%d) = %d, want %d (71680)", mmqRows, got, want)
	}
	if got := mmq2SmemBytes(mmqRowsSmall); got != 47104 {
		t.Errorf("mmq2SmemBytes(%d) = %d, want 47104", mmqRowsSmall, got)
	}
	if mmq2SmemBytes(mmqRows) <= defaultDynSmem {
		t.Errorf("the 128-row v2 tile (%d bytes) no longer needs the opt-in: PrepareMMQ2's comment is stale", mmq2SmemBytes(mmqRows))
	}
	// sm_90: 227 KiB per block at most, 228 KiB per SM with 1 KiB reserved per block.
	for rows, perSM := range map[int]int{mmqRows: mmqBigPerSM, mmqRowsSmall: mmqSmallPerSM} {
		if s := mmq2SmemBytes(rows); s > 227<<10 || perSM*(s+1024) > 228<<10 {
			t.Errorf("v2 %d-row tile: %d bytes x %d blocks do not fit an sm_90 SM", rows, s, perSM)
		}
	}
	if len(mmq2Table) != len(mmqTable) {
		t.Errorf("mmq2Table has %d types, mmqTable %d", len(mmq2Table), len(mmqTable))
	}
	for ty, name := range mmqTable {
		v2, ok := mmq2Table[ty]
		if !ok || v2 != strings.Replace(name, "minfer_mmq_", "minfer_mmq2_", 1) {
			t.Errorf("%s: v1 %s, v2 %q", ty, name, v2)
		}
		if m := "MINFER_MMQ2_KERNEL(" + strings.TrimPrefix(v2, "minfer_mmq2_") + ","; !strings.Contains(src, m) {
			t.Errorf("%s: mmq2.cu has no %s", ty, m)
		}
	}
}

// TestMatMulPath_MMQV2NamesV2OnlyWithLever: with MMQ and MMQV2 the prefill
// path of every MMQ type is minfer_mmq2_<type> (class
// activation-quantization-q8_1), and MMQKernelsOpts names the v2 tile
// variant of v1's plan (+ the same reduce); MMQV2 without MMQ, decode, and
// NoPrefillGEMM change nothing; MMQV2 off gives v1's names.
func TestMatMulPath_MMQV2NamesV2OnlyWithLever(t *testing.T) {
	const sms = 132
	v2 := MatMulOptions{MMQ: true, MMQV2: true}
	for _, ty := range MatMulTypes() {
		ks := matmulTable[ty]
		name, has := mmq2Table[ty]
		for _, nt := range []int{9, 77, 512} {
			got := MatMulPath(ty, nt, v2)
			if has && got != name || !has && got != ks.gemm {
				t.Errorf("%s nt=%d MMQ+V2: path %q", ty, nt, got)
			}
			if has {
				if c := MatMulTolerance(ty, nt, v2); c != "activation-quantization-q8_1" {
					t.Errorf("%s nt=%d MMQ+V2: class %q", ty, nt, c)
				}
				if got := MatMulPath(ty, nt, MatMulOptions{MMQ: true}); got != mmqTable[ty] {
					t.Errorf("%s nt=%d MMQ: path %q, want v1 %q", ty, nt, got, mmqTable[ty])
				}
			}
			if got := MatMulPath(ty, nt, MatMulOptions{MMQV2: true}); got != ks.gemm {
				t.Errorf("%s nt=%d V2 without MMQ: path %q, want the GEMM", ty, nt, got)
			}
			if got := MatMulPath(ty, nt, MatMulOptions{MMQ: true, MMQV2: true, NoPrefillGEMM: true}); got != ks.mmv {
				t.Errorf("%s nt=%d V2+NoPrefillGEMM: path %q, want %q", ty, nt, got, ks.mmv)
			}
		}
		if got := MatMulPath(ty, mmvMaxNT, v2); has && got == name {
			t.Errorf("%s nt=%d: v2 path at decode/mmv size", ty, mmvMaxNT)
		}
	}
	for _, c := range []struct {
		n, nt, k int
		want     string
	}{
		{3584, 512, 3584, "minfer_mmq2_q4_k"},
		{896, 512, 896, "minfer_mmq2_q4_k_r64"},
		{896, 9, 4864, "minfer_mmq2_q4_k_r64," + mmqReduceKernel},
	} {
		got := strings.Join(MMQKernelsOpts(quant.Q4_K, c.nt, c.k, c.n, sms, v2), ",")
		v1 := MMQKernels(quant.Q4_K, c.nt, c.k, c.n, sms)
		if got != c.want || strings.Join(MMQKernelsOpts(quant.Q4_K, c.nt, c.k, c.n, sms, MatMulOptions{MMQ: true}), ",") != strings.Join(v1, ",") {
			t.Errorf("n=%d nt=%d k=%d: v2 kernels %s (want %s), v1 %v", c.n, c.nt, c.k, got, c.want, v1)
		}
	}
}
