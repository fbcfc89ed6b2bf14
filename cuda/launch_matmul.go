package cuda

import (
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/quant"
)

// MatMulOptions selects among the matmul paths.
type MatMulOptions struct {
	// NoPrefillGEMM (MINFER_NO_PREFILL_GEMM) runs prefill (nt >= 9) through
	// the per-type mmv kernel, looped over chunks of at most 8 tokens,
	// instead of the f16 tensor-core GEMM.
	NoPrefillGEMM bool
}

// Launch geometry; these mirror the #defines of cuda/kernels/mmv.cu and
// cuda/kernels/gemm.cu (TestMatmulGeometry_MatchesKernelSources pins them).
const (
	mmvMaxNT   = 8   // MINFER_MMV_MAX_NT: the largest nt one mmv launch takes
	mmvRows    = 4   // MINFER_MMV_ROWS: output rows (warps) per block
	mmvThreads = 128 // MINFER_MMV_THREADS

	gemmBM      = 64  // MINFER_GEMM_BM: tokens per block tile
	gemmBN      = 128 // MINFER_GEMM_BN: weight rows per block tile
	gemmBK      = 32  // MINFER_GEMM_BK
	gemmPad     = 8   // MINFER_GEMM_PAD (halves)
	gemmCPad    = 4   // MINFER_GEMM_CPAD (floats)
	gemmThreads = 256 // MINFER_GEMM_THREADS

	// defaultDynSmem is the dynamic shared memory a kernel may use without
	// an opt-in.
	defaultDynSmem = 48 << 10
	// maxGridY bounds the gemm's token-tile grid dimension.
	maxGridY = 65535
)

// gemmSmemBytes is the gemm kernels' dynamic shared memory: the f16 weight
// tile, the hi and lo f16 activation tiles and the f32 output staging tile
// (MINFER_GEMM_SMEM_BYTES).
func gemmSmemBytes() int {
	ldk := gemmBK + gemmPad
	ldc := gemmBN + gemmCPad
	return gemmBN*ldk*2 + 2*gemmBM*ldk*2 + gemmBM*ldc*4
}

// matmulKernels names the kernels of one weight type.
type matmulKernels struct {
	mmv  string // decode / small batch, nt 1..8 (and the NoPrefillGEMM prefill)
	gemm string // prefill, nt >= 9: f16 tensor-core GEMM
}

// matmulTable is the dispatch table: every weight type the device matmul
// reads, and its kernels.
var matmulTable = map[quant.Type]matmulKernels{
	quant.F32:  {"minfer_mmv_f32", "minfer_gemm_f32"},
	quant.F16:  {"minfer_mmv_f16", "minfer_gemm_f16"},
	quant.BF16: {"minfer_mmv_bf16", "minfer_gemm_bf16"},
	quant.Q4_0: {"minfer_mmv_q4_0", "minfer_gemm_q4_0"},
	quant.Q4_1: {"minfer_mmv_q4_1", "minfer_gemm_q4_1"},
	quant.Q5_0: {"minfer_mmv_q5_0", "minfer_gemm_q5_0"},
	quant.Q5_1: {"minfer_mmv_q5_1", "minfer_gemm_q5_1"},
	quant.Q8_0: {"minfer_mmv_q8_0", "minfer_gemm_q8_0"},
	quant.Q4_K: {"minfer_mmv_q4_k", "minfer_gemm_q4_k"},
	quant.Q5_K: {"minfer_mmv_q5_k", "minfer_gemm_q5_k"},
	quant.Q6_K: {"minfer_mmv_q6_k", "minfer_gemm_q6_k"},
}

