package cuda

// launch_ops.go: the launchers of the non-matmul op kernels
// (cuda/kernels/{elementwise,norm,rope,embed,kv,attention}.cu). Each checks
// its arguments on the host (an invalid shape is an error naming the op and
// the values, never a launch), then launches through k.launch, and returns
// the launch's error wrapped with the op name.
//
// Per-step data (token ids, positions, the KV window {start, kv_len}) is
// always passed as a device pointer and read inside the kernel, never as a
// scalar: a captured graph replays its launches with the same arguments, so
// only device memory can change between replays.

import (
	"fmt"
	"math"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/quant"
)

const (
	opsThreads   = 256     // block size of the element-wise, row and KV kernels
	opsMaxBlocks = 1 << 16 // grid cap of the grid-stride element-wise kernels
	// AttnMaxHeadDim is the largest head_dim the attention kernel takes
	// (its block holds one thread per head-row element).
	AttnMaxHeadDim = 128
	attnThreads    = 128 // mops::ATTN_THREADS in attention.cu
	maxInt32       = math.MaxInt32
	// ropeMaxHeadDim bounds head_dim (and so the fused K staging row,
	// launch_rope_store.go) well inside 32-bit index arithmetic.
	ropeMaxHeadDim = 4096
)

// opsErr wraps a launch error with the op name.
func opsErr(op string, err error) error {
	if err != nil {
		return fmt.Errorf("cuda: %s: %w", op, err)
	}
	return nil
}

// opsBad is an argument error naming the op.
func opsBad(op, format string, args ...any) error {
	return fmt.Errorf("cuda: %s: %s", op, fmt.Sprintf(format, args...))
}

// opsGrid1 is the grid of a grid-stride kernel over n elements.
func opsGrid1(n int) [3]uint32 {
	b := (n + opsThreads - 1) / opsThreads
	b = max(1, min(b, opsMaxBlocks))
	return [3]uint32{uint32(b), 1, 1}
}

// opsRowBlock is the block of a one-block-per-row kernel over rows of n:
// a multiple of 32, at most opsThreads.
func opsRowBlock(n int) [3]uint32 {
	b := min(opsThreads, (n+31)/32*32)
	return [3]uint32{uint32(max(32, b)), 1, 1}
}

var opsBlock = [3]uint32{opsThreads, 1, 1}

func opsCheckN(op string, n int) error {
	if n <= 0 {
		return opsBad(op, "%d elements: must be positive", n)
	}
	return nil
}

// opsCheckRows checks rows x n with n (the row length) and rows below 2^31
// and a positive product.
func opsCheckRows(op string, rows, n int) error {
	if rows <= 0 || n <= 0 {
		return opsBad(op, "%d rows of %d: both must be positive", rows, n)
	}
	if rows > maxInt32 || n > maxInt32 || rows > math.MaxInt64/n {
		return opsBad(op, "%d rows of %d: too large", rows, n)
	}
	return nil
}

func (k *Kernels) binary(s *driver.Stream, op, name string, out, a, b driver.DevicePtr, n, nb int) error {
	return opsErr(op, k.launch(s, name, opsGrid1(n), opsBlock, 0, out, a, b, int64(n), int64(nb)))
}

// Add: out = a + b over n f32.
func (k *Kernels) Add(s *driver.Stream, out, a, b driver.DevicePtr, n int) error {
	if err := opsCheckN("add", n); err != nil {
		return err
	}
	return k.binary(s, "add", "minfer_add_f32", out, a, b, n, n)
}

// Mul: out = a * b over n f32.
func (k *Kernels) Mul(s *driver.Stream, out, a, b driver.DevicePtr, n int) error {
	if err := opsCheckN("mul", n); err != nil {
		return err
	}
	return k.binary(s, "mul", "minfer_mul_f32", out, a, b, n, n)
}

// AddBias: out[r, i] = x[r, i] + bias[i] over rows of n (one row of bias
// broadcast over the rows: OpAdd's broadcast form and the matmul bias).
func (k *Kernels) AddBias(s *driver.Stream, out, x, bias driver.DevicePtr, rows, n int) error {
	if err := opsCheckRows("add_bias", rows, n); err != nil {
		return err
	}
	return k.binary(s, "add_bias", "minfer_add_f32", out, x, bias, rows*n, n)
}

// MulRows: out[r, i] = x[r, i] * w[i] over rows of n (OpMul's broadcast form).
func (k *Kernels) MulRows(s *driver.Stream, out, x, w driver.DevicePtr, rows, n int) error {
	if err := opsCheckRows("mul_rows", rows, n); err != nil {
		return err
	}
	return k.binary(s, "mul_rows", "minfer_mul_f32", out, x, w, rows*n, n)
}

