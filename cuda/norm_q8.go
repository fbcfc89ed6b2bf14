package cuda

// norm_q8.go: MINFER_NORM_Q8. At decode (nt = 1) the rms_norm whose output
// feeds MMVQ matmuls (attn_norm -> fused QKV, ffn_norm -> fused FFN,
// output_norm -> lm head) also writes that output's Q8_1 blocks into the
// decode scratch b.mm.ActQ8 (minfer_rms_norm_q8_1), and the matmuls that
// read it skip their minfer_quantize_q8_1 launch.
//
// Which launches to issue is decided at plan time: Execute runs the op
// functions in node order, and their closures run later in that same order
// (directly, or recorded and issued inside a CUDA-graph capture window at
// Synchronize; a replay re-issues exactly the captured sequence). So a
// plan-time record of what the scratch will hold when the next closure runs
// is exact, provided every node that could make it stale clears it before it
// is planned. The record never crosses a split: Synchronize, BeginSplit and
// host writes clear it, so a replayed split (whose nodes are not planned)
// cannot leave one behind, and a consumer never relies on another split.

import (
	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
)

// actQ8Record says that, at this point of the plan, the Q8_1 scratch at
// scratch holds the quantization of the k f32 values at x. k = 0: nothing
// is known (the zero value).
type actQ8Record struct {
	scratch driver.DevicePtr
	x       driver.DevicePtr
	k       int
}

// holds reports whether the scratch at scratch holds the quantization of the
// k values at x.
func (r actQ8Record) holds(scratch, x driver.DevicePtr, k int) bool {
	return r.k > 0 && scratch != 0 && r.scratch == scratch && r.x == x && r.k == k
}

// actQ8Node is what the record's rule looks at in one node: its op, its
// first input (the f32 activation of a matmul) and its output, as device
// ranges of f32 values.
type actQ8Node struct {
	op     graph.Op
	x      driver.DevicePtr
	xLen   int
	out    driver.DevicePtr
	outLen int
}

// before is the rule applied before a node is planned: the record survives
// only nodes that launch nothing (views, reshapes) and matmul consumers
// reading exactly the recorded row (one token of k values) without writing
// over it: their quantizations of x (if any) write the same bytes. Every
// other node (the producer included: it sets a new record itself) clears it.
func (r actQ8Record) before(n actQ8Node) actQ8Record {
	if r.k == 0 {
		return r
	}
	switch n.op {
	case graph.OpView, graph.OpReshape:
		return r
	case graph.OpFusedQKV, graph.OpFusedFFN, graph.OpMatMul:
		if n.x == r.x && n.xLen == r.k && !overlapF32(n.out, n.outLen, r.x, r.k) {
			return r
		}
	}
	return actQ8Record{}
}

// after is the rule applied once a node is planned: a record set by a node
// other than its producer (a consumer's own quantization of its input) does
// not survive that node writing over the recorded row. Views and reshapes
// alias their input but write nothing.
func (r actQ8Record) after(n actQ8Node) actQ8Record {
	switch {
	case r.k == 0, n.op == graph.OpRmsNorm, n.op == graph.OpView, n.op == graph.OpReshape,
		!overlapF32(n.out, n.outLen, r.x, r.k):
		return r
	}
	return actQ8Record{}
}

// quantize plans the quantization of the k values at x into the scratch: it
// returns whether the launch is needed (false: the record says the scratch
// already holds it), and the record after it (x's quantization replaces
// whatever the scratch held).
func (r actQ8Record) quantize(scratch, x driver.DevicePtr, k int) (bool, actQ8Record) {
	if r.holds(scratch, x, k) {
		return false, r
	}
	return true, actQ8Record{scratch: scratch, x: x, k: k}
}

// actQ8Node resolves the node's first input and output for the rule; ok is
// false when one does not resolve (the caller then clears the record: the
// op itself will report the error).
func (b *Backend) actQ8Node(n *graph.Node, in []graph.Tensor, out graph.Tensor) (actQ8Node, bool) {
	nd := actQ8Node{op: n.Op}
	if len(in) > 0 && in[0].Len > 0 {
		p, err := b.pool.tensor(in[0])
		if err != nil {
			return nd, false
		}
		nd.x, nd.xLen = p, in[0].Len
	}
	if out.Len > 0 {
		p, err := b.pool.tensor(out)
		if err != nil {
			return nd, false
		}
		nd.out, nd.outLen = p, out.Len
	}
	return nd, true
}

// q8Before applies the record's rule before node n is planned (Execute).
func (b *Backend) q8Before(n *graph.Node, in []graph.Tensor, out graph.Tensor) {
	if b.q8.k == 0 {
		return
	}
	nd, ok := b.actQ8Node(n, in, out)
	if !ok {
		b.q8 = actQ8Record{}
		return
	}
	b.q8 = b.q8.before(nd)
}

// q8After applies the record's rule once node n is planned (Execute).
func (b *Backend) q8After(n *graph.Node, in []graph.Tensor, out graph.Tensor) {
	if b.q8.k == 0 {
		return
	}
	nd, ok := b.actQ8Node(n, in, out)
	if !ok {
		b.q8 = actQ8Record{}
		return
	}
	b.q8 = b.q8.after(nd)
}

// normQ8 reports whether an rms_norm of rows rows of dim takes
// minfer_rms_norm_q8_1 (a shape choice, not an error: otherwise the plain
// kernel): the lever is on, it is the block norm (not a per-head qk_norm),
// one row (decode), dim a multiple of 32 and the scratch large enough.
func (b *Backend) normQ8(op graph.Op, rows, dim int) bool {
	need := ActQ8Bytes(dim, 1)
	return b.lv.NormQ8 && op == graph.OpRmsNorm && rows == 1 && need != 0 &&
		b.mm.ActQ8 != 0 && uint64(b.mm.ActQ8)%4 == 0 && b.mm.ActQ8Bytes >= need
}

// planActQ8 decides at plan time whether a decode consumer must quantize x
// (k values) into the scratch. Lever off: always (the record is not kept).
func (b *Backend) planActQ8(x driver.DevicePtr, k int) bool {
	if !b.lv.NormQ8 {
		return true
	}
	launch, r := b.q8.quantize(b.mm.ActQ8, x, k)
	b.q8 = r
	return launch
}

// planMatMulQ8 decides at plan time, for a plain matmul of one token whose
// Kernels.MatMul would be minfer_quantize_q8_1 + mmvq (not the in-kernel
// form), whether the quantize launch is needed. Other paths do not touch
// the scratch: true (MatMul as before), and the record stays as it is.
func (b *Backend) planMatMulQ8(x driver.DevicePtr, nt int, m matmulPlan) bool {
	if r := b.matmulRoute(m.w, nt); !b.lv.NormQ8 || (r != routeMMVQ && r != routeMMVQR) {
		return true
	}
	return b.planActQ8(x, m.w.rowLen)
}
