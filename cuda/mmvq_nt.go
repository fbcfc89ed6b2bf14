package cuda

// mmvq_nt.go: MINFER_MMVQ_NT (opt-in). A matmul of 2..8 tokens of an
// mmvq weight type quantizes its nt activation rows to Q8_1 (one
// minfer_quantize_q8_1 launch into the Q8_1 scratch, sized for 8 rows while
// the lever is on) and runs minfer_mmvq_nt_<t> (cuda/kernels/mmvq_nt.cu):
// the weight bytes read once for all nt tokens with integer dot products,
// each token's outputs bitwise minfer_mmvq_<t>'s on that token's Q8_1 row.
// Off: those matmuls keep the f32-activation minfer_mmv_<t> kernels.

import (
	"fmt"
	"math"
	"strings"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/quant"
)

// Launch geometry of minfer_mmvq_nt_<t>; mirrors mmvq_nt.cu's #defines
// (TestMMVQNTGeometry_MatchesKernelSource pins them).
const (
	mmvqntRows    = 4   // MINFER_MMVQNT_ROWS: output rows (warps) per block
	mmvqntThreads = 128 // MINFER_MMVQNT_THREADS
	mmvqntMinNT   = 2   // MINFER_MMVQNT_MIN_NT
	mmvqntMaxNT   = 8   // MINFER_MMVQNT_MAX_NT
)

// mmvqNTMissing are the mmvq types mmvq_nt.cu has no multi-token kernel
// for (its per-type structs are not mmvq.cu's): their 2..8-token matmuls
// keep the f32-activation minfer_mmv_<t>. Q5_K's decode MMVQ became the
// default in session 11; a minfer_mmvq_nt_q5_k would follow its own A/B.
var mmvqNTMissing = map[quant.Type]bool{quant.Q5_K: true}

// mmvqNTKernel names the multi-token mmvq kernel of wtype ("" for a type
// without one: no mmvq kernel, or in mmvqNTMissing).
func mmvqNTKernel(wtype quant.Type) string {
	name, ok := mmvqTable[wtype]
	if !ok || mmvqNTMissing[wtype] {
		return ""
	}
	return "minfer_mmvq_nt_" + strings.TrimPrefix(name, "minfer_mmvq_")
}

// mmvqNTOn reports whether a matmul of wtype over nt tokens takes the
// multi-token mmvq path: the lever on, 2 <= nt <= 8, the type's mmvq lever
// off (mmvqOn) and a Q8_1 scratch given (the in-kernel form alone is not
// enough: the nt rows are quantized into the scratch).
func mmvqNTOn(wtype quant.Type, nt int, opts MatMulOptions) bool {
	return opts.MMVQNT && nt >= mmvqntMinNT && nt <= mmvqntMaxNT && opts.ActQ8 != 0 && mmvqOn(wtype, opts) &&
		mmvqNTKernel(wtype) != ""
}

// launchMMVQNT quantizes the nt activation rows x into opts.ActQ8, then
// runs minfer_mmvq_nt_<t> over them (both on s, so a capture records both).
func (k *Kernels) launchMMVQNT(s *driver.Stream, wtype quant.Type, out, x, w, bias driver.DevicePtr, nt, kDim, n int,
	opts MatMulOptions) error {
	name := mmvqNTKernel(wtype)
	if nt < mmvqntMinNT || nt > mmvqntMaxNT {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d: the multi-token mmvq kernel takes %d..%d tokens",
			name, nt, kDim, n, mmvqntMinNT, mmvqntMaxNT)
	}
	need := ActQ8Bytes(kDim, nt)
	if need == 0 || opts.ActQ8 == 0 || opts.ActQ8Bytes < need || uint64(opts.ActQ8)%4 != 0 {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d: activation scratch %v of %d bytes (needs %d bytes, 4-byte aligned)",
			name, nt, kDim, n, opts.ActQ8, opts.ActQ8Bytes, need)
	}
	if err := k.QuantizeQ8_1(s, opts.ActQ8, x, kDim, nt); err != nil {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d: %w", name, nt, kDim, n, err)
	}
	return k.MatMulQ8_1NT(s, out, opts.ActQ8, opts.ActQ8Bytes, w, wtype, bias, nt, kDim, n)
}

// MatMulQ8_1NT is the second half of the multi-token mmvq path: out[t][j] =
// W[j] . a_t (+ bias[j]) for t < nt (2..8), j < n, over nt activation rows
// already quantized to Q8_1 at xq (xqBytes >= ActQ8Bytes(kDim, nt), rows back
// to back as QuantizeQ8_1 writes them). Several matmuls of one input
// (q/k/v, gate/up) quantize it once and call this for each weight. Every
// check runs before the launch.
func (k *Kernels) MatMulQ8_1NT(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w driver.DevicePtr,
	wtype quant.Type, bias driver.DevicePtr, nt, kDim, n int) error {
	return k.matMulQ8_1NT(false, s, out, xq, xqBytes, w, wtype, bias, nt, kDim, n)
}