// Silu: out = x / (1 + exp(-x)) over n f32.
func (k *Kernels) Silu(s *driver.Stream, out, x driver.DevicePtr, n int) error {
	if err := opsCheckN("silu", n); err != nil {
		return err
	}
	return opsErr("silu", k.launch(s, "minfer_silu_f32", opsGrid1(n), opsBlock, 0, out, x, int64(n)))
}

// SwiGLU: out = silu(gate) * up over n f32.
func (k *Kernels) SwiGLU(s *driver.Stream, out, gate, up driver.DevicePtr, n int) error {
	if err := opsCheckN("swiglu", n); err != nil {
		return err
	}
	return opsErr("swiglu", k.launch(s, "minfer_swiglu_f32", opsGrid1(n), opsBlock, 0, out, gate, up, int64(n)))
}

// Scale: out = x * f over n f32.
func (k *Kernels) Scale(s *driver.Stream, out, x driver.DevicePtr, f float32, n int) error {
	if err := opsCheckN("scale", n); err != nil {
		return err
	}
	return opsErr("scale", k.launch(s, "minfer_scale_f32", opsGrid1(n), opsBlock, 0, out, x, f, int64(n)))
}

// Copy copies n f32 (non-overlapping).
func (k *Kernels) Copy(s *driver.Stream, dst, src driver.DevicePtr, n int) error {
	if err := opsCheckN("copy", n); err != nil {
		return err
	}
	return opsErr("copy", k.launch(s, "minfer_copy_f32", opsGrid1(n), opsBlock, 0, dst, src, int64(n)))
}

// CopyBytes copies n bytes (non-overlapping) as a kernel, so it is captured
// like any other launch.
func (k *Kernels) CopyBytes(s *driver.Stream, dst, src driver.DevicePtr, n int) error {
	if err := opsCheckN("copy_bytes", n); err != nil {
		return err
	}
	return opsErr("copy_bytes", k.launch(s, "minfer_copy_bytes", opsGrid1(n/4+1), opsBlock, 0, dst, src, int64(n)))
}

// permuteStrides returns, for graph.OpPermute's output shape out and Perm,
// the input element stride of each output axis (out axis i is input axis
// perm[i]), or an error when perm is not a permutation of 0..3.
func permuteStrides(out, perm [4]int) ([4]int64, error) {
	var seen [4]bool
	var in [4]int
	for i, p := range perm {
		if p < 0 || p > 3 || seen[p] {
			return [4]int64{}, fmt.Errorf("perm %v is not a permutation of 0..3", perm)
		}
		seen[p] = true
		in[p] = out[i]
	}
	inStride := [4]int64{1, int64(in[0]), int64(in[0]) * int64(in[1]), int64(in[0]) * int64(in[1]) * int64(in[2])}
	var st [4]int64
	for i, p := range perm {
		st[i] = inStride[p]
	}
	return st, nil
}

// Permute copies x into out with axes permuted: out has shape outShape
// (ne0 innermost) and out axis i is input axis perm[i] (graph.OpPermute).
func (k *Kernels) Permute(s *driver.Stream, out, x driver.DevicePtr, outShape, perm [4]int) error {
	n := 1
	for _, d := range outShape {
		if d <= 0 || d > maxInt32 || n > maxInt32/d {
			return opsBad("permute", "shape %v: every dim positive, product below 2^31", outShape)
		}
		n *= d
	}
	st, err := permuteStrides(outShape, perm)
	if err != nil {
		return opsBad("permute", "%v", err)
	}
	return opsErr("permute", k.launch(s, "minfer_permute_f32", opsGrid1(n), opsBlock, 0, out, x,
		int32(outShape[0]), int32(outShape[1]), int32(outShape[2]), int32(outShape[3]), st[0], st[1], st[2], st[3]))
}

// SoftmaxRows: out = softmax(x * scale) per row of n (max-subtracted, f32);
// scale 0 means 1 (graph.OpSoftmax).
func (k *Kernels) SoftmaxRows(s *driver.Stream, out, x driver.DevicePtr, rows, n int, scale float32) error {
	if err := opsCheckRows("softmax", rows, n); err != nil {
		return err
	}
	if scale == 0 {
		scale = 1
	}
	return opsErr("softmax", k.launch(s, "minfer_softmax_f32", [3]uint32{uint32(rows), 1, 1}, opsRowBlock(n), 0, out, x, int32(n), scale))
}

