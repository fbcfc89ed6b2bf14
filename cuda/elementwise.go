package cuda

// elementwise.go: the element-wise kernels (cuda/kernels/elementwise.cu:
// add, mul, bias and row broadcasts, silu, swiglu, scale, copy, permute)
// and their op handlers. Each launcher checks its arguments on the host (an
// invalid shape is an error naming the op and the values, never a launch),
// then launches through k.launch, and returns the launch's error wrapped
// with the op name.

import (
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
)

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

func opAddMul(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	p, o, err := b.nodeIO(n, in, 2, out)
	if err != nil {
		return nil, err
	}
	a, c := in[0].Len, in[1].Len
	dim := n.Shape[0]
	mul := n.Op == graph.OpMul
	switch {
	case a != out.Len:
		return nil, fmt.Errorf("operands of %d and %d elements, output %d", a, c, out.Len)
	case c == a:
		if mul {
			return func() error { return b.k.Mul(b.s, o, p[0], p[1], a) }, nil
		}
		return func() error { return b.k.Add(b.s, o, p[0], p[1], a) }, nil
	case c == dim && dim > 0 && a%dim == 0:
		rows := a / dim
		if mul {
			return func() error { return b.k.MulRows(b.s, o, p[0], p[1], rows, dim) }, nil
		}
		return func() error { return b.k.AddBias(b.s, o, p[0], p[1], rows, dim) }, nil
	}
	return nil, fmt.Errorf("operands of %d and %d elements, output %d", a, c, out.Len)
}

func opSilu(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	x, o, err := b.sameShape(n, in, out)
	if err != nil {
		return nil, err
	}
	return func() error { return b.k.Silu(b.s, o, x, out.Len) }, nil
}

func opSwiGLU(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	p, o, err := b.nodeIO(n, in, 2, out)
	if err != nil {
		return nil, err
	}
	if in[0].Len != out.Len || in[1].Len != out.Len {
		return nil, fmt.Errorf("operands of %d and %d elements, output %d", in[0].Len, in[1].Len, out.Len)
	}
	return func() error { return b.k.SwiGLU(b.s, o, p[0], p[1], out.Len) }, nil
}

func opScale(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	x, o, err := b.sameShape(n, in, out)
	if err != nil {
		return nil, err
	}
	f := n.P.Scale
	return func() error { return b.k.Scale(b.s, o, x, f, out.Len) }, nil
}

func opPermute(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	x, o, err := b.sameShape(n, in, out)
	if err != nil {
		return nil, err
	}
	shape, perm := [4]int(n.Shape), n.P.Perm
	return func() error { return b.k.Permute(b.s, o, x, shape, perm) }, nil
}
