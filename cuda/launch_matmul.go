package cuda

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/quant"
)

// MatMulOptions selects among the matmul paths.
type MatMulOptions struct {
	// NoPrefillGEMM (MINFER_NO_PREFILL_GEMM) runs prefill (nt >= 9) through
	// the per-type mmv kernel, looped over chunks of at most 8 tokens,
	// instead of the f16 tensor-core GEMM.
	NoPrefillGEMM bool
	// NoQ80MMVQ (MINFER_NO_Q80_MMVQ: Q8_0), NoQ40MMVQ (MINFER_NO_Q40_MMVQ:
	// the legacy 32-value formats Q4_0, Q4_1, Q5_0 and Q5_1) and NoKQMMVQ
	// (MINFER_NO_KQ_MMVQ: Q4_K and Q6_K) run decode (nt = 1) of those weight
	// types through the f32-activation mmv kernel instead of the
	// Q8_1-activation mmvq kernel (and its fused q/k/v and FFN forms).
	NoQ80MMVQ bool
	NoQ40MMVQ bool
	NoKQMMVQ  bool
	// ActQ8 is a device scratch of ActQ8Bytes bytes (4-byte aligned) that
	// the mmvq path quantizes the activation row into (k / 32 Q8_1 blocks of
	// 36 bytes). The mmvq path is taken only when it is set: the Backend
	// owns one (sized at weight registration for its largest k), callers
	// without one (kernel-level tests) get the mmv path. A set scratch that
	// is too small for k is an error, never a fallback.
	ActQ8      driver.DevicePtr
	ActQ8Bytes uint64
	// InlineQ8 runs the decode mmvq path in its in-kernel form where the
	// shape allows it (Kernels.MMVQInline): the minfer_mmvqx_* kernels
	// quantize the f32 activation row into shared memory themselves, so
	// there is no minfer_quantize_q8_1 launch and no scratch; the results
	// are bitwise the two-launch form's. Off (the zero value, and the
	// shapes it does not take), decode mmvq is minfer_quantize_q8_1 into
	// ActQ8 and then the mmvq kernel. With InlineQ8 set the mmvq path runs
	// without ActQ8 for the shapes the in-kernel form takes.
	InlineQ8 bool
	// MMQ (MINFER_MMQ, default on) runs prefill (nt >= 9) of the types in
	// mmqTable through the int8 tensor-core kernel over Q8_1 activations
	// (launch_mmq.go) in MMQAct (MMQActBytes >= ActQ8Bytes(k, nt), grown by
	// the Backend; a missing or small one is an error, not a fallback).
	MMQ         bool
	MMQAct      driver.DevicePtr
	MMQActBytes uint64
	// MMVQNT (MINFER_MMVQ_NT, default on) runs matmuls of 2..8 tokens of the
	// mmvq types (their mmvq lever off) as minfer_quantize_q8_1 of the nt
	// rows into ActQ8 (ActQ8Bytes(k, nt)) + minfer_mmvq_nt_<t>
	// (launch_mmvqnt.go) instead of the f32-activation mmv kernel.
	MMVQNT bool
	// MMVQSplit (MINFER_MMVQ_SPLIT) runs decode mmvq matmuls (plain, _res_
	// and fused q/k/v, GGUF and repacked) of few rows in the split form,
	// several warps per row (launch_mmvqsplit.go: Kernels.MMVQSplit).
	MMVQSplit bool
}

// mmvqTable names the decode kernels over Q8_1 activations
// (cuda/kernels/mmvq.cu) of the weight types that have one.
var mmvqTable = map[quant.Type]string{
	quant.Q8_0: "minfer_mmvq_q8_0",
	quant.Q4_0: "minfer_mmvq_q4_0",
	quant.Q4_1: "minfer_mmvq_q4_1",
	quant.Q5_0: "minfer_mmvq_q5_0",
	quant.Q5_1: "minfer_mmvq_q5_1",
	quant.Q4_K: "minfer_mmvq_q4_k",
	quant.Q6_K: "minfer_mmvq_q6_k",
}

// mmvqFusedKernel names the fused form ("qkv" or "ffn") of a type's mmvq
// kernel (cuda/kernels/mmvq.cu instantiates all three per type).
func mmvqFusedKernel(wtype quant.Type, form string) string {
	name, ok := mmvqTable[wtype]
	if !ok {
		return ""
	}
	return "minfer_mmvq_" + form + "_" + strings.TrimPrefix(name, "minfer_mmvq_")
}

