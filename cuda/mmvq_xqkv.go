package cuda

// mmvq_xqkv.go: MINFER_MMVQ_QKV_MIXED. The decode q/k/v projections of one
// Q8_1 row in one launch when v's weight type (or layout) is not q's and
// k's (cuda/kernels/mmvq_xqkv.cu): the quantizer's _M mixes give attn_v
// more bits on a third of the layers, where the one-type fused kernel
// (minfer_mmvq[r]_qkv_<t>) cannot run and the node launched one matvec per
// matrix. Each row is its separate kernel's row, so the output is bitwise
// theirs. The route (qkvDecodePlan) is decided at plan time: a pair without
// a kernel, q or k rows that are not whole blocks of rows, or a matrix the
// split form takes keeps the three launches.

import (
	"fmt"
	"math"
	"strings"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/quant"
)

// xqkvPair is what a mixed q/k/v kernel is instantiated for: the q and k
// type (GGUF blocks), the v type, and whether v is read from its repacked
// copy (mmvq_repack.go).
type xqkvPair struct {
	qk, v     quant.Type
	vRepacked bool
}

// xqkvTable names the mixed kernels (MINFER_XQKV_KERNEL in mmvq_xqkv.cu):
// the pairs of the quantizer's recipes (engine/quantize TypeFor over the
// synth shapes): Q4_K_M's and Q5_K_M's v of more bits, repacked or not,
// and Q4_K_S's first layers.
var xqkvTable = map[xqkvPair]string{
	{quant.Q5_0, quant.Q8_0, true}:  "minfer_mmvq_xqkv_q5_0_q8_0r", // qwen2-0.5b Q4_K_M
	{quant.Q5_0, quant.Q8_0, false}: "minfer_mmvq_xqkv_q5_0_q8_0",
	{quant.Q4_K, quant.Q6_K, true}:  "minfer_mmvq_xqkv_q4_k_q6_kr", // qwen2-7b, qwen3-0.6b Q4_K_M
	{quant.Q4_K, quant.Q6_K, false}: "minfer_mmvq_xqkv_q4_k_q6_k",
	{quant.Q5_1, quant.Q8_0, true}:  "minfer_mmvq_xqkv_q5_1_q8_0r", // qwen2-0.5b Q5_K_M
	{quant.Q5_1, quant.Q8_0, false}: "minfer_mmvq_xqkv_q5_1_q8_0",
	{quant.Q5_K, quant.Q6_K, true}:  "minfer_mmvq_xqkv_q5_k_q6_kr", // qwen2-7b, qwen3-0.6b Q5_K_M
	{quant.Q5_K, quant.Q6_K, false}: "minfer_mmvq_xqkv_q5_k_q6_k",
	{quant.Q5_0, quant.Q5_1, false}: "minfer_mmvq_xqkv_q5_0_q5_1", // qwen2-0.5b Q4_K_S
	{quant.Q4_K, quant.Q5_K, false}: "minfer_mmvq_xqkv_q4_k_q5_k", // qwen2-7b, qwen3-0.6b Q4_K_S
}

// xqkvKernel names the mixed q/k/v kernel of a pair ("" when none).
func xqkvKernel(p xqkvPair) string { return xqkvTable[p] }

// xqkvShapeOK reports whether the kernel takes these row counts: q and k
// whole blocks of mmvqRows rows (each block then holds rows of one matrix),
// v any.
func xqkvShapeOK(n [3]int) bool {
	return n[0] > 0 && n[1] > 0 && n[2] > 0 && n[0]%mmvqRows == 0 && n[1]%mmvqRows == 0
}