// MatMulTypes lists the weight types the device matmul supports, in type-id
// order (for eligibility checks and test sweeps).
func MatMulTypes() []quant.Type {
	ts := make([]quant.Type, 0, len(matmulTable))
	for t := range matmulTable {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	return ts
}

// MatMulPath returns the name of the kernel MatMul launches for wtype and
// nt tokens ("" for a type without a device matmul or nt < 1). The
// NoPrefillGEMM prefill runs that one kernel once per chunk of up to 8
// tokens.
func MatMulPath(wtype quant.Type, nt int, opts MatMulOptions) string {
	ks, ok := matmulTable[wtype]
	if !ok || nt < 1 {
		return ""
	}
	if nt <= mmvMaxNT || opts.NoPrefillGEMM {
		return ks.mmv
	}
	return ks.gemm
}

// MatMulTolerance names the tolerance class of the path MatMul takes
// against the CPU reference (GATES.md): "f32-reorder" for the mmv kernels
// (f32 FMAs, only the accumulation order differs), "f16-weight-tile" for
// the GEMM (each dequantized weight is rounded to f16: |err| <= 2^-11 *
// sum_i |w_i x_i| per output).
func MatMulTolerance(wtype quant.Type, nt int, opts MatMulOptions) string {
	ks, ok := matmulTable[wtype]
	if !ok || nt < 1 {
		return ""
	}
	if MatMulPath(wtype, nt, opts) == ks.gemm {
		return "f16-weight-tile"
	}
	return "f32-reorder"
}

// validateMatMul checks the shape and type of one matmul; errors name the
// op and the values.
func validateMatMul(wtype quant.Type, nt, kDim, n int) error {
	if _, ok := matmulTable[wtype]; !ok {
		return fmt.Errorf("matmul: weight type %s (id %d) has no device kernel", wtype, uint32(wtype))
	}
	if nt < 1 || kDim < 1 || n < 1 {
		return fmt.Errorf("matmul: empty shape nt=%d k=%d n=%d (%s)", nt, kDim, n, wtype)
	}
	if bs := wtype.BlockSize(); kDim%bs != 0 {
		return fmt.Errorf("matmul: k=%d is not a multiple of the %s block size %d", kDim, wtype, bs)
	}
	if kDim > math.MaxInt32 || n > math.MaxInt32 || nt > math.MaxInt32 {
		return fmt.Errorf("matmul: shape nt=%d k=%d n=%d (%s) exceeds the kernels' int32 range", nt, kDim, n, wtype)
	}
	rowBytes := uint64(kDim/wtype.BlockSize()) * uint64(wtype.BlockBytes())
	if rowBytes*uint64(n) > math.MaxInt64/2 {
		return fmt.Errorf("matmul: weight of %d rows x %d bytes (%s) is too large", n, rowBytes, wtype)
	}
	return nil
}

// matmulAlign is the byte alignment each device pointer must have: f32 for
// x, out, bias; the weight's natural element alignment (GGUF blocks are
// read byte-wise, F32 / F16 / BF16 rows element-wise).
func matmulAlign(wtype quant.Type) uint64 {
	switch wtype {
	case quant.F32:
		return 4
	case quant.F16, quant.BF16:
		return 2
	}
	return 1
}

// matmulOptIn records, per loaded kernel function, the dynamic shared
// memory it was opted in to by PrepareMatmul (keyed by *driver.Function,
// which Kernels caches per module).
var matmulOptIn sync.Map // *driver.Function -> int

// PrepareMatmul does every dynamic-shared-memory opt-in the matmul kernels
// need (the GEMM's tile exceeds the 48 KiB default). Call it once at init,
// inside dev.Do and before any capture window can open: MatMul never sets
// an attribute and refuses to launch an un-opted configuration.
func (k *Kernels) PrepareMatmul() error {
	smem := gemmSmemBytes()
	for _, t := range MatMulTypes() {
		name := matmulTable[t].gemm
		f, err := k.Function(name)
		if err != nil {
			return fmt.Errorf("matmul: prepare: %w", err)
		}
		if smem > defaultDynSmem {
			if err := f.SetMaxDynamicSmem(smem); err != nil {
				return fmt.Errorf("matmul: prepare %s: opt-in to %d bytes of dynamic shared memory: %w", name, smem, err)
			}
		}
		matmulOptIn.Store(f, smem)
	}
	return nil
}

// MatMul computes out[t][j] = sum_i W[j][i] * x[t][i] (+ bias[j]) on s for
// t < nt, j < n, i < kDim: w holds n rows of kDim values of wtype in their
// GGUF block layout, x nt rows of kDim f32, out nt rows of n f32; bias is n
// f32 or 0 for none. nt <= 8 (or opts.NoPrefillGEMM) runs the per-type mmv
// kernel, larger nt the f16 tensor-core GEMM (MatMulPath says which).
// Errors name the op, the kernel and the values; nothing falls back.
func (k *Kernels) MatMul(s *driver.Stream, out, x, w driver.DevicePtr, wtype quant.Type, bias driver.DevicePtr,
	nt, kDim, n int, opts MatMulOptions) error {
	if err := validateMatMul(wtype, nt, kDim, n); err != nil {
		return err
	}
	if out == 0 || x == 0 || w == 0 {
		return fmt.Errorf("matmul: null device pointer (out=%v x=%v w=%v) for %s nt=%d k=%d n=%d", out, x, w, wtype, nt, kDim, n)
	}
	if a := matmulAlign(wtype); uint64(w)%a != 0 || uint64(out)%4 != 0 || uint64(x)%4 != 0 || uint64(bias)%4 != 0 {
		return fmt.Errorf("matmul: misaligned device pointer (out=%v x=%v w=%v bias=%v; %s weights need %d-byte alignment, f32 data 4)",
			out, x, w, bias, wtype, a)
	}
	name := MatMulPath(wtype, nt, opts)
	ks := matmulTable[wtype]
	if name == ks.gemm {
		return k.launchGemm(s, name, out, x, w, bias, nt, kDim, n)
	}
	block := [3]uint32{mmvThreads, 1, 1}
	grid := [3]uint32{uint32((n + mmvRows - 1) / mmvRows), 1, 1}
	for t0 := 0; t0 < nt; t0 += mmvMaxNT {
		c := min(mmvMaxNT, nt-t0)
		o := out.Add(uint64(t0) * uint64(n) * 4)
		xi := x.Add(uint64(t0) * uint64(kDim) * 4)
		if err := k.launch(s, name, grid, block, 0, o, xi, w, bias, int32(kDim), int32(n), int32(c)); err != nil {
			return fmt.Errorf("matmul %s nt=%d k=%d n=%d (tokens %d..%d): %w", name, nt, kDim, n, t0, t0+c-1, err)
		}
	}
	return nil
}

func (k *Kernels) launchGemm(s *driver.Stream, name string, out, x, w, bias driver.DevicePtr, nt, kDim, n int) error {
	gy := (nt + gemmBM - 1) / gemmBM
	if gy > maxGridY {
		return fmt.Errorf("matmul %s: nt=%d needs %d token tiles, above the grid limit %d", name, nt, gy, maxGridY)
	}
	smem := gemmSmemBytes()
	f, err := k.Function(name)
	if err != nil {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d: %w", name, nt, kDim, n, err)
	}
	if smem > defaultDynSmem {
		v, ok := matmulOptIn.Load(f)
		if !ok || v.(int) < smem {
			return fmt.Errorf("matmul %s nt=%d k=%d n=%d: needs %d bytes of dynamic shared memory and was not opted in "+
				"(call Kernels.PrepareMatmul at init, before any capture window)", name, nt, kDim, n, smem)
		}
	}
	grid := [3]uint32{uint32((n + gemmBN - 1) / gemmBN), uint32(gy), 1}
	block := [3]uint32{gemmThreads, 1, 1}
	if err := k.launch(s, name, grid, block, uint32(smem), out, x, w, bias, int32(kDim), int32(n), int32(nt)); err != nil {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d: %w", name, nt, kDim, n, err)
	}
	return nil
}