// RmsNorm: out = x / sqrt(mean(x^2) + eps) * w per row of n; w == 0 means
// no weight. QkNorm is the same call with rows = nt*heads, n = head_dim.
func (k *Kernels) RmsNorm(s *driver.Stream, out, x, w driver.DevicePtr, rows, n int, eps float32) error {
	if err := opsCheckRows("rms_norm", rows, n); err != nil {
		return err
	}
	if !(eps >= 0) {
		return opsBad("rms_norm", "eps %g: must be >= 0", eps)
	}
	return opsErr("rms_norm", k.launch(s, "minfer_rms_norm_f32", [3]uint32{uint32(rows), 1, 1}, opsRowBlock(n), 0, out, x, w, int32(n), eps))
}

// rmsNormQ8Kernel is RmsNorm that also writes its output's Q8_1 blocks
// (cuda/kernels/norm.cu).
const rmsNormQ8Kernel = "minfer_rms_norm_q8_1"

// RmsNormQ8_1 is RmsNorm (bitwise the same out, same geometry) that also
// writes the Q8_1 blocks of each output row to q: the bytes QuantizeQ8_1 of
// out gives, rows back to back. q holds qBytes bytes, at least
// ActQ8Bytes(n, rows), 4-byte aligned. n must be a multiple of 32 (a Q8_1
// block is one warp's values): other n are an error, the caller's shape
// choice is RmsNorm then QuantizeQ8_1.
func (k *Kernels) RmsNormQ8_1(s *driver.Stream, out, q, x, w driver.DevicePtr, qBytes uint64, rows, n int, eps float32) error {
	const op = "rms_norm_q8_1"
	if err := opsCheckRows(op, rows, n); err != nil {
		return err
	}
	if !(eps >= 0) {
		return opsBad(op, "eps %g: must be >= 0", eps)
	}
	need := ActQ8Bytes(n, rows)
	if need == 0 {
		return opsBad(op, "%d rows of %d: n must be a multiple of %d", rows, n, quant.QK)
	}
	if q == 0 || qBytes < need || uint64(q)%4 != 0 {
		return opsBad(op, "Q8_1 destination %v of %d bytes for %d rows of %d (needs %d bytes, 4-byte aligned)", q, qBytes, rows, n, need)
	}
	return opsErr(op, k.launch(s, rmsNormQ8Kernel, [3]uint32{uint32(rows), 1, 1}, opsRowBlock(n), 0, out, q, x, w, int32(n), eps))
}

// Rope rotates x [headDim, nHeads, nt] into out (may be x) at the positions
// pos (i32 device array of nt, read by the kernel). The first nRot dims of
// each head rotate (nRot == headDim is engine/cpu's op); neox pairs (i,
// i+nRot/2), otherwise interleaved (2i, 2i+1). Angles in double as the CPU.
func (k *Kernels) Rope(s *driver.Stream, out, x, pos driver.DevicePtr, nt, nHeads, headDim, nRot int, theta float32, neox bool) error {
	if err := opsCheckRows("rope", nt, nHeads); err != nil {
		return err
	}
	if headDim <= 0 || headDim%2 != 0 || headDim > ropeMaxHeadDim || nHeads > maxInt32/headDim {
		return opsBad("rope", "head_dim %d: must be even, positive and at most %d", headDim, ropeMaxHeadDim)
	}
	if nRot <= 0 || nRot%2 != 0 || nRot > headDim {
		return opsBad("rope", "n_rot %d: must be even, positive and at most head_dim %d", nRot, headDim)
	}
	if !(theta > 0) || math.IsInf(float64(theta), 0) {
		return opsBad("rope", "theta %g: must be positive and finite", theta)
	}
	hpb, block := ropeGeometry(nHeads, nRot)
	groups := (nHeads + hpb - 1) / hpb
	if groups > opsGridYMax {
		return opsBad("rope", "%d heads: more than %d head groups", nHeads, opsGridYMax)
	}
	return opsErr("rope", k.launch(s, "minfer_rope_f32", [3]uint32{uint32(nt), uint32(groups), 1}, block, 0,
		out, x, pos, int32(nHeads), int32(headDim), int32(nRot), theta, boolI32(neox), int32(hpb)))
}