// MatMulQ8_1QKVMixed runs the q, k and v projections of one Q8_1 row at xq
// in one launch (minfer_mmvq_xqkv_<qk>_<v>[r]): out holds n[0] + n[1] +
// n[2] values, q then k then v, each row bitwise what MatMulQ8_1 (q, k and
// a GGUF v) or MatMulQ8_1R (a repacked v) gives for it. w[0], w[1] are q/k
// weights of pair.qk (GGUF blocks); w[2] the v weight of pair.v (its
// repacked copy when pair.vRepacked). A pair without a kernel, or q or k
// rows that are not a multiple of the rows a block, is an error naming
// them: the route never asks for one.
func (k *Kernels) MatMulQ8_1QKVMixed(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w [3]driver.DevicePtr,
	pair xqkvPair, bias [3]driver.DevicePtr, kDim int, n [3]int) error {
	const op = "matmul_q8_1_xqkv"
	name := xqkvKernel(pair)
	if name == "" {
		return fmt.Errorf("%s: no mixed q/k/v kernel for q/k %s with v %s (repacked %v)", op, pair.qk, pair.v, pair.vRepacked)
	}
	if !xqkvShapeOK(n) {
		return fmt.Errorf("%s %s k=%d n=%v: q and k rows must be positive multiples of %d (a block's rows are one matrix's)",
			op, name, kDim, n, mmvqRows)
	}
	total := 0
	for i := range w {
		f, t := mmvqFam, pair.qk
		if i == 2 {
			t = pair.v
			if pair.vRepacked {
				f = mmvqrFam
			}
		}
		if err := f.check(op, xq, xqBytes, w[i], t, kDim, n[i]); err != nil {
			return fmt.Errorf("weight %d: %w", i, err)
		}
		if uint64(bias[i])%4 != 0 {
			return fmt.Errorf("%s: bias %d %v is misaligned", op, i, bias[i])
		}
		total += n[i]
	}
	// After checkMMVQ of q this cannot fail: it checks the same.
	if err := checkQ8Act(op, xq, xqBytes, kDim); err != nil {
		return err
	}
	if out == 0 || uint64(out)%4 != 0 || total > math.MaxInt32 {
		return fmt.Errorf("%s %s k=%d n=%v: null or misaligned output %v, or too many rows", op, name, kDim, n, out)
	}
	grid, block := mmvqFam.grid(total)
	if err := k.launch(s, name, grid, block, 0, qkvArgs(out, xq, w, bias, kDim, n)...); err != nil {
		return fmt.Errorf("matmul %s nt=1 k=%d n=%v: %w", name, kDim, n, err)
	}
	return nil
}

// qkvKind is how a fused q/k/v node runs its matvecs.
type qkvKind int

const (
	qkvSeparate qkvKind = iota // one matmul per matrix, sharing the input as sharedInput says
	qkvOneType                 // decode, one type and route: minfer_mmvq[r]_qkv_<t> (or its split form)
	qkvMixed                   // decode, v of another type: minfer_mmvq_xqkv_* (MINFER_MMVQ_QKV_MIXED)
)

// qkvPlan is the route of a fused q/k/v node's matvecs, decided at plan
// time from its three weights.
type qkvPlan struct {
	kind  qkvKind
	route mmRoute  // qkvOneType: the shared decode route
	pair  xqkvPair // qkvMixed: the kernel's pair
	// why says, for a decode node of mixed types that keeps its separate
	// launches, what the mixed kernel lacks ("" otherwise).
	why string
}

// matvecs is the number of matvec launches the plan makes at decode (the
// Q8_1 row's producer, a quantization or the fused norm, is one launch
// before them on every decode route).
func (p qkvPlan) matvecs() int {
	if p.kind == qkvSeparate {
		return 3
	}
	return 1
}

