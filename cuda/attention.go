package cuda

// attention.go: opAttn, the attention op of every family, and the plain
// kernel minfer_attn_f32 (cuda/kernels/attention.cu), one block per (token,
// head). attnFamily picks the kernel family of a call: the tiled prefill
// kernels (attn_prefill*.go), the split-K decode kernels (attn_decode*.go)
// or the plain one.

import (
	"errors"
	"fmt"
	"math"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
)

const (
	// AttnMaxHeadDim is the largest head_dim the attention kernel takes
	// (its block holds one thread per head-row element).
	AttnMaxHeadDim = 128
	attnThreads    = 128 // mops::ATTN_THREADS in attention.cu
)

// AttnParams is the shape of one attention call.
type AttnParams struct {
	NT      int     // query tokens
	NHead   int     // query heads
	NHeadKV int     // KV heads (NHead % NHeadKV == 0); a KV row is NHeadKV*HeadDim values
	HeadDim int     // even, 2..AttnMaxHeadDim
	NCtx    int     // cells of the regions
	Window  int     // attend to at most the last Window cells (0: all)
	Scale   float32 // score scale; 0 means 1/sqrt(HeadDim)
	// Q8 runs the lean decode kernel that also writes each output row's
	// Q8_1 quantization (MINFER_FUSE_ATTN_Q8: minfer_attn_decode2q_*,
	// head_dim 64 or 128): AttentionDecode2Q8's launches.
	Q8 bool
}

// attnScale is engine/cpu's default: f32(1/sqrt(hd)) in double.
func attnScale(p AttnParams) float32 {
	if p.Scale != 0 {
		return p.Scale
	}
	return float32(1 / math.Sqrt(float64(p.HeadDim)))
}

func (p AttnParams) check(format kv.Format) (rowBytes int, err error) {
	const op = "attn"
	if p.HeadDim <= 0 || p.HeadDim%2 != 0 || p.HeadDim > AttnMaxHeadDim {
		return 0, opsBad(op, "head_dim %d: must be even and in 2..%d", p.HeadDim, AttnMaxHeadDim)
	}
	if p.NHead <= 0 || p.NHeadKV <= 0 || p.NHead%p.NHeadKV != 0 {
		return 0, opsBad(op, "%d heads over %d kv heads: must be positive and divide", p.NHead, p.NHeadKV)
	}
	if p.NT <= 0 || p.NT > p.NCtx {
		return 0, opsBad(op, "%d tokens for %d cells", p.NT, p.NCtx)
	}
	if p.NHead > maxInt32/p.NT {
		return 0, opsBad(op, "%d tokens x %d heads: too many", p.NT, p.NHead)
	}
	if p.Window < 0 || p.Window > maxInt32 {
		return 0, opsBad(op, "window %d", p.Window)
	}
	return kvRowBytes(op, format, p.NHeadKV*p.HeadDim, p.NCtx)
}

// Attention computes causal GQA attention of q [HeadDim, NHead, NT] over one
// layer's K and V regions (format) into out (same shape), exactly
// engine/cpu's attn: the query of token t sits at cell win[0]+t and attends
// to cells [max(0, cell-Window+1), cell]. win is the graph's KV window
// {start, kv_len} (i32[2] on the device), read by the kernel, so a captured
// graph replays with the current step's cells; a start the region cannot
// hold gives NaN outputs. One kernel serves decode (NT = 1) and prefill.
func (k *Kernels) Attention(s *driver.Stream, out, q, kRegion, vRegion driver.DevicePtr, format kv.Format, win driver.DevicePtr, p AttnParams) error {
	rb, err := p.check(format)
	if err != nil {
		return err
	}
	return opsErr("attn", k.launch(s, "minfer_attn_f32", [3]uint32{uint32(p.NT * p.NHead), 1, 1}, [3]uint32{attnThreads, 1, 1}, 0,
		out, q, kRegion, vRegion, int32(format), win, int32(p.NHead), int32(p.NHeadKV), int32(p.HeadDim),
		int64(rb), int32(p.NCtx), int32(p.Window), attnScale(p)))
}

// The attention kernel families attnFamily chooses from.
const (
	attnPlain     = "plain"     // minfer_attn_f32, one block per (token, head)
	attnPrefill2  = "prefill2"  // minfer_attn_prefill2_*
	attnPrefillTC = "prefilltc" // minfer_attn_prefill_tc_* (MINFER_FA_PREFILL_TC)
	attnDecode2   = "decode2"   // minfer_attn_decode2l_* (decode2q_* with MINFER_FUSE_ATTN_Q8)
	attnDecodeTC  = "decodetc"  // minfer_attn_decode_tc_* (MINFER_ATTN_DECODE_TC)
)