// MatMulQ8_1NTR is MatMulQ8_1NT over the repacked copy w (RepackHost's
// layout, 16-byte aligned; MINFER_ONE_COPY) of a Q8_0 / Q6_K matrix:
// minfer_mmvq_nt_<t>r, bitwise MatMulQ8_1NT of the GGUF bytes.
func (k *Kernels) MatMulQ8_1NTR(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w driver.DevicePtr,
	wtype quant.Type, bias driver.DevicePtr, nt, kDim, n int) error {
	return k.matMulQ8_1NT(true, s, out, xq, xqBytes, w, wtype, bias, nt, kDim, n)
}

func (k *Kernels) matMulQ8_1NT(repacked bool, s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w driver.DevicePtr,
	wtype quant.Type, bias driver.DevicePtr, nt, kDim, n int) error {
	name, align := mmvqNTKernel(wtype), mmvqAlign(wtype)
	if repacked {
		name, align = "", mmvqrAlign
		if MMVQRepackable(wtype) && mmvqNTKernel(wtype) != "" {
			name = mmvqNTKernel(wtype) + "r"
		}
	}
	if name == "" {
		return fmt.Errorf("matmul_q8_1_nt: weight type %s has no multi-token mmvq kernel (repacked=%v)", wtype, repacked)
	}
	if nt < mmvqntMinNT || nt > mmvqntMaxNT {
		return fmt.Errorf("matmul_q8_1_nt %s nt=%d k=%d n=%d: the multi-token mmvq kernel takes %d..%d tokens",
			wtype, nt, kDim, n, mmvqntMinNT, mmvqntMaxNT)
	}
	if err := validateMatMul(wtype, nt, kDim, n); err != nil {
		return fmt.Errorf("matmul_q8_1_nt: %w", err)
	}
	if uint64(nt)*uint64(n) > math.MaxInt32 {
		return fmt.Errorf("matmul_q8_1_nt %s nt=%d n=%d: output exceeds the kernel's int32 range", wtype, nt, n)
	}
	need := ActQ8Bytes(kDim, nt)
	if need == 0 || xq == 0 || xqBytes < need || uint64(xq)%4 != 0 {
		return fmt.Errorf("matmul_q8_1_nt %s nt=%d k=%d n=%d: Q8_1 activation %v of %d bytes (needs %d bytes, 4-byte aligned)",
			wtype, nt, kDim, n, xq, xqBytes, need)
	}
	if w == 0 || uint64(w)%align != 0 {
		return fmt.Errorf("matmul_q8_1_nt %s k=%d n=%d: weight pointer %v is null or not %d-byte aligned", wtype, kDim, n, w, align)
	}
	if out == 0 || uint64(out)%4 != 0 || uint64(bias)%4 != 0 {
		return fmt.Errorf("matmul_q8_1_nt %s nt=%d k=%d n=%d: null or misaligned output %v / bias %v", wtype, nt, kDim, n, out, bias)
	}
	grid := [3]uint32{uint32((n + mmvqntRows - 1) / mmvqntRows), 1, 1}
	block := [3]uint32{mmvqntThreads, 1, 1}
	if err := k.launch(s, name, grid, block, 0, out, xq, w, bias, int32(kDim), int32(n), int32(nt)); err != nil {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d: %w", name, nt, kDim, n, err)
	}
	return nil
}

// actQ8Rows is the number of activation rows the backend's Q8_1 scratch is
// sized for: 8 with MINFER_MMVQ_NT (its matmuls quantize up to 8 rows), else
// the one decode row.
func actQ8Rows(opts MatMulOptions) int {
	if opts.MMVQNT {
		return mmvqntMaxNT
	}
	return 1
}

// quantizeActNT quantizes the nt activation rows x (k values each) into the
// backend's Q8_1 scratch: the shared first half of a fused op's multi-token
// mmvq matmuls (runFromQ8NT is the second).
func (b *Backend) quantizeActNT(x driver.DevicePtr, k, nt int) error {
	if need := ActQ8Bytes(k, nt); need == 0 || b.mm.ActQ8Bytes < need {
		return fmt.Errorf("Q8_1 activation scratch of %d bytes, k=%d nt=%d needs %d", b.mm.ActQ8Bytes, k, nt, need)
	}
	return b.k.QuantizeQ8_1(b.s, b.mm.ActQ8, x, k, nt)
}

// runFromQ8NT runs one multi-token mmvq matmul of m over the nt rows
// quantizeActNT left in the scratch.
func (b *Backend) runFromQ8NT(nt int, m matmulPlan) error {
	if m.w.rpOnly {
		return b.k.MatMulQ8_1NTR(b.s, m.out, b.mm.ActQ8, b.mm.ActQ8Bytes, m.w.rp, m.w.typ, m.bias, nt, m.w.rowLen, m.w.rows)
	}
	return b.k.MatMulQ8_1NT(b.s, m.out, b.mm.ActQ8, b.mm.ActQ8Bytes, m.w.ptr, m.w.typ, m.bias, nt, m.w.rowLen, m.w.rows)
}
