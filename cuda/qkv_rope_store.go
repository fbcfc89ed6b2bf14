package cuda

// qkv_rope_store.go: minfer_qkv_rope_store and minfer_qkv_norm_rope_store
// (cuda/kernels/qkv_rope_store.cu): bias, (q/k norm,) rope and KV store of
// a layer in one launch, and the op handler of graph.OpQkvBiasRopeStore.

import (
	"fmt"
	"math"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
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

const (
	// qkNormRopeStoreKernel is the q/k-norm variant (MINFER_FUSE_QKNORM).
	qkNormRopeStoreKernel = "minfer_qkv_norm_rope_store"
	// qnrsThreads is mops::QNRS_THREADS: a block holds qnrsThreads/HeadDim
	// heads, one value per thread.
	qnrsThreads = 256
)

// QkNormRopeStoreBuffers are the operands of the q/k-norm variant: the
// fused op's plus the per-head norm weights of q and k (HeadDim f32 each,
// never 0).
type QkNormRopeStoreBuffers struct {
	QkvRopeStoreBuffers
	NormQ, NormK driver.DevicePtr
}

// qkNormRopeStoreGeometry is the grid of minfer_qkv_norm_rope_store and
// gkv, the number of K blocks (as many V blocks follow, then the q
// blocks), or an argument error. The norm is minfer_rms_norm_f32's
// arithmetic only where that kernel runs one value per thread in a block of
// head_dim threads, so head_dim is 64 or 128.
func qkNormRopeStoreGeometry(p QkvRopeStoreParams, eps float32) (grid [3]uint32, gkv int, rowBytes int, err error) {
	const op = "qkv_norm_rope_store"
	if p.NT <= 0 || p.NT > p.NCtx {
		return grid, 0, 0, opsBad(op, "%d tokens for %d cells", p.NT, p.NCtx)
	}
	if p.HeadDim != 64 && p.HeadDim != 128 {
		return grid, 0, 0, opsBad(op, "head_dim %d: the fused q/k norm supports head_dim 64 and 128 only", p.HeadDim)
	}
	if p.NRot <= 0 || p.NRot%2 != 0 || p.NRot > p.HeadDim {
		return grid, 0, 0, opsBad(op, "n_rot %d: must be even, positive and at most head_dim %d", p.NRot, p.HeadDim)
	}
	if p.NHead <= 0 || p.NHeadKV <= 0 || p.NHead > maxInt32/p.HeadDim || p.NHead*p.HeadDim > maxInt32/p.NT {
		return grid, 0, 0, opsBad(op, "%d heads over %d KV heads of %d for %d tokens", p.NHead, p.NHeadKV, p.HeadDim, p.NT)
	}
	if !(p.Theta > 0) || math.IsInf(float64(p.Theta), 0) {
		return grid, 0, 0, opsBad(op, "theta %g: must be positive and finite", p.Theta)
	}
	if !(eps >= 0) || math.IsInf(float64(eps), 0) {
		return grid, 0, 0, opsBad(op, "eps %g: must be >= 0 and finite", eps)
	}
	if rowBytes, err = kvRowBytes(op, p.Format, p.NHeadKV*p.HeadDim, p.NCtx); err != nil {
		return grid, 0, 0, err
	}
	hpb := qnrsThreads / p.HeadDim
	gkv = (p.NHeadKV + hpb - 1) / hpb
	gq := (p.NHead + hpb - 1) / hpb
	if 2*gkv+gq > opsGridYMax {
		return grid, 0, 0, opsBad(op, "%d query and %d KV heads: more than %d blocks a token", p.NHead, p.NHeadKV, opsGridYMax)
	}
	return [3]uint32{uint32(p.NT), uint32(2*gkv + gq), 1}, gkv, rowBytes, nil
}

// QkNormRopeStore is QkvBiasRopeStore with qwen3's per-head RMS norms of q
// and k (weights b.NormQ, b.NormK, eps) between the bias add and rope: the
// values of AddBias + RmsNorm (per head row) + Rope + KVStore, bitwise
// (norm.cu's reduction, rope.cuh, kvput.cuh), in one launch.
func (k *Kernels) QkNormRopeStore(s *driver.Stream, b QkNormRopeStoreBuffers, p QkvRopeStoreParams, eps float32) error {
	grid, gkv, rb, err := qkNormRopeStoreGeometry(p, eps)
	if err != nil {
		return err
	}
	if b.NormQ == 0 || b.NormK == 0 {
		return opsBad("qkv_norm_rope_store", "the q and k norm weights are required (q %v, k %v)", b.NormQ, b.NormK)
	}
	return opsErr("qkv_norm_rope_store", k.launch(s, qkNormRopeStoreKernel, grid, [3]uint32{qnrsThreads, 1, 1}, 0,
		b.Out, b.Q, b.K, b.V, b.BQ, b.BK, b.BV, b.NormQ, b.NormK, b.Pos, b.Win, b.KRegion, b.VRegion, int32(p.Format),
		int64(rb), int32(p.NCtx), int32(p.NHead), int32(p.NHeadKV), int32(p.HeadDim), int32(p.NRot), p.Theta,
		boolI32(p.Neox), eps, int32(gkv)))
}

// opQkvBiasRopeStore runs graph.OpQkvBiasRopeStore (in = q, k, v, positions,
// KV window; Biases = q, k, v bias names, possibly empty) as one
// minfer_qkv_rope_store launch, or with Weights = {q norm, k norm} one
// minfer_qkv_norm_rope_store launch. It writes the layer's K and V cells like two
// kvcache_store nodes: same regions, same window input read on the device,
// so capture needs nothing more (the KV layout stamp already guards the
// region pointers a captured graph holds).
func opQkvBiasRopeStore(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	if len(n.Biases) != 3 {
		return nil, fmt.Errorf("%d bias names, want 3 (q, k, v)", len(n.Biases))
	}
	if len(in) < 5 {
		return nil, fmt.Errorf("%d inputs, want q, k, v, positions and the KV window", len(in))
	}
	p, o, err := b.ptrs(in, 4, out, true)
	if err != nil {
		return nil, err
	}
	win, err := b.kvWindow(in[4])
	if err != nil {
		return nil, err
	}
	hd, nh, nkv := n.P.HeadDim, n.P.NHead, n.P.NHeadKV
	nt := in[3].Len
	if hd <= 0 || nh <= 0 || nkv <= 0 || nt <= 0 {
		return nil, fmt.Errorf("%d tokens of %d/%d heads of %d", nt, nh, nkv, hd)
	}
	if in[0].Len != hd*nh*nt || out.Len != in[0].Len || in[1].Len != hd*nkv*nt || in[2].Len != in[1].Len {
		return nil, fmt.Errorf("q %d, k %d, v %d, output %d elements for %d tokens of %d/%d heads of %d",
			in[0].Len, in[1].Len, in[2].Len, out.Len, nt, nh, nkv, hd)
	}
	if nkv*hd != b.kvSpec.RowLen {
		return nil, fmt.Errorf("%d KV heads of %d is not the KV row of %d", nkv, hd, b.kvSpec.RowLen)
	}
	bq, err := b.vector(n.Biases[0], nh*hd)
	if err != nil {
		return nil, err
	}
	bk, err := b.vector(n.Biases[1], nkv*hd)
	if err != nil {
		return nil, err
	}
	bv, err := b.vector(n.Biases[2], nkv*hd)
	if err != nil {
		return nil, err
	}
	kr, vr, err := b.regions(n.P.Layer)
	if err != nil {
		return nil, err
	}
	prm := QkvRopeStoreParams{NT: nt, NHead: nh, NHeadKV: nkv, HeadDim: hd, NRot: hd, Theta: n.P.Theta,
		Neox: n.P.Rope == graph.RopeNeox, Format: b.kvSpec.Format, NCtx: b.kvSpec.NCtx}
	bufs := QkvRopeStoreBuffers{Out: o, Q: p[0], K: p[1], V: p[2], BQ: bq, BK: bk, BV: bv, Pos: p[3], Win: win,
		KRegion: kr, VRegion: vr}
	switch len(n.Weights) {
	case 0:
	case 2:
		// qwen3: the q/k norms ride along (FuseQkNormRopeStore, MINFER_FUSE_QKNORM).
		nq, err := b.vector(n.Weights[0], hd)
		if err != nil {
			return nil, err
		}
		nk, err := b.vector(n.Weights[1], hd)
		if err != nil {
			return nil, err
		}
		if nq == 0 || nk == 0 {
			return nil, fmt.Errorf("q/k norm weights %q: both are required", n.Weights)
		}
		if _, _, _, err := qkNormRopeStoreGeometry(prm, n.P.Eps); err != nil {
			return nil, err
		}
		nb := QkNormRopeStoreBuffers{QkvRopeStoreBuffers: bufs, NormQ: nq, NormK: nk}
		eps := n.P.Eps
		return func() error { return b.k.QkNormRopeStore(b.s, nb, prm, eps) }, nil
	default:
		return nil, fmt.Errorf("%d norm weight names, want none or 2 (q norm, k norm)", len(n.Weights))
	}
	if _, _, _, _, err := qkvRopeStoreGeometry(prm); err != nil {
		return nil, err
	}
	return func() error { return b.k.QkvBiasRopeStore(b.s, bufs, prm) }, nil
}
