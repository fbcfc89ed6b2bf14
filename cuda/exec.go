package cuda

import (
	"errors"
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
)

// opFunc checks one node on the host (shapes, weights, KV layer) and
// returns its launches as a closure to run on the device thread (nil: the
// node launches nothing). A failed check is an error naming the values;
// Execute adds the node.
type opFunc func(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error)

// opTable is the dispatch table: every op the device runs. What is not
// here is refused by SupportsOp and placed on the CPU.
func opTable() map[graph.Op]opFunc {
	return map[graph.Op]opFunc{
		graph.OpInput:            opNone,
		graph.OpView:             opNone,
		graph.OpReshape:          opNone,
		graph.OpGetRows:          opGetRows,
		graph.OpRmsNorm:          opRmsNorm,
		graph.OpQkNorm:           opRmsNorm,
		graph.OpMatMul:           opMatMul,
		graph.OpFusedQKV:         opFusedQKV,
		graph.OpFusedFFN:         opFusedFFN,
		graph.OpAdd:              opAddMul,
		graph.OpMul:              opAddMul,
		graph.OpSilu:             opSilu,
		graph.OpSwiGLU:           opSwiGLU,
		graph.OpRope:             opRope,
		graph.OpAttn:             opAttn,
		graph.OpKvcacheStore:     opKVStore,
		graph.OpKvcacheLoad:      opKVLoad,
		graph.OpPermute:          opPermute,
		graph.OpScale:            opScale,
		graph.OpSoftmax:          opSoftmax,
		graph.OpQkvBiasRopeStore: opQkvBiasRopeStore,
	}
}

// Execute implements graph.Backend. Outside a capturing execution the
// node's launches run now (asynchronously on the stream); in a capturing
// one they are recorded and issued inside the window at Synchronize.
func (b *Backend) Execute(n *graph.Node, in []graph.Tensor, out graph.Tensor) error {
	if b.closed {
		return fmt.Errorf("cuda: %s %s: backend is closed", n.Op, n.Name)
	}
	op := b.ops[n.Op]
	if op == nil {
		return fmt.Errorf("cuda: %s %s: op has no device kernel", n.Op, n.Name)
	}
	if b.resid != nil {
		// A deferred decode matmul (MINFER_FUSE_RESIDUAL, fuse_resid.go):
		// n is its residual add (one fused launch) or it launches first.
		if fused, err := b.residTake(n, in, out); fused || err != nil {
			return err
		}
	}
	b.cap.noteNode(n)
	// The Q8_1 scratch record (MINFER_NORM_Q8, norm_q8.go) is plan-time
	// state: the op functions run here in node order and their closures run
	// in the same order (now, or recorded for capture and issued at
	// Synchronize), so what a node plans from the record is what the scratch
	// holds when its closure runs, also in every replay of a capture.
	b.q8Before(n, in, out)
	launch, err := op(b, n, in, out)
	if err != nil {
		b.q8 = actQ8Record{}
		err = fmt.Errorf("cuda: %s %s: %w", n.Op, n.Name, err)
		if b.cap.recording {
			b.abandon(err)
		}
		return err
	}
	b.q8After(n, in, out)
	if launch == nil {
		return nil
	}
	return b.issue(n, launch)
}

// issue runs node n's launches now, or records them for the capture.
func (b *Backend) issue(n *graph.Node, launch func() error) error {
	named := func() error {
		if err := launch(); err != nil {
			return fmt.Errorf("cuda: %s %s: %w", n.Op, n.Name, err)
		}
		return nil
	}
	if b.cap.recording {
		b.cap.pending = append(b.cap.pending, named)
		return nil
	}
	return b.dev.Do(named)
}

func opNone(*Backend, *graph.Node, []graph.Tensor, graph.Tensor) (func() error, error) {
	return nil, nil
}

