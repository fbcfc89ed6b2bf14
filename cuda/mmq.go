package cuda

// mmq.go: the int8 tensor-core prefill matmul over Q8_1 activations
// (cuda/kernels/mmq.cu, MINFER_MMQ), its tile and split-K plan, and the
// backend's growable activation scratch.

import (
	"fmt"
	"math"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/quant"
)

// mmqTable names the prefill kernels over Q8_1 activations
// (cuda/kernels/mmq.cu: int8 tensor-core MMA) of the weight types that have
// one. The other types (F32, F16, BF16) keep the f16 GEMM: MatMulPath names
// the path per type.
var mmqTable = map[quant.Type]string{
	quant.Q8_0: "minfer_mmq_q8_0",
	quant.Q4_0: "minfer_mmq_q4_0",
	quant.Q4_1: "minfer_mmq_q4_1",
	quant.Q5_0: "minfer_mmq_q5_0",
	quant.Q5_1: "minfer_mmq_q5_1",
	quant.Q4_K: "minfer_mmq_q4_k",
	quant.Q5_K: "minfer_mmq_q5_k",
	quant.Q6_K: "minfer_mmq_q6_k",
}

// Launch geometry; these mirror the #defines of cuda/kernels/mmq.cu.
const (
	mmqRows         = 128 // MINFER_MMQ_ROWS: weight rows per block tile (minfer_mmq_<type>)
	mmqRowsSmall    = 64  // MINFER_MMQ_ROWS_SMALL: weight rows per block tile (minfer_mmq_<type>_r64)
	mmqToks         = 64  // MINFER_MMQ_TOKS: tokens per block tile
	mmqKB           = 128 // MINFER_MMQ_KB: k values per stage
	mmqThreads      = 256 // MINFER_MMQ_THREADS
	mmqThreadsSmall = 128 // MINFER_MMQ_THREADS_SMALL
	mmqReduceThr    = 256 // MINFER_MMQ_REDUCE_THREADS

	// mmqReduceKernel adds the split-K partial sums (and the bias).
	mmqReduceKernel = "minfer_mmq_reduce"

	// Blocks resident per SM (the kernels' __launch_bounds__ minimum):
	// 2 of the 256-thread tile, 4 of the 128-thread one.
	mmqBigPerSM   = 2
	mmqSmallPerSM = 4
	// mmqMinSplitStages is the fewest k stages a split-K part runs: below
	// it the partial traffic and the reduce launch outweigh the extra blocks.
	mmqMinSplitStages = 4
	mmqMaxSplits      = 8

	// mmqActChunks is MINFER_MMQ_ACT_CHUNKS: the 16-byte chunks of an
	// activation row's stage (4 Q8_1 blocks) in the async staging.
	mmqActChunks = 10
)

// mmqRawChunks is MinferMmqRaw<T>::chunks: the 16-byte chunks that cover a
// weight row's stage span (small types: the stage's 4 blocks; K-quants:
// the super-block holding the stage) from any address mod 16.
func mmqRawChunks(wtype quant.Type) int {
	span := wtype.BlockBytes()
	if wtype.BlockSize() == quant.QK {
		span *= mmqKB / quant.QK
	}
	return (span + 30) / 16
}

// mmqAsyncSmemBytes is the dynamic shared memory of the async variant of
// wtype with a rows x mmqToks tile (MINFER_MMQ_RAW_BYTES): the raw staging
// of one stage's weight rows and activation rows.
func mmqAsyncSmemBytes(wtype quant.Type, rows int) int {
	return 16 * (rows*mmqRawChunks(wtype) + mmqToks*mmqActChunks)
}

// prepareMMQAsync opts every async MMQ kernel into its dynamic shared
// memory: below the 48 KiB default itself, but with the static tile above
// it, so the attribute is set whatever the size (PrepareMatmul calls it).
func (k *Kernels) prepareMMQAsync() error {
	for wtype := range mmqTable {
		for _, rows := range []int{mmqRows, mmqRowsSmall} {
			name := mmqPlan{rows: rows, splits: 1, async: true}.kernel(wtype)
			f, err := k.Function(name)
			if err != nil {
				return fmt.Errorf("matmul: prepare: %w", err)
			}
			dyn := mmqAsyncSmemBytes(wtype, rows)
			if err := f.SetMaxDynamicSmem(dyn); err != nil {
				return fmt.Errorf("matmul: prepare %s: opt-in to %d bytes of dynamic shared memory: %w", name, dyn, err)
			}
			k.setOptIn(name, dyn)
		}
	}
	return nil
}

