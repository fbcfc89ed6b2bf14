package cuda

import (
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/quant"
)

// matmulPlan is one weight of a (fused) matmul.
type matmulPlan struct {
	w    *devWeight
	bias driver.DevicePtr
	out  driver.DevicePtr
}

func (b *Backend) planMatMul(wname, bname string, x graph.Tensor, nt int, out driver.DevicePtr) (matmulPlan, error) {
	w, err := b.weight(wname)
	if err != nil {
		return matmulPlan{}, err
	}
	if w.vector {
		return matmulPlan{}, fmt.Errorf("weight %s is a vector (dims %v), not a matrix", wname, w.dims)
	}
	if x.Len != w.rowLen*nt {
		return matmulPlan{}, fmt.Errorf("input of %d elements is not %d rows of k=%d (weight %s)", x.Len, nt, w.rowLen, wname)
	}
	if bs := w.typ.BlockSize(); w.rowLen%bs != 0 {
		return matmulPlan{}, fmt.Errorf("weight %s (%s): k=%d is not a multiple of the block size %d", wname, w.typ, w.rowLen, bs)
	}
	bias, err := b.vector(bname, w.rows)
	if err != nil {
		return matmulPlan{}, err
	}
	if err := b.ensureMMQScratch(w.typ, nt, w.rowLen, w.rows); err != nil {
		return matmulPlan{}, fmt.Errorf("weight %s: %w", wname, err)
	}
	return matmulPlan{w: w, bias: bias, out: out}, nil
}

func (b *Backend) runMatMul(x driver.DevicePtr, nt int, m matmulPlan) error {
	if b.matmulRoute(m.w, nt) == routeMMVQR {
		// Kernels.MatMul knows no repacked copy: quantize x, then minfer_mmvqr.
		if err := b.quantizeAct(true, x, m.w.rowLen); err != nil {
			return err
		}
		return b.mmvqFromQ8(m, m.out, 0)
	}
	return b.k.MatMul(b.s, m.out, x, m.w.ptr, m.w.typ, m.bias, nt, m.w.rowLen, m.w.rows, b.mm)
}

func opMatMul(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	p, o, err := b.ptrs(in, 1, out, true)
	if err != nil {
		return nil, err
	}
	nt := n.Shape[1] * n.Shape[2] * n.Shape[3]
	m, err := b.planMatMul(n.Weight, n.Bias, in[0], nt, o)
	if err != nil {
		return nil, err
	}
	if m.w.rows != n.Shape[0] {
		return nil, fmt.Errorf("weight %s has %d rows, node wants %d", n.Weight, m.w.rows, n.Shape[0])
	}
	launch := func() error { return b.runMatMul(p[0], nt, m) }
	q8 := b.planMatMulQ8(p[0], nt, m)
	if !q8 {
		// The scratch already holds p[0]'s Q8_1 row (MINFER_NORM_Q8): the
		// mmvq kernel alone, as MatMul would run it after its quantize.
		launch = func() error { return b.runFromQ8(p[0], m) }
	}
	if b.residDefer(n, nt, out, p[0], q8, m, launch) {
		return nil, nil // pending: its add fuses it (MINFER_FUSE_RESIDUAL)
	}
	return launch, nil
}

// mmRoute is the kernel path of one weight's matmul over nt tokens: the
// one choice every matmul op (plain, fused q/k/v, fused FFN) makes through
// matmulRoute, and Kernels.MatMul through routeFor.
type mmRoute int

const (
	routeNone   mmRoute = iota // no device matmul (or plans that differ)
	routeGEMM                  // prefill: f16 tensor-core GEMM (minfer_gemm_<t>)
	routeMMV                   // f32 activations: minfer_mmv_<t>, chunks of 8 tokens
	routeMMQ                   // prefill: quantize the rows, int8 MMQ (MINFER_MMQ)
	routeMMVQNT                // 2..8 tokens: quantize the rows, minfer_mmvq_nt_<t> (MINFER_MMVQ_NT)
	routeMMVQ                  // decode: quantize the row, minfer_mmvq_<t> (one-warp or split)
	routeMMVQR                 // decode: quantize the row, minfer_mmvqr_<t> over the repacked copy
	routeMMVQX                 // decode: minfer_mmvqx_<t> quantizes the row itself (MINFER_MMVQ_INLINE_Q8)
)

