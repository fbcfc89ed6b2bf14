package cuda

// matmul.go: the matmul ops (plain, fused q/k/v, fused FFN) and the one
// route choice they share (matmulRoute), with the type table and the
// Kernels.MatMul entry point that dispatches a single matmul to its
// family: mmv.go, gemm.go, mmq.go, mmvq.go, mmvq_nt.go, mmvq_repack.go,
// mmvq_split.go. No kernel lives here.

import (
	"fmt"
	"math"
	"sort"

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
	if w.host {
		// The model registered it as gathered only (graph.Weight.Gathered):
		// a matmul over it breaks that rule, and one over the host link
		// would be slow; refused, never read there.
		return matmulPlan{}, fmt.Errorf("weight %s is in mapped host memory (MINFER_EMBED_HOST=1, registered as gathered only): no matmul reads it", wname)
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
	if err := b.ensureMMQScratch(w.typ, nt, w.rowLen, w.rows, b.matmulRoute(w, nt) == routeGEMM16); err != nil {
		return matmulPlan{}, fmt.Errorf("weight %s: %w", wname, err)
	}
	return matmulPlan{w: w, bias: bias, out: out}, nil
}

func (b *Backend) runMatMul(x driver.DevicePtr, nt int, m matmulPlan) error {
	r := b.matmulRoute(m.w, nt)
	if m.w.rpOnly && r != routeMMVQR {
		// Only the repacked copy is on the device (MINFER_ONE_COPY):
		// Kernels.MatMul reads GGUF bytes, so quantize here and run the
		// route's repacked kernel.
		switch r {
		case routeGEMM16:
			if err := b.convertGemm16(x, m.w.rowLen, nt); err != nil {
				return err
			}
			return b.runGemm16(nt, m)
		case routeMMQ:
			if err := b.quantizeMMQ(x, m.w.rowLen, nt); err != nil {
				return err
			}
			return b.runPreQ8(nt, m)
		case routeMMVQNT:
			if err := b.quantizeActNT(x, m.w.rowLen, nt); err != nil {
				return err
			}
			return b.runFromQ8NT(nt, m)
		}
		return fmt.Errorf("weight %s (%s) keeps only its repacked copy (MINFER_ONE_COPY=1) and its matmul over %d tokens takes route %d, "+
			"which has no repacked kernel", m.w.name, m.w.typ, nt, r)
	}
	if r == routeGEMM16 {
		if err := b.convertGemm16(x, m.w.rowLen, nt); err != nil {
			return err
		}
		return b.runGemm16(nt, m)
	}
	if r == routeMMVQR {
		// Kernels.MatMul knows no repacked copy: quantize x, then minfer_mmvqr.
		if err := b.quantizeAct(x, m.w.rowLen); err != nil {
			return err
		}
		return b.mmvqFromQ8(m, m.out, 0)
	}
	return b.k.MatMul(b.s, m.out, x, m.w.ptr, m.w.typ, m.bias, nt, m.w.rowLen, m.w.rows, b.mm)
}

func opMatMul(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	p, o, err := b.nodeIO(n, in, 1, out)
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
	if n.Norm != "" {
		// FuseNormQ8 (the decode lm head): the norm writes the Q8_1 row
		// the matvec reads.
		quantize, err := b.decodeQuantize(n, p[0], m.w.rowLen, nt, []matmulPlan{m})
		if err != nil {
			return nil, err
		}
		return func() error {
			if err := quantize(); err != nil {
				return err
			}
			return b.mmvqFromQ8(m, m.out, 0)
		}, nil
	}
	return func() error { return b.runMatMul(p[0], nt, m) }, nil
}

// residRoute reports whether the matmul node m takes a route whose kernel
// has a residual form (SupportsFused(FuseMatMulAdd) asks it at fuse time):
// one token, quantize + minfer_mmvq_<t> or the repacked minfer_mmvqr_<t>.
// The in-kernel form and the f32 mmv kernel read the f32 activation from
// every block while others write the output: no residual form.
func (b *Backend) residRoute(m *graph.Node) bool {
	w := b.weights[m.Weight]
	if w == nil || m.Shape.Rows() != 1 {
		return false
	}
	return b.matmulRoute(w, 1).decode()
}

// opMatMulAdd runs graph.OpMatMulAdd, out = in[1] + (W in[0] + bias), as
// one minfer_mmvq[r]_res_<t> launch after the row's quantization: the
// plain mmvq kernel with the add folded into the lane that writes the row,
// the same f32 __fadd_rn as minfer_add_f32's, so bitwise the unfused
// matmul and add. The fuse pass made the node only where residRoute holds;
// elsewhere it is an error naming the route, never a fallback.
func opMatMulAdd(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	p, o, err := b.nodeIO(n, in, 2, out)
	if err != nil {
		return nil, err
	}
	nt := n.Shape.Rows()
	m, err := b.planMatMul(n.Weight, n.Bias, in[0], nt, o)
	if err != nil {
		return nil, err
	}
	if m.w.rows != n.Shape[0] || in[1].Len != out.Len {
		return nil, fmt.Errorf("weight %s has %d rows, residual %d elements, node wants %s", n.Weight, m.w.rows, in[1].Len, n.Shape)
	}
	if r := b.matmulRoute(m.w, nt); nt != 1 || !r.decode() {
		return nil, fmt.Errorf("weight %s (%s) over %d tokens takes route %d: no residual form", n.Weight, m.w.typ, nt, r)
	}
	return func() error {
		if err := b.quantizeAct(p[0], m.w.rowLen); err != nil {
			return err
		}
		return b.mmvqFromQ8(m, o, p[1])
	}, nil
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
	routeGEMM16                // prefill: f16 rows, minfer_gemm16_* (Q8_0's one copy; MINFER_MMQ_F16_KQ)
)

// decode reports whether r is one of the decode MMVQ routes, whose Q8_1
// row the fused and residual forms share.
func (r mmRoute) decode() bool { return r == routeMMVQ || r == routeMMVQR }

// routeFor is the route of a weight type over nt tokens under opts, for
// the GGUF bytes: matmulRoute adds the repacked copy.
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
// decode MMVQ matmul reads the repacked copy when w has one, and a prefill
// of the f16 GEMM's types takes that GEMM where gemm16On says.
func (b *Backend) matmulRoute(w *devWeight, nt int) mmRoute {
	r := routeFor(w.typ, nt, b.mm)
	if r == routeMMVQ && w.rp != 0 {
		return routeMMVQR
	}
	if r == routeMMQ && gemm16On(w.typ, nt, w.rp != 0, w.rpOnly, b.mm) {
		return routeGEMM16
	}
	return r
}

// sharedInput is how the matmuls ms of one input x (k values, nt rows:
// fused q/k/v, gate/up) share it when no single fused kernel takes them:
// prep runs once (the shared quantization, if any), then run with the
// plans. The routes decide: all MMQ or all multi-token MMVQ quantize x
// once into their scratch; all f16 GEMM convert it once and run the
// matmuls in one launch; decode with an MMVQ route quantizes the row
// once; else each weight's own matmul.
func (b *Backend) sharedInput(x driver.DevicePtr, k, nt int, ms []matmulPlan) (prep func() error, run func(...matmulPlan) error) {
	prep = func() error { return nil }
	one := func(m matmulPlan) error { return b.runMatMul(x, nt, m) }
	switch all, anyDecode := b.routesOf(nt, ms); {
	case all == routeMMQ:
		prep = func() error { return b.quantizeMMQ(x, k, nt) }
		one = func(m matmulPlan) error { return b.runPreQ8(nt, m) }
	case all == routeGEMM16:
		prep = func() error { return b.convertGemm16(x, k, nt) }
		return prep, func(ms ...matmulPlan) error { return b.runGemm16(nt, ms...) }
	case all == routeMMVQNT:
		prep = func() error { return b.quantizeActNT(x, k, nt) }
		one = func(m matmulPlan) error { return b.runFromQ8NT(nt, m) }
	case anyDecode:
		prep = func() error { return b.quantizeAct(x, k) }
		one = func(m matmulPlan) error { return b.runFromQ8(x, m) }
	}
	return prep, func(ms ...matmulPlan) error {
		for _, m := range ms {
			if err := one(m); err != nil {
				return err
			}
		}
		return nil
	}
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

// allDecode reports whether every plan of ms takes a decode MMVQ route over
// nt == 1 token (any types): each reads only the Q8_1 row.
func (b *Backend) allDecode(nt int, ms []matmulPlan) bool {
	for _, m := range ms {
		if nt != 1 || !b.matmulRoute(m.w, nt).decode() {
			return false
		}
	}
	return len(ms) > 0
}

// decodeGroup reports whether every plan of ms takes one decode MMVQ route
// over one weight type, so one fused mmvq kernel can run them all, and
// that route (routeMMVQ, routeMMVQR: all read a repacked copy).
func (b *Backend) decodeGroup(nt int, ms []matmulPlan) (same bool, route mmRoute) {
	if len(ms) == 0 {
		return false, routeNone
	}
	route = b.matmulRoute(ms[0].w, nt)
	same = route.decode()
	for _, m := range ms[1:] {
		same = same && b.matmulRoute(m.w, nt) == route && m.w.typ == ms[0].w.typ
	}
	return same, route
}

// decodeQuantize is how a fused q/k/v or gate/up node (or the decode lm
// head's matmul) over the row x (k values, nt tokens) fills the Q8_1
// scratch at decode: the row's quantization, or with n.Norm (FuseNormQ8)
// the norm and quantization in one launch (RmsNormQ8_1) of the un-normed
// row. A Norm where a matmul of the node is not on a decode MMVQ route (it
// would read the f32 row) is an error: the fuse pass made the node only
// where normQ8Route holds.
func (b *Backend) decodeQuantize(n *graph.Node, x driver.DevicePtr, k, nt int, ms []matmulPlan) (func() error, error) {
	if n.Norm == "" {
		return func() error { return b.quantizeAct(x, k) }, nil
	}
	if !b.allDecode(nt, ms) {
		return nil, fmt.Errorf("norm %s folded in over %d tokens where a matmul is not on a decode MMVQ route", n.Norm, nt)
	}
	w, err := b.vector(n.Norm, k)
	if err != nil {
		return nil, err
	}
	if need := ActQ8Bytes(k, 1); b.mm.ActQ8Bytes < need {
		return nil, fmt.Errorf("Q8_1 activation scratch of %d bytes, k=%d needs %d", b.mm.ActQ8Bytes, k, need)
	}
	eps := n.P.Eps
	return func() error { return b.k.RmsNormQ8_1(b.s, b.mm.ActQ8, x, w, k, eps) }, nil
}

// opFusedQKV runs the three matmuls of one input into one output (q, then
// k, then v), as qkvDecodePlan says. Decode with the three of one type on
// an MMVQ route: one fused launch after the row's quantization
// (minfer_mmvqr_qkv over repacked copies, else minfer_mmvq_qkv); with
// MINFER_MMVQ_QKV_MIXED, q/k of one type and v of another on decode MMVQ
// routes: one mixed launch (minfer_mmvq_xqkv_*); otherwise the three share
// x as sharedInput says.
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
	quantize, err := b.decodeQuantize(n, x, k, nt, ms)
	if err != nil {
		return nil, err
	}
	bias := [3]driver.DevicePtr{ms[0].bias, ms[1].bias, ms[2].bias}
	rows := [3]int{ms[0].w.rows, ms[1].w.rows, ms[2].w.rows}
	if name, _ := b.normMMVQNode(n, nt, ms); name != "" {
		// MINFER_FUSE_NORM_MMVQ: the kernel norms the row itself, no
		// norm launch (mmvq_norm.go).
		r, err := b.normMMVQRow(n, x, k)
		if err != nil {
			return nil, err
		}
		var w [3]driver.DevicePtr
		var types [3]quant.Type
		var rep [3]bool
		for i, m := range ms {
			w[i], types[i], rep[i] = m.w.ptr, m.w.typ, b.matmulRoute(m.w, nt) == routeMMVQR
			if rep[i] {
				w[i] = m.w.rp
			}
		}
		return func() error { return b.k.MatMulNormQKV(b.s, name, o, r, w, types, rep, bias, k, rows) }, nil
	}
	switch plan := b.qkvDecodePlan(nt, ms); plan.kind {
	case qkvOneType:
		w := [3]driver.DevicePtr{ms[0].w.ptr, ms[1].w.ptr, ms[2].w.ptr}
		if plan.route == routeMMVQR {
			w = [3]driver.DevicePtr{ms[0].w.rp, ms[1].w.rp, ms[2].w.rp}
		}
		typ := ms[0].w.typ
		return func() error {
			if err := quantize(); err != nil {
				return err
			}
			return b.mmvqQKVFromQ8(o, w, typ, bias, k, rows, plan.route)
		}, nil
	case qkvMixed:
		// MINFER_MMVQ_QKV_MIXED: q and k from their GGUF bytes, v from
		// its repacked copy when it has one (mmvq_xqkv.go).
		w := [3]driver.DevicePtr{ms[0].w.ptr, ms[1].w.ptr, ms[2].w.ptr}
		if plan.pair.vRepacked {
			w[2] = ms[2].w.rp
		}
		return func() error {
			if err := quantize(); err != nil {
				return err
			}
			return b.k.MatMulQ8_1QKVMixed(b.s, o, b.mm.ActQ8, b.mm.ActQ8Bytes, w, plan.pair, bias, k, rows)
		}, nil
	}
	prep, run := b.sharedInput(x, k, nt, ms)
	if n.Norm != "" {
		prep = quantize // every matmul reads the Q8_1 row (decodeQuantize)
	}
	return func() error {
		if err := prep(); err != nil {
			return err
		}
		return run(ms...)
	}, nil
}

// opFusedFFN computes silu(x*gate) * (x*up) (graph.OpFusedFFN, Weights =
// {gate, up}, output [n_ff, nt]) as engine/cpu does. Decode with gate and
// up of one type on an MMVQ route: one fused launch after the row's
// quantization (minfer_mmvqr_ffn over repacked copies, else
// minfer_mmvq_ffn). Otherwise gate into the output, up into the backend's
// ffnUp scratch (sharing x as sharedInput says), then SwiGLU in place: the
// unfused graph's kernels, so bitwise its values.
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
	quantize, err := b.decodeQuantize(n, x, k, nt, []matmulPlan{g, u})
	if err != nil {
		return nil, err
	}
	if name, _ := b.normMMVQNode(n, nt, []matmulPlan{g, u}); name != "" {
		// MINFER_FUSE_NORM_MMVQ: the kernel norms the row itself.
		r, err := b.normMMVQRow(n, x, k)
		if err != nil {
			return nil, err
		}
		_, route := b.decodeGroup(nt, []matmulPlan{g, u})
		typ, wg, wu, rep := g.w.typ, g.w.ptr, u.w.ptr, route == routeMMVQR
		if rep {
			wg, wu = g.w.rp, u.w.rp
		}
		return func() error { return b.k.MatMulNormFFN(b.s, name, o, r, wg, wu, typ, rep, k, nff) }, nil
	}
	if same, route := b.decodeGroup(nt, []matmulPlan{g, u}); same {
		typ, wg, wu := g.w.typ, g.w.ptr, u.w.ptr
		if route == routeMMVQR {
			wg, wu = g.w.rp, u.w.rp
		}
		return func() error {
			if err := quantize(); err != nil {
				return err
			}
			if route == routeMMVQR {
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
	prep, run := b.sharedInput(x, k, nt, []matmulPlan{g, u})
	if n.Norm != "" {
		prep = quantize // every matmul reads the Q8_1 row (decodeQuantize)
	}
	return func() error {
		if err := prep(); err != nil {
			return err
		}
		if err := run(g, u); err != nil {
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

// MatMulOptions selects among the matmul paths.
type MatMulOptions struct {
	// NoPrefillGEMM (MINFER_NO_PREFILL_GEMM) runs prefill (nt >= 9) through
	// the per-type mmv kernel, looped over chunks of at most 8 tokens,
	// instead of the f16 tensor-core GEMM.
	NoPrefillGEMM bool
	// NoQ80MMVQ (MINFER_NO_Q80_MMVQ: Q8_0), NoQ40MMVQ (MINFER_NO_Q40_MMVQ:
	// the legacy 32-value formats Q4_0, Q4_1, Q5_0 and Q5_1) and NoKQMMVQ
	// (MINFER_NO_KQ_MMVQ: Q4_K, Q6_K and Q5_K) run decode (nt = 1) of those weight
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
	// MMQ (MINFER_MMQ, default on) runs prefill (nt >= 9) of the types in
	// mmqTable through the int8 tensor-core kernel over Q8_1 activations
	// (mmq.go) in MMQAct (MMQActBytes >= ActQ8Bytes(k, nt), grown by
	// the Backend; a missing or small one is an error, not a fallback).
	MMQ bool
	// MMQAsync (MINFER_MMQ_ASYNC) runs the MMQ kernels' async variants
	// (minfer_mmq_<type>_async[_r64]: a stage's bytes staged in shared
	// memory by cp.async one stage ahead), bitwise the plain ones.
	MMQAsync bool
	// MMQF16KQ (MINFER_MMQ_F16_KQ) runs prefill of Q4_K weights and of Q6_K
	// weights with a repacked copy through the f16 GEMM (gemm16.go) over
	// their f16 rows in MMQAct, as a Q8_0 weight's one copy always is.
	MMQF16KQ    bool
	MMQAct      driver.DevicePtr
	MMQActBytes uint64
	// MMVQNT (MINFER_MMVQ_NT, default on) runs matmuls of 2..8 tokens of the
	// mmvq types (their mmvq lever off) as minfer_quantize_q8_1 of the nt
	// rows into ActQ8 (ActQ8Bytes(k, nt)) + minfer_mmvq_nt_<t>
	// (mmvq_nt.go) instead of the f32-activation mmv kernel.
	MMVQNT bool
	// MMVQSplit (MINFER_MMVQ_SPLIT) runs decode mmvq matmuls (plain, _res_
	// and fused q/k/v, GGUF and repacked) of few rows in the split form,
	// several warps per row (mmvq_split.go: Kernels.MMVQSplit).
	MMVQSplit bool
	// MMVQQKVMixed (MINFER_MMVQ_QKV_MIXED) runs a decode fused q/k/v whose
	// v weight type differs from q's and k's as one launch
	// (mmvq_xqkv.go) instead of one matvec per matrix.
	MMVQQKVMixed bool
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
// tokens. Decode (nt = 1) of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and
// Q6_K runs the mmvq kernel (after
// minfer_quantize_q8_1) when its lever is off and opts.ActQ8 is set; 2..8
// tokens of those types but Q5_K (no multi-token kernel: mmvqNTMissing)
// run minfer_mmvq_nt_<t> (after minfer_quantize_q8_1 of the nt rows) when
// opts.MMVQNT is set too.
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
		return k.launchMMVQ(s, wtype, out, x, w, bias, kDim, n, opts)
	}
	return k.launchMMV(s, name, out, x, w, bias, nt, kDim, n)
}
