package cuda

// mmvq_norm.go: MINFER_FUSE_NORM_MMVQ. A decode (nt = 1) fused q/k/v or
// gate/up node that carries the folded RMS norm (graph.FuseNormQ8) runs
// the normed form of its consumer kernel (cuda/kernels/mmvq_znorm.cu:
// minfer_mmvqn[r]_*) instead of minfer_rms_norm_q8_1 then the plain
// kernel: every block norms the f32 row with the norm kernel's arithmetic
// and quantizes it into shared memory, so the outputs are bitwise the two
// launches' and the norm launch is gone (two a layer). The route is
// decided at plan time (normMMVQNode); every form it declines keeps the
// norm launch: more than one token, a row above MINFER_MMVQN_MAX_K or not
// whole Q8_1 blocks, the split form (MINFER_MMVQ_SPLIT=1), separate q/k/v
// launches, the decode lm head (a plain MatMul node: its 151,936 rows would
// norm the row in every one of its blocks), any plain kernel without a
// normed form.

import (
	"fmt"
	"math"
	"strings"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/quant"
)

// normMMVQMaxK is MINFER_MMVQN_MAX_K (mmvq_znorm.cu): the row the normed
// prologue holds in registers (8 values a thread of a 256-thread norm
// block). qwen2-7b's 3584 is declined.
const normMMVQMaxK = 2048

// NormRow is what a normed kernel reads in place of the Q8_1 row: the
// un-normed f32 row X of K values, the norm weight W (K values) and Eps.
type NormRow struct {
	X, W driver.DevicePtr
	K    int
	Eps  float32
}

// mmvqnKernels are the normed kernels mmvq_znorm.cu instantiates, by name:
// the _qkv_, _ffn_ and _qkvrs_ forms of every one-type and repacked type,
// and the mixed pairs' _xqkv_ and _xqkvrs_.
var mmvqnKernels = func() map[string]bool {
	m := map[string]bool{}
	for t := range mmvqTable {
		for _, form := range []string{"qkv", "ffn", "qkvrs"} {
			m[mmvqnName(mmvqFusedKernel(t, form))] = true
		}
	}
	for t := range mmvqrTypes {
		for _, form := range []string{"qkv", "ffn", "qkvrs"} {
			m[mmvqnName(mmvqrKernel(t, form))] = true
		}
	}
	for _, name := range xqkvTable {
		m[mmvqnName(name)] = true
		m[mmvqnName(strings.Replace(name, "_xqkv_", "_xqkvrs_", 1))] = true
	}
	return m
}()

// mmvqnName is the normed form's name of a plain kernel: minfer_mmvq_X ->
// minfer_mmvqn_X, minfer_mmvqr_X -> minfer_mmvqnr_X ("" for anything else).
func mmvqnName(plain string) string {
	switch {
	case strings.HasPrefix(plain, "minfer_mmvqr_"):
		return "minfer_mmvqnr_" + strings.TrimPrefix(plain, "minfer_mmvqr_")
	case strings.HasPrefix(plain, "minfer_mmvq_"):
		return "minfer_mmvqn_" + strings.TrimPrefix(plain, "minfer_mmvq_")
	}
	return ""
}

// mmvqnKernel is the instantiated normed form of plain, or "".
func mmvqnKernel(plain string) string {
	if n := mmvqnName(plain); mmvqnKernels[n] {
		return n
	}
	return ""
}

// normMMVQRowOK reports whether the prologue takes a row of k values: whole
// Q8_1 blocks, at most normMMVQMaxK, and within what minfer_rms_norm_q8_1
// takes (so the norm it reproduces exists).
func normMMVQRowOK(k int) bool {
	return k > 0 && k%quant.QK == 0 && k <= normMMVQMaxK && k <= normQ8MaxPer*int(opsRowBlock(k)[0])
}