// decode reports whether r is one of the decode MMVQ routes, whose Q8_1
// row the fused and residual forms share.
func (r mmRoute) decode() bool { return r == routeMMVQ || r == routeMMVQR || r == routeMMVQX }

// routeFor is the route of a weight type over nt tokens under opts, for
// the GGUF bytes (no repacked copy) and before the in-kernel choice, which
// depends on the row count: matmulRoute refines both.
func routeFor(wtype quant.Type, nt int, opts MatMulOptions) mmRoute {
	if _, ok := matmulTable[wtype]; !ok || nt < 1 {
		return routeNone
	}
	switch {
	case nt == 1 && mmvqOn(wtype, opts):
		return routeMMVQ
	case mmvqNTOn(wtype, nt, opts):
		return routeMMVQNT
	case nt <= mmvMaxNT || opts.NoPrefillGEMM:
		return routeMMV
	case mmqOn(wtype, nt, opts):
		return routeMMQ
	}
	return routeGEMM
}

// matmulRoute is the route of weight w over nt tokens on this backend: a
// decode MMVQ matmul reads the repacked copy when w has one (before the
// in-kernel form), else the in-kernel form when it takes w's shape.
func (b *Backend) matmulRoute(w *devWeight, nt int) mmRoute {
	r := routeFor(w.typ, nt, b.mm)
	switch {
	case r != routeMMVQ:
		return r
	case w.rp != 0:
		return routeMMVQR
	case b.k.MMVQInline(w.rowLen, w.rows, b.mm):
		return routeMMVQX
	}
	return r
}

