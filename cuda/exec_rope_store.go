package cuda

import (
	"fmt"

	"github.com/minfer-go/minfer/engine/graph"
)

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
	kr, err := b.region(n.P.Layer, graph.SideK)
	if err != nil {
		return nil, err
	}
	vr, err := b.region(n.P.Layer, graph.SideV)
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
