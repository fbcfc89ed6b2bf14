package cuda

// mmvq_split.go: MINFER_MMVQ_SPLIT. Decode (nt = 1) MMVQ matmuls of
// matrices with few rows run MINFER_MMVQS_WARPS warps per output row
// (minfer_mmvq*_s_*: cuda/kernels/mmvq_split.cu) instead of one.
//
// The rule, with the H200 ncu evidence (reports/perf/ncu-2026-11-29-3eb617d):
// the one-warp kernels launch ceil(rows / 4) blocks of 4 warps. 7B Q8_0's
// o-proj and ffn_down (3,584 rows: 896 blocks, 27 warps per SM, 42% achieved
// occupancy) ran at 52% of the HBM floor and its fused q/k/v (4,608 rows:
// 1,152 blocks) at 36%, while the fused gate/up (4,736 blocks) reached 86%
// and the lm_head (9,504 blocks) the floor: below about a dozen one-warp
// blocks per SM the rows have too few loads in flight (latency-bound). So a
// decode matmul whose one-warp grid would be under MMVQSplitMaxBlocksPerSM
// blocks per SM (1,584 on the 132-SM H200) launches the split form; a
// taller one (gate/up, lm_head) keeps the one-warp kernel. The split form
// sums the same per-unit values in another f32 order (tolerance class:
// accumulation order). The fused FFN keeps its kernel.

import (
	"fmt"
	"math"
	"strings"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/quant"
)

// Geometry of cuda/kernels/mmvq_split.cu (TestMMVQSplitGeometry_MatchesKernelSource
// pins these to its #defines): one output row per block.
const (
	mmvqsWarps   = 4   // MINFER_MMVQS_WARPS: warps per output row (and per block)
	mmvqsThreads = 128 // MINFER_MMVQS_THREADS

	// MMVQSplitMaxBlocksPerSM: a decode matmul whose one-warp grid
	// (ceil(rows / 4) blocks) is below this many blocks per SM splits.
	MMVQSplitMaxBlocksPerSM = 12
)

// mmvqSplitPick is the rule on its own: rows output rows on a device of
// sms SMs split when the one-warp grid would have fewer than
// MMVQSplitMaxBlocksPerSM blocks per SM.
func mmvqSplitPick(rows, sms int) bool {
	return rows > 0 && sms > 0 && (rows+mmvqRows-1)/mmvqRows < MMVQSplitMaxBlocksPerSM*sms
}

// MMVQSplit reports whether a decode MMVQ matmul (or fused q/k/v) of rows
// output rows runs the split form under opts on this device.
func (k *Kernels) MMVQSplit(rows int, opts MatMulOptions) bool {
	return opts.MMVQSplit && k.dev != nil && mmvqSplitPick(rows, k.dev.Attr.SMCount)
}

// mmvqSplitKernel names the split kernel of form "" (plain), "res" or
// "qkv" for wtype, over the repacked copy or the GGUF blocks ("" when the
// type has none).
func mmvqSplitKernel(wtype quant.Type, form string, repacked bool) string {
	prefix, sfx := "minfer_mmvq_", ""
	if repacked {
		s, ok := mmvqrTypes[wtype]
		if !ok {
			return ""
		}
		prefix, sfx = "minfer_mmvqr_", s
	} else {
		name, ok := mmvqTable[wtype]
		if !ok {
			return ""
		}
		sfx = strings.TrimPrefix(name, "minfer_mmvq_")
	}
	switch form {
	case "":
		return prefix + "s_" + sfx
	case "res", "qkv":
		return prefix + form + "_s_" + sfx
	}
	return ""
}

// mmvqsLaunch launches one split kernel of rows output rows (one block
// each) with args.
func (k *Kernels) mmvqsLaunch(s *driver.Stream, name string, rows int, args ...any) error {
	if name == "" || rows < 1 || rows > math.MaxInt32 {
		return fmt.Errorf("mmvq split: no kernel %q or bad row count %d", name, rows)
	}
	grid := [3]uint32{uint32(rows), 1, 1}
	block := [3]uint32{mmvqsThreads, 1, 1}
	return k.launch(s, name, grid, block, 0, args...)
}

// mmvqFamilyOf is the one-warp family whose checks the split form of that
// weight layout applies: the repacked copy's or the GGUF bytes'.
func mmvqFamilyOf(repacked bool) mmvqFamily {
	if repacked {
		return mmvqrFam
	}
	return mmvqFam
}

// MatMulQ8_1S is MatMulQ8_1 (res = 0) or MatMulQ8_1Res (res the residual,
// possibly out itself) in the split form (minfer_mmvq_s_<type> /
// minfer_mmvq_res_s_<type>): the same per-unit values summed by 4 warps.
func (k *Kernels) MatMulQ8_1S(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w driver.DevicePtr,
	wtype quant.Type, bias, res driver.DevicePtr, kDim, n int) error {
	return k.matMulSplit("matmul_q8_1_split", s, out, xq, xqBytes, w, wtype, bias, res, kDim, n, false)
}

// MatMulQ8_1RS is MatMulQ8_1R (res = 0) or MatMulQ8_1RRes over the repacked
// copy w in the split form (minfer_mmvqr_s_<type> / minfer_mmvqr_res_s_<type>).
func (k *Kernels) MatMulQ8_1RS(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w driver.DevicePtr,
	wtype quant.Type, bias, res driver.DevicePtr, kDim, n int) error {
	return k.matMulSplit("matmul_q8_1r_split", s, out, xq, xqBytes, w, wtype, bias, res, kDim, n, true)
}

// matMulSplit is MatMulQ8_1S / MatMulQ8_1RS: the call checked as the
// one-warp kernels of that weight layout check it (checkCall), the residual
// when given, then the plain or _res_ split kernel of that layout.
func (k *Kernels) matMulSplit(op string, s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w driver.DevicePtr,
	wtype quant.Type, bias, res driver.DevicePtr, kDim, n int, repacked bool) error {
	if err := mmvqFamilyOf(repacked).checkCall(op, out, xq, xqBytes, w, bias, wtype, kDim, n); err != nil {
		return err
	}
	if res != 0 {
		if err := checkRes(op, wtype, out, res, kDim, n); err != nil {
			return err
		}
	}
	form, args := matVecArgs(out, xq, w, bias, res, kDim, n)
	name := mmvqSplitKernel(wtype, form, repacked)
	if err := k.mmvqsLaunch(s, name, n, args...); err != nil {
		return fmt.Errorf("matmul %s nt=1 k=%d n=%d: %w", name, kDim, n, err)
	}
	return nil
}

// MatMulQ8_1QKVS is MatMulQ8_1QKV (repacked false) or MatMulQ8_1QKVR
// (repacked true: w are the repacked copies) in the split form
// (minfer_mmvq[r]_qkv_s_<type>).
func (k *Kernels) MatMulQ8_1QKVS(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w [3]driver.DevicePtr,
	wtype quant.Type, bias [3]driver.DevicePtr, kDim int, n [3]int, repacked bool) error {
	const op = "matmul_q8_1_qkv_split"
	total, err := checkQKV(op, mmvqFamilyOf(repacked), out, xq, xqBytes, w, bias, wtype, kDim, n)
	if err != nil {
		return err
	}
	name := mmvqSplitKernel(wtype, "qkv", repacked)
	if err := k.mmvqsLaunch(s, name, total, qkvArgs(out, xq, w, bias, kDim, n)...); err != nil {
		return fmt.Errorf("matmul %s nt=1 k=%d n=%v: %w", name, kDim, n, err)
	}
	return nil
}