// attnFamily is the attention kernel of an nt-token call whose window
// reads kvLen cells (its kv_len): the tiled prefill kernels from
// AttnPrefillMinNT tokens, the split-K decode kernels up to AttnDecodeMaxNT
// (the FMA-tiled prefill kernels instead with MINFER_FA_PREFILL_TC=0), each
// unless its kill switch (MINFER_NO_FA_PREFILL, MINFER_NO_SPLITK_ATTN)
// sends it to the plain kernel. (The v1 tiled and split-K kernels were
// retired with MINFER_FA_PREFILL_V2 and MINFER_ATTN_DECODE_V2.)
// MINFER_ATTN_DECODE_TC sends decode over an f16 cache (kvf) to the tensor
// cores from MINFER_ATTN_DECODE_TC_FROM cells of kv_len on (0: at any
// length), where they beat the lean kernels; an f32 or q8_0 cache stays on
// the lean kernels (f32: its precision class; q8_0: staged through
// registers). Only the decode choice depends on kvLen.
func attnFamily(nt, kvLen int, lv levers.Config, kvf kv.Format) string {
	switch {
	case nt >= AttnPrefillMinNT && !lv.NoFAPrefill && lv.FAPrefillTC:
		return attnPrefillTC
	case nt >= AttnPrefillMinNT && !lv.NoFAPrefill:
		return attnPrefill2
	case nt <= AttnDecodeMaxNT && !lv.NoSplitKAttn && lv.AttnDecodeTC && kvf == kv.F16 && kvLen >= lv.AttnDecodeTCFrom:
		return attnDecodeTC
	case nt <= AttnDecodeMaxNT && !lv.NoSplitKAttn:
		return attnDecode2
	}
	return attnPlain
}

// decodeTCForm is the tensor-core decode's tile form the backend's
// kernels launch (MINFER_ATTN_DECODE_TC_NARROW: KernelsOptions.DecodeTCNarrow).
func (b *Backend) decodeTCForm() attnDecodeTCForm { return attnDecodeTCFormOf(b.lv.DecodeTCNarrow) }

// attnDecodeFamily reports whether fam is one of the split-K decode
// families, the two the route by depth moves between.
func attnDecodeFamily(fam string) bool { return fam == attnDecode2 || fam == attnDecodeTC }

// attnDecodeFamilies says which decode families an nt-token attention over
// a context of nCtx cells can take as the cache fills (kv_len from nt to
// nCtx): the scratch of each is reserved at once (attnRoute, the memory
// plan), so crossing MINFER_ATTN_DECODE_TC_FROM allocates nothing and
// leaves every captured graph's pool generation as it was.
func attnDecodeFamilies(nt, nCtx int, lv levers.Config, kvf kv.Format) (lean, tc bool) {
	return attnFamily(nt, nt, lv, kvf) == attnDecode2 || attnFamily(nt, nCtx, lv, kvf) == attnDecode2,
		attnFamily(nt, nt, lv, kvf) == attnDecodeTC || attnFamily(nt, nCtx, lv, kvf) == attnDecodeTC
}

// attnOperands are what an attention over a layer's KV reads: the
// parameters, the window and the regions.
type attnOperands struct {
	ap          AttnParams
	win, kr, vr driver.DevicePtr
}