// qkvDecodePlan is the route of the fused q/k/v matmuls ms (q, k, v) over
// nt tokens: one launch when all three share a decode MMVQ route and type
// (decodeGroup); else, with MINFER_MMVQ_QKV_MIXED, one mixed launch where
// q and k share a type on the GGUF decode route, v is on a decode route of
// another type, the pair has a kernel, q and k are whole blocks of rows,
// and no matrix would take the split form (the separate launches' rows
// would not be the one-warp rows); else one matmul each.
func (b *Backend) qkvDecodePlan(nt int, ms []matmulPlan) qkvPlan {
	if same, route := b.decodeGroup(nt, ms); same {
		return qkvPlan{kind: qkvOneType, route: route}
	}
	if nt != 1 || len(ms) != 3 || !b.allDecode(nt, ms) {
		return qkvPlan{kind: qkvSeparate}
	}
	q, k, v := ms[0].w, ms[1].w, ms[2].w
	rv := b.matmulRoute(v, nt)
	pair := xqkvPair{qk: q.typ, v: v.typ, vRepacked: rv == routeMMVQR}
	rows := [3]int{q.rows, k.rows, v.rows}
	var why string
	switch {
	case !b.mm.MMVQQKVMixed:
		why = "MINFER_MMVQ_QKV_MIXED=0"
	case q.typ != k.typ || b.matmulRoute(q, nt) != routeMMVQ || b.matmulRoute(k, nt) != routeMMVQ:
		why = fmt.Sprintf("q %s and k %s are not one type on the GGUF decode route", q.typ, k.typ)
	case xqkvKernel(pair) == "":
		why = fmt.Sprintf("no mixed kernel for q/k %s with v %s (repacked %v)", pair.qk, pair.v, pair.vRepacked)
	case !xqkvShapeOK(rows):
		why = fmt.Sprintf("q/k rows %d/%d are not multiples of %d", rows[0], rows[1], mmvqRows)
	case b.mm.MMVQSplit && (b.k.MMVQSplit(rows[0], b.mm) || b.k.MMVQSplit(rows[1], b.mm) || b.k.MMVQSplit(rows[2], b.mm)):
		why = "a matrix takes the split form (MINFER_MMVQ_SPLIT=1)"
	default:
		return qkvPlan{kind: qkvMixed, pair: pair}
	}
	return qkvPlan{kind: qkvSeparate, why: why}
}

// ---------------------------------------------------------------------
// MINFER_FUSE_QKV_ROPE: the decode q/k/v matvec with the bias, neox rope
// and KV store of graph.OpQkvBiasRopeStore folded in (the _qkvrs_ kernels
// of cuda/kernels/mmvq_xqkv.cu): each q / k block of 4 rows holds two whole
// rope pairs of a head, ropes them after one barrier and writes q' or the
// K cell; v blocks store their rows into the V cell. One launch a layer
// fewer than the matvec then minfer_qkv_rope_store, bitwise their q' and
// KV bytes.

// qkvrsKernel names the fused kernel of a decode q/k/v plan over weight
// type wtype (q's): the one-type form of the plan's route or the mixed
// pair's form; "" where none is instantiated.
func qkvrsKernel(plan qkvPlan, wtype quant.Type) string {
	switch {
	case plan.kind == qkvOneType && plan.route == routeMMVQ:
		return mmvqFusedKernel(wtype, "qkvrs")
	case plan.kind == qkvOneType && plan.route == routeMMVQR:
		return mmvqrKernel(wtype, "qkvrs")
	case plan.kind == qkvMixed:
		if name := xqkvKernel(plan.pair); name != "" {
			return "minfer_mmvq_xqkvrs_" + strings.TrimPrefix(name, "minfer_mmvq_xqkv_")
		}
	}
	return ""
}

// QkvRopeTail is the rope/store half of a fused launch: where q' and the
// token's K and V cells go, and the rope.
type QkvRopeTail struct {
	Q                driver.DevicePtr // q' [HeadDim, NHead]
	Pos              driver.DevicePtr // i32 [1]: the token's position
	Win              driver.DevicePtr // i32 [2]: the KV window {start cell, kv_len}
	KRegion, VRegion driver.DevicePtr // the layer's regions of NCtx cells
	Format           kv.Format        // f32 or f16
	NCtx             int
	HeadDim          int // the rope spans the whole head (n_rot == HeadDim), neox pairs
	Theta            float32
}

