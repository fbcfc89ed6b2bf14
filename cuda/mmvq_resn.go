package cuda

// mmvq_resn.go: MINFER_FUSE_RES_NORM_Q8 (graph.FuseResNormQ8): the decode
// residual matvec whose last block writes the next RMS norm's Q8_1 row
// (cuda/kernels/mmvq_resn.cu, minfer_mmvq[r]_resn_<t>), so the fused q/k/v
// or gate/up node after it (Q8In) launches no norm.

import (
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/quant"
)

// resnKernel names the resn form of wtype over the repacked copy or the
// GGUF bytes ("" where the type has none).
func resnKernel(wtype quant.Type, repacked bool) string {
	if repacked {
		return mmvqrKernel(wtype, "resn")
	}
	return mmvqFusedKernel(wtype, "resn")
}

// ResNorm is the norm a resn launch writes after its rows: weight W (n
// values, 0: none), Eps, the Q8_1 row's destination (Q8, Q8Bytes; it may
// be the launch's own activation row: the last block writes it after every
// read) and Counter, an int that is 0 between launches (each launch leaves
// it 0; launches on one counter stream-ordered).
type ResNorm struct {
	W       driver.DevicePtr
	Eps     float32
	Q8      driver.DevicePtr
	Q8Bytes uint64
	Counter driver.DevicePtr
}

// MatMulQ8_1ResNorm is MatMulQ8_1Res (or MatMulQ8_1RRes over the repacked
// copy w) whose launch also writes the Q8_1 row of the RMS norm of its
// output (nrm): the rows bitwise the _res_ kernel's, the bytes
// RmsNormQ8_1's of that row, one launch of minfer_mmvq[r]_resn_<t>.
func (k *Kernels) MatMulQ8_1ResNorm(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w driver.DevicePtr,
	wtype quant.Type, bias, res driver.DevicePtr, kDim, n int, nrm ResNorm, repacked bool) error {
	const op = "matmul_q8_1_resn"
	f := mmvqFamilyOf(repacked)
	if err := f.checkCall(op, out, xq, xqBytes, w, bias, wtype, kDim, n); err != nil {
		return err
	}
	if err := checkRes(op, wtype, out, res, kDim, n); err != nil {
		return err
	}
	vb := opsRowBlock(n)[0] // RmsNormQ8_1's block: its sums' order
	if n%quant.QK != 0 || n > normQ8MaxPer*int(vb) {
		return opsBad(op, "row of %d values: want a multiple of %d, at most %d", n, quant.QK, normQ8MaxPer*int(vb))
	}
	if !(nrm.Eps >= 0) {
		return opsBad(op, "eps %g: must be >= 0", nrm.Eps)
	}
	need := ActQ8Bytes(n, 1)
	if nrm.Q8 == 0 || uint64(nrm.Q8)%4 != 0 || nrm.Q8Bytes < need || uint64(nrm.W)%4 != 0 ||
		nrm.Counter == 0 || uint64(nrm.Counter)%4 != 0 {
		return opsBad(op, "Q8_1 row %v of %d bytes (needs %d, 4-byte aligned), norm weight %v, counter %v", nrm.Q8, nrm.Q8Bytes, need, nrm.W, nrm.Counter)
	}
	if overlapBytes(nrm.Q8, need, out, 4*uint64(n)) || overlapBytes(nrm.Q8, need, res, 4*uint64(n)) {
		return opsBad(op, "Q8_1 row %v overlaps the output %v or the residual %v", nrm.Q8, out, res)
	}
	// The Q8_1 row is the activation row itself (its last block writes it
	// after every read) or apart from it (the FFN's Q8_1 output, FUSE_FFN_Q8);
	// a row starting inside the activation would be written where blocks
	// still read.
	if nrm.Q8 != xq && overlapBytes(nrm.Q8, need, xq, xqBytes) {
		return opsBad(op, "Q8_1 row %v partly overlaps the activation %v it reads", nrm.Q8, xq)
	}
	name := resnKernel(wtype, repacked)
	if name == "" {
		return opsBad(op, "weight type %s has no resn kernel (repacked %v)", wtype, repacked)
	}
	grid, block := f.grid(n)
	err := k.launch(s, name, grid, block, 0, out, xq, w, bias, int32(kDim), int32(n), res, nrm.W, nrm.Eps, int32(vb), nrm.Q8, nrm.Counter)
	if err != nil {
		return fmt.Errorf("matmul %s nt=1 k=%d n=%d: %w", name, kDim, n, err)
	}
	return nil
}

