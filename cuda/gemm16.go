package cuda

// gemm16.go: the f16 prefill matmul of a Q8_0 weight's repacked copy
// (MINFER_MMQ_F16; cuda/kernels/gemm16.cu): minfer_f32_to_f16 converts the
// nt activation rows once into the MMQ scratch, then minfer_gemm16_q8_0r
// runs each matmul of that input over them.

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
	f32ToF16      = "minfer_f32_to_f16"
)

// Gemm16ActBytes is the f16 copy of nt activation rows of k values.
func Gemm16ActBytes(k, nt int) uint64 { return 2 * uint64(k) * uint64(nt) }

// gemm16On reports whether a prefill matmul of a wtype weight over nt
// tokens with a repacked copy takes the f16 GEMM: the lever on, Q8_0, an
// MMQ shape.
func gemm16On(wtype quant.Type, nt int, repacked bool, opts MatMulOptions) bool {
	return opts.MMQF16 && repacked && wtype == quant.Q8_0 && mmqOn(wtype, nt, opts)
}

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

// MatMulF16Q8_0R is out = W x (+ bias) for nt tokens over x16, their f16
// rows (ConvertF16), and w, the repacked copy of an n x kDim Q8_0 matrix.
func (k *Kernels) MatMulF16Q8_0R(s *driver.Stream, out, x16, w, bias driver.DevicePtr, nt, kDim, n int) error {
	if err := validateMatMul(quant.Q8_0, nt, kDim, n); err != nil {
		return err
	}
	if kDim%quant.QK != 0 || out == 0 || x16 == 0 || w == 0 || uint64(w)%mmvqrAlign != 0 || uint64(x16)%16 != 0 ||
		uint64(out)%4 != 0 || uint64(bias)%4 != 0 {
		return fmt.Errorf("cuda: gemm16 nt=%d k=%d n=%d: k must be a multiple of %d, w and x16 16-byte aligned (out=%v x16=%v w=%v bias=%v)",
			nt, kDim, n, quant.QK, out, x16, w, bias)
	}
	grid := [3]uint32{uint32((nt + gemm16Toks - 1) / gemm16Toks), uint32((n + gemm16Rows - 1) / gemm16Rows), 1}
	if grid[1] > 65535 {
		return fmt.Errorf("cuda: gemm16 nt=%d k=%d n=%d: %d weight tiles exceed the grid's 65,535 rows", nt, kDim, n, grid[1])
	}
	if err := k.launch(s, gemm16Kernel, grid, [3]uint32{gemm16Threads, 1, 1}, 0, out, x16, w, bias, int32(kDim), int32(n), int32(nt)); err != nil {
		return fmt.Errorf("cuda: gemm16 %s nt=%d k=%d n=%d: %w", gemm16Kernel, nt, kDim, n, err)
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

// runGemm16 runs one prefill matmul of m over the f16 rows convertGemm16
// left in the scratch.
func (b *Backend) runGemm16(nt int, m matmulPlan) error {
	return b.k.MatMulF16Q8_0R(b.s, m.out, b.mm.MMQAct, m.w.rp, m.bias, nt, m.w.rowLen, m.w.rows)
}