// normMMVQNode is the normed kernel the fused decode node n (FusedQKV,
// FusedFFN or FusedQKVRopeStore, its matmuls ms over nt tokens) runs under
// MINFER_FUSE_NORM_MMVQ, or "" and why the norm launch stays.
func (b *Backend) normMMVQNode(n *graph.Node, nt int, ms []matmulPlan) (name, why string) {
	var k int
	if len(ms) > 0 && ms[0].w != nil {
		k = ms[0].w.rowLen
	}
	switch {
	case !b.lv.FuseNormMMVQ:
		return "", "MINFER_FUSE_NORM_MMVQ=0"
	case n.Norm == "":
		return "", "no folded norm (MINFER_FUSE_NORM_Q8)"
	case nt != 1:
		return "", fmt.Sprintf("%d tokens: the normed kernels are decode only", nt)
	case !normMMVQRowOK(k):
		return "", fmt.Sprintf("a row of %d values: the prologue takes multiples of %d up to %d", k, quant.QK, normMMVQMaxK)
	case b.mm.MMVQSplit:
		return "", "MINFER_MMVQ_SPLIT=1 (the split form has no normed kernel)"
	case !b.allDecode(nt, ms):
		return "", "a matmul is not on a decode MMVQ route"
	}
	var plain string
	switch n.Op {
	case graph.OpFusedQKV:
		plan := b.qkvDecodePlan(nt, ms)
		switch {
		case plan.kind == qkvOneType && plan.route == routeMMVQR:
			plain = mmvqrKernel(ms[0].w.typ, "qkv")
		case plan.kind == qkvOneType:
			plain = mmvqFusedKernel(ms[0].w.typ, "qkv")
		case plan.kind == qkvMixed:
			plain = xqkvKernel(plan.pair)
		default:
			return "", "the q/k/v matvecs take separate launches"
		}
	case graph.OpFusedFFN:
		same, route := b.decodeGroup(nt, ms)
		switch {
		case !same:
			return "", "gate and up are not one type and route"
		case route == routeMMVQR:
			plain = mmvqrKernel(ms[0].w.typ, "ffn")
		default:
			plain = mmvqFusedKernel(ms[0].w.typ, "ffn")
		}
	case graph.OpFusedQKVRopeStore:
		var w string
		if plain, _, _, w = b.qkvRopeLayout(ms); plain == "" {
			return "", w
		}
	default:
		return "", fmt.Sprintf("op %s has no normed kernel (the decode lm head keeps the norm launch)", n.Op)
	}
	if name = mmvqnKernel(plain); name == "" {
		return "", fmt.Sprintf("%s has no normed form", plain)
	}
	return name, ""
}

// normMMVQRow is the row a normed launch of node n reads: x (k values) and
// the node's norm weight and eps.
func (b *Backend) normMMVQRow(n *graph.Node, x driver.DevicePtr, k int) (NormRow, error) {
	w, err := b.vector(n.Norm, k)
	if err != nil {
		return NormRow{}, err
	}
	r := NormRow{X: x, W: w, K: k, Eps: n.P.Eps}
	return r, checkNormRow("mmvqn", r, k)
}

// checkNormRow checks the row a normed kernel norms: k values in whole Q8_1
// blocks up to normMMVQMaxK, x and w set and 4-byte aligned, eps >= 0 and
// finite.
func checkNormRow(op string, r NormRow, kDim int) error {
	switch {
	case r.K != kDim || !normMMVQRowOK(r.K):
		return fmt.Errorf("%s: a normed row of %d values for k=%d: want k, a positive multiple of %d up to %d", op, r.K, kDim, quant.QK, normMMVQMaxK)
	case r.X == 0 || uint64(r.X)%4 != 0 || r.W == 0 || uint64(r.W)%4 != 0:
		return fmt.Errorf("%s: row %v / norm weight %v null or not 4-byte aligned", op, r.X, r.W)
	case !(r.Eps >= 0) || math.IsInf(float64(r.Eps), 0):
		return fmt.Errorf("%s: eps %g: must be >= 0 and finite", op, r.Eps)
	}
	return nil
}

// normArgs replaces the Q8_1 row argument at args[at] of a plain launch by
// the normed kernels' three (x, w, eps).
func normArgs(args []any, at int, r NormRow) []any {
	out := make([]any, 0, len(args)+2)
	out = append(out, args[:at]...)
	out = append(out, r.X, r.W, r.Eps)
	return append(out, args[at+1:]...)
}

// The plain checks ask for a Q8_1 row; a normed launch has none. They get
// the f32 row in its place: 4 k bytes, more than the k / 32 x 36 they ask.
func normAsQ8(r NormRow) (driver.DevicePtr, uint64) { return r.X, 4 * uint64(r.K) }