// ptrs resolves the first k inputs and the output (when wantOut).
func (b *Backend) ptrs(in []graph.Tensor, k int, out graph.Tensor, wantOut bool) ([]driver.DevicePtr, driver.DevicePtr, error) {
	if len(in) < k {
		return nil, 0, fmt.Errorf("%d inputs, want %d", len(in), k)
	}
	ps := make([]driver.DevicePtr, k)
	for i := range k {
		p, err := b.pool.tensor(in[i])
		if err != nil {
			return nil, 0, fmt.Errorf("input %d: %w", i, err)
		}
		ps[i] = p
	}
	var o driver.DevicePtr
	if wantOut {
		if out.Len <= 0 {
			return nil, 0, errors.New("node has no output tensor")
		}
		var err error
		if o, err = b.pool.tensor(out); err != nil {
			return nil, 0, fmt.Errorf("output: %w", err)
		}
	}
	return ps, o, nil
}

func checkOut(n *graph.Node, out graph.Tensor) error {
	if out.Len != n.Shape.N() {
		return fmt.Errorf("output of %d elements, shape %s", out.Len, n.Shape)
	}
	return nil
}

func opGetRows(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	p, o, err := b.ptrs(in, 1, out, true)
	if err != nil {
		return nil, err
	}
	w, err := b.weight(n.Weight)
	if err != nil {
		return nil, err
	}
	rowLen, nt := n.Shape[0], in[0].Len
	if w.vector || w.rowLen != rowLen || out.Len != rowLen*nt {
		return nil, fmt.Errorf("weight %s rows of %d, output %d for %d ids", n.Weight, w.rowLen, out.Len, nt)
	}
	return func() error { return b.k.GetRows(b.s, o, w.ptr, w.typ, w.rows, p[0], nt, rowLen) }, nil
}

func opRmsNorm(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	p, o, err := b.ptrs(in, 1, out, true)
	if err != nil {
		return nil, err
	}
	dim := n.Shape[0]
	if in[0].Len != out.Len || dim <= 0 || out.Len%dim != 0 {
		return nil, fmt.Errorf("input of %d elements, output %d, rows of %d", in[0].Len, out.Len, dim)
	}
	w, err := b.vector(n.Weight, dim)
	if err != nil {
		return nil, err
	}
	if w == 0 {
		return nil, fmt.Errorf("norm weight is missing")
	}
	rows, eps := out.Len/dim, n.P.Eps
	if b.normQ8(n.Op, rows, dim) {
		// Decode: also write o's Q8_1 blocks into the scratch, so the MMVQ
		// matmuls reading o skip their quantize launch (MINFER_NORM_Q8).
		q, qBytes := b.mm.ActQ8, b.mm.ActQ8Bytes
		b.q8 = actQ8Record{scratch: q, x: o, k: dim}
		return func() error { return b.k.RmsNormQ8_1(b.s, o, q, p[0], w, qBytes, rows, dim, eps) }, nil
	}
	return func() error { return b.k.RmsNorm(b.s, o, p[0], w, rows, dim, eps) }, nil
}

// The attention kernel families attnFamily chooses from.
const (
	attnPlain    = "plain"    // minfer_attn_f32, one block per (token, head)
	attnPrefill1 = "prefill"  // minfer_attn_prefill_*
	attnPrefill2 = "prefill2" // minfer_attn_prefill2_*
	attnDecode1  = "decode"   // minfer_attn_decode_*
	attnDecode2  = "decode2"  // minfer_attn_decode2_*
)

// attnFamily is the attention kernel of an nt-token call. The switch-off
// levers win over the version levers: MINFER_NO_FA_PREFILL=1 and
// MINFER_NO_SPLITK_ATTN=1 mean the plain kernel whatever MINFER_FA_PREFILL_V2
// and MINFER_ATTN_DECODE_V2 say (the v2 kernels are tiled and split-K too;
// with v2 on by default, the other order made those two levers no-ops).
func attnFamily(nt int, lv levers.Config) string {
	switch {
	case nt >= AttnPrefillMinNT && !lv.NoFAPrefill:
		if lv.FAPrefillV2 {
			return attnPrefill2
		}
		return attnPrefill1
	case nt <= AttnDecodeMaxNT && !lv.NoSplitKAttn:
		if lv.AttnDecodeV2 {
			return attnDecode2
		}
		return attnDecode1
	}
	return attnPlain
}

