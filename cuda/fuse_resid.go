package cuda

// fuse_resid.go: MINFER_FUSE_RESIDUAL. At decode every layer ends two
// chains with a residual add, x + attn_output(a) and h + ffn_down(s); each
// add is its own minfer_add_f32 launch (~1.3 us, plus a graph-node gap).
// With the lever on, a decode matmul whose output's only reader is such an
// add writes out = x + (W a + bias) itself (minfer_mmvq_res_<t> /
// minfer_mmvqr_res_<t>, the plain mmvq kernels with the add folded into the
// lane that writes the row) and the add launches nothing. The add is the
// same f32 __fadd_rn after the dot as minfer_add_f32's, so the result is
// bitwise the unfused chain.
//
// The backend sees one node per Execute and no graph, so the decision is a
// deferral: Execute of an eligible matmul (lever on, nt = 1, Readers = 1,
// a quantize-first mmvq path) plans it but launches nothing and leaves it
// pending; the next Execute either is its add (pair rule below: then one
// fused launch in the add's place) or launches the pending matmul unfused
// first. Synchronize, BeginSplit and host reads and writes launch a pending
// matmul too, so nothing ever observes it missing (RunInstrumented, which
// synchronizes after every node, therefore runs unfused). Recording for a
// CUDA-graph capture keeps the same order: the pending closure or the
// fused one is appended where the launches would have run.
//
// In-kernel quantization (minfer_mmvqx_*, MINFER_MMVQ_INLINE_Q8) and the
// f32 mmv kernel read the f32 activation from every block, and the add's
// output may be the activation's freed slot: those paths are not fused.

import (
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
)

// residPending is a planned, not yet launched, decode matmul.
type residPending struct {
	mm     *graph.Node
	out    graph.Tensor     // its output (what the add reads)
	x      driver.DevicePtr // its f32 activation
	q8     bool             // whether its launch quantizes x (planMatMulQ8)
	m      matmulPlan
	launch func() error // the unfused launch, as opMatMul would return it
}

// residEligible is the matmul half of the rule: lever on, one token, the
// output read by exactly one node, and a path the fused kernels take.
func residEligible(on bool, nt, readers int, fusablePath bool) bool {
	return on && nt == 1 && readers == 1 && fusablePath
}

// residPair is the add half of the rule, for the node n executed right
// after the pending matmul mm (output mmOut): n is an add reading mm's
// output directly, once, and another operand of mm's shape, into an output
// of that shape. It returns the index of that other operand (the residual).
func residPair(mm *graph.Node, mmOut graph.Tensor, n *graph.Node, in []graph.Tensor, out graph.Tensor) (int, bool) {
	if n.Op != graph.OpAdd || len(n.Inputs) != 2 || len(in) != 2 || mm.Readers != 1 {
		return -1, false
	}
	j := -1
	for i, id := range n.Inputs {
		if id == mm.ID {
			if j >= 0 {
				return -1, false // x + x of the matmul: not a residual
			}
			j = i
		}
	}
	if j < 0 {
		return -1, false
	}
	r := 1 - j
	if in[j] != mmOut || in[r].Len != mmOut.Len || out.Len != mmOut.Len || n.Shape != mm.Shape {
		return -1, false
	}
	return r, true
}

// residPtrsOK: the residual may be the output itself (each element is read
// and written by the one lane), never a shifted overlap of it.
func residPtrsOK(res, out driver.DevicePtr, n int) bool {
	return res == out || !overlapF32(res, n, out, n)
}

// residPath reports whether the decode matmul m runs a kernel that has a
// _res_ form: quantize (or the NORM_Q8 scratch) + minfer_mmvq_<t>, or the
// repacked minfer_mmvqr_<t>.
func (b *Backend) residPath(m matmulPlan, nt int) bool {
	r := b.matmulRoute(m.w, nt)
	return r == routeMMVQ || r == routeMMVQR
}

// residDefer leaves the planned matmul n pending when the rule's matmul
// half holds (opMatMul then returns no launch), and reports whether it did.
func (b *Backend) residDefer(n *graph.Node, nt int, out graph.Tensor, x driver.DevicePtr, q8 bool, m matmulPlan,
	launch func() error) bool {
	if !b.lv.FuseResidual || !residEligible(true, nt, n.Readers, b.residPath(m, nt)) {
		return false
	}
	b.resid = &residPending{mm: n, out: out, x: x, q8: q8, m: m, launch: launch}
	return true
}

// residTake runs before node n is planned while a matmul is pending: when n
// is its add, the fused launch is issued in n's place (fused = true, n is
// done); otherwise the pending matmul is issued unfused, then n proceeds.
func (b *Backend) residTake(n *graph.Node, in []graph.Tensor, out graph.Tensor) (fused bool, err error) {
	p := b.resid
	b.resid = nil
	if r, ok := residPair(p.mm, p.out, n, in, out); ok {
		res, rerr := b.pool.tensor(in[r])
		o, oerr := b.pool.tensor(out)
		if rerr == nil && oerr == nil && residPtrsOK(res, o, out.Len) {
			// The add writes out: whatever the Q8_1 record said about it is
			// stale (an add clears the record in q8Before anyway).
			b.q8 = actQ8Record{}
			return true, b.issue(n, func() error { return b.runMatMulRes(p, res, o) })
		}
	}
	return false, b.issue(p.mm, p.launch)
}

// flushResid issues a pending matmul unfused (split boundaries, host I/O).
func (b *Backend) flushResid() error {
	if b.resid == nil {
		return nil
	}
	p := b.resid
	b.resid = nil
	return b.issue(p.mm, p.launch)
}

// runMatMulRes is the fused launch: the pending matmul's quantization (when
// its plan has one) and its _res_ kernel writing res + (W a + bias) to out.
func (b *Backend) runMatMulRes(p *residPending, res, out driver.DevicePtr) error {
	m := p.m
	if err := b.quantizeAct(p.q8, p.x, m.w.rowLen); err != nil {
		return err
	}
	if res == 0 {
		return fmt.Errorf("fused residual matmul %s: null residual", m.w.name)
	}
	// The repacked or GGUF _res_ kernel, one-warp or split (MINFER_MMVQ_SPLIT).
	return b.mmvqFromQ8(m, out, res)
}