// mmqSmemBytes is the static shared memory of a rows x mmqToks tile
// (MINFER_MMQ_SMEM_BYTES): the int8 weight and activation tiles (rows
// padded to KB + 16 bytes), three per-(row, block) weight arrays and two
// per-(token, block) activation arrays of 4 bytes.
func mmqSmemBytes(rows int) int {
	nb := mmqKB / quant.QK
	return (rows+mmqToks)*(mmqKB+16) + 3*rows*nb*4 + 2*mmqToks*nb*4
}

// mmqPlan is one MMQ launch's geometry: the weight-row tile (mmqRows or
// mmqRowsSmall), the number of split-K parts (1: none), and whether the
// async variant (MINFER_MMQ_ASYNC: cp.async staging one stage ahead) runs.
type mmqPlan struct {
	rows, splits int
	async        bool
	// repacked: the weight is the repacked copy (MINFER_ONE_COPY):
	// minfer_mmq_<t>r, Q6_K only, no async variant.
	repacked bool
}

// mmqTableR names the MMQ kernels over the repacked copy (mmqPlan.repacked):
// Q6_K's alone. A Q8_0 prefill over its one copy runs the f16 GEMM
// (gemm16On); its int8 form there went with MINFER_MMQ_F16.
var mmqTableR = map[quant.Type]string{quant.Q6_K: "minfer_mmq_q6_kr"}

// mmqPlanFor picks the tile and split-K of an n x kDim weight over nt
// tokens on a device of sms SMs: a pure function of the shape (so a
// captured graph replays the launches a direct run makes, bit for bit).
//   - the 128 x 64 tile when its grid has at least 1.5 blocks per SM;
//   - else the 64 x 64 tile (twice the blocks, 4 resident per SM) when that
//     grid reaches 1.5 blocks per SM;
//   - else the 64 x 64 tile split over k into S parts, S the most that keeps
//     the grid within one wave (4 blocks per SM), each part at least
//     mmqMinSplitStages stages of 128, S <= mmqMaxSplits; minfer_mmq_reduce
//     then adds the parts in a fixed order. S < 2: no split.
func mmqPlanFor(n, nt, kDim, sms int) mmqPlan {
	sms = max(sms, 1)
	tt := (nt + mmqToks - 1) / mmqToks
	if big := (n + mmqRows - 1) / mmqRows * tt; 2*big >= 3*sms {
		return mmqPlan{rows: mmqRows, splits: 1}
	}
	small := (n + mmqRowsSmall - 1) / mmqRowsSmall * tt
	if 2*small >= 3*sms {
		return mmqPlan{rows: mmqRowsSmall, splits: 1}
	}
	stages := (kDim + mmqKB - 1) / mmqKB
	sp := min(mmqSmallPerSM*sms/small, stages/mmqMinSplitStages, mmqMaxSplits)
	return mmqPlan{rows: mmqRowsSmall, splits: max(sp, 1)}
}

// kernel is the plan's kernel name for wtype ("" when the type has no MMQ
// kernel).
func (p mmqPlan) kernel(wtype quant.Type) string {
	name, ok := mmqTable[wtype]
	if p.repacked {
		name, ok = mmqTableR[wtype]
	}
	if !ok || (p.repacked && p.async) {
		return ""
	}
	if p.async {
		name += "_async"
	}
	if p.rows == mmqRowsSmall {
		return name + "_r64"
	}
	return name
}

// MMQKernels names the kernels an MMQ matmul of wtype (n rows of kDim)
// over nt tokens launches on a device of sms SMs after the activation is
// quantized: the tile variant (its async form when async is set), then
// minfer_mmq_reduce when it splits k. For tests and reports.
func MMQKernels(wtype quant.Type, nt, kDim, n, sms int, async bool) []string {
	p := mmqPlanFor(n, nt, kDim, sms)
	p.async = async
	if p.splits > 1 {
		return []string{p.kernel(wtype), mmqReduceKernel}
	}
	return []string{p.kernel(wtype)}
}

// mmqPartOffset is where the split-K partial sums start in the MMQ scratch:
// after the Q8_1 activation, 256-byte aligned.
func mmqPartOffset(kDim, nt int) uint64 { return (ActQ8Bytes(kDim, nt) + 255) &^ 255 }