// checkQkvRopeTail checks the tail for a launch of nq / nk / nv rows and
// returns the K / V row bytes: q and k whole heads of a head_dim that is a
// multiple of 4 (a block holds two pairs: rows 2j, 2j+1, half+2j,
// half+2j+1), v as many rows as k (one KV row), an f32 or f16 cache, every
// pointer set and aligned.
func checkQkvRopeTail(op string, t QkvRopeTail, n [3]int) (int, error) {
	hd := t.HeadDim
	if hd <= 0 || hd%(2*2) != 0 || hd > ropeMaxHeadDim {
		return 0, opsBad(op, "head_dim %d: a block holds two rope pairs, so a positive multiple of 4 up to %d", hd, ropeMaxHeadDim)
	}
	if n[0] <= 0 || n[1] <= 0 || n[0]%hd != 0 || n[1]%hd != 0 || n[2] != n[1] {
		return 0, opsBad(op, "rows %v: q and k whole heads of %d, v as many rows as k", n, hd)
	}
	if t.Format != kv.F32 && t.Format != kv.F16 {
		return 0, opsBad(op, "KV format %s: the fused store writes f32 or f16 cells (q8_0 keeps minfer_qkv_rope_store)", t.Format)
	}
	if !(t.Theta > 0) || math.IsInf(float64(t.Theta), 0) {
		return 0, opsBad(op, "theta %g: must be positive and finite", t.Theta)
	}
	for _, p := range []struct {
		name string
		ptr  driver.DevicePtr
	}{{"q'", t.Q}, {"positions", t.Pos}, {"KV window", t.Win}, {"K region", t.KRegion}, {"V region", t.VRegion}} {
		if p.ptr == 0 || uint64(p.ptr)%4 != 0 {
			return 0, opsBad(op, "%s %v is null or not 4-byte aligned", p.name, p.ptr)
		}
	}
	return kvRowBytes(op, t.Format, n[1], t.NCtx)
}

// MatMulQ8_1QKVRopeStore runs the decode q/k/v projections of the Q8_1 row
// at xq and the rope/store of OpQkvBiasRopeStore in one launch of kernel
// name (qkvrsKernel of the node's plan; rep says which weights are
// repacked copies: q and k, v): q' into t.Q, k' and v (biases added) into
// the K and V cells win[0] of t's regions, bitwise the matvec then
// QkvBiasRopeStore. w, bias, kDim and n as MatMulQ8_1QKV / the mixed
// launch take them. Every argument error is returned, nothing launched.
func (k *Kernels) MatMulQ8_1QKVRopeStore(s *driver.Stream, name string, xq driver.DevicePtr, xqBytes uint64,
	w [3]driver.DevicePtr, types [3]quant.Type, rep [3]bool, bias [3]driver.DevicePtr, kDim int, n [3]int, t QkvRopeTail) error {
	args, err := qkvRopeStoreArgs(name, xq, xqBytes, w, types, rep, bias, kDim, n, t)
	if err != nil {
		return err
	}
	grid, block := mmvqFam.grid(n[0] + n[1] + n[2])
	if err := k.launch(s, name, grid, block, 0, args...); err != nil {
		return fmt.Errorf("matmul %s nt=1 k=%d n=%v: %w", name, kDim, n, err)
	}
	return nil
}

// qkvRopeStoreArgs checks a fused launch (the plan's handler runs it once
// at plan time) and returns its arguments: the _qkv_ kernels' (qkvArgs
// without the output), then q', pos, win, the regions, the format, the row
// bytes, n_ctx, head_dim and theta.
func qkvRopeStoreArgs(name string, xq driver.DevicePtr, xqBytes uint64, w [3]driver.DevicePtr, types [3]quant.Type,
	rep [3]bool, bias [3]driver.DevicePtr, kDim int, n [3]int, t QkvRopeTail) ([]any, error) {
	const op = "matmul_q8_1_qkv_rope_store"
	if name == "" || !strings.Contains(name, "qkvrs_") {
		return nil, fmt.Errorf("%s: no fused q/k/v + rope/store kernel for %v (repacked %v)", op, types, rep)
	}
	if types[0] != types[1] || rep[0] != rep[1] {
		return nil, fmt.Errorf("%s %s: q %s and k %s are not one type and layout", op, name, types[0], types[1])
	}
	rb, err := checkQkvRopeTail(op, t, n)
	if err != nil {
		return nil, err
	}
	total, err := checkQKVWeights(op, xq, xqBytes, w, types, rep, bias, kDim, n)
	if err != nil {
		return nil, err
	}
	if err := checkQ8Act(op, xq, xqBytes, kDim); err != nil {
		return nil, err
	}
	if total > math.MaxInt32 {
		return nil, fmt.Errorf("%s %s k=%d n=%v: too many rows", op, name, kDim, n)
	}
	return []any{xq, w[0], w[1], w[2], bias[0], bias[1], bias[2], int32(kDim), int32(n[0]), int32(n[1]), int32(n[2]),
		t.Q, t.Pos, t.Win, t.KRegion, t.VRegion, int32(t.Format), int64(rb), int32(t.NCtx), int32(t.HeadDim), t.Theta}, nil
}

