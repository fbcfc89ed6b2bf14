package cuda

// gemm16.go: the f16 prefill matmul (cuda/kernels/gemm16.cu) of a Q8_0
// weight's one repacked copy (the only Q8_0 prefill over it since
// reports/MINFER_MMQ_F16), a Q4_K weight's GGUF bytes and a Q6_K weight's
// repacked copy (MINFER_MMQ_F16_KQ): minfer_f32_to_f16
// converts the nt activation rows once into the MMQ scratch, then one
// minfer_gemm16_<type> launch a weight type runs the matmuls of that input
// over them.

import (
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/quant"
)

// Launch geometry; these mirror g16:: in cuda/kernels/gemm16.cu.
const (
	gemm16Rows    = 128 // g16::BN: weight rows a block
	gemm16Toks    = 128 // g16::BM: tokens a block
	gemm16Threads = 256 // g16::NT
	gemm16Kernel  = "minfer_gemm16_q8_0r"
	gemm16Q4K     = "minfer_gemm16_q4_k"  // GGUF bytes (MINFER_MMQ_F16_KQ)
	gemm16Q6KR    = "minfer_gemm16_q6_kr" // the repacked copy (MINFER_MMQ_F16_KQ)
	f32ToF16      = "minfer_f32_to_f16"
)

// Gemm16ActBytes is the f16 copy of nt activation rows of k values.
func Gemm16ActBytes(k, nt int) uint64 { return 2 * uint64(k) * uint64(nt) }

// gemm16On reports whether a prefill matmul of a wtype weight over nt
// tokens takes the f16 GEMM (repacked: the weight has a repacked copy;
// only: that copy is its only one, MINFER_ONE_COPY): an MMQ shape and Q8_0
// from its one copy, or under MINFER_MMQ_F16_KQ Q6_K from its repacked
// copy and Q4_K from its GGUF bytes. A Q8_0 matrix whose GGUF bytes stay
// beside the copy (MINFER_ONE_COPY=0 or a setting it yields to, such as
// MINFER_MMQ_ASYNC=1) keeps the int8 MMQ over those bytes: the f16 GEMM
// won its A/B over the one copy (reports/MINFER_MMQ_F16), and the
// two-copy layout is the opt-out that keeps the path before it.
func gemm16On(wtype quant.Type, nt int, repacked, only bool, opts MatMulOptions) bool {
	switch wtype {
	case quant.Q8_0:
		return only && mmqOn(wtype, nt, opts)
	case quant.Q6_K:
		return opts.MMQF16KQ && repacked && mmqOn(wtype, nt, opts)
	case quant.Q4_K:
		return opts.MMQF16KQ && mmqOn(wtype, nt, opts)
	}
	return false
}

// gemm16Names are the f16 GEMM's kernels by weight type. (Its wgmma form
// and its scales loaded a step ahead lost their A/Bs and are gone:
// reports/MINFER_MMQ_WGMMA, reports/MINFER_MMQ_F16_AHEAD.)
var gemm16Names = map[quant.Type]string{quant.Q8_0: gemm16Kernel, quant.Q4_K: gemm16Q4K, quant.Q6_K: gemm16Q6KR}

// ConvertF16 writes the count f32 values at x as f16 at y (count % 4 == 0,
// x 16-byte and y 8-byte aligned).
func (k *Kernels) ConvertF16(s *driver.Stream, y, x driver.DevicePtr, count int) error {
	if count <= 0 || count%4 != 0 || uint64(x)%16 != 0 || uint64(y)%8 != 0 {
		return opsBad("f32_to_f16", "%d values at x=%#x y=%#x: want a positive multiple of 4, x 16-byte and y 8-byte aligned",
			count, uint64(x), uint64(y))
	}
	return opsErr("f32_to_f16", k.launch(s, f32ToF16, [3]uint32{uint32((count + 1023) / 1024), 1, 1}, [3]uint32{256, 1, 1}, 0,
		y, x, int64(count)))
}

// Gemm16Seg is one matmul of an f16 GEMM launch: Out [nt][N] = W x (+
// Bias), W an N x k matrix of the launch's type (the repacked copy of a
// Q8_0 or Q6_K one, the GGUF bytes of a Q4_K one), Bias N floats or 0.
type Gemm16Seg struct {
	Out, W, Bias driver.DevicePtr
	N            int
}

// gemm16Segs is how many matmuls one launch takes (g16::SEGS).
const gemm16Segs = 3

// gemm16Split is the launch's k split: 2 when its blocks would not fill
// the SMs once (each block then has a whole SM's warp slots to itself:
// 12% occupancy in ncu) and k has two 32-deep steps or more, else 1.
func gemm16Split(blocks, smCount, kDim int) int {
	if blocks <= smCount && kDim/quant.QK >= 2 {
		return 2
	}
	return 1
}