// MMQScratchBytes is the scratch an MMQ matmul of an n x kDim weight over
// nt tokens needs on a device of sms SMs: the Q8_1 activation, then (when
// the plan splits k) splits x nt x n f32 partial sums. 0 for a k that is
// not a multiple of 32.
func MMQScratchBytes(kDim, nt, n, sms int) uint64 {
	act := ActQ8Bytes(kDim, nt)
	if act == 0 {
		return 0
	}
	if p := mmqPlanFor(n, nt, kDim, sms); p.splits > 1 {
		return mmqPartOffset(kDim, nt) + uint64(p.splits)*uint64(nt)*uint64(n)*4
	}
	return act
}

// mmqWeightAlign is the byte alignment the MMQ kernel of wtype (its async
// variant when async) needs for the weight pointer: the plain Q4_K / Q5_K
// kernels read their quants with 16-byte loads (the blocks, 144 and 176
// bytes, are 16-byte multiples), their async variants and Q4_1 / Q5_1
// 4-byte words, the others 2-byte halves.
func mmqWeightAlign(wtype quant.Type, async bool) uint64 {
	switch wtype {
	case quant.Q4_K, quant.Q5_K:
		if !async {
			return 16
		}
		return 4
	case quant.Q4_1, quant.Q5_1:
		return 4
	}
	return 2
}

// mmqOn reports whether a matmul of wtype over nt tokens runs the MMQ
// kernel: a prefill shape (nt > mmvMaxNT) that would otherwise run the f16
// GEMM (NoPrefillGEMM keeps the mmv path), the MMQ lever on and the type
// has a kernel. The scratch is checked at launch (a missing one is an
// error, not a fallback).
func mmqOn(wtype quant.Type, nt int, opts MatMulOptions) bool {
	if !opts.MMQ || nt <= mmvMaxNT || opts.NoPrefillGEMM {
		return false
	}
	_, ok := mmqTable[wtype]
	return ok
}

// launchMMQ quantizes the nt activation rows x to Q8_1 into opts.MMQAct,
// then runs the MMQ kernel over them (all on s, so a capture records all).
func (k *Kernels) launchMMQ(s *driver.Stream, name string, out, x, w driver.DevicePtr, wtype quant.Type,
	bias driver.DevicePtr, nt, kDim, n int, opts MatMulOptions) error {
	if err := k.checkMMQ(name, w, wtype, nt, kDim, n, opts); err != nil {
		return err
	}
	if err := k.QuantizeQ8_1(s, opts.MMQAct, x, kDim, nt); err != nil {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d: %w", name, nt, kDim, n, err)
	}
	return k.runMMQ(s, out, w, wtype, false, bias, nt, kDim, n, opts)
}

// checkMMQ validates the scratch (MMQScratchBytes, 4-byte aligned), the
// weight alignment and the token grid of one MMQ matmul.
func (k *Kernels) checkMMQ(name string, w driver.DevicePtr, wtype quant.Type, nt, kDim, n int, opts MatMulOptions) error {
	need := MMQScratchBytes(kDim, nt, n, k.dev.Attr.SMCount)
	if need == 0 || opts.MMQActBytes < need || opts.MMQAct == 0 || uint64(opts.MMQAct)%4 != 0 {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d: activation scratch %v of %d bytes (needs %d bytes, 4-byte aligned)",
			name, nt, kDim, n, opts.MMQAct, opts.MMQActBytes, need)
	}
	if a := mmqWeightAlign(wtype, opts.MMQAsync); uint64(w)%a != 0 {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d: weight pointer %v is not %d-byte aligned", name, nt, kDim, n, w, a)
	}
	if gy := (nt + mmqToks - 1) / mmqToks; gy > maxGridY {
		return fmt.Errorf("matmul %s: nt=%d needs %d token tiles, above the grid limit %d", name, nt, gy, maxGridY)
	}
	return nil
}