// qkvRopeLayout is the kernel and weight layout a fused q/k/v node's
// decode plan takes with the rope/store folded in: the kernel ("" when
// none), each weight's type and whether it is read from its repacked copy.
func (b *Backend) qkvRopeLayout(ms []matmulPlan) (name string, types [3]quant.Type, rep [3]bool, why string) {
	plan := b.qkvDecodePlan(1, ms)
	for i, m := range ms {
		types[i] = m.w.typ
		rep[i] = b.matmulRoute(m.w, 1) == routeMMVQR
	}
	name = qkvrsKernel(plan, types[0])
	switch {
	case plan.kind == qkvSeparate:
		why = "the q/k/v matvecs take separate launches"
		if plan.why != "" {
			why += " (" + plan.why + ")"
		}
	case name == "":
		why = fmt.Sprintf("no fused kernel for %v (repacked %v)", types, rep)
	case plan.kind == qkvOneType && b.mm.MMVQSplit && b.k.MMVQSplit(ms[0].w.rows+ms[1].w.rows+ms[2].w.rows, b.mm):
		why = "the q/k/v matvec takes the split form (MINFER_MMVQ_SPLIT=1)"
	default:
		return name, types, rep, ""
	}
	return "", types, rep, why
}

// qkvRopeRoute reports whether the backend runs the chain
// QkvBiasRopeStore r <- FusedQKV f as FuseQKVRopeStore (asked at fuse
// time): one decode token, no q/k norms, neox rope over whole heads of a
// head_dim that is a multiple of 4, an f32 or f16 cache, and q, k, v on a
// decode MMVQ plan of one launch whose fused form exists (one-type GGUF or
// repacked, or a mixed pair, not the split form). Everything else keeps
// the matvec and minfer_qkv_rope_store.
func (b *Backend) qkvRopeRoute(r, f *graph.Node) bool {
	if r.Op != graph.OpQkvBiasRopeStore || f.Op != graph.OpFusedQKV || len(r.Weights) != 0 || len(f.Weights) != 3 {
		return false
	}
	hd, nh, nkv := r.P.HeadDim, r.P.NHead, r.P.NHeadKV
	if r.P.Rope != graph.RopeNeox || hd <= 0 || hd%4 != 0 || nh <= 0 || nkv <= 0 || r.Shape != graph.Sh(hd, nh, 1) {
		return false
	}
	if b.kvSpec.Format != kv.F32 && b.kvSpec.Format != kv.F16 {
		return false
	}
	ms := make([]matmulPlan, 3)
	for i, name := range f.Weights {
		w := b.weights[name]
		if w == nil || w.vector || w.rowLen != b.weights[f.Weights[0]].rowLen {
			return false
		}
		ms[i] = matmulPlan{w: w}
	}
	if ms[0].w.rows != nh*hd || ms[1].w.rows != nkv*hd || ms[2].w.rows != nkv*hd || !b.allDecode(1, ms) {
		return false
	}
	name, _, _, _ := b.qkvRopeLayout(ms)
	return name != ""
}

