package cuda

// norm.go: the row kernels of cuda/kernels/norm.cu (rms_norm, softmax) and
// their op handlers. minfer_rms_norm_q8_1, the kernel of the retired
// MINFER_NORM_Q8, is removed from the sources (reports/MINFER_NORM_Q8/NOTE.md).

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

// RmsNormQ8_1 normalises one row of n values at x (weight w, eps) as
// RmsNorm does and writes its Q8_1 quantization (n / 32 blocks,
// QuantizeQ8_1's bytes) at dst instead of the f32 row: one launch of
// minfer_rms_norm_q8_1 in RmsNorm's block (n % 32 == 0, n <= 16 x the
// block: the values a thread keeps in registers).
func (k *Kernels) RmsNormQ8_1(s *driver.Stream, dst, x, w driver.DevicePtr, n int, eps float32) error {
	blk := opsRowBlock(n)
	if n <= 0 || n%quant.QK != 0 || n > normQ8MaxPer*int(blk[0]) {
		return opsBad("rms_norm_q8_1", "row of %d values: want a positive multiple of %d, at most %d", n, quant.QK, normQ8MaxPer*int(blk[0]))
	}
	if !(eps >= 0) {
		return opsBad("rms_norm_q8_1", "eps %g: must be >= 0", eps)
	}
	return opsErr("rms_norm_q8_1", k.launch(s, normQ8Kernel, [3]uint32{1, 1, 1}, blk, 0, dst, x, w, int32(n), eps))
}

const (
	normQ8Kernel = "minfer_rms_norm_q8_1"
	normQ8MaxPer = 16 // values a thread holds (norm.cu: rms_q8_1<16>)
)

// normQ8Route reports whether the backend runs the chain RmsNorm norm ->
// c (a FusedQKV or FusedFFN node, or a MatMul: the decode lm head) as
// FuseNormQ8: one decode row whose matmuls all take a decode MMVQ route
// (any types: each reads only the Q8_1 row, as opFusedQKV / opFusedFFN /
// opMatMul run them), a norm weight, and a row the fused kernel holds
// (RmsNormQ8_1).
func (b *Backend) normQ8Route(norm, c *graph.Node) bool {
	reader := c.Op == graph.OpFusedQKV || c.Op == graph.OpFusedFFN || c.Op == graph.OpMatMul
	if norm.Op != graph.OpRmsNorm || !reader || norm.Shape.Rows() != 1 || norm.Weight == "" || b.weights[norm.Weight] == nil {
		return false
	}
	n := norm.Shape[0]
	if n%quant.QK != 0 || n > normQ8MaxPer*int(opsRowBlock(n)[0]) {
		return false
	}
	names := c.Weights
	if c.Op == graph.OpMatMul {
		names = []string{c.Weight}
	}
	var ws []*devWeight
	for _, name := range names {
		w := b.weights[name]
		if w == nil || w.rowLen != n {
			return false
		}
		ws = append(ws, w)
	}
	ms := make([]matmulPlan, len(ws))
	for i, w := range ws {
		ms[i].w = w
	}
	return b.allDecode(1, ms)
}

func opRmsNorm(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	p, o, err := b.nodeIO(n, in, 1, out)
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
	return func() error { return b.k.RmsNorm(b.s, o, p[0], w, rows, dim, eps) }, nil
}

func opSoftmax(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	x, o, err := b.sameShape(n, in, out)
	if err != nil {
		return nil, err
	}
	dim, sc := n.Shape[0], n.P.Scale
	rows := n.Shape.Rows()
	return func() error { return b.k.SoftmaxRows(b.s, o, x, rows, dim, sc) }, nil
}