// runMMQ runs the planned MMQ kernel (and the split-K reduce) over the
// Q8_1 activation already at opts.MMQAct; the caller has run checkMMQ.
func (k *Kernels) runMMQ(s *driver.Stream, out, w driver.DevicePtr, wtype quant.Type, repacked bool, bias driver.DevicePtr,
	nt, kDim, n int, opts MatMulOptions) error {
	p := mmqPlanFor(n, nt, kDim, k.dev.Attr.SMCount)
	p.async, p.repacked = opts.MMQAsync, repacked
	name := p.kernel(wtype)
	if name == "" {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d: no MMQ kernel (repacked=%v async=%v)", wtype, nt, kDim, n, repacked, p.async)
	}
	threads := uint32(mmqThreads)
	if p.rows == mmqRowsSmall {
		threads = mmqThreadsSmall
	}
	dyn := 0
	if p.async {
		if dyn = mmqAsyncSmemBytes(wtype, p.rows); k.optedIn(name) < dyn {
			return fmt.Errorf("matmul %s nt=%d k=%d n=%d: needs %d bytes of dynamic shared memory and was not opted in "+
				"(call Kernels.PrepareMatmul at init, before any capture window)", name, nt, kDim, n, dyn)
		}
	}
	grid := [3]uint32{uint32((n + p.rows - 1) / p.rows), uint32((nt + mmqToks - 1) / mmqToks), uint32(p.splits)}
	block := [3]uint32{threads, 1, 1}
	dst, kb := out, bias
	if p.splits > 1 {
		dst, kb = opts.MMQAct.Add(mmqPartOffset(kDim, nt)), 0
	}
	if err := k.launch(s, name, grid, block, uint32(dyn), dst, opts.MMQAct, w, kb, int32(kDim), int32(n), int32(nt)); err != nil {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d splits=%d: %w", name, nt, kDim, n, p.splits, err)
	}
	if p.splits == 1 {
		return nil
	}
	total := nt * n
	if total > math.MaxInt32 {
		return fmt.Errorf("matmul %s nt=%d n=%d: %d outputs exceed the reduce's int32 range", name, nt, n, total)
	}
	rgrid := [3]uint32{uint32((total + mmqReduceThr - 1) / mmqReduceThr), 1, 1}
	if err := k.launch(s, mmqReduceKernel, rgrid, [3]uint32{mmqReduceThr, 1, 1}, 0, out, dst, bias,
		int32(n), int32(total), int32(p.splits)); err != nil {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d: %s: %w", name, nt, kDim, n, mmqReduceKernel, err)
	}
	return nil
}

// MatMulPreQ8_1 is the MMQ matmul of a prefill activation already
// quantized: opts.MMQAct holds QuantizeQ8_1(x, kDim, nt) and is at least
// MMQScratchBytes(kDim, nt, n, SMs) bytes (the split-K partials follow the
// activation there, so matmuls that share it run one after another on s).
// Several matmuls of one input (fused q/k/v, gate/up) quantize it once and
// call this per weight; each gives bitwise what MatMul gives. wtype must
// have an MMQ kernel and opts.MMQ must be set.
func (k *Kernels) MatMulPreQ8_1(s *driver.Stream, out, w driver.DevicePtr, wtype quant.Type, bias driver.DevicePtr,
	nt, kDim, n int, opts MatMulOptions) error {
	if err := validateMatMul(wtype, nt, kDim, n); err != nil {
		return err
	}
	if !mmqOn(wtype, nt, opts) {
		return fmt.Errorf("matmul_pre_q8_1 %s nt=%d k=%d n=%d: not an MMQ shape (MMQ=%v, nt must exceed %d)",
			wtype, nt, kDim, n, opts.MMQ, mmvMaxNT)
	}
	if out == 0 || w == 0 || uint64(out)%4 != 0 || uint64(bias)%4 != 0 {
		return fmt.Errorf("matmul_pre_q8_1 %s nt=%d k=%d n=%d: null or misaligned pointer (out=%v w=%v bias=%v)",
			wtype, nt, kDim, n, out, w, bias)
	}
	if err := k.checkMMQ(mmqTable[wtype], w, wtype, nt, kDim, n, opts); err != nil {
		return err
	}
	return k.runMMQ(s, out, w, wtype, false, bias, nt, kDim, n, opts)
}

