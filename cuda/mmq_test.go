package cuda

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/quant"
)

// TestMMQGeometry_MatchesKernelSource pins the launcher's MMQ constants to
// the #defines of cuda/kernels/mmq.cu, checks every mmqTable kernel is
// instantiated there, and that the static shared memory fits the 48 KiB a
// kernel gets without an opt-in.
func TestMMQGeometry_MatchesKernelSource(t *testing.T) {
	defs, src := kernelDefines(t, "kernels/mmq.cu")
	for name, want := range map[string]int{"MINFER_MMQ_ROWS": mmqRows, "MINFER_MMQ_TOKS": mmqToks,
		"MINFER_MMQ_KB": mmqKB, "MINFER_MMQ_THREADS": mmqThreads, "MINFER_MMQ_Q8_1_BYTES": q8_1BlockBytes,
		"MINFER_MMQ_ROWS_SMALL": mmqRowsSmall, "MINFER_MMQ_THREADS_SMALL": mmqThreadsSmall,
		"MINFER_MMQ_REDUCE_THREADS": mmqReduceThr} {
		if defs[name] != want {
			t.Errorf("mmq.cu %s = %d, launcher has %d", name, defs[name], want)
		}
	}
	if mmqThreads != 8*32 || mmqRows != 4*32 || mmqToks != 2*32 {
		t.Errorf("the kernel's 4 x 2 warp grid of 32 x 32 tiles needs 256 threads, 128 rows, 64 tokens; have %d, %d, %d",
			mmqThreads, mmqRows, mmqToks)
	}
	if mmqThreadsSmall != 4*32 || mmqRowsSmall != 2*32 {
		t.Errorf("the _r64 kernel's 2 x 2 warp grid needs 128 threads and 64 rows; have %d, %d", mmqThreadsSmall, mmqRowsSmall)
	}
	for _, rows := range []int{mmqRows, mmqRowsSmall} {
		if s := mmqSmemBytes(rows); s > defaultDynSmem {
			t.Errorf("mmq %d-row tile: static shared memory %d bytes > %d", rows, s, defaultDynSmem)
		}
	}
	if defs["MINFER_MMQ_ACT_CHUNKS"] != mmqActChunks || mmqActChunks != (4*q8_1BlockBytes+30)/16 {
		t.Errorf("mmq.cu MINFER_MMQ_ACT_CHUNKS = %d, launcher %d, a 144-byte span needs %d", defs["MINFER_MMQ_ACT_CHUNKS"], mmqActChunks, (4*q8_1BlockBytes+30)/16)
	}
	// The async variants' staging: every span covered from any address mod
	// 16, and static + dynamic shared memory of the blocks the launch bounds
	// ask for fits an H200 SM (227 KiB a block's opt-in, 228 KiB an SM).
	for ty := range mmqTable {
		span := ty.BlockBytes()
		if ty.BlockSize() == quant.QK {
			span *= mmqKB / quant.QK
		}
		if c := mmqRawChunks(ty); 16*c < span+15 || 16*(c-1) >= span+15 {
			t.Errorf("%s: %d chunks for a %d-byte span", ty, c, span)
		}
		for _, v := range []struct{ rows, perSM int }{{mmqRows, mmqBigPerSM}, {mmqRowsSmall, mmqSmallPerSM}} {
			if total := mmqSmemBytes(v.rows) + mmqAsyncSmemBytes(ty, v.rows); v.perSM*total > 228*1024 {
				t.Errorf("%s async %d-row tile: %d bytes of shared memory a block, %d blocks do not fit an SM", ty, v.rows, total, v.perSM)
			}
		}
	}
	for _, m := range []string{"minfer_mmq_##name##_r64(", "minfer_mmq_body<T, 4, 2, ASYNC>", "minfer_mmq_body<T, 2, 2, ASYNC>",
		"MINFER_MMQ_TILES(name, T, false, nullptr)", "MINFER_MMQ_TILES(name##_async, T, true, MINFER_MMQ_DYN)",
		"__launch_bounds__(MINFER_MMQ_THREADS, 2)", "__launch_bounds__(MINFER_MMQ_THREADS_SMALL, 4)", mmqReduceKernel + "("} {
		if !strings.Contains(src, m) {
			t.Errorf("mmq.cu has no %q", m)
		}
	}
	for ty, name := range mmqTable {
		if m := "MINFER_MMQ_KERNEL(" + strings.TrimPrefix(name, "minfer_mmq_") + ","; !strings.Contains(src, m) {
			t.Errorf("%s: mmq.cu has no %s", ty, m)
		}
		if _, ok := matmulTable[ty]; !ok {
			t.Errorf("%s has an MMQ kernel but no matmulTable entry", ty)
		}
	}
	for ty, name := range mmqTableR {
		if m := "MINFER_MMQ_TILES(" + strings.TrimPrefix(name, "minfer_mmq_") + ", MINFER_MMQ_T_"; !strings.Contains(src, m) || !MMVQRepackable(ty) {
			t.Errorf("%s: mmq.cu has no %s (or the type has no repacked layout)", ty, m)
		}
	}
}

