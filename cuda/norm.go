package cuda

// norm.go: the row kernels of cuda/kernels/norm.cu (rms_norm, its Q8_1
// form for MINFER_NORM_Q8, softmax) and their op handlers.

import (
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/quant"
)

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

func opRmsNorm(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	p, o, err := b.ptrs(in, 1, out, true)
	if err != nil {
		return nil, err
	}
	dim := n.Shape[0]
	if in[0].Len != out.Len || dim <= 0 || out.Len%dim != 0 {
		return nil, fmt.Errorf("input of %d elements, output %d, rows of %d", in[0].Len, out.Len, dim)
	}
	w, err := b.vector(n.Weight, dim)
	if err != nil {
		return nil, err
	}
	if w == 0 {
		return nil, fmt.Errorf("norm weight is missing")
	}
	rows, eps := out.Len/dim, n.P.Eps
	if b.normQ8(n.Op, rows, dim) {
		// Decode: also write o's Q8_1 blocks into the scratch, so the MMVQ
		// matmuls reading o skip their quantize launch (MINFER_NORM_Q8).
		q, qBytes := b.mm.ActQ8, b.mm.ActQ8Bytes
		b.q8 = actQ8Record{scratch: q, x: o, k: dim}
		return func() error { return b.k.RmsNormQ8_1(b.s, o, q, p[0], w, qBytes, rows, dim, eps) }, nil
	}
	return func() error { return b.k.RmsNorm(b.s, o, p[0], w, rows, dim, eps) }, nil
}

func opSoftmax(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	p, o, err := b.ptrs(in, 1, out, true)
	if err != nil {
		return nil, err
	}
	if in[0].Len != out.Len {
		return nil, fmt.Errorf("input of %d elements, output %d", in[0].Len, out.Len)
	}
	dim, sc := n.Shape[0], n.P.Scale
	rows := n.Shape.Rows()
	return func() error { return b.k.SoftmaxRows(b.s, o, p[0], rows, dim, sc) }, nil
}
