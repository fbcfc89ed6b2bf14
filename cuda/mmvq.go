package cuda

// mmvq.go: the decode matmul kernels over a Q8_1 activation row
// (cuda/kernels/mmvq.cu): minfer_mmvq_<t> and its fused q/k/v, FFN and
// residual forms, and the backend's decode dispatch over the row in its
// scratch (one-warp, split or repacked). The in-kernel-quantizing
// minfer_mmvqx_* kernels of the retired MINFER_MMVQ_INLINE_Q8 are removed
// from the sources (reports/MINFER_MMVQ_INLINE_Q8/NOTE.md).

import (
	"fmt"
	"math"
	"strings"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/quant"
)

// mmvqTable names the decode kernels over Q8_1 activations
// (cuda/kernels/mmvq.cu) of the weight types that have one.
var mmvqTable = map[quant.Type]string{
	quant.Q8_0: "minfer_mmvq_q8_0",
	quant.Q4_0: "minfer_mmvq_q4_0",
	quant.Q4_1: "minfer_mmvq_q4_1",
	quant.Q5_0: "minfer_mmvq_q5_0",
	quant.Q5_1: "minfer_mmvq_q5_1",
	quant.Q4_K: "minfer_mmvq_q4_k",
	quant.Q5_K: "minfer_mmvq_q5_k",
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

// mmvqOn reports whether the mmvq kernel of wtype is enabled by opts (its
// kill switch not set and a scratch given). Q5_K joined the K-quants when
// its H200 A/B passed (tg x1.117, reports/MINFER_Q5K_MMVQ).
func mmvqOn(wtype quant.Type, opts MatMulOptions) bool {
	if _, ok := mmvqTable[wtype]; !ok || opts.ActQ8 == 0 {
		return false
	}
	switch wtype {
	case quant.Q8_0:
		return !opts.NoQ80MMVQ
	case quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1:
		return !opts.NoQ40MMVQ
	case quant.Q4_K, quant.Q5_K, quant.Q6_K:
		return !opts.NoKQMMVQ
	}
	return false
}

const (
	mmvqRows    = 4   // MINFER_MMVQ_ROWS: output rows (warps) per block
	mmvqThreads = 128 // MINFER_MMVQ_THREADS
)

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
// Q4_K quants and the Q5_K quants and high bits are loaded 16 bytes at a
// time (their 144 / 176-byte blocks keep a 16-byte aligned base aligned),
// every other type's fields 2 or 4 (cuda/kernels/mmvq.cu); device
// allocations are 256-byte aligned.
func mmvqAlign(wtype quant.Type) uint64 {
	if wtype == quant.Q4_K || wtype == quant.Q5_K {
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

// mmvqFamily is what the decode kernel families that give each output row
// one warp differ in: minfer_mmvq_* over the GGUF bytes (mmvqFam), its
// repacked copy (mmvqrFam, mmvq_repack.go). Their plain, _res_, _qkv_ and
// _ffn_ launchers share one body each (mmvqMatVec, mmvqQKV, mmvqFFN) so
// that the checks, grids and argument orders of the two cannot drift apart.
type mmvqFamily struct {
	rows    int                                        // output rows (warps) per block
	threads uint32                                     // threads per block
	kernel  func(wtype quant.Type, form string) string // form "" (plain), "res", "qkv" or "ffn"
	// check validates one weight under op; checkMMVQ checks the Q8_1 row
	// too, checkMMVQR does not (checkQ8Act follows it).
	check func(op string, xq driver.DevicePtr, xqBytes uint64, w driver.DevicePtr, wtype quant.Type, kDim, n int) error
}

var mmvqFam = mmvqFamily{rows: mmvqRows, threads: mmvqThreads, kernel: mmvqKernel, check: checkMMVQ}

// mmvqKernel names the GGUF decode kernel of form "" (plain), "res", "qkv"
// or "ffn" for wtype ("" for a type without one).
func mmvqKernel(wtype quant.Type, form string) string {
	if form == "" {
		return mmvqTable[wtype]
	}
	return mmvqFusedKernel(wtype, form)
}

// grid is the launch geometry of rows output rows, f.rows to a block.
func (f mmvqFamily) grid(rows int) (grid, block [3]uint32) {
	return [3]uint32{uint32((rows + f.rows - 1) / f.rows), 1, 1}, [3]uint32{f.threads, 1, 1}
}

// checkCall checks, under op, one decode matmul of f: its weight
// (f.check), its Q8_1 activation, and its output and bias.
func (f mmvqFamily) checkCall(op string, out, xq driver.DevicePtr, xqBytes uint64, w, bias driver.DevicePtr, wtype quant.Type,
	kDim, n int) error {
	if err := f.check(op, xq, xqBytes, w, wtype, kDim, n); err != nil {
		return err
	}
	// After checkMMVQ this cannot fail: it checks the same.
	if err := checkQ8Act(op, xq, xqBytes, kDim); err != nil {
		return err
	}
	return checkOutBias(op, wtype, out, bias, kDim, n)
}

// checkOutBias checks a decode matmul's output (not null) and bias (may be
// 0): both 4-byte aligned.
func checkOutBias(op string, wtype quant.Type, out, bias driver.DevicePtr, kDim, n int) error {
	if out == 0 || uint64(out)%4 != 0 || uint64(bias)%4 != 0 {
		return fmt.Errorf("%s %s k=%d n=%d: null or misaligned output %v / bias %v", op, wtype, kDim, n, out, bias)
	}
	return nil
}

// matVecArgs is the form and the arguments of a decode matmul kernel, one
// warp a row or split: out, xq, w, bias, k, n, and for the _res_ form
// (res != 0: its callers have checked it with checkRes) res last.
func matVecArgs(out, xq, w, bias, res driver.DevicePtr, kDim, n int) (form string, args []any) {
	args = []any{out, xq, w, bias, int32(kDim), int32(n)}
	if res != 0 {
		return "res", append(args, res)
	}
	return "", args
}

// mmvqMatVec is MatMulQ8_1 of family f under op: checkCall, then f's plain
// kernel.
func (k *Kernels) mmvqMatVec(f mmvqFamily, op string, s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64,
	w driver.DevicePtr, wtype quant.Type, bias driver.DevicePtr, kDim, n int) error {
	if err := f.checkCall(op, out, xq, xqBytes, w, bias, wtype, kDim, n); err != nil {
		return err
	}
	return k.launchMatVec(f, s, out, xq, w, bias, 0, wtype, kDim, n)
}

// mmvqMatVecRes is MatMulQ8_1Res of family f under op: checkCall and
// checkRes, then f's _res_ kernel.
func (k *Kernels) mmvqMatVecRes(f mmvqFamily, op string, s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64,
	w driver.DevicePtr, wtype quant.Type, bias, res driver.DevicePtr, kDim, n int) error {
	if err := f.checkCall(op, out, xq, xqBytes, w, bias, wtype, kDim, n); err != nil {
		return err
	}
	if err := checkRes(op, wtype, out, res, kDim, n); err != nil {
		return err
	}
	return k.launchMatVec(f, s, out, xq, w, bias, res, wtype, kDim, n)
}

// launchMatVec launches f's plain kernel of wtype, or its _res_ form when
// res != 0, over n output rows (the call checked).
func (k *Kernels) launchMatVec(f mmvqFamily, s *driver.Stream, out, xq, w, bias, res driver.DevicePtr, wtype quant.Type,
	kDim, n int) error {
	form, args := matVecArgs(out, xq, w, bias, res, kDim, n)
	name := f.kernel(wtype, form)
	grid, block := f.grid(n)
	if err := k.launch(s, name, grid, block, 0, args...); err != nil {
		return fmt.Errorf("matmul %s nt=1 k=%d n=%d: %w", name, kDim, n, err)
	}
	return nil
}

// MatMulQ8_1 is the second half of the decode mmvq path: out[j] = W[j] . a
// (+ bias[j]) for an activation row a already quantized to Q8_1 at xq
// (xqBytes bytes, QuantizeQ8_1 of kDim values). Several matmuls of one input
// (q/k/v, gate/up) quantize it once and call this for each weight.
func (k *Kernels) MatMulQ8_1(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w driver.DevicePtr, wtype quant.Type,
	bias driver.DevicePtr, kDim, n int) error {
	return k.mmvqMatVec(mmvqFam, "matmul_q8_1", s, out, xq, xqBytes, w, wtype, bias, kDim, n)
}

// checkQKV checks, under op, the three weights of a fused q/k/v launch
// (f.check: checkMMVQ, checkMMVQR for repacked copies), their
// biases' alignment, the Q8_1 activation and the output (not null, aligned,
// at most MaxInt32 rows in all), and returns the rows in all.
func checkQKV(op string, f mmvqFamily, out, xq driver.DevicePtr, xqBytes uint64, w, bias [3]driver.DevicePtr, wtype quant.Type,
	kDim int, n [3]int) (int, error) {
	total := 0
	for i := range w {
		if err := f.check(op, xq, xqBytes, w[i], wtype, kDim, n[i]); err != nil {
			return 0, fmt.Errorf("weight %d: %w", i, err)
		}
		if uint64(bias[i])%4 != 0 {
			return 0, fmt.Errorf("%s: bias %d %v is misaligned", op, i, bias[i])
		}
		total += n[i]
	}
	// After checkMMVQ this cannot fail: it checks the same.
	if err := checkQ8Act(op, xq, xqBytes, kDim); err != nil {
		return 0, err
	}
	if out == 0 || uint64(out)%4 != 0 || total > math.MaxInt32 {
		return 0, fmt.Errorf("%s %s k=%d n=%v: null or misaligned output %v, or too many rows", op, wtype, kDim, n, out)
	}
	return total, nil
}

// qkvArgs are the arguments of every fused q/k/v decode kernel, one warp a
// row or split: out, xq, the three weights, the three biases, k and the
// three row counts.
func qkvArgs(out, xq driver.DevicePtr, w, bias [3]driver.DevicePtr, kDim int, n [3]int) []any {
	return []any{out, xq, w[0], w[1], w[2], bias[0], bias[1], bias[2], int32(kDim), int32(n[0]), int32(n[1]), int32(n[2])}
}

// mmvqQKV is MatMulQ8_1QKV of family f under op: checkQKV, then one launch
// of f's _qkv_ kernel over the rows in all.
func (k *Kernels) mmvqQKV(f mmvqFamily, op string, s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64,
	w [3]driver.DevicePtr, wtype quant.Type, bias [3]driver.DevicePtr, kDim int, n [3]int) error {
	total, err := checkQKV(op, f, out, xq, xqBytes, w, bias, wtype, kDim, n)
	if err != nil {
		return err
	}
	name := f.kernel(wtype, "qkv")
	grid, block := f.grid(total)
	if err := k.launch(s, name, grid, block, 0, qkvArgs(out, xq, w, bias, kDim, n)...); err != nil {
		return fmt.Errorf("matmul %s nt=1 k=%d n=%v: %w", name, kDim, n, err)
	}
	return nil
}

// mmvqFFN is FFNQ8_1 of family f under op: both weights (f.check), the
// Q8_1 activation and the output checked, then one launch of f's _ffn_
// kernel with out, xq, wg, wu, k, n.
func (k *Kernels) mmvqFFN(f mmvqFamily, op string, s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64,
	wg, wu driver.DevicePtr, wtype quant.Type, kDim, n int) error {
	for i, w := range []driver.DevicePtr{wg, wu} {
		if err := f.check(op, xq, xqBytes, w, wtype, kDim, n); err != nil {
			return fmt.Errorf("weight %d: %w", i, err)
		}
	}
	// After checkMMVQ this cannot fail: it checks the same.
	if err := checkQ8Act(op, xq, xqBytes, kDim); err != nil {
		return err
	}
	if out == 0 || uint64(out)%4 != 0 {
		return fmt.Errorf("%s %s k=%d n=%d: null or misaligned output %v", op, wtype, kDim, n, out)
	}
	name := f.kernel(wtype, "ffn")
	grid, block := f.grid(n)
	if err := k.launch(s, name, grid, block, 0, out, xq, wg, wu, int32(kDim), int32(n)); err != nil {
		return fmt.Errorf("ffn %s nt=1 k=%d n=%d: %w", name, kDim, n, err)
	}
	return nil
}

// MatMulQ8_1QKV runs the q, k and v projections of one Q8_1 activation row
// in one launch (minfer_mmvq_qkv_<type>): out holds n[0] + n[1] + n[2]
// values, q then k then v, each row bitwise what MatMulQ8_1 gives for it.
// The three weights share wtype and kDim; a bias may be 0.
func (k *Kernels) MatMulQ8_1QKV(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w [3]driver.DevicePtr,
	wtype quant.Type, bias [3]driver.DevicePtr, kDim int, n [3]int) error {
	return k.mmvqQKV(mmvqFam, "matmul_q8_1_qkv", s, out, xq, xqBytes, w, wtype, bias, kDim, n)
}

// FFNQ8_1 is the fused SwiGLU FFN of one Q8_1 activation row in one launch
// (minfer_mmvq_ffn_<type>): out[j] = silu(Wg[j] . a) * (Wu[j] . a) for j < n,
// the gate and up dot products bitwise MatMulQ8_1's and silu and the
// product as minfer_swiglu_f32 computes them. Gate and up share wtype.
func (k *Kernels) FFNQ8_1(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, wg, wu driver.DevicePtr,
	wtype quant.Type, kDim, n int) error {
	return k.mmvqFFN(mmvqFam, "ffn_q8_1", s, out, xq, xqBytes, wg, wu, wtype, kDim, n)
}

// mmvqResKernel names the residual form of a type's mmvq kernel.
func mmvqResKernel(wtype quant.Type) string { return mmvqFusedKernel(wtype, "res") }

// checkRes validates the residual and output of a _res_ launch: both f32
// aligned, the same n values or disjoint.
func checkRes(op string, wtype quant.Type, out, res driver.DevicePtr, kDim, n int) error {
	if res == 0 || uint64(res)%4 != 0 {
		return fmt.Errorf("%s %s k=%d n=%d: null or misaligned residual %v", op, wtype, kDim, n, res)
	}
	if !residPtrsOK(res, out, n) {
		return fmt.Errorf("%s %s k=%d n=%d: residual %v partly overlaps the output %v", op, wtype, kDim, n, res, out)
	}
	return nil
}

// MatMulQ8_1Res is MatMulQ8_1 with the residual add folded in
// (minfer_mmvq_res_<type>): out[j] = res[j] + (W[j] . a (+ bias[j])),
// bitwise MatMulQ8_1 followed by Add. res may be out (in place).
func (k *Kernels) MatMulQ8_1Res(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w driver.DevicePtr,
	wtype quant.Type, bias, res driver.DevicePtr, kDim, n int) error {
	return k.mmvqMatVecRes(mmvqFam, "matmul_q8_1_res", s, out, xq, xqBytes, w, wtype, bias, res, kDim, n)
}

// mmvqFromQ8 runs the decode MMVQ matmul m over the Q8_1 row already in
// the backend's scratch, writing out (with res folded in when res != 0):
// over the repacked copy when m's weight has one, in the split form when
// the rule picks it, else the one-warp kernels. Nothing falls back: an
// error of the chosen launch is returned.
func (b *Backend) mmvqFromQ8(m matmulPlan, out, res driver.DevicePtr) error {
	q, qb := b.mm.ActQ8, b.mm.ActQ8Bytes
	route := b.matmulRoute(m.w, 1)
	w, rp := m.w.ptr, route == routeMMVQR
	if rp {
		w = m.w.rp
	}
	switch split := b.k.MMVQSplit(m.w.rows, b.mm); {
	case split && rp:
		return b.k.MatMulQ8_1RS(b.s, out, q, qb, w, m.w.typ, m.bias, res, m.w.rowLen, m.w.rows)
	case split:
		return b.k.MatMulQ8_1S(b.s, out, q, qb, w, m.w.typ, m.bias, res, m.w.rowLen, m.w.rows)
	case rp && res != 0:
		return b.k.MatMulQ8_1RRes(b.s, out, q, qb, w, m.w.typ, m.bias, res, m.w.rowLen, m.w.rows)
	case rp:
		return b.k.MatMulQ8_1R(b.s, out, q, qb, w, m.w.typ, m.bias, m.w.rowLen, m.w.rows)
	case res != 0:
		return b.k.MatMulQ8_1Res(b.s, out, q, qb, w, m.w.typ, m.bias, res, m.w.rowLen, m.w.rows)
	}
	return b.k.MatMulQ8_1(b.s, out, q, qb, w, m.w.typ, m.bias, m.w.rowLen, m.w.rows)
}

// mmvqQKVFromQ8 runs a fused decode q/k/v over the Q8_1 row in the
// scratch: the split form when the rule picks it for the total row count,
// else minfer_mmvq[r]_qkv_<type> as route says (w: the repacked copies
// for routeMMVQR, else the GGUF bytes).
func (b *Backend) mmvqQKVFromQ8(out driver.DevicePtr, w [3]driver.DevicePtr, wtype quant.Type, bias [3]driver.DevicePtr,
	kDim int, rows [3]int, route mmRoute) error {
	q, qb := b.mm.ActQ8, b.mm.ActQ8Bytes
	switch {
	case b.k.MMVQSplit(rows[0]+rows[1]+rows[2], b.mm):
		return b.k.MatMulQ8_1QKVS(b.s, out, q, qb, w, wtype, bias, kDim, rows, route == routeMMVQR)
	case route == routeMMVQR:
		return b.k.MatMulQ8_1QKVR(b.s, out, q, qb, w, wtype, bias, kDim, rows)
	}
	return b.k.MatMulQ8_1QKV(b.s, out, q, qb, w, wtype, bias, kDim, rows)
}

// quantizeAct quantizes the one activation row x (k values) into the
// backend's Q8_1 scratch: the shared first half of the mmvq matmuls of x.
func (b *Backend) quantizeAct(x driver.DevicePtr, k int) error {
	if need := ActQ8Bytes(k, 1); need == 0 || b.mm.ActQ8Bytes < need {
		return fmt.Errorf("Q8_1 activation scratch of %d bytes, k=%d needs %d", b.mm.ActQ8Bytes, k, need)
	}
	return b.k.QuantizeQ8_1(b.s, b.mm.ActQ8, x, k, 1)
}

// runFromQ8 runs one matmul of a decode step whose activation is already in
// the Q8_1 scratch: the mmvq kernel when m's type takes it, else the f32
// path (which leaves the scratch alone).
func (b *Backend) runFromQ8(x driver.DevicePtr, m matmulPlan) error {
	if b.matmulRoute(m.w, 1).decode() {
		return b.mmvqFromQ8(m, m.out, 0) // over the repacked copy when there is one
	}
	return b.runMatMul(x, 1, m)
}

// residPtrsOK: the residual may be the output itself (each element is read
// and written by the one lane), never a shifted overlap of it.
func residPtrsOK(res, out driver.DevicePtr, n int) bool {
	return res == out || !overlapF32(res, n, out, n)
}

// overlapF32 reports whether the f32 ranges [a, a+n) and [b, b+m) share a
// byte.
func overlapF32(a driver.DevicePtr, n int, b driver.DevicePtr, m int) bool {
	if n <= 0 || m <= 0 {
		return false
	}
	return uint64(a) < uint64(b)+uint64(m)*4 && uint64(b) < uint64(a)+uint64(n)*4
}