// attnOperands checks the attention of node n (OpAttn, OpAttnMatMulAdd:
// P the attention's params, in[0] q, in[1] the KV window) over nt tokens.
func (b *Backend) attnOperands(n *graph.Node, in []graph.Tensor, nt int) (attnOperands, error) {
	if len(in) < 2 {
		return attnOperands{}, errors.New("no KV window input")
	}
	win, err := b.kvWindow(in[1])
	if err != nil {
		return attnOperands{}, err
	}
	kr, vr, err := b.regions(n.P.Layer)
	if err != nil {
		return attnOperands{}, err
	}
	ap := AttnParams{NT: nt, NHead: n.P.NHead, NHeadKV: n.P.NHeadKV, HeadDim: n.P.HeadDim,
		NCtx: b.kvSpec.NCtx, Window: n.P.Window, Scale: n.P.Scale}
	if ap.HeadDim <= 0 || ap.HeadDim > AttnMaxHeadDim || ap.HeadDim%2 != 0 {
		return attnOperands{}, fmt.Errorf("head_dim %d: the device attention takes even head_dim in 2..%d", ap.HeadDim, AttnMaxHeadDim)
	}
	if ap.NHeadKV <= 0 || ap.NHead%ap.NHeadKV != 0 {
		return attnOperands{}, fmt.Errorf("%d query heads over %d KV heads", ap.NHead, ap.NHeadKV)
	}
	if ap.NHeadKV*ap.HeadDim != b.kvSpec.RowLen {
		return attnOperands{}, fmt.Errorf("%d KV heads of %d is not the KV row of %d", ap.NHeadKV, ap.HeadDim, b.kvSpec.RowLen)
	}
	if in[0].Len != ap.HeadDim*ap.NHead*ap.NT {
		return attnOperands{}, fmt.Errorf("q of %d elements for %d tokens of %d heads of %d", in[0].Len, ap.NT, ap.NHead, ap.HeadDim)
	}
	if _, err := ap.check(b.kvSpec.Format); err != nil {
		return attnOperands{}, err
	}
	return attnOperands{ap: ap, win: win, kr: kr, vr: vr}, nil
}

func opAttn(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	p, o, err := b.nodeIO(n, in, 1, out)
	if err != nil {
		return nil, err
	}
	ops, err := b.attnOperands(n, in, n.Shape[1])
	if err != nil {
		return nil, err
	}
	if out.Len != in[0].Len {
		return nil, fmt.Errorf("q of %d elements, output %d", in[0].Len, out.Len)
	}
	ap, win, kr, vr := ops.ap, ops.win, ops.kr, ops.vr
	f := b.kvSpec.Format
	fam, err := b.attnRoute(ap)
	if err != nil {
		return nil, err
	}
	switch fam {
	case attnPrefill2:
		return func() error { return b.k.AttentionPrefill2(b.s, o, p[0], kr, vr, f, win, ap) }, nil
	case attnPrefillTC:
		part, partBytes, err := b.attnTCScratch(ap, attnPrefillTCSplits(ap, b.dev.Attr.SMCount))
		if err != nil {
			return nil, err
		}
		return func() error { return b.k.AttentionPrefillTC(b.s, o, p[0], kr, vr, f, win, part, partBytes, ap) }, nil
	case attnDecode2:
		scr, scrBytes, err := b.attnDecode2Scratch(ap)
		if err != nil {
			return nil, err
		}
		return func() error { return b.k.AttentionDecode2(b.s, o, p[0], kr, vr, f, win, scr, scrBytes, ap) }, nil
	case attnDecodeTC:
		part, partBytes, err := b.attnTCScratch(ap, b.decodeTCForm().splits(ap, b.dev.Attr.SMCount))
		if err != nil {
			return nil, err
		}
		return func() error {
			return b.k.AttentionDecodeTC(b.s, o, 0, 0, p[0], kr, vr, f, win, part, partBytes, ap)
		}, nil
	}
	return func() error { return b.k.Attention(b.s, o, p[0], kr, vr, f, win, ap) }, nil
}

var _ graph.KVLengthSetter = (*Backend)(nil)

// SetKVLength implements graph.KVLengthSetter: the kv_len of the window
// the next run's attention reads (the engine writes the same value to the
// device), by which attnRoute picks the decode family and staleReason
// judges a captured graph's.
func (b *Backend) SetKVLength(cells int) {
	defer b.unlock(b.lock())
	b.kvLen = cells
}

// attnRoute is the family of the attention ap at the step's KV length
// (b.kvLen), chosen at Execute time: the closures of opAttn and
// opAttnMatMulAdd are built at each direct or recording execution (a
// replay executes no node; staleReason drops a graph whose family the
// length no longer takes), so each runs its own step's family. A decode
// attention whose route can take both families as the cache fills gets
// both scratches now, at its first (direct) execution: crossing
// MINFER_ATTN_DECODE_TC_FROM later allocates nothing and moves no pool
// generation. A recording notes the decode family it took.
func (b *Backend) attnRoute(ap AttnParams) (string, error) {
	fam := attnFamily(ap.NT, b.kvLen, b.lv, b.kvSpec.Format)
	if !attnDecodeFamily(fam) {
		return fam, nil
	}
	if lean, tc := attnDecodeFamilies(ap.NT, ap.NCtx, b.lv, b.kvSpec.Format); lean && tc {
		if _, _, err := b.attnDecode2Scratch(ap); err != nil {
			return "", err
		}
		if _, _, err := b.attnTCScratch(ap, b.decodeTCForm().splits(ap, b.dev.Attr.SMCount)); err != nil {
			return "", err
		}
	}
	b.cap.noteAttn(fam, ap.NT)
	return fam, nil
}

