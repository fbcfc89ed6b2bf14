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

	"github.com/minfer-go/minfer/cuda/driver"
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
