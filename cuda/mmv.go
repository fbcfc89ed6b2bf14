package cuda

// mmv.go: the f32-activation matmul kernels minfer_mmv_<t>
// (cuda/kernels/mmv.cu): up to 8 tokens per launch, every weight type.

import (
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
)

// Launch geometry; these mirror the #defines of cuda/kernels/mmv.cu and
// cuda/kernels/gemm.cu (TestMatmulGeometry_MatchesKernelSources pins them).
const (
	mmvMaxNT   = 8   // MINFER_MMV_MAX_NT: the largest nt one mmv launch takes
	mmvRows    = 4   // MINFER_MMV_ROWS: output rows (warps) per block
	mmvThreads = 128 // MINFER_MMV_THREADS
)

// launchMMV runs the f32-activation kernel name over nt tokens, one launch
// per chunk of at most mmvMaxNT tokens.
func (k *Kernels) launchMMV(s *driver.Stream, name string, out, x, w, bias driver.DevicePtr, nt, kDim, n int) error {
	block := [3]uint32{mmvThreads, 1, 1}
	grid := [3]uint32{uint32((n + mmvRows - 1) / mmvRows), 1, 1}
	for t0 := 0; t0 < nt; t0 += mmvMaxNT {
		c := min(mmvMaxNT, nt-t0)
		o := out.Add(uint64(t0) * uint64(n) * 4)
		xi := x.Add(uint64(t0) * uint64(kDim) * 4)
		if err := k.launch(s, name, grid, block, 0, o, xi, w, bias, int32(kDim), int32(n), int32(c)); err != nil {
			return fmt.Errorf("matmul %s nt=%d k=%d n=%d (tokens %d..%d): %w", name, nt, kDim, n, t0, t0+c-1, err)
		}
	}
	return nil
}