// MatMulF16 runs the matmuls segs (1 to 3, one k, weight type wt) over
// nt tokens of x16, their f16 rows (ConvertF16), in one launch. A split k
// (gemm16Split) zeroes the outputs first: its two halves add into them.
func (k *Kernels) MatMulF16(s *driver.Stream, x16 driver.DevicePtr, nt, kDim int, wt quant.Type, segs []Gemm16Seg) error {
	if len(segs) == 0 || len(segs) > gemm16Segs {
		return fmt.Errorf("cuda: gemm16: %d matmuls, want 1 to %d", len(segs), gemm16Segs)
	}
	name := gemm16Names[wt]
	if name == "" {
		return fmt.Errorf("cuda: gemm16: no f16 GEMM for %s weights: Q8_0, Q4_K and Q6_K have one", wt)
	}
	tiles, kStep := 0, wt.BlockSize()
	for _, g := range segs {
		if err := validateMatMul(wt, nt, kDim, g.N); err != nil {
			return err
		}
		if kDim%kStep != 0 || g.Out == 0 || x16 == 0 || g.W == 0 || uint64(g.W)%mmvqrAlign != 0 || uint64(x16)%16 != 0 ||
			uint64(g.Out)%4 != 0 || uint64(g.Bias)%4 != 0 {
			return fmt.Errorf("cuda: gemm16 %s nt=%d k=%d n=%d: k must be a multiple of %d, w and x16 16-byte aligned (out=%v x16=%v w=%v bias=%v)",
				wt, nt, kDim, g.N, kStep, g.Out, x16, g.W, g.Bias)
		}
		tiles += (g.N + gemm16Rows - 1) / gemm16Rows
	}
	tx := (nt + gemm16Toks - 1) / gemm16Toks
	split := gemm16Split(tx*tiles, k.dev.Attr.SMCount, kDim)
	if tiles*split > 65535 {
		return fmt.Errorf("cuda: gemm16 nt=%d k=%d: %d weight tiles (x%d k split) exceed the grid's 65,535 rows", nt, kDim, tiles, split)
	}
	args := []any{x16, int32(kDim), int32(nt), int32(split)}
	for i := range gemm16Segs {
		var g Gemm16Seg
		if i < len(segs) {
			g = segs[i]
		}
		if split == 2 && g.N > 0 {
			if err := s.MemsetD8(g.Out, 0, uint64(nt)*uint64(g.N)*4); err != nil {
				return fmt.Errorf("cuda: gemm16 nt=%d k=%d n=%d: zeroing the split-k output: %w", nt, kDim, g.N, err)
			}
		}
		args = append(args, g.Out, g.W, g.Bias, int32(g.N))
	}
	grid := [3]uint32{uint32(tx), uint32(tiles * split), 1}
	if err := k.launch(s, name, grid, [3]uint32{gemm16Threads, 1, 1}, 0, args...); err != nil {
		return fmt.Errorf("cuda: gemm16 %s nt=%d k=%d (%d matmuls, k split %d): %w", name, nt, kDim, len(segs), split, err)
	}
	return nil
}

// convertGemm16 converts the nt activation rows x (k values each) into the
// backend's MMQ scratch as f16: the shared first half of the f16 GEMMs of
// one input (runGemm16 is the second).
func (b *Backend) convertGemm16(x driver.DevicePtr, k, nt int) error {
	if need := Gemm16ActBytes(k, nt); b.mm.MMQActBytes < need {
		return fmt.Errorf("f16 activation scratch of %d bytes, k=%d nt=%d needs %d", b.mm.MMQActBytes, k, nt, need)
	}
	return b.k.ConvertF16(b.s, b.mm.MMQAct, x, k*nt)
}

// runGemm16 runs the prefill matmuls ms (up to three, one input) over the
// f16 rows convertGemm16 left in the scratch: one launch a weight type (a
// Q4_K_M layer's q and k are Q4_K, its v may be Q6_K), in ms's order.
func (b *Backend) runGemm16(nt int, ms ...matmulPlan) error {
	for len(ms) > 0 {
		wt := ms[0].w.typ
		var segs []Gemm16Seg
		rest := ms[:0:0]
		for _, m := range ms {
			if m.w.typ != wt {
				rest = append(rest, m)
				continue
			}
			w := m.w.rp // the repacked copy; Q4_K has none and is read as stored
			if wt == quant.Q4_K {
				w = m.w.ptr
			}
			segs = append(segs, Gemm16Seg{Out: m.out, W: w, Bias: m.bias, N: m.w.rows})
		}
		if err := b.k.MatMulF16(b.s, b.mm.MMQAct, nt, ms[0].w.rowLen, wt, segs); err != nil {
			return err
		}
		ms = rest
	}
	return nil
}