// TestMatMulPath_MMQIsPrefillOnlyAndLevered: with MMQ set, nt >= 9 of every
// quantized type runs minfer_mmq_<type> (class activation-quantization-q8_1);
// nt <= 8, MMQ unset or NoPrefillGEMM keep their old paths; F32 / F16 /
// BF16 keep the f16 GEMM.
func TestMatMulPath_MMQIsPrefillOnlyAndLevered(t *testing.T) {
	on := MatMulOptions{MMQ: true}
	for _, ty := range MatMulTypes() {
		ks := matmulTable[ty]
		name, has := mmqTable[ty]
		for _, nt := range []int{9, 64, 512} {
			got := MatMulPath(ty, nt, on)
			switch {
			case has && got != name:
				t.Errorf("%s nt=%d MMQ: path %q, want %q", ty, nt, got, name)
			case !has && got != ks.gemm:
				t.Errorf("%s nt=%d MMQ: path %q, want the GEMM %q", ty, nt, got, ks.gemm)
			}
			if has {
				if c := MatMulTolerance(ty, nt, on); c != "activation-quantization-q8_1" {
					t.Errorf("%s nt=%d MMQ: class %q", ty, nt, c)
				}
			}
			if got := MatMulPath(ty, nt, MatMulOptions{}); got != ks.gemm {
				t.Errorf("%s nt=%d no MMQ: path %q, want %q", ty, nt, got, ks.gemm)
			}
			if got := MatMulPath(ty, nt, MatMulOptions{MMQ: true, NoPrefillGEMM: true}); got != ks.mmv {
				t.Errorf("%s nt=%d MMQ+NoPrefillGEMM: path %q, want %q", ty, nt, got, ks.mmv)
			}
		}
		if got := MatMulPath(ty, mmvMaxNT, on); got == name && has {
			t.Errorf("%s nt=%d MMQ: path %q (MMQ is prefill-only)", ty, mmvMaxNT, got)
		}
	}
	for _, ty := range []quant.Type{quant.Q8_0, quant.Q5_0, quant.Q4_K, quant.Q6_K} {
		if _, ok := mmqTable[ty]; !ok {
			t.Errorf("%s (qwen2 Q4_K_M / Q8_0 weights) has no MMQ kernel", ty)
		}
	}
}

