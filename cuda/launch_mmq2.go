package cuda

import (
	"fmt"

	"github.com/minfer-go/minfer/engine/quant"
)

// mmq2Table names the software-pipelined MMQ kernels (cuda/kernels/mmq2.cu,
// lever MINFER_MMQ_V2): the same types, tiles, split-K plan and per-output
// arithmetic as mmqTable's, with two shared-memory stages so the next k
// stage's global reads overlap the current stage's MMAs.
var mmq2Table = map[quant.Type]string{
	quant.Q8_0: "minfer_mmq2_q8_0",
	quant.Q4_0: "minfer_mmq2_q4_0",
	quant.Q4_1: "minfer_mmq2_q4_1",
	quant.Q5_0: "minfer_mmq2_q5_0",
	quant.Q5_1: "minfer_mmq2_q5_1",
	quant.Q4_K: "minfer_mmq2_q4_k",
	quant.Q5_K: "minfer_mmq2_q5_k",
	quant.Q6_K: "minfer_mmq2_q6_k",
}

// mmq2Stages mirrors MINFER_MMQ2_STAGES: shared-memory stage buffers.
const mmq2Stages = 2

// mmq2SmemBytes is the dynamic shared memory of the v2 kernel of a rows x
// mmqToks tile: mmq2Stages stage buffers of v1's layout
// (MINFER_MMQ2_STAGE_BYTES = MINFER_MMQ_SMEM_BYTES): 71680 bytes for the
// 128-row tile (opted in above 48 KiB), 47104 for the 64-row one.
func mmq2SmemBytes(rows int) int { return mmq2Stages * mmqSmemBytes(rows) }

// kernel2 is the plan's v2 kernel name for wtype ("" when the type has no
// MMQ kernel).
func (p mmqPlan) kernel2(wtype quant.Type) string {
	name, ok := mmq2Table[wtype]
	if !ok {
		return ""
	}
	if p.rows == mmqRowsSmall {
		return name + "_r64"
	}
	return name
}

// mmqPathName is the name MatMulPath reports for an MMQ matmul of wtype:
// the v1 or (opts.MMQV2) v2 kernel family.
func mmqPathName(wtype quant.Type, opts MatMulOptions) string {
	if opts.MMQV2 {
		return mmq2Table[wtype]
	}
	return mmqTable[wtype]
}

// MMQKernelsOpts is MMQKernels for the kernel family opts selects (v2 with
// opts.MMQV2): the tile variant, then minfer_mmq_reduce when the plan
// splits k. For tests and reports.
func MMQKernelsOpts(wtype quant.Type, nt, kDim, n, sms int, opts MatMulOptions) []string {
	ks := MMQKernels(wtype, nt, kDim, n, sms)
	if opts.MMQV2 {
		ks[0] = mmqPlanFor(n, nt, kDim, sms).kernel2(wtype)
	}
	return ks
}

// PrepareMMQ2 opts the v2 kernels into their dynamic shared memory (the
// 128-row tile's two stages exceed the 48 KiB default). Kernels.PrepareMatmul
// calls it, once at init, inside dev.Do and before any capture window; the
// launch refuses an un-opted kernel.
func (k *Kernels) PrepareMMQ2() error {
	for _, t := range MatMulTypes() {
		base, ok := mmq2Table[t]
		if !ok {
			continue
		}
		for _, rows := range []int{mmqRows, mmqRowsSmall} {
			name := mmqPlan{rows: rows}.kernel2(t)
			smem := mmq2SmemBytes(rows)
			f, err := k.Function(name)
			if err != nil {
				return fmt.Errorf("mmq2: prepare %s: %w", base, err)
			}
			if smem > defaultDynSmem {
				if err := f.SetMaxDynamicSmem(smem); err != nil {
					return fmt.Errorf("mmq2: prepare %s: opt-in to %d bytes of dynamic shared memory: %w", name, smem, err)
				}
			}
			k.setOptIn(name, smem)
		}
	}
	return nil
}

// mmqLaunchKernel is the kernel and dynamic shared memory runMMQ launches
// for plan p: v1's static-smem kernel, or with opts.MMQV2 the v2 kernel,
// which must have been opted in (PrepareMMQ2) when above 48 KiB.
func (k *Kernels) mmqLaunchKernel(p mmqPlan, wtype quant.Type, opts MatMulOptions) (string, uint32, error) {
	if !opts.MMQV2 {
		return p.kernel(wtype), 0, nil
	}
	name, smem := p.kernel2(wtype), mmq2SmemBytes(p.rows)
	if name == "" {
		return "", 0, fmt.Errorf("mmq2: weight type %s has no v2 kernel", wtype)
	}
	if smem > defaultDynSmem && k.optedIn(name) < smem {
		return "", 0, fmt.Errorf("mmq2: %s needs %d bytes of dynamic shared memory and was not opted in "+
			"(call Kernels.PrepareMatmul at init, before any capture window)", name, smem)
	}
	return name, uint32(smem), nil
}