// resNormRoute reports whether the backend runs the chain (m, c) as
// FuseResNormQ8: m a decode MatMulAdd / AttnMatMulAdd / FFNMatMulAdd of
// one row whose weight (an FFNMatMulAdd's: its down projection) takes a
// one-warp decode MMVQ route with a resn kernel (not the split form,
// MINFER_MMVQ_SPLIT), or the one-row embedding gather of a table whose
// gather has a _q8_1 twin (gatherQ8Kernel); c the fused q/k/v, gate/up,
// FFN + down node or the lm head's matmul that reads m's row through a
// folded norm (FuseNormQ8) of a registered weight, and a row the norm's
// block holds (RmsNormQ8_1's limits). An FFNMatMulAdd reader runs its FFN
// over the Q8_1 row (decodeQuantize), an FFNMatMulAdd producer its resn
// launch over the FFN's Q8_1 output (opFFNMatMulAdd): both are decode
// MMVQ routes by ffnQ8Route; a matmul reader's weight is on one by
// normQ8Route.
func (b *Backend) resNormRoute(m, c *graph.Node) bool {
	reader := c.Op == graph.OpFusedQKV || c.Op == graph.OpFusedFFN || c.Op == graph.OpFFNMatMulAdd || c.Op == graph.OpMatMul
	if !reader || c.Norm == "" || b.weights[c.Norm] == nil || m.Shape.Rows() != 1 {
		return false
	}
	w, n := b.weights[m.Weight], m.Shape[0]
	if w == nil || n%quant.QK != 0 || n > normQ8MaxPer*int(opsRowBlock(n)[0]) {
		return false
	}
	switch m.Op {
	case graph.OpGetRows:
		return w.rowLen == n && gatherQ8Kernel(w) != ""
	case graph.OpMatMulAdd, graph.OpAttnMatMulAdd, graph.OpFFNMatMulAdd:
		if b.mm.MMVQSplit || w.rows != n {
			return false
		}
		r := b.matmulRoute(w, 1)
		return r.decode() && resnKernel(w.typ, r == routeMMVQR) != ""
	}
	return false
}

// resNormOf is what the matmul-add n with an output norm (FuseResNormQ8:
// OutNorm, P.OutEps) writes after its row m: the norm's weight and eps,
// the Q8_1 row into the backend's activation scratch (where the Q8In node
// after it reads it) and the counter. A zero ResNorm for a node without
// one.
func (b *Backend) resNormOf(n *graph.Node, m matmulPlan) (ResNorm, error) {
	if n.OutNorm == "" {
		return ResNorm{}, nil
	}
	if b.mm.MMVQSplit || !b.matmulRoute(m.w, 1).decode() {
		return ResNorm{}, fmt.Errorf("norm %s folded into %s, whose matvec has no resn form here", n.OutNorm, n.Weight)
	}
	w, err := b.vector(n.OutNorm, m.w.rows)
	if err != nil {
		return ResNorm{}, err
	}
	ctr, err := b.resnCounter()
	if err != nil {
		return ResNorm{}, err
	}
	return ResNorm{W: w, Eps: n.P.OutEps, Q8: b.mm.ActQ8, Q8Bytes: b.mm.ActQ8Bytes, Counter: ctr}, nil
}

// ResnCounterBytes is the resn launches' counter allocation (one int used,
// a pool granule held): what the memory plan counts with the lever on.
const ResnCounterBytes = 256

// resnCounter returns the resn launches' counter (one int, shared: the
// launches are stream-ordered and each leaves it 0), allocated and zeroed
// the first time a node asks, at a direct execution before any capture
// (as attnDecode2Scratch), and kept until Close.
func (b *Backend) resnCounter() (driver.DevicePtr, error) {
	if b.resnCtr != 0 {
		return b.resnCtr, nil
	}
	const what = "residual matvec norm counter"
	err := b.dev.Do(func() error {
		ptr, err := b.pool.raw(MemWorkspace, ResnCounterBytes, what)
		if err != nil {
			return err
		}
		if err := b.s.MemsetD8(ptr, 0, ResnCounterBytes); err != nil {
			return fmt.Errorf("cuda: zero the %s: %w", what, err)
		}
		b.resnCtr = ptr
		return nil
	})
	return b.resnCtr, err
}

// mmvqResNormFromQ8 is mmvqFromQ8 with a residual and a norm (nrm.Counter
// != 0): the resn kernel of m's route over the Q8_1 row in the scratch.
func (b *Backend) mmvqResNormFromQ8(m matmulPlan, out, res driver.DevicePtr, nrm ResNorm) error {
	return b.mmvqResNormFromQ8At(m, b.mm.ActQ8, b.mm.ActQ8Bytes, out, res, nrm)
}

// mmvqResNormFromQ8At is mmvqResNormFromQ8 over the Q8_1 row at q (qb
// bytes): the FFN's Q8_1 output (MINFER_FUSE_FFN_Q8) when an FFNMatMulAdd's
// down projection writes the next norm's row. That row still goes to the
// scratch (nrm.Q8), which this launch does not read.
func (b *Backend) mmvqResNormFromQ8At(m matmulPlan, q driver.DevicePtr, qb uint64, out, res driver.DevicePtr, nrm ResNorm) error {
	if nrm.Counter == 0 {
		return b.mmvqFromQ8At(m, q, qb, out, res)
	}
	rp := b.matmulRoute(m.w, 1) == routeMMVQR
	w := m.w.ptr
	if rp {
		w = m.w.rp
	}
	return b.k.MatMulQ8_1ResNorm(b.s, out, q, qb, w, m.w.typ, m.bias, res, m.w.rowLen, m.w.rows, nrm, rp)
}