// MatMulPreQ8_1R is MatMulPreQ8_1 over the repacked copy w (RepackHost's
// layout of the n x kDim wtype matrix, 16-byte aligned; MINFER_ONE_COPY):
// minfer_mmq_<t>r, bitwise MatMulPreQ8_1 of the GGUF bytes. Q6_K only; no
// async variant (opts.MMQAsync is an error).
func (k *Kernels) MatMulPreQ8_1R(s *driver.Stream, out, w driver.DevicePtr, wtype quant.Type, bias driver.DevicePtr,
	nt, kDim, n int, opts MatMulOptions) error {
	name, ok := mmqTableR[wtype]
	if !ok || opts.MMQAsync {
		return fmt.Errorf("matmul_pre_q8_1r %s nt=%d k=%d n=%d: no repacked MMQ kernel (Q6_K, not async; async=%v)",
			wtype, nt, kDim, n, opts.MMQAsync)
	}
	if err := validateMatMul(wtype, nt, kDim, n); err != nil {
		return err
	}
	if !mmqOn(wtype, nt, opts) {
		return fmt.Errorf("matmul_pre_q8_1r %s nt=%d k=%d n=%d: not an MMQ shape (MMQ=%v, nt must exceed %d)",
			wtype, nt, kDim, n, opts.MMQ, mmvMaxNT)
	}
	if out == 0 || w == 0 || uint64(w)%mmvqrAlign != 0 || uint64(out)%4 != 0 || uint64(bias)%4 != 0 {
		return fmt.Errorf("matmul_pre_q8_1r %s nt=%d k=%d n=%d: null or misaligned pointer (out=%v w=%v, %d-byte aligned, bias=%v)",
			wtype, nt, kDim, n, out, w, mmvqrAlign, bias)
	}
	if err := k.checkMMQ(name, w, wtype, nt, kDim, n, opts); err != nil {
		return err
	}
	return k.runMMQ(s, out, w, wtype, true, bias, nt, kDim, n, opts)
}

// ensureMMQScratch grows the backend's Q8_1 prefill scratch so a matmul of
// an n x kDim wtype weight over nt tokens fits (activation and split-K
// partials, MMQScratchBytes), when that matmul takes the MMQ path; with f16
// (the f16 GEMM's route, gemm16On) it holds the f16 rows too
// (Gemm16ActBytes). It runs
// on the host while a node is planned (before any capture window opens); a
// growth is a pool allocation, so it moves the pool generation and no stale
// graph replays. It doubles, so a session grows it a handful of times at
// most.
func (b *Backend) ensureMMQScratch(wtype quant.Type, nt, kDim, n int, f16 bool) error {
	if !mmqOn(wtype, nt, b.mm) {
		return nil
	}
	need := MMQScratchBytes(kDim, nt, n, b.dev.Attr.SMCount)
	if need == 0 {
		return fmt.Errorf("mmq scratch: k=%d is not a multiple of %d", kDim, quant.QK)
	}
	if f16 {
		need = max(need, Gemm16ActBytes(kDim, nt))
	}
	if b.mm.MMQActBytes >= need {
		return nil
	}
	size := max(need, 2*b.mm.MMQActBytes)
	size = (size + 255) &^ 255
	return b.dev.Do(func() error {
		p, err := b.pool.raw(MemWorkspace, size, fmt.Sprintf("MMQ Q8_1 activation scratch (nt=%d k=%d n=%d)", nt, kDim, n))
		if err != nil {
			return err
		}
		b.mm.MMQAct, b.mm.MMQActBytes = p, size
		return nil
	})
}

// quantizeMMQ quantizes the nt activation rows x (k values each) into the
// backend's MMQ scratch: the shared first half of the fused ops' prefill
// matmuls (runPreQ8 is the second).
func (b *Backend) quantizeMMQ(x driver.DevicePtr, k, nt int) error {
	if need := ActQ8Bytes(k, nt); need == 0 || b.mm.MMQActBytes < need {
		return fmt.Errorf("MMQ Q8_1 activation scratch of %d bytes, k=%d nt=%d needs %d", b.mm.MMQActBytes, k, nt, need)
	}
	return b.k.QuantizeQ8_1(b.s, b.mm.MMQAct, x, k, nt)
}

// runPreQ8 runs one prefill matmul of m over the activation quantizeMMQ
// left in the scratch.
func (b *Backend) runPreQ8(nt int, m matmulPlan) error {
	if m.w.rpOnly {
		return b.k.MatMulPreQ8_1R(b.s, m.out, m.w.rp, m.w.typ, m.bias, nt, m.w.rowLen, m.w.rows, b.mm)
	}
	return b.k.MatMulPreQ8_1(b.s, m.out, m.w.ptr, m.w.typ, m.bias, nt, m.w.rowLen, m.w.rows, b.mm)
}