// TestMMQPlan_PicksEachVariantAsPureFunctionOfShape pins the launcher's
// tile / split-K choice on a 132-SM H200 for the qwen2-0.5b, qwen3-0.6b and
// qwen2-7b prefill shapes (nt = 512), shows every variant is chosen for
// some shape, and that the plan is a pure function of the shape (asked
// twice, the same answer) whose splits each run at least
// mmqMinSplitStages stages and fit one wave.
func TestMMQPlan_PicksEachVariantAsPureFunctionOfShape(t *testing.T) {
	const sms, nt = 132, 512
	cases := []struct {
		name     string
		n, k     int
		want     mmqPlan
		kernels  []string
		scratchX uint64 // scratch beyond the Q8_1 activation
	}{
		{"0.5b q/o 896x896", 896, 896, mmqPlan{rows: 64, splits: 1}, []string{"minfer_mmq_q8_0_r64"}, 0},
		{"0.5b k/v 128x896", 128, 896, mmqPlan{rows: 64, splits: 1}, []string{"minfer_mmq_q8_0_r64"}, 0},
		{"0.5b gate/up 4864x896", 4864, 896, mmqPlan{rows: 128, splits: 1}, []string{"minfer_mmq_q8_0"}, 0},
		{"0.5b down 896x4864", 896, 4864, mmqPlan{rows: 64, splits: 4}, []string{"minfer_mmq_q8_0_r64", mmqReduceKernel}, 4 * nt * 896 * 4},
		{"0.6b q 2048x1024", 2048, 1024, mmqPlan{rows: 64, splits: 1}, []string{"minfer_mmq_q8_0_r64"}, 0},
		{"0.6b k/v 1024x1024", 1024, 1024, mmqPlan{rows: 64, splits: 2}, []string{"minfer_mmq_q8_0_r64", mmqReduceKernel}, 2 * nt * 1024 * 4},
		{"0.6b o 1024x2048", 1024, 2048, mmqPlan{rows: 64, splits: 4}, []string{"minfer_mmq_q8_0_r64", mmqReduceKernel}, 4 * nt * 1024 * 4},
		{"7b q/o 3584x3584", 3584, 3584, mmqPlan{rows: 128, splits: 1}, []string{"minfer_mmq_q8_0"}, 0},
		{"7b k/v 512x3584", 512, 3584, mmqPlan{rows: 64, splits: 7}, []string{"minfer_mmq_q8_0_r64", mmqReduceKernel}, 7 * nt * 512 * 4},
		{"7b down 3584x18944", 3584, 18944, mmqPlan{rows: 128, splits: 1}, []string{"minfer_mmq_q8_0"}, 0},
	}
	seen := map[mmqPlan]bool{}
	for _, c := range cases {
		got := mmqPlanFor(c.n, nt, c.k, sms)
		if again := mmqPlanFor(c.n, nt, c.k, sms); again != got {
			t.Errorf("%s: plan %+v then %+v", c.name, got, again)
		}
		if got != c.want {
			t.Errorf("%s: plan %+v, want %+v", c.name, got, c.want)
		}
		if ks := MMQKernels(quant.Q8_0, nt, c.k, c.n, sms, false); strings.Join(ks, ",") != strings.Join(c.kernels, ",") {
			t.Errorf("%s: kernels %v, want %v", c.name, ks, c.kernels)
		}
		want := ActQ8Bytes(c.k, nt)
		if c.scratchX > 0 {
			want = mmqPartOffset(c.k, nt) + c.scratchX
		}
		if sb := MMQScratchBytes(c.k, nt, c.n, sms); sb != want {
			t.Errorf("%s: scratch %d bytes, want %d", c.name, sb, want)
		}
		seen[mmqPlan{rows: got.rows, splits: min(got.splits, 2)}] = true
	}
	for _, v := range []mmqPlan{{rows: 128, splits: 1}, {rows: 64, splits: 1}, {rows: 64, splits: 2}} {
		if !seen[v] {
			t.Errorf("no case chose variant rows=%d split=%v", v.rows, v.splits > 1)
		}
	}
	// Every split plan over a sweep: parts of >= mmqMinSplitStages stages,
	// at most one wave of 64-row blocks, only when the 64-row grid is short.
	for _, n := range []int{37, 128, 896, 1000, 3584} {
		for _, ntt := range []int{9, 64, 65, 512, 1000} {
			for _, k := range []int{256, 896, 4864, 18944} {
				p := mmqPlanFor(n, ntt, k, sms)
				if p.splits == 1 {
					continue
				}
				blocks := (n + mmqRowsSmall - 1) / mmqRowsSmall * ((ntt + mmqToks - 1) / mmqToks)
				stages := (k + mmqKB - 1) / mmqKB
				if p.rows != mmqRowsSmall || p.splits > mmqMaxSplits || stages/p.splits < mmqMinSplitStages ||
					blocks*p.splits > mmqSmallPerSM*sms || 2*blocks >= 3*sms {
					t.Errorf("n=%d nt=%d k=%d: plan %+v (%d blocks of 64 rows, %d stages)", n, ntt, k, p, blocks, stages)
				}
			}
		}
	}
}