func opAddMul(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	p, o, err := b.ptrs(in, 2, out, true)
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
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	p, o, err := b.ptrs(in, 1, out, true)
	if err != nil {
		return nil, err
	}
	if in[0].Len != out.Len {
		return nil, fmt.Errorf("input of %d elements, output %d", in[0].Len, out.Len)
	}
	return func() error { return b.k.Silu(b.s, o, p[0], out.Len) }, nil
}

func opSwiGLU(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	p, o, err := b.ptrs(in, 2, out, true)
	if err != nil {
		return nil, err
	}
	if in[0].Len != out.Len || in[1].Len != out.Len {
		return nil, fmt.Errorf("operands of %d and %d elements, output %d", in[0].Len, in[1].Len, out.Len)
	}
	return func() error { return b.k.SwiGLU(b.s, o, p[0], p[1], out.Len) }, nil
}

func opScale(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	p, o, err := b.ptrs(in, 1, out, true)
	if err != nil {
		return nil, err
	}
	if in[0].Len != out.Len {
		return nil, fmt.Errorf("input of %d elements, output %d", in[0].Len, out.Len)
	}
	f := n.P.Scale
	return func() error { return b.k.Scale(b.s, o, p[0], f, out.Len) }, nil
}

func opSoftmax(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	p, o, err := b.ptrs(in, 1, out, true)
	if err != nil {
		return nil, err
	}
	if in[0].Len != out.Len {
		return nil, fmt.Errorf("input of %d elements, output %d", in[0].Len, out.Len)
	}
	dim, sc := n.Shape[0], n.P.Scale
	rows := n.Shape.Rows()
	return func() error { return b.k.SoftmaxRows(b.s, o, p[0], rows, dim, sc) }, nil
}

func opPermute(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	p, o, err := b.ptrs(in, 1, out, true)
	if err != nil {
		return nil, err
	}
	if in[0].Len != out.Len {
		return nil, fmt.Errorf("input of %d elements, output %d", in[0].Len, out.Len)
	}
	shape, perm := [4]int(n.Shape), n.P.Perm
	return func() error { return b.k.Permute(b.s, o, p[0], shape, perm) }, nil
}

