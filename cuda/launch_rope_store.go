package cuda

// launch_rope_store.go: the launcher of minfer_qkv_rope_store
// (cuda/kernels/qkv_rope_store.cu), graph.OpQkvBiasRopeStore in one launch.

import (
	"math"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/kv"
)

const (
	// opsGridYMax is the largest grid y dimension of a launch.
	opsGridYMax = 65535
	// qrsThreads is mops::QRS_THREADS (the kernel's __launch_bounds__).
	qrsThreads = 256
	// qrsMaxSmem bounds the K staging row (4 bytes a value) below the 48 KiB
	// of dynamic shared memory that needs no opt-in.
	qrsMaxSmem = 48 << 10
)

// QkvRopeStoreParams is the shape of one fused bias + rope + KV store.
type QkvRopeStoreParams struct {
	NT      int // tokens
	NHead   int // query heads
	NHeadKV int // KV heads: a KV row is NHeadKV*HeadDim values
	HeadDim int // even
	NRot    int // rotated dims of a head (even, <= HeadDim; HeadDim is engine/cpu's op)
	Theta   float32
	Neox    bool // neox pairs (i, i+NRot/2), else interleaved (2i, 2i+1)
	Format  kv.Format
	NCtx    int // cells of the regions
}

// QkvRopeStoreBuffers are the device operands. Biases may be 0 (no bias).
type QkvRopeStoreBuffers struct {
	Out              driver.DevicePtr // roped q [HeadDim, NHead, NT]
	Q, K, V          driver.DevicePtr // bias-less projections: q [HeadDim*NHead, NT], k and v [HeadDim*NHeadKV, NT]
	BQ, BK, BV       driver.DevicePtr // biases of HeadDim*NHead, HeadDim*NHeadKV, HeadDim*NHeadKV, or 0
	Pos              driver.DevicePtr // i32 [NT] positions
	Win              driver.DevicePtr // i32 [2] KV window {start, kv_len}
	KRegion, VRegion driver.DevicePtr // one layer's regions
}

// qkvRopeStoreGeometry is the kernel's grid and dynamic shared memory, or
// an argument error: blockIdx.y 0 is the K row, 1 the V row, 2.. groups of
// qhpb query heads (one rotation pair per thread when a head has at most
// qrsThreads pairs).
func qkvRopeStoreGeometry(p QkvRopeStoreParams) (grid [3]uint32, qhpb int, smem uint32, rowBytes int, err error) {
	const op = "qkv_rope_store"
	if p.NT <= 0 || p.NT > p.NCtx {
		return grid, 0, 0, 0, opsBad(op, "%d tokens for %d cells", p.NT, p.NCtx)
	}
	if p.HeadDim <= 0 || p.HeadDim%2 != 0 || p.HeadDim > ropeMaxHeadDim {
		return grid, 0, 0, 0, opsBad(op, "head_dim %d: must be even, positive and at most %d", p.HeadDim, ropeMaxHeadDim)
	}
	if p.NRot <= 0 || p.NRot%2 != 0 || p.NRot > p.HeadDim {
		return grid, 0, 0, 0, opsBad(op, "n_rot %d: must be even, positive and at most head_dim %d", p.NRot, p.HeadDim)
	}
	if p.NHead <= 0 || p.NHeadKV <= 0 || p.NHead > maxInt32/p.HeadDim || p.NHead*p.HeadDim > maxInt32/p.NT {
		return grid, 0, 0, 0, opsBad(op, "%d heads over %d KV heads of %d for %d tokens", p.NHead, p.NHeadKV, p.HeadDim, p.NT)
	}
	if !(p.Theta > 0) || math.IsInf(float64(p.Theta), 0) {
		return grid, 0, 0, 0, opsBad(op, "theta %g: must be positive and finite", p.Theta)
	}
	rowLen := p.NHeadKV * p.HeadDim
	if rowLen*4 > qrsMaxSmem {
		return grid, 0, 0, 0, opsBad(op, "KV rows of %d values: the K staging row exceeds %d bytes of shared memory", rowLen, qrsMaxSmem)
	}
	if rowBytes, err = kvRowBytes(op, p.Format, rowLen, p.NCtx); err != nil {
		return grid, 0, 0, 0, err
	}
	qhpb = max(1, min(p.NHead, qrsThreads/(p.NRot/2)))
	groups := (p.NHead + qhpb - 1) / qhpb
	if 2+groups > opsGridYMax {
		return grid, 0, 0, 0, opsBad(op, "%d query heads: more than %d head groups", p.NHead, opsGridYMax-2)
	}
	return [3]uint32{uint32(p.NT), uint32(2 + groups), 1}, qhpb, uint32(rowLen * 4), rowBytes, nil
}

// QkvBiasRopeStore adds the biases to q, k and v, ropes q (into b.Out) and
// k at the positions b.Pos, and stores k and v into the regions at cells
// win[0] .. win[0]+NT-1 in p.Format (graph.OpQkvBiasRopeStore): bitwise the
// values of AddBias + Rope + KVStore (same roundings, rope.cuh, kvput.cuh).
// Positions and the window are read by the kernel; rows whose cell falls
// outside the regions are not stored.
func (k *Kernels) QkvBiasRopeStore(s *driver.Stream, b QkvRopeStoreBuffers, p QkvRopeStoreParams) error {
	grid, qhpb, smem, rb, err := qkvRopeStoreGeometry(p)
	if err != nil {
		return err
	}
	return opsErr("qkv_rope_store", k.launch(s, "minfer_qkv_rope_store", grid, [3]uint32{qrsThreads, 1, 1}, smem,
		b.Out, b.Q, b.K, b.V, b.BQ, b.BK, b.BV, b.Pos, b.Win, b.KRegion, b.VRegion, int32(p.Format),
		int64(rb), int32(p.NCtx), int32(p.NHead), int32(p.NHeadKV), int32(p.HeadDim), int32(p.NRot), p.Theta,
		boolI32(p.Neox), int32(qhpb)))
}