// quantizeQ8_1Kernel quantizes f32 activation rows to Q8_1
// (cuda/kernels/quantize_act.cu).
const quantizeQ8_1Kernel = "minfer_quantize_q8_1"

// q8_1BlockBytes is the size of one Q8_1 block (f16 d, f16 s, 32 int8).
const q8_1BlockBytes = 36

// ActQ8Bytes is the scratch the mmvq path needs for nt activation rows of
// k values (k a multiple of 32; 0 otherwise).
func ActQ8Bytes(k, nt int) uint64 {
	if k <= 0 || nt <= 0 || k%quant.QK != 0 {
		return 0
	}
	return uint64(k/quant.QK) * q8_1BlockBytes * uint64(nt)
}

// mmvqOn reports whether the mmvq kernel of wtype is enabled by opts (its
// lever not set and a scratch given).
func mmvqOn(wtype quant.Type, opts MatMulOptions) bool {
	if _, ok := mmvqTable[wtype]; !ok || (opts.ActQ8 == 0 && !opts.InlineQ8) {
		return false
	}
	switch wtype {
	case quant.Q8_0:
		return !opts.NoQ80MMVQ
	case quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1:
		return !opts.NoQ40MMVQ
	case quant.Q4_K, quant.Q6_K:
		return !opts.NoKQMMVQ
	}
	return false
}

