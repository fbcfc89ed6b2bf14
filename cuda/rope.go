package cuda

// rope.go: minfer_rope_f32 (cuda/kernels/rope.cu), normal and neox, and
// its op handler.

import (
	"fmt"
	"math"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
)

// ropeMaxHeadDim bounds head_dim (and so the fused K staging row,
// qkv_rope_store.go) well inside 32-bit index arithmetic.
const ropeMaxHeadDim = 4096

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

func opRope(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	p, o, err := b.nodeIO(n, in, 2, out)
	if err != nil {
		return nil, err
	}
	hd, nh, nt := n.Shape[0], n.Shape[1], n.Shape[2]*n.Shape[3]
	if in[0].Len != out.Len {
		return nil, fmt.Errorf("input of %d elements, output %d", in[0].Len, out.Len)
	}
	if in[1].Len != nt {
		return nil, fmt.Errorf("%d positions for %d tokens", in[1].Len, nt)
	}
	theta, neox := n.P.Theta, n.P.Rope == graph.RopeNeox
	return func() error { return b.k.Rope(b.s, o, p[0], p[1], nt, nh, hd, hd, theta, neox) }, nil
}