// boolI32 is a kernel int flag (C has no bool kernel parameter here).
func boolI32(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// ropeGeometry is minfer_rope_f32's block (rope.cu): hpb heads of nRot/2
// pairs each, one pair per thread, at most opsThreads threads; a head of
// more pairs gets a block of opsThreads that loops.
func ropeGeometry(nHeads, nRot int) (hpb int, block [3]uint32) {
	half := nRot / 2
	if half >= opsThreads {
		return 1, opsBlock
	}
	hpb = min(nHeads, opsThreads/half)
	return hpb, [3]uint32{uint32(hpb * half), 1, 1}
}

// getRowsTypes are the weight types the gather decodes (dequant.cuh).
var getRowsTypes = map[quant.Type]bool{
	quant.F32: true, quant.F16: true, quant.BF16: true, quant.Q4_0: true, quant.Q4_1: true,
	quant.Q5_0: true, quant.Q5_1: true, quant.Q8_0: true, quant.Q4_K: true, quant.Q5_K: true, quant.Q6_K: true,
}

// GetRows gathers rows ids[0..nt) (i32 device array) of the weight w
// (wRows rows of k values of type wtype) into out [k, nt] as f32. An id
// outside [0, wRows) gives a NaN row (the kernel cannot return an error).
func (k *Kernels) GetRows(s *driver.Stream, out, w driver.DevicePtr, wtype quant.Type, wRows int, ids driver.DevicePtr, nt, rowLen int) error {
	if err := opsCheckRows("get_rows", nt, rowLen); err != nil {
		return err
	}
	if !getRowsTypes[wtype] {
		return opsBad("get_rows", "weight type %s has no device decoder", wtype)
	}
	if wRows <= 0 || wRows > maxInt32 {
		return opsBad("get_rows", "weight of %d rows", wRows)
	}
	rb, err := wtype.RowBytes(rowLen)
	if err != nil {
		return opsBad("get_rows", "%v", err)
	}
	return opsErr("get_rows", k.launch(s, "minfer_get_rows", [3]uint32{uint32(nt), 1, 1}, opsRowBlock(rowLen), 0,
		out, w, int32(wtype), int64(rb), int32(wRows), ids, int32(rowLen)))
}

// kvRowBytes checks a KV format and row length and returns the row stride.
func kvRowBytes(op string, format kv.Format, rowLen, nCtx int) (int, error) {
	if format != kv.F32 && format != kv.F16 && format != kv.Q8_0 {
		return 0, opsBad(op, "KV format %s", format)
	}
	if rowLen <= 0 || rowLen > maxInt32 || nCtx <= 0 || nCtx > maxInt32 {
		return 0, opsBad(op, "KV rows of %d values in %d cells: both must be positive", rowLen, nCtx)
	}
	rb := kv.RowBytes(format, rowLen)
	if rb < 0 {
		return 0, opsBad(op, "%s KV rows of %d values: q8_0 needs a multiple of 32", format, rowLen)
	}
	return rb, nil
}

func opsChunks(n int) uint32 { return uint32((n + opsThreads - 1) / opsThreads) }

// KVStore writes src [rowLen, nt] (f32) into one layer's K or V region
// (nCtx cells) at cells win[0] .. win[0]+nt-1, encoded in format (q8_0 with
// the reference quantizer). win is the graph's KV window {start, kv_len}
// (i32[2] on the device) and is read by the kernel; rows whose cell falls
// outside the region are not written.
func (k *Kernels) KVStore(s *driver.Stream, region driver.DevicePtr, format kv.Format, src, win driver.DevicePtr, nt, rowLen, nCtx int) error {
	rb, err := kvRowBytes("kv_store", format, rowLen, nCtx)
	if err != nil {
		return err
	}
	if nt <= 0 || nt > nCtx {
		return opsBad("kv_store", "%d tokens for %d cells", nt, nCtx)
	}
	return opsErr("kv_store", k.launch(s, "minfer_kv_store", [3]uint32{uint32(nt), opsChunks(rowLen), 1}, opsBlock, 0,
		region, int32(format), src, win, int32(rowLen), int64(rb), int32(nCtx)))
}

// KVLoad expands cells [0, win[1]) of a region to f32 out [rowLen, nCtx]
// (graph.OpKvcacheLoad: rows beyond the KV length are left as they were).
// The length is read from the device window by the kernel.
func (k *Kernels) KVLoad(s *driver.Stream, out, region driver.DevicePtr, format kv.Format, win driver.DevicePtr, rowLen, nCtx int) error {
	rb, err := kvRowBytes("kv_load", format, rowLen, nCtx)
	if err != nil {
		return err
	}
	return opsErr("kv_load", k.launch(s, "minfer_kv_load", [3]uint32{uint32(nCtx), opsChunks(rowLen), 1}, opsBlock, 0,
		out, region, int32(format), win, int32(rowLen), int64(rb), int32(nCtx)))
}

// KVMoveScratchBytes is the scratch KVMove needs for n cells.
func KVMoveScratchBytes(format kv.Format, rowLen, n int) int {
	return kv.RowBytes(format, rowLen) * n
}

// KVMove moves cells [src, src+n) of one region (nCtx cells) to [dst,
// dst+n) with memmove semantics: the rows go to scratch (at least
// KVMoveScratchBytes) and back, two stream-ordered launches, so overlap in
// either direction is correct. n == 0 or src == dst launches nothing.
func (k *Kernels) KVMove(s *driver.Stream, region, scratch driver.DevicePtr, format kv.Format, rowLen, nCtx, src, dst, n int) error {
	rb, err := kvRowBytes("kv_move", format, rowLen, nCtx)
	if err != nil {
		return err
	}
	if n < 0 || src < 0 || dst < 0 || src > nCtx-n || dst > nCtx-n {
		return opsBad("kv_move", "move %d cells from %d to %d: out of range of %d cells", n, src, dst, nCtx)
	}
	if n == 0 || src == dst {
		return nil
	}
	if scratch == 0 {
		return opsBad("kv_move", "no scratch buffer")
	}
	nb := n * rb
	if err := k.CopyBytes(s, scratch, region.Add(uint64(src*rb)), nb); err != nil {
		return opsErr("kv_move", err)
	}
	return opsErr("kv_move", k.CopyBytes(s, region.Add(uint64(dst*rb)), scratch, nb))
}

// AttnParams is the shape of one attention call.
type AttnParams struct {
	NT      int     // query tokens
	NHead   int     // query heads
	NHeadKV int     // KV heads (NHead % NHeadKV == 0); a KV row is NHeadKV*HeadDim values
	HeadDim int     // even, 2..AttnMaxHeadDim
	NCtx    int     // cells of the regions
	Window  int     // attend to at most the last Window cells (0: all)
	Scale   float32 // score scale; 0 means 1/sqrt(HeadDim)
}

// attnScale is engine/cpu's default: f32(1/sqrt(hd)) in double.
func attnScale(p AttnParams) float32 {
	if p.Scale != 0 {
		return p.Scale
	}
	return float32(1 / math.Sqrt(float64(p.HeadDim)))
}

func (p AttnParams) check(format kv.Format) (rowBytes int, err error) {
	const op = "attn"
	if p.HeadDim <= 0 || p.HeadDim%2 != 0 || p.HeadDim > AttnMaxHeadDim {
		return 0, opsBad(op, "head_dim %d: must be even and in 2..%d", p.HeadDim, AttnMaxHeadDim)
	}
	if p.NHead <= 0 || p.NHeadKV <= 0 || p.NHead%p.NHeadKV != 0 {
		return 0, opsBad(op, "%d heads over %d kv heads: must be positive and divide", p.NHead, p.NHeadKV)
	}
	if p.NT <= 0 || p.NT > p.NCtx {
		return 0, opsBad(op, "%d tokens for %d cells", p.NT, p.NCtx)
	}
	if p.NHead > maxInt32/p.NT {
		return 0, opsBad(op, "%d tokens x %d heads: too many", p.NT, p.NHead)
	}
	if p.Window < 0 || p.Window > maxInt32 {
		return 0, opsBad(op, "window %d", p.Window)
	}
	return kvRowBytes(op, format, p.NHeadKV*p.HeadDim, p.NCtx)
}

// Attention computes causal GQA attention of q [HeadDim, NHead, NT] over one
// layer's K and V regions (format) into out (same shape), exactly
// engine/cpu's attn: the query of token t sits at cell win[0]+t and attends
// to cells [max(0, cell-Window+1), cell]. win is the graph's KV window
// {start, kv_len} (i32[2] on the device), read by the kernel, so a captured
// graph replays with the current step's cells; a start the region cannot
// hold gives NaN outputs. One kernel serves decode (NT = 1) and prefill.
func (k *Kernels) Attention(s *driver.Stream, out, q, kRegion, vRegion driver.DevicePtr, format kv.Format, win driver.DevicePtr, p AttnParams) error {
	rb, err := p.check(format)
	if err != nil {
		return err
	}
	return opsErr("attn", k.launch(s, "minfer_attn_f32", [3]uint32{uint32(p.NT * p.NHead), 1, 1}, [3]uint32{attnThreads, 1, 1}, 0,
		out, q, kRegion, vRegion, int32(format), win, int32(p.NHead), int32(p.NHeadKV), int32(p.HeadDim),
		int64(rb), int32(p.NCtx), int32(p.Window), attnScale(p)))
}