// opFusedQKVRopeStore runs graph.OpFusedQKVRopeStore (FuseQKVRopeStore):
// in = x, positions, KV window; the decode row's Q8_1 quantization (or with
// n.Norm the fused norm, as opFusedQKV) and one _qkvrs_ launch that writes
// q' into out and the token's K and V cells: bitwise opFusedQKV then
// opQkvBiasRopeStore, one launch fewer. The fuse pass made the node only
// where qkvRopeRoute holds; elsewhere it is an error, never a fallback.
func opFusedQKVRopeStore(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	if len(n.Weights) != 3 || len(n.Biases) != 3 {
		return nil, fmt.Errorf("fused qkv + rope/store wants 3 weights and 3 bias names, has %d and %d", len(n.Weights), len(n.Biases))
	}
	p, o, err := b.ptrs(in, 2, out, true)
	if err != nil {
		return nil, err
	}
	if len(in) < 3 {
		return nil, fmt.Errorf("%d inputs, want x, positions and the KV window", len(in))
	}
	win, err := b.kvWindow(in[2])
	if err != nil {
		return nil, err
	}
	hd, nh, nkv := n.P.HeadDim, n.P.NHead, n.P.NHeadKV
	if in[1].Len != 1 || out.Len != hd*nh || hd <= 0 || nh <= 0 || nkv <= 0 {
		return nil, fmt.Errorf("%d positions, output %d elements for %d/%d heads of %d: the fused form is one decode token",
			in[1].Len, out.Len, nh, nkv, hd)
	}
	if nkv*hd != b.kvSpec.RowLen {
		return nil, fmt.Errorf("%d KV heads of %d is not the KV row of %d", nkv, hd, b.kvSpec.RowLen)
	}
	if n.P.Rope != graph.RopeNeox {
		return nil, fmt.Errorf("rope style %d: the fused form ropes neox pairs only", n.P.Rope)
	}
	ms := make([]matmulPlan, 3)
	for i := range ms {
		if ms[i], err = b.planMatMul(n.Weights[i], n.Biases[i], in[0], 1, 0); err != nil {
			return nil, err
		}
	}
	rows := [3]int{ms[0].w.rows, ms[1].w.rows, ms[2].w.rows}
	if rows != [3]int{nh * hd, nkv * hd, nkv * hd} {
		return nil, fmt.Errorf("q/k/v weights of %v rows for %d/%d heads of %d", rows, nh, nkv, hd)
	}
	name, types, rep, why := b.qkvRopeLayout(ms)
	if name == "" {
		return nil, fmt.Errorf("q/k/v %v: no fused rope/store launch: %s", n.Weights, why)
	}
	x, k := p[0], ms[0].w.rowLen
	quantize, err := b.decodeQuantize(n, x, k, 1, ms)
	if err != nil {
		return nil, err
	}
	kr, vr, err := b.regions(n.P.Layer)
	if err != nil {
		return nil, err
	}
	var w, bias [3]driver.DevicePtr
	for i, m := range ms {
		w[i], bias[i] = m.w.ptr, m.bias
		if rep[i] {
			w[i] = m.w.rp
		}
	}
	tail := QkvRopeTail{Q: o, Pos: p[1], Win: win, KRegion: kr, VRegion: vr, Format: b.kvSpec.Format, NCtx: b.kvSpec.NCtx,
		HeadDim: hd, Theta: n.P.Theta}
	if _, err := qkvRopeStoreArgs(name, b.mm.ActQ8, b.mm.ActQ8Bytes, w, types, rep, bias, k, rows, tail); err != nil {
		return nil, err
	}
	if nname, _ := b.normMMVQNode(n, 1, ms); nname != "" {
		// MINFER_FUSE_NORM_MMVQ: the kernel norms the row itself.
		r, err := b.normMMVQRow(n, x, k)
		if err != nil {
			return nil, err
		}
		return func() error {
			return b.k.MatMulNormQKVRopeStore(b.s, nname, r, w, types, rep, bias, k, rows, tail)
		}, nil
	}
	return func() error {
		if err := quantize(); err != nil {
			return err
		}
		return b.k.MatMulQ8_1QKVRopeStore(b.s, name, b.mm.ActQ8, b.mm.ActQ8Bytes, w, types, rep, bias, k, rows, tail)
	}, nil
}

// checkQKVWeights checks the q, k and v matrices of a one-launch q/k/v
// kernel (each in its family's layout: GGUF, or repacked where rep says)
// against the activation row xq and their biases' alignment, and returns
// their total rows.
func checkQKVWeights(op string, xq driver.DevicePtr, xqBytes uint64, w [3]driver.DevicePtr, types [3]quant.Type, rep [3]bool,
	bias [3]driver.DevicePtr, kDim int, n [3]int) (int, error) {
	total := 0
	for i := range w {
		f := mmvqFam
		if rep[i] {
			f = mmvqrFam
		}
		if err := f.check(op, xq, xqBytes, w[i], types[i], kDim, n[i]); err != nil {
			return 0, fmt.Errorf("weight %d: %w", i, err)
		}
		if uint64(bias[i])%4 != 0 {
			return 0, fmt.Errorf("%s: bias %d %v is misaligned", op, i, bias[i])
		}
		total += n[i]
	}
	return total, nil
}
