package cuda

// quantize_act_x4.go: minfer_quantize_q8_1_x4
// (cuda/kernels/quantize_act_x4.cu), four Q8_1 blocks per warp with float4
// loads (MINFER_QUANTIZE_X4); the same bytes as quantize_act.go's kernel.

import (
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
)

// minfer_quantize_q8_1_x4 (kernels/quantize_act_x4.cu, lever
// MINFER_QUANTIZE_X4): four Q8_1 blocks per warp, float4 loads.
const (
	quantizeQ8_1X4Kernel = "minfer_quantize_q8_1_x4"
	qactX4Warps          = 4 // MINFER_QACTX4_WARPS
	qactX4PerWarp        = 4 // MINFER_QACTX4_PER_WARP
)

// quantizeQ8_1X4 is QuantizeQ8_1's launch through the x4 kernel (its
// checks already done): the same bytes at dst. x must be 16-byte aligned
// (the float4 loads); an unaligned x is an error, not a quiet switch to the
// other kernel, so the census always names what ran.
func (k *Kernels) quantizeQ8_1X4(s *driver.Stream, dst, x driver.DevicePtr, kDim, nt int, blocks uint64) error {
	if uint64(x)%16 != 0 {
		return fmt.Errorf("quantize_q8_1_x4 k=%d nt=%d: x=%v is not 16-byte aligned (MINFER_QUANTIZE_X4=1 needs float4 loads)", kDim, nt, x)
	}
	per := uint64(qactX4Warps * qactX4PerWarp)
	grid := [3]uint32{uint32((blocks + per - 1) / per), 1, 1}
	block := [3]uint32{32 * qactX4Warps, 1, 1}
	if err := k.launch(s, quantizeQ8_1X4Kernel, grid, block, 0, dst, x, int32(kDim), int32(nt)); err != nil {
		return fmt.Errorf("quantize_q8_1_x4 k=%d nt=%d: %w", kDim, nt, err)
	}
	return nil
}