// Launch geometry; these mirror the #defines of cuda/kernels/mmv.cu and
// cuda/kernels/gemm.cu (TestMatmulGeometry_MatchesKernelSources pins them).
const (
	mmvMaxNT   = 8   // MINFER_MMV_MAX_NT: the largest nt one mmv launch takes
	mmvRows    = 4   // MINFER_MMV_ROWS: output rows (warps) per block
	mmvThreads = 128 // MINFER_MMV_THREADS

	mmvqRows    = 4   // MINFER_MMVQ_ROWS: output rows (warps) per block
	mmvqThreads = 128 // MINFER_MMVQ_THREADS
	qactBlocks  = 4   // MINFER_QACT_BLOCKS: Q8_1 blocks (warps) per block
	qactThreads = 128 // MINFER_QACT_THREADS

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
// tokens. Decode (nt = 1) of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K and Q6_K
// runs the mmvq kernel (after minfer_quantize_q8_1) when its lever is off
// and opts.ActQ8 is set; 2..8 tokens of those types run minfer_mmvq_nt_<t>
// (after minfer_quantize_q8_1 of the nt rows) when opts.MMVQNT is set too.
// Prefill (nt >= 9) of the mmqTable types runs
// minfer_mmq_<type> (after minfer_quantize_q8_1) when opts.MMQ is set and
// NoPrefillGEMM is not; F32, F16 and BF16 keep the f16 GEMM. With
// opts.MMVQSplit the decode mmvq kernel named here runs in its split form
// (minfer_mmvq_s_<t>) for the row counts Kernels.MMVQSplit picks; the name
// stays the family's, and the tolerance class too.
func MatMulPath(wtype quant.Type, nt int, opts MatMulOptions) string {
	ks := matmulTable[wtype]
	switch routeFor(wtype, nt, opts) {
	case routeMMVQ:
		return mmvqTable[wtype]
	case routeMMVQNT:
		return mmvqNTKernel(wtype)
	case routeMMV:
		return ks.mmv
	case routeMMQ:
		return mmqTable[wtype]
	case routeGEMM:
		return ks.gemm
	}
	return ""
}

// MatMulTolerance names the tolerance class of the path MatMul takes
// against the CPU reference (GATES.md): "f32-reorder" for the mmv kernels
// (f32 FMAs, only the accumulation order differs), "f16-weight-tile" for
// the GEMM (each dequantized weight is rounded to f16: |err| <= 2^-11 *
// sum_i |w_i x_i| per output), "activation-quantization-q8_1" for the mmvq
// kernels (the activations are rounded to Q8_1 as the CPU's quantizer does;
// the integer dot products are exact).
func MatMulTolerance(wtype quant.Type, nt int, opts MatMulOptions) string {
	ks, ok := matmulTable[wtype]
	if !ok || nt < 1 {
		return ""
	}
	switch MatMulPath(wtype, nt, opts) {
	case ks.gemm:
		return "f16-weight-tile"
	case mmvqTable[wtype], mmqTable[wtype], mmvqNTKernel(wtype):
		return "activation-quantization-q8_1"
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
		k.setOptIn(name, smem)
	}
	return nil
}

// setOptIn records that kernel name was opted in to smem bytes of dynamic
// shared memory. The record lives on the Kernels (one module), not in a
// process-wide map, so a second device or a reloaded module starts clean.
func (k *Kernels) setOptIn(name string, smem int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.optIn == nil {
		k.optIn = map[string]int{}
	}
	k.optIn[name] = smem
}

// optedIn is the dynamic shared memory kernel name was opted in to (0: none).
func (k *Kernels) optedIn(name string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.optIn[name]
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
	switch routeFor(wtype, nt, opts) {
	case routeGEMM:
		return k.launchGemm(s, name, out, x, w, bias, nt, kDim, n)
	case routeMMQ:
		return k.launchMMQ(s, name, out, x, w, wtype, bias, nt, kDim, n, opts)
	case routeMMVQNT:
		return k.launchMMVQNT(s, wtype, out, x, w, bias, nt, kDim, n, opts)
	case routeMMVQ:
		if k.MMVQInline(kDim, n, opts) {
			return k.mmvqxPlain(s, out, x, w, wtype, bias, kDim, n, 0)
		}
		return k.launchMMVQ(s, wtype, out, x, w, bias, kDim, n, opts)
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
	if smem > defaultDynSmem && k.optedIn(name) < smem {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d: needs %d bytes of dynamic shared memory and was not opted in "+
			"(call Kernels.PrepareMatmul at init, before any capture window)", name, nt, kDim, n, smem)
	}
	grid := [3]uint32{uint32((n + gemmBN - 1) / gemmBN), uint32(gy), 1}
	block := [3]uint32{gemmThreads, 1, 1}
	if err := k.launch(s, name, grid, block, uint32(smem), out, x, w, bias, int32(kDim), int32(n), int32(nt)); err != nil {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d: %w", name, nt, kDim, n, err)
	}
	return nil
}

// launchMMVQ quantizes the one activation row x to Q8_1 into opts.ActQ8,
// then runs the mmvq kernel over it (both on s, so a capture records both).
func (k *Kernels) launchMMVQ(s *driver.Stream, wtype quant.Type, out, x, w, bias driver.DevicePtr, kDim, n int,
	opts MatMulOptions) error {
	name := mmvqTable[wtype]
	need := ActQ8Bytes(kDim, 1)
	if need == 0 || opts.ActQ8Bytes < need || uint64(opts.ActQ8)%4 != 0 {
		return fmt.Errorf("matmul %s k=%d n=%d: activation scratch %v of %d bytes (needs %d bytes, 4-byte aligned)",
			name, kDim, n, opts.ActQ8, opts.ActQ8Bytes, need)
	}
	if err := k.QuantizeQ8_1(s, opts.ActQ8, x, kDim, 1); err != nil {
		return fmt.Errorf("matmul %s k=%d n=%d: %w", name, kDim, n, err)
	}
	if k.MMVQSplit(n, opts) {
		return k.MatMulQ8_1S(s, out, opts.ActQ8, opts.ActQ8Bytes, w, wtype, bias, 0, kDim, n)
	}
	return k.MatMulQ8_1(s, out, opts.ActQ8, opts.ActQ8Bytes, w, wtype, bias, kDim, n)
}

// mmvqAlign is the weight base alignment the mmvq kernels read with: the
// Q4_K quants are loaded 16 bytes at a time, every other type's fields 2 or
// 4 (cuda/kernels/mmvq.cu); device allocations are 256-byte aligned.
func mmvqAlign(wtype quant.Type) uint64 {
	if wtype == quant.Q4_K {
		return 16
	}
	return 4
}

// checkMMVQ validates one mmvq weight and the quantized activation xq
// (xqBytes bytes) for a row length kDim.
func checkMMVQ(op string, xq driver.DevicePtr, xqBytes uint64, w driver.DevicePtr, wtype quant.Type, kDim, n int) error {
	if _, ok := mmvqTable[wtype]; !ok {
		return fmt.Errorf("%s: weight type %s has no mmvq kernel", op, wtype)
	}
	if err := validateMatMul(wtype, 1, kDim, n); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	need := ActQ8Bytes(kDim, 1)
	if need == 0 || xq == 0 || xqBytes < need || uint64(xq)%4 != 0 {
		return fmt.Errorf("%s %s k=%d n=%d: Q8_1 activation %v of %d bytes (needs %d bytes, 4-byte aligned)",
			op, wtype, kDim, n, xq, xqBytes, need)
	}
	if a := mmvqAlign(wtype); w == 0 || uint64(w)%a != 0 {
		return fmt.Errorf("%s %s k=%d n=%d: weight pointer %v is null or not %d-byte aligned", op, wtype, kDim, n, w, a)
	}
	return nil
}

// MatMulQ8_1 is the second half of the decode mmvq path: out[j] = W[j] . a
// (+ bias[j]) for an activation row a already quantized to Q8_1 at xq
// (xqBytes bytes, QuantizeQ8_1 of kDim values). Several matmuls of one input
// (q/k/v, gate/up) quantize it once and call this for each weight.
func (k *Kernels) MatMulQ8_1(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w driver.DevicePtr, wtype quant.Type,
	bias driver.DevicePtr, kDim, n int) error {
	if err := checkMMVQ("matmul_q8_1", xq, xqBytes, w, wtype, kDim, n); err != nil {
		return err
	}
	if out == 0 || uint64(out)%4 != 0 || uint64(bias)%4 != 0 {
		return fmt.Errorf("matmul_q8_1 %s k=%d n=%d: null or misaligned output %v / bias %v", wtype, kDim, n, out, bias)
	}
	name := mmvqTable[wtype]
	grid := [3]uint32{uint32((n + mmvqRows - 1) / mmvqRows), 1, 1}
	block := [3]uint32{mmvqThreads, 1, 1}
	if err := k.launch(s, name, grid, block, 0, out, xq, w, bias, int32(kDim), int32(n)); err != nil {
		return fmt.Errorf("matmul %s nt=1 k=%d n=%d: %w", name, kDim, n, err)
	}
	return nil
}

// MatMulQ8_1QKV runs the q, k and v projections of one Q8_1 activation row
// in one launch (minfer_mmvq_qkv_<type>): out holds n[0] + n[1] + n[2]
// values, q then k then v, each row bitwise what MatMulQ8_1 gives for it.
// The three weights share wtype and kDim; a bias may be 0.
func (k *Kernels) MatMulQ8_1QKV(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w [3]driver.DevicePtr,
	wtype quant.Type, bias [3]driver.DevicePtr, kDim int, n [3]int) error {
	total := 0
	for i := range w {
		if err := checkMMVQ("matmul_q8_1_qkv", xq, xqBytes, w[i], wtype, kDim, n[i]); err != nil {
			return fmt.Errorf("weight %d: %w", i, err)
		}
		if uint64(bias[i])%4 != 0 {
			return fmt.Errorf("matmul_q8_1_qkv: bias %d %v is misaligned", i, bias[i])
		}
		total += n[i]
	}
	if out == 0 || uint64(out)%4 != 0 || total > math.MaxInt32 {
		return fmt.Errorf("matmul_q8_1_qkv %s k=%d n=%v: null or misaligned output %v, or too many rows", wtype, kDim, n, out)
	}
	name := mmvqFusedKernel(wtype, "qkv")
	grid := [3]uint32{uint32((total + mmvqRows - 1) / mmvqRows), 1, 1}
	block := [3]uint32{mmvqThreads, 1, 1}
	if err := k.launch(s, name, grid, block, 0, out, xq, w[0], w[1], w[2], bias[0], bias[1], bias[2],
		int32(kDim), int32(n[0]), int32(n[1]), int32(n[2])); err != nil {
		return fmt.Errorf("matmul %s nt=1 k=%d n=%v: %w", name, kDim, n, err)
	}
	return nil
}

// FFNQ8_1 is the fused SwiGLU FFN of one Q8_1 activation row in one launch
// (minfer_mmvq_ffn_<type>): out[j] = silu(Wg[j] . a) * (Wu[j] . a) for j < n,
// the gate and up dot products bitwise MatMulQ8_1's and silu and the
// product as minfer_swiglu_f32 computes them. Gate and up share wtype.
func (k *Kernels) FFNQ8_1(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, wg, wu driver.DevicePtr,
	wtype quant.Type, kDim, n int) error {
	for i, w := range []driver.DevicePtr{wg, wu} {
		if err := checkMMVQ("ffn_q8_1", xq, xqBytes, w, wtype, kDim, n); err != nil {
			return fmt.Errorf("weight %d: %w", i, err)
		}
	}
	if out == 0 || uint64(out)%4 != 0 {
		return fmt.Errorf("ffn_q8_1 %s k=%d n=%d: null or misaligned output %v", wtype, kDim, n, out)
	}
	name := mmvqFusedKernel(wtype, "ffn")
	grid := [3]uint32{uint32((n + mmvqRows - 1) / mmvqRows), 1, 1}
	block := [3]uint32{mmvqThreads, 1, 1}
	if err := k.launch(s, name, grid, block, 0, out, xq, wg, wu, int32(kDim), int32(n)); err != nil {
		return fmt.Errorf("ffn %s nt=1 k=%d n=%d: %w", name, kDim, n, err)
	}
	return nil
}

// QuantizeQ8_1 writes nt rows of kDim f32 at x as Q8_1 blocks to dst
// (ActQ8Bytes(kDim, nt) bytes, 4-byte aligned): the bytes
// quant.Quantize(quant.Q8_1, row) gives for each row, rows back to back.
func (k *Kernels) QuantizeQ8_1(s *driver.Stream, dst, x driver.DevicePtr, kDim, nt int) error {
	if kDim <= 0 || nt <= 0 || kDim%quant.QK != 0 {
		return fmt.Errorf("quantize_q8_1: k=%d nt=%d: k must be a positive multiple of %d", kDim, nt, quant.QK)
	}
	blocks := uint64(kDim/quant.QK) * uint64(nt)
	if uint64(kDim)*uint64(nt) > math.MaxInt32 {
		return fmt.Errorf("quantize_q8_1: k=%d nt=%d exceeds the kernel's int32 range", kDim, nt)
	}
	if dst == 0 || x == 0 || uint64(dst)%4 != 0 || uint64(x)%4 != 0 {
		return fmt.Errorf("quantize_q8_1: null or misaligned device pointer (dst=%v x=%v; both need 4-byte alignment)", dst, x)
	}
	if k.qx4 {
		return k.quantizeQ8_1X4(s, dst, x, kDim, nt, blocks)
	}
	grid := [3]uint32{uint32((blocks + qactBlocks - 1) / qactBlocks), 1, 1}
	block := [3]uint32{qactThreads, 1, 1}
	if err := k.launch(s, quantizeQ8_1Kernel, grid, block, 0, dst, x, int32(kDim), int32(nt)); err != nil {
		return fmt.Errorf("quantize_q8_1 k=%d nt=%d: %w", kDim, nt, err)
	}
	return nil
}

// In-kernel quantization (minfer_mmvqx_*: cuda/kernels/mmvq.cu). Each block
// quantizes the f32 row into shared memory and then runs one row per warp,
// striding over the rows, so the geometry trades the separate launch
// (~1.2 us plus a ~1 us graph-node gap) against every block re-reading
// the f32 row (4k bytes) from L2 before its first weight load.
const (
	mmvqxMaxWarps = 16 // MINFER_MMVQX_MAX_THREADS / 32
	mmvqxMinWarps = 4
	// mmvqxWarpsPerSM is the residency the grid cap assumes (64 warps, the
	// sm_90 maximum): blocks beyond it would only re-quantize.
	mmvqxWarpsPerSM = 64
	// mmvqxPrologueBudget bounds the f32 activation bytes the resident
	// blocks of one SM re-read: about 0.5 us of one SM's L2 bandwidth, well
	// under the launch it replaces. Shapes above it (7B's ffn_down, k =
	// 18944: 448 blocks x 74 KiB over 132 SMs = 257 KiB per SM) keep the
	// two-launch form.
	mmvqxPrologueBudget = 64 << 10
)

// mmvqxSmem is the dynamic shared memory of the mmvqx kernels for row
// length k: k int8 quants and k / 32 f32 scales (MINFER_MMVQX_SMEM).
func mmvqxSmem(kDim int) int { return kDim + 4*(kDim/quant.QK) }

// mmvqxForms are the kernel-name infixes of the three forms.
var mmvqxForms = map[string]string{"": "minfer_mmvqx_", "qkv": "minfer_mmvqx_qkv_", "ffn": "minfer_mmvqx_ffn_"}

// mmvqxKernel names the in-kernel-quantization form ("", "qkv" or "ffn")
// of a type's mmvq kernel ("" for a type without one).
func mmvqxKernel(wtype quant.Type, form string) string {
	name, ok := mmvqTable[wtype]
	prefix, okf := mmvqxForms[form]
	if !ok || !okf {
		return ""
	}
	return prefix + strings.TrimPrefix(name, "minfer_mmvq_")
}

// mmvqxGeom is the launch of an mmvqx kernel over rows output rows of
// length kDim on a device of sms SMs: warps (rows) per block, blocks, and
// whether the in-kernel form takes the shape at all. Blocks are the
// largest warp count (16, 8, 4) that still gives two blocks per SM, capped
// at one residency's worth; the shape is taken when the smem fits the
// default 48 KiB (no opt-in: every k of qwen2 up to 72B does, 7B's 18944
// needs 21 KiB) and the re-read f32 bytes per SM stay in the budget.
func mmvqxGeom(kDim, rows, sms int) (warps, blocks int, ok bool) {
	if kDim <= 0 || kDim%quant.QK != 0 || rows <= 0 || sms <= 0 {
		return 0, 0, false
	}
	warps = mmvqxMinWarps
	for w := mmvqxMaxWarps; w > mmvqxMinWarps; w /= 2 {
		if (rows+w-1)/w >= 2*sms {
			warps = w
			break
		}
	}
	blocks = min((rows+warps-1)/warps, sms*(mmvqxWarpsPerSM/warps))
	if mmvqxSmem(kDim) > defaultDynSmem {
		return warps, blocks, false
	}
	return warps, blocks, uint64(blocks)*uint64(kDim)*4 <= uint64(sms)*mmvqxPrologueBudget
}

// MMVQInline reports whether a decode mmvq matmul (or fused form) of rows
// output rows of length kDim runs in-kernel quantization (minfer_mmvqx_*)
// under opts on this device, rather than minfer_quantize_q8_1 + mmvq.
func (k *Kernels) MMVQInline(kDim, rows int, opts MatMulOptions) bool {
	if !opts.InlineQ8 || k.dev == nil {
		return false
	}
	_, _, ok := mmvqxGeom(kDim, rows, k.dev.Attr.SMCount)
	return ok
}

// mmvqxLaunch checks the common arguments of the three mmvqx forms and
// returns the geometry. xq (tests) receives block 0's Q8_1 row when set.
func (k *Kernels) mmvqxLaunch(op string, x, xq driver.DevicePtr, kDim, rows int) (grid, block [3]uint32, smem uint32, err error) {
	if x == 0 || uint64(x)%4 != 0 || uint64(xq)%4 != 0 {
		return grid, block, 0, fmt.Errorf("%s k=%d rows=%d: null or misaligned activation %v (or Q8_1 dump %v)", op, kDim, rows, x, xq)
	}
	sms := 0
	if k.dev != nil {
		sms = k.dev.Attr.SMCount
	}
	warps, blocks, ok := mmvqxGeom(kDim, rows, sms)
	if !ok && (warps == 0 || mmvqxSmem(kDim) > defaultDynSmem) {
		return grid, block, 0, fmt.Errorf("%s: k=%d rows=%d on %d SMs: the in-kernel form needs %d bytes of shared memory "+
			"(at most %d; larger k takes minfer_quantize_q8_1 + mmvq)", op, kDim, rows, sms, mmvqxSmem(kDim), defaultDynSmem)
	}
	// Over the prologue budget is only slower, so a direct call may still
	// run it (the tests do); MatMul and the backend ask MMVQInline first.
	return [3]uint32{uint32(blocks), 1, 1}, [3]uint32{uint32(32 * warps), 1, 1}, uint32(mmvqxSmem(kDim)), nil
}

// mmvqxPlain is MatMulQ8_1 of the f32 row x with the quantization in the
// kernel (minfer_mmvqx_<type>): out bitwise what QuantizeQ8_1 + MatMulQ8_1
// give.
func (k *Kernels) mmvqxPlain(s *driver.Stream, out, x, w driver.DevicePtr, wtype quant.Type, bias driver.DevicePtr,
	kDim, n int, xq driver.DevicePtr) error {
	if err := checkMMVQWeight("matmul_x", w, wtype, kDim, n); err != nil {
		return err
	}
	if out == 0 || uint64(out)%4 != 0 || uint64(bias)%4 != 0 {
		return fmt.Errorf("matmul_x %s k=%d n=%d: null or misaligned output %v / bias %v", wtype, kDim, n, out, bias)
	}
	grid, block, smem, err := k.mmvqxLaunch("matmul_x", x, xq, kDim, n)
	if err != nil {
		return err
	}
	name := mmvqxKernel(wtype, "")
	if err := k.launch(s, name, grid, block, smem, out, x, w, bias, int32(kDim), int32(n), xq); err != nil {
		return fmt.Errorf("matmul %s nt=1 k=%d n=%d: %w", name, kDim, n, err)
	}
	return nil
}

// mmvqxQKV is MatMulQ8_1QKV of the f32 row x with the quantization in the
// kernel (minfer_mmvqx_qkv_<type>).
func (k *Kernels) mmvqxQKV(s *driver.Stream, out, x driver.DevicePtr, w [3]driver.DevicePtr, wtype quant.Type,
	bias [3]driver.DevicePtr, kDim int, n [3]int, xq driver.DevicePtr) error {
	total := 0
	for i := range w {
		if err := checkMMVQWeight("matmul_x_qkv", w[i], wtype, kDim, n[i]); err != nil {
			return fmt.Errorf("weight %d: %w", i, err)
		}
		if uint64(bias[i])%4 != 0 {
			return fmt.Errorf("matmul_x_qkv: bias %d %v is misaligned", i, bias[i])
		}
		total += n[i]
	}
	if out == 0 || uint64(out)%4 != 0 || total > math.MaxInt32 {
		return fmt.Errorf("matmul_x_qkv %s k=%d n=%v: null or misaligned output %v, or too many rows", wtype, kDim, n, out)
	}
	grid, block, smem, err := k.mmvqxLaunch("matmul_x_qkv", x, xq, kDim, total)
	if err != nil {
		return err
	}
	name := mmvqxKernel(wtype, "qkv")
	if err := k.launch(s, name, grid, block, smem, out, x, w[0], w[1], w[2], bias[0], bias[1], bias[2],
		int32(kDim), int32(n[0]), int32(n[1]), int32(n[2]), xq); err != nil {
		return fmt.Errorf("matmul %s nt=1 k=%d n=%v: %w", name, kDim, n, err)
	}
	return nil
}

// mmvqxFFN is FFNQ8_1 of the f32 row x with the quantization in the kernel
// (minfer_mmvqx_ffn_<type>).
func (k *Kernels) mmvqxFFN(s *driver.Stream, out, x, wg, wu driver.DevicePtr, wtype quant.Type, kDim, n int,
	xq driver.DevicePtr) error {
	for i, w := range []driver.DevicePtr{wg, wu} {
		if err := checkMMVQWeight("ffn_x", w, wtype, kDim, n); err != nil {
			return fmt.Errorf("weight %d: %w", i, err)
		}
	}
	if out == 0 || uint64(out)%4 != 0 {
		return fmt.Errorf("ffn_x %s k=%d n=%d: null or misaligned output %v", wtype, kDim, n, out)
	}
	grid, block, smem, err := k.mmvqxLaunch("ffn_x", x, xq, kDim, n)
	if err != nil {
		return err
	}
	name := mmvqxKernel(wtype, "ffn")
	if err := k.launch(s, name, grid, block, smem, out, x, wg, wu, int32(kDim), int32(n), xq); err != nil {
		return fmt.Errorf("ffn %s nt=1 k=%d n=%d: %w", name, kDim, n, err)
	}
	return nil
}

// checkMMVQWeight validates one mmvq weight (type, shape, alignment).
func checkMMVQWeight(op string, w driver.DevicePtr, wtype quant.Type, kDim, n int) error {
	if _, ok := mmvqTable[wtype]; !ok {
		return fmt.Errorf("%s: weight type %s has no mmvq kernel", op, wtype)
	}
	if err := validateMatMul(wtype, 1, kDim, n); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if a := mmvqAlign(wtype); w == 0 || uint64(w)%a != 0 {
		return fmt.Errorf("%s %s k=%d n=%d: weight pointer %v is null or not %d-byte aligned", op, wtype, kDim, n, w, a)
	}
	return nil
}