// The plan's kernel names: the repacked MMQ kernels per tile for Q6_K only
// (Q8_0's went with MINFER_MMQ_F16: the f16 GEMM reads its one copy), never
// async; Q4_K / Q5_K keep the plain names (their 16-byte
// loads are the plain kernels since MINFER_MMQ_WIDE_LOADS retired). The
// plain Q4_K / Q5_K kernels need 16-byte aligned weights, their async
// variants 4-byte: a weight that is not is refused before any launch, never
// sent to another kernel.
func TestMMQPlan_KernelNamesAndWeightAlignment(t *testing.T) {
	for _, c := range []struct {
		p    mmqPlan
		t    quant.Type
		want string
	}{
		{mmqPlan{rows: mmqRows, repacked: true}, quant.Q6_K, "minfer_mmq_q6_kr"},
		{mmqPlan{rows: mmqRows, repacked: true}, quant.Q8_0, ""},
		{mmqPlan{rows: mmqRowsSmall, repacked: true}, quant.Q6_K, "minfer_mmq_q6_kr_r64"},
		{mmqPlan{rows: mmqRows, repacked: true}, quant.Q4_K, ""},
		{mmqPlan{rows: mmqRows, repacked: true, async: true}, quant.Q8_0, ""},
		{mmqPlan{rows: mmqRows}, quant.Q8_0, "minfer_mmq_q8_0"},
		{mmqPlan{rows: mmqRows}, quant.Q4_K, "minfer_mmq_q4_k"},
		{mmqPlan{rows: mmqRowsSmall}, quant.Q5_K, "minfer_mmq_q5_k_r64"},
		{mmqPlan{rows: mmqRows, async: true}, quant.Q4_K, "minfer_mmq_q4_k_async"},
		{mmqPlan{rows: mmqRowsSmall, async: true}, quant.Q5_K, "minfer_mmq_q5_k_async_r64"},
	} {
		if got := c.p.kernel(c.t); got != c.want {
			t.Errorf("%+v %s: %q, want %q", c.p, c.t, got, c.want)
		}
	}
	for ty, want := range map[quant.Type][2]uint64{quant.Q4_K: {16, 4}, quant.Q5_K: {16, 4}, quant.Q4_1: {4, 4},
		quant.Q5_1: {4, 4}, quant.Q8_0: {2, 2}, quant.Q6_K: {2, 2}} {
		if got := [2]uint64{mmqWeightAlign(ty, false), mmqWeightAlign(ty, true)}; got != want {
			t.Errorf("%s: alignment %d plain, %d async; want %d, %d", ty, got[0], got[1], want[0], want[1])
		}
	}
	// The launcher's checks read only the SM count: no module, no launch.
	k := &Kernels{dev: &driver.Device{Attr: driver.Attributes{SMCount: 132}}}
	const nt, kd, n = 64, 1024, 256
	opts := MatMulOptions{MMQ: true, MMQAct: 0x100000, MMQActBytes: MMQScratchBytes(kd, nt, n, 132)}
	async := opts
	async.MMQAsync = true
	for _, ty := range []quant.Type{quant.Q4_K, quant.Q5_K} {
		for _, err := range []error{
			k.checkMMQ(mmqTable[ty], 0x3004, ty, nt, kd, n, opts),
			k.MatMul(nil, 0x1000, 0x2000, 0x3008, ty, 0, nt, kd, n, opts),
			k.MatMulPreQ8_1(nil, 0x1000, 0x3004, ty, 0, nt, kd, n, opts),
		} {
			if err == nil || !strings.Contains(err.Error(), "is not 16-byte aligned") {
				t.Errorf("%s plain MMQ, weight 4-byte aligned only: %v, want a refusal naming 16-byte alignment", ty, err)
			}
		}
		if err := k.checkMMQ(mmqTable[ty], 0x3004, ty, nt, kd, n, async); err != nil {
			t.Errorf("%s async MMQ, weight 4-byte aligned: %v, want accepted", ty, err)
		}
		if err := k.checkMMQ(mmqTable[ty], 0x3002, ty, nt, kd, n, async); err == nil || !strings.Contains(err.Error(), "is not 4-byte aligned") {
			t.Errorf("%s async MMQ, weight 2-byte aligned: %v, want a refusal naming 4-byte alignment", ty, err)
		}
		if err := k.checkMMQ(mmqTable[ty], 0x3010, ty, nt, kd, n, opts); err != nil {
			t.Errorf("%s plain MMQ, weight 16-byte aligned: %v, want accepted", ty, err)
		}
	}
}
