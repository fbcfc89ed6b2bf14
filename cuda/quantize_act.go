package cuda

// quantize_act.go: minfer_quantize_q8_1 (cuda/kernels/quantize_act.cu),
// the f32 -> Q8_1 activation quantization every MMVQ and MMQ route runs
// first (the x4 form is quantize_act_x4.go).

import (
	"fmt"
	"math"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/quant"
)

// quantizeQ8_1Kernel quantizes f32 activation rows to Q8_1
// (cuda/kernels/quantize_act.cu).
const quantizeQ8_1Kernel = "minfer_quantize_q8_1"

// q8_1BlockBytes is the size of one Q8_1 block (f16 d, f16 s, 32 int8).
const q8_1BlockBytes = 36

// ActQ8Bytes is the scratch the mmvq path needs for nt activation rows of
// k values (k a multiple of 32; 0 otherwise).
func ActQ8Bytes(k, nt int) uint64 {
	if k <= 0 || nt <= 0 || k%quant.QK != 0 {
		return 0
	}
	return uint64(k/quant.QK) * q8_1BlockBytes * uint64(nt)
}

const (
	qactBlocks  = 4   // MINFER_QACT_BLOCKS: Q8_1 blocks (warps) per block
	qactThreads = 128 // MINFER_QACT_THREADS
)

// QuantizeQ8_1 writes nt rows of kDim f32 at x as Q8_1 blocks to dst
// (ActQ8Bytes(kDim, nt) bytes, 4-byte aligned): the bytes
// quant.Quantize(quant.Q8_1, row) gives for each row, rows back to back.
func (k *Kernels) QuantizeQ8_1(s *driver.Stream, dst, x driver.DevicePtr, kDim, nt int) error {
	if kDim <= 0 || nt <= 0 || kDim%quant.QK != 0 {
		return fmt.Errorf("quantize_q8_1: k=%d nt=%d: k must be a positive multiple of %d", kDim, nt, quant.QK)
	}
	blocks := uint64(kDim/quant.QK) * uint64(nt)
	if uint64(kDim)*uint64(nt) > math.MaxInt32 {
		return fmt.Errorf("quantize_q8_1: k=%d nt=%d exceeds the kernel's int32 range", kDim, nt)
	}
	if dst == 0 || x == 0 || uint64(dst)%4 != 0 || uint64(x)%4 != 0 {
		return fmt.Errorf("quantize_q8_1: null or misaligned device pointer (dst=%v x=%v; both need 4-byte alignment)", dst, x)
	}
	if k.qx4 {
		return k.quantizeQ8_1X4(s, dst, x, kDim, nt, blocks)
	}
	grid := [3]uint32{uint32((blocks + qactBlocks - 1) / qactBlocks), 1, 1}
	block := [3]uint32{qactThreads, 1, 1}
	if err := k.launch(s, quantizeQ8_1Kernel, grid, block, 0, dst, x, int32(kDim), int32(nt)); err != nil {
		return fmt.Errorf("quantize_q8_1 k=%d nt=%d: %w", kDim, nt, err)
	}
	return nil
}