// quantizeAct quantizes the one activation row x (k values) into the
// backend's Q8_1 scratch: the shared first half of the mmvq matmuls of x.
// launch is planActQ8's plan-time answer: false when the scratch already
// holds x's quantization (MINFER_NORM_Q8), and then nothing is launched.
func (b *Backend) quantizeAct(launch bool, x driver.DevicePtr, k int) error {
	if need := ActQ8Bytes(k, 1); need == 0 || b.mm.ActQ8Bytes < need {
		return fmt.Errorf("Q8_1 activation scratch of %d bytes, k=%d needs %d", b.mm.ActQ8Bytes, k, need)
	}
	if !launch {
		return nil
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

// sharedInput is how the matmuls ms of one input x (k values, nt rows:
// fused q/k/v, gate/up) share it when no single fused kernel takes them:
// prep runs once (the shared quantization, if any), then one per plan. The
// routes decide: all MMQ or all multi-token MMVQ quantize x once into their
// scratch; decode with an MMVQ route quantizes the row once (unless the
// in-kernel form is on: then each weight's own kernel from x); else each
// weight's own matmul.
func (b *Backend) sharedInput(x driver.DevicePtr, k, nt int, ms []matmulPlan) (prep func() error, one func(matmulPlan) error) {
	prep = func() error { return nil }
	one = func(m matmulPlan) error { return b.runMatMul(x, nt, m) }
	switch all, any := b.routesOf(nt, ms); {
	case all == routeMMQ:
		prep = func() error { return b.quantizeMMQ(x, k, nt) }
		one = func(m matmulPlan) error { return b.runPreQ8(nt, m) }
	case all == routeMMVQNT:
		prep = func() error { return b.quantizeActNT(x, k, nt) }
		one = func(m matmulPlan) error { return b.runFromQ8NT(nt, m) }
	case any && b.mm.InlineQ8:
		// Mixed types with in-kernel quantization: each weight's own route.
	case any:
		q8 := b.planActQ8(x, k) // plan time: the record is node-ordered
		prep = func() error { return b.quantizeAct(q8, x, k) }
		one = func(m matmulPlan) error { return b.runFromQ8(x, m) }
	}
	return prep, one
}

// routesOf is the route every plan of ms shares over nt tokens (routeNone
// when they differ), and whether any of them is a decode MMVQ route.
func (b *Backend) routesOf(nt int, ms []matmulPlan) (all mmRoute, anyDecode bool) {
	for i, m := range ms {
		r := b.matmulRoute(m.w, nt)
		anyDecode = anyDecode || r.decode()
		if i == 0 {
			all = r
		} else if r != all {
			all = routeNone
		}
	}
	return all, anyDecode
}

// decodeGroup reports whether every plan of ms takes a decode MMVQ route
// over one weight type, so one fused mmvq kernel can run them all, and
// whether all of them read a repacked copy.
func (b *Backend) decodeGroup(nt int, ms []matmulPlan) (same, repacked bool) {
	same, repacked = len(ms) > 0, true
	for _, m := range ms {
		r := b.matmulRoute(m.w, nt)
		same = same && r.decode() && m.w.typ == ms[0].w.typ
		repacked = repacked && r == routeMMVQR
	}
	return same, same && repacked
}

// opFusedQKV runs the three matmuls of one input into one output (q, then
// k, then v). Decode with the three of one type on an MMVQ route: one
// fused launch (minfer_mmvqr_qkv over repacked copies, minfer_mmvqx_qkv
// when the in-kernel form takes the three together, else quantize once and
// minfer_mmvq_qkv); otherwise the three share x as sharedInput says.
func opFusedQKV(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if len(n.Weights) != 3 || len(n.Biases) != 3 {
		return nil, fmt.Errorf("fused qkv wants 3 weights and 3 bias names")
	}
	p, o, err := b.ptrs(in, 1, out, true)
	if err != nil {
		return nil, err
	}
	w0, err := b.weight(n.Weights[0])
	if err != nil {
		return nil, err
	}
	if w0.rowLen == 0 || in[0].Len%w0.rowLen != 0 {
		return nil, fmt.Errorf("input of %d elements is not rows of %d", in[0].Len, w0.rowLen)
	}
	nt := in[0].Len / w0.rowLen
	ms := make([]matmulPlan, 3)
	off := 0
	for i := range ms {
		if ms[i], err = b.planMatMul(n.Weights[i], n.Biases[i], in[0], nt, o.Add(uint64(off)*4)); err != nil {
			return nil, err
		}
		off += ms[i].w.rows * nt
	}
	if off != out.Len {
		return nil, fmt.Errorf("output of %d elements, the three projections give %d", out.Len, off)
	}
	x, k := p[0], w0.rowLen
	if same, repacked := b.decodeGroup(nt, ms); same {
		w := [3]driver.DevicePtr{ms[0].w.ptr, ms[1].w.ptr, ms[2].w.ptr}
		if repacked {
			w = [3]driver.DevicePtr{ms[0].w.rp, ms[1].w.rp, ms[2].w.rp}
		}
		bias := [3]driver.DevicePtr{ms[0].bias, ms[1].bias, ms[2].bias}
		rows := [3]int{ms[0].w.rows, ms[1].w.rows, ms[2].w.rows}
		typ := ms[0].w.typ
		switch {
		case repacked || !b.mm.InlineQ8:
			// The repacked copies take precedence over the in-kernel form.
			q8 := b.planActQ8(x, k) // plan time: the record is node-ordered
			return func() error {
				if err := b.quantizeAct(q8, x, k); err != nil {
					return err
				}
				return b.mmvqQKVFromQ8(o, w, typ, bias, k, rows, repacked)
			}, nil
		case b.k.MMVQInline(k, off, b.mm):
			return func() error { return b.k.mmvqxQKV(b.s, o, x, w, typ, bias, k, rows, 0) }, nil
		}
	}
	prep, one := b.sharedInput(x, k, nt, ms)
	return func() error {
		if err := prep(); err != nil {
			return err
		}
		for _, m := range ms {
			if err := one(m); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// opFusedFFN computes silu(x*gate) * (x*up) (graph.OpFusedFFN, Weights =
// {gate, up}, output [n_ff, nt]) as engine/cpu does. Decode with gate and
// up of one type on an MMVQ route: one fused launch (minfer_mmvqr_ffn over
// repacked copies, minfer_mmvqx_ffn when the in-kernel form takes the
// shape, else quantize once and minfer_mmvq_ffn). Otherwise gate into the
// output, up into the backend's ffnUp scratch (sharing x as sharedInput
// says), then SwiGLU in place: the unfused graph's kernels, so bitwise its
// values.
func opFusedFFN(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	if len(n.Weights) != 2 {
		return nil, fmt.Errorf("fused ffn wants 2 weights (gate, up), has %d", len(n.Weights))
	}
	p, o, err := b.ptrs(in, 1, out, true)
	if err != nil {
		return nil, err
	}
	nff := n.Shape[0]
	if nff <= 0 || out.Len%nff != 0 {
		return nil, fmt.Errorf("output of %d elements is not rows of n_ff=%d", out.Len, nff)
	}
	nt := out.Len / nff
	g, err := b.planMatMul(n.Weights[0], "", in[0], nt, o)
	if err != nil {
		return nil, err
	}
	u, err := b.planMatMul(n.Weights[1], "", in[0], nt, 0)
	if err != nil {
		return nil, err
	}
	if g.w.rows != nff || u.w.rows != nff {
		return nil, fmt.Errorf("gate %s has %d rows, up %s %d, node wants n_ff=%d", n.Weights[0], g.w.rows, n.Weights[1], u.w.rows, nff)
	}
	x, k := p[0], g.w.rowLen
	if same, repacked := b.decodeGroup(nt, []matmulPlan{g, u}); same {
		typ, wg, wu := g.w.typ, g.w.ptr, u.w.ptr
		switch {
		case repacked:
			wg, wu = g.w.rp, u.w.rp
		case b.k.MMVQInline(k, nff, b.mm):
			return func() error { return b.k.mmvqxFFN(b.s, o, x, wg, wu, typ, k, nff, 0) }, nil
		}
		q8 := b.planActQ8(x, k) // plan time: the record is node-ordered
		return func() error {
			if err := b.quantizeAct(q8, x, k); err != nil {
				return err
			}
			if repacked {
				return b.k.FFNQ8_1R(b.s, o, b.mm.ActQ8, b.mm.ActQ8Bytes, wg, wu, typ, k, nff)
			}
			return b.k.FFNQ8_1(b.s, o, b.mm.ActQ8, b.mm.ActQ8Bytes, wg, wu, typ, k, nff)
		}, nil
	}
	if err := b.ensureFFNUp(out.Len); err != nil {
		return nil, err
	}
	u.out = b.ffnUp
	n0 := out.Len
	prep, one := b.sharedInput(x, k, nt, []matmulPlan{g, u})
	return func() error {
		if err := prep(); err != nil {
			return err
		}
		if err := one(g); err != nil {
			return err
		}
		if err := one(u); err != nil {
			return err
		}
		return b.k.SwiGLU(b.s, o, o, u.out, n0)
	}, nil
}

// ensureFFNUp grows the fused FFN's up scratch to n f32 values. It runs at
// plan time (Execute's host half, never inside a capture window); a new
// allocation moves the pool generation, so no graph captured with the old
// pointer replays, and the old one stays allocated until Close.
func (b *Backend) ensureFFNUp(n int) error {
	if n <= b.ffnUpLen {
		return nil
	}
	// Doubling: every prompt length would otherwise grow it (and each growth
	// moves the pool generation, so captured graphs re-warm).
	n = max(n, 2*b.ffnUpLen)
	return b.dev.Do(func() error {
		ptr, err := b.pool.raw(MemActivations, uint64(n)*4, fmt.Sprintf("fused FFN up scratch (%d values)", n))
		if err != nil {
			return err
		}
		b.ffnUp, b.ffnUpLen = ptr, n
		return nil
	})
}