// attnScratchKey is the shape a split-K scratch was laid out for; the
// tensor-core prefill's partials have one per head_dim (prefillTC).
type attnScratchKey struct {
	nHead, nHeadKV, headDim, nCtx int
	prefillTC                     bool
}

// attnScratchBuf is one split-K scratch allocation.
type attnScratchBuf struct {
	ptr   driver.DevicePtr
	bytes int
}

// attnQ8Route reports whether the backend runs the chain Attn a ->
// MatMulAdd m (the o-projection and its residual) as FuseAttnQ8: one
// decode token on the lean split-K decode kernel at head_dim 64 or 128,
// and an o-projection on a decode MMVQ route, which reads only the Q8_1 row
// minfer_attn_decode2q_* writes.
func (b *Backend) attnQ8Route(a, m *graph.Node) bool {
	if a.Op != graph.OpAttn || m.Op != graph.OpMatMulAdd || a.Shape[1] != 1 || m.Shape.Rows() != 1 {
		return false
	}
	// Either decode family writes the Q8_1 row, so the answer holds at
	// every KV length the route by depth may meet (any kvLen gives one).
	if !attnDecodeFamily(attnFamily(1, 1, b.lv, b.kvSpec.Format)) || !(AttnParams{HeadDim: a.P.HeadDim}).q8Form() {
		return false
	}
	w := b.weights[m.Weight]
	return w != nil && w.rowLen == a.Shape[0] && b.allDecode(1, []matmulPlan{{w: w}})
}

// opAttnMatMulAdd runs graph.OpAttnMatMulAdd (FuseAttnQ8): the lean decode
// attention of in[0] (window in[1]) writes its output row straight into
// the Q8_1 activation scratch (minfer_attn_decode2q_*, no f32 row), then
// out = in[2] + W row as minfer_mmvq[r]_res_<t> from that scratch: bitwise
// the unfused attention, quantization and residual matvec, one launch
// fewer. The fuse pass made the node only where attnQ8Route holds;
// elsewhere it is an error, never a fallback.
func opAttnMatMulAdd(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	p, o, err := b.nodeIO(n, in, 3, out)
	if err != nil {
		return nil, err
	}
	nt := n.Shape.Rows()
	ops, err := b.attnOperands(n, in, nt)
	if err != nil {
		return nil, err
	}
	m, err := b.planMatMul(n.Weight, n.Bias, in[0], nt, o)
	if err != nil {
		return nil, err
	}
	if m.w.rows != n.Shape[0] || in[2].Len != out.Len {
		return nil, fmt.Errorf("weight %s has %d rows, residual %d elements, node wants %s", n.Weight, m.w.rows, in[2].Len, n.Shape)
	}
	fam, err := b.attnRoute(ops.ap)
	if err != nil {
		return nil, err
	}
	if r := b.matmulRoute(m.w, nt); nt != 1 || !r.decode() || !attnDecodeFamily(fam) || !ops.ap.q8Form() {
		return nil, fmt.Errorf("attention (head_dim %d) + %s (%s) over %d tokens: matmul route %d, attention %s: no Q8_1 handoff",
			ops.ap.HeadDim, n.Weight, m.w.typ, nt, r, fam)
	}
	f := b.kvSpec.Format
	if fam == attnDecodeTC { // the combine writes the Q8_1 row
		part, partBytes, err := b.attnTCScratch(ops.ap, b.decodeTCForm().splits(ops.ap, b.dev.Attr.SMCount))
		if err != nil {
			return nil, err
		}
		return func() error {
			if err := b.k.AttentionDecodeTC(b.s, 0, b.mm.ActQ8, b.mm.ActQ8Bytes, p[0], ops.kr, ops.vr, f, ops.win, part, partBytes, ops.ap); err != nil {
				return err
			}
			return b.mmvqFromQ8(m, o, p[2])
		}, nil
	}
	scr, scrBytes, err := b.attnDecode2Scratch(ops.ap)
	if err != nil {
		return nil, err
	}
	return func() error {
		if err := b.k.AttentionDecode2Q8(b.s, 0, b.mm.ActQ8, b.mm.ActQ8Bytes, p[0], ops.kr, ops.vr, f, ops.win, scr, scrBytes, ops.ap); err != nil {
			return err
		}
		return b.mmvqFromQ8(m, o, p[2])
	}, nil
}