func opRope(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	p, o, err := b.ptrs(in, 2, out, true)
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

// region returns a layer's K or V region.
func (b *Backend) region(layer int, side graph.KVSide) (driver.DevicePtr, error) {
	if b.kvK == nil || layer < 0 || layer >= b.kvSpec.NLayer {
		return 0, fmt.Errorf("no KV region for layer %d", layer)
	}
	if side == graph.SideV {
		return b.kvV[layer], nil
	}
	return b.kvK[layer], nil
}

func (b *Backend) kvWindow(t graph.Tensor) (driver.DevicePtr, error) {
	if t.Len != 2 {
		return 0, fmt.Errorf("KV window of %d values, want 2", t.Len)
	}
	return b.pool.tensor(t)
}

func opKVStore(b *Backend, n *graph.Node, in []graph.Tensor, _ graph.Tensor) (func() error, error) {
	p, _, err := b.ptrs(in, 1, graph.Tensor{}, false)
	if err != nil {
		return nil, err
	}
	if len(in) < 2 {
		return nil, fmt.Errorf("%d inputs, want the rows and the KV window", len(in))
	}
	win, err := b.kvWindow(in[1])
	if err != nil {
		return nil, err
	}
	reg, err := b.region(n.P.Layer, n.P.Side)
	if err != nil {
		return nil, err
	}
	rl := b.kvSpec.RowLen
	if in[0].Len == 0 || in[0].Len%rl != 0 {
		return nil, fmt.Errorf("input of %d elements is not rows of %d", in[0].Len, rl)
	}
	nt, f, nCtx := in[0].Len/rl, b.kvSpec.Format, b.kvSpec.NCtx
	return func() error { return b.k.KVStore(b.s, reg, f, p[0], win, nt, rl, nCtx) }, nil
}

func opKVLoad(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	if len(in) < 1 {
		return nil, errors.New("no KV window input")
	}
	win, err := b.kvWindow(in[0])
	if err != nil {
		return nil, err
	}
	_, o, err := b.ptrs(in, 0, out, true)
	if err != nil {
		return nil, err
	}
	reg, err := b.region(n.P.Layer, n.P.Side)
	if err != nil {
		return nil, err
	}
	rl, nCtx, f := b.kvSpec.RowLen, b.kvSpec.NCtx, b.kvSpec.Format
	if out.Len != rl*nCtx {
		return nil, fmt.Errorf("output of %d elements, want %d", out.Len, rl*nCtx)
	}
	return func() error { return b.k.KVLoad(b.s, o, reg, f, win, rl, nCtx) }, nil
}

func opAttn(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	p, o, err := b.ptrs(in, 1, out, true)
	if err != nil {
		return nil, err
	}
	if len(in) < 2 {
		return nil, errors.New("no KV window input")
	}
	win, err := b.kvWindow(in[1])
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
	ap := AttnParams{NT: n.Shape[1], NHead: n.P.NHead, NHeadKV: n.P.NHeadKV, HeadDim: n.P.HeadDim,
		NCtx: b.kvSpec.NCtx, Window: n.P.Window, Scale: n.P.Scale}
	if ap.HeadDim <= 0 || ap.HeadDim > AttnMaxHeadDim || ap.HeadDim%2 != 0 {
		return nil, fmt.Errorf("head_dim %d: the device attention takes even head_dim in 2..%d", ap.HeadDim, AttnMaxHeadDim)
	}
	if ap.NHeadKV <= 0 || ap.NHead%ap.NHeadKV != 0 {
		return nil, fmt.Errorf("%d query heads over %d KV heads", ap.NHead, ap.NHeadKV)
	}
	if ap.NHeadKV*ap.HeadDim != b.kvSpec.RowLen {
		return nil, fmt.Errorf("%d KV heads of %d is not the KV row of %d", ap.NHeadKV, ap.HeadDim, b.kvSpec.RowLen)
	}
	if in[0].Len != ap.HeadDim*ap.NHead*ap.NT || out.Len != in[0].Len {
		return nil, fmt.Errorf("q of %d elements, output %d, for %d tokens of %d heads of %d", in[0].Len, out.Len, ap.NT, ap.NHead, ap.HeadDim)
	}
	if _, err := ap.check(b.kvSpec.Format); err != nil {
		return nil, err
	}
	f := b.kvSpec.Format
	switch attnFamily(ap.NT, b.lv) {
	case attnPrefill2:
		// Prefill: the v2 tiled kernels (MINFER_FA_PREFILL_V2, default on).
		return func() error { return b.k.AttentionPrefill2(b.s, o, p[0], kr, vr, f, win, ap) }, nil
	case attnPrefill1:
		// Prefill: the v1 tiled kernel (MINFER_FA_PREFILL_V2=0).
		return func() error { return b.k.AttentionPrefill(b.s, o, p[0], kr, vr, f, win, ap) }, nil
	case attnDecode2:
		// Decode: the lean split-K kernel (MINFER_ATTN_DECODE_V2, default on).
		scr, scrBytes, err := b.attnDecode2Scratch(ap)
		if err != nil {
			return nil, err
		}
		return func() error { return b.k.AttentionDecode2(b.s, o, p[0], kr, vr, f, win, scr, scrBytes, ap) }, nil
	case attnDecode1:
		// Decode: the v1 split-K kernel (MINFER_ATTN_DECODE_V2=0).
		scr, scrBytes, err := b.attnDecodeScratch(ap)
		if err != nil {
			return nil, err
		}
		return func() error { return b.k.AttentionDecode(b.s, o, p[0], kr, vr, f, win, scr, scrBytes, ap) }, nil
	}
	return func() error { return b.k.Attention(b.s, o, p[0], kr, vr, f, win, ap) }, nil
}