// MatMulNormQKV runs the normed q/k/v kernel name (normMMVQNode of a
// FusedQKV node: minfer_mmvqn[r]_qkv_<t> or minfer_mmvqn_xqkv_<qk>_<v>[r])
// over the row r: out as the plain kernel writes it after
// minfer_rms_norm_q8_1 of r. w, types, rep (which weights are repacked
// copies), bias and n as the plain launches take them. Every argument
// error is returned, nothing launched.
func (k *Kernels) MatMulNormQKV(s *driver.Stream, name string, out driver.DevicePtr, r NormRow, w [3]driver.DevicePtr,
	types [3]quant.Type, rep [3]bool, bias [3]driver.DevicePtr, kDim int, n [3]int) error {
	const op = "matmul_norm_qkv"
	if !mmvqnKernels[name] || strings.Contains(name, "qkvrs_") || strings.Contains(name, "_ffn_") {
		return fmt.Errorf("%s: %q is no normed q/k/v kernel", op, name)
	}
	if err := checkNormRow(op, r, kDim); err != nil {
		return err
	}
	if strings.Contains(name, "_xqkv_") {
		if !xqkvShapeOK(n) {
			return fmt.Errorf("%s %s k=%d n=%v: q and k rows must be positive multiples of %d", op, name, kDim, n, mmvqRows)
		}
	} else if types[1] != types[0] || types[2] != types[0] || rep[1] != rep[0] || rep[2] != rep[0] {
		return fmt.Errorf("%s %s: q/k/v of types %v (repacked %v): the one-type kernel takes one", op, name, types, rep)
	}
	xq, xqBytes := normAsQ8(r)
	total, err := checkQKVWeights(op, xq, xqBytes, w, types, rep, bias, kDim, n)
	if err != nil {
		return err
	}
	if out == 0 || uint64(out)%4 != 0 || total > math.MaxInt32 {
		return fmt.Errorf("%s %s k=%d n=%v: null or misaligned output %v, or too many rows", op, name, kDim, n, out)
	}
	grid, block := mmvqFam.grid(total)
	if err := k.launch(s, name, grid, block, 0, normArgs(qkvArgs(out, xq, w, bias, kDim, n), 1, r)...); err != nil {
		return fmt.Errorf("matmul %s nt=1 k=%d n=%v: %w", name, kDim, n, err)
	}
	return nil
}

// MatMulNormFFN runs the normed SwiGLU kernel name (minfer_mmvqn[r]_ffn_<t>)
// over the row r: out[j] = silu(gate[j] . a) * (up[j] . a), a the Q8_1 row
// minfer_rms_norm_q8_1 makes of r. wg, wu: gate and up of wtype (their
// repacked copies when rep).
func (k *Kernels) MatMulNormFFN(s *driver.Stream, name string, out driver.DevicePtr, r NormRow, wg, wu driver.DevicePtr,
	wtype quant.Type, rep bool, kDim, n int) error {
	const op = "matmul_norm_ffn"
	f := mmvqFam
	if rep {
		f = mmvqrFam
	}
	if want := mmvqnKernel(f.kernel(wtype, "ffn")); name == "" || name != want {
		return fmt.Errorf("%s: %q is not the normed SwiGLU kernel of %s (repacked %v): %q", op, name, wtype, rep, want)
	}
	if err := checkNormRow(op, r, kDim); err != nil {
		return err
	}
	xq, xqBytes := normAsQ8(r)
	for i, w := range []driver.DevicePtr{wg, wu} {
		if err := f.check(op, xq, xqBytes, w, wtype, kDim, n); err != nil {
			return fmt.Errorf("weight %d: %w", i, err)
		}
	}
	if out == 0 || uint64(out)%4 != 0 {
		return fmt.Errorf("%s %s k=%d n=%d: null or misaligned output %v", op, wtype, kDim, n, out)
	}
	grid, block := f.grid(n)
	if err := k.launch(s, name, grid, block, 0, out, r.X, r.W, r.Eps, wg, wu, int32(kDim), int32(n)); err != nil {
		return fmt.Errorf("ffn %s nt=1 k=%d n=%d: %w", name, kDim, n, err)
	}
	return nil
}

// MatMulNormQKVRopeStore runs the normed roped q/k/v kernel name
// (minfer_mmvqn[r]_qkvrs_<t>, minfer_mmvqn_xqkvrs_<qk>_<v>[r]) over the row
// r: MatMulQ8_1QKVRopeStore's q' and KV cells, of the Q8_1 row
// minfer_rms_norm_q8_1 makes of r.
func (k *Kernels) MatMulNormQKVRopeStore(s *driver.Stream, name string, r NormRow, w [3]driver.DevicePtr,
	types [3]quant.Type, rep [3]bool, bias [3]driver.DevicePtr, kDim int, n [3]int, t QkvRopeTail) error {
	const op = "matmul_norm_qkv_rope_store"
	if !mmvqnKernels[name] || !strings.Contains(name, "qkvrs_") {
		return fmt.Errorf("%s: %q is no normed q/k/v + rope/store kernel", op, name)
	}
	if err := checkNormRow(op, r, kDim); err != nil {
		return err
	}
	xq, xqBytes := normAsQ8(r)
	args, err := qkvRopeStoreArgs(name, xq, xqBytes, w, types, rep, bias, kDim, n, t)
	if err != nil {
		return err
	}
	grid, block := mmvqFam.grid(n[0] + n[1] + n[2])
	if err := k.launch(s, name, grid, block, 0, normArgs(args, 0, r)...); err != nil {
		return fmt.Errorf("matmul %s nt=1 k=%d n=%v: %w", name, kDim, n, err)
	}
	return nil
}
