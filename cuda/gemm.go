package cuda

// gemm.go: the f16 tensor-core GEMM (cuda/kernels/gemm.cu), the prefill
// route of the types without an MMQ kernel (and of every type with
// MINFER_MMQ=0). Its tile needs a dynamic shared memory opt-in, done once
// at load by PrepareMatmul.

import (
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
)

const (
	gemmBM      = 64  // MINFER_GEMM_BM: tokens per block tile
	gemmBN      = 128 // MINFER_GEMM_BN: weight rows per block tile
	gemmBK      = 32  // MINFER_GEMM_BK
	gemmPad     = 8   // MINFER_GEMM_PAD (halves)
	gemmCPad    = 4   // MINFER_GEMM_CPAD (floats)
	gemmThreads = 256 // MINFER_GEMM_THREADS
)

// gemmSmemBytes is the gemm kernels' dynamic shared memory: the f16 weight
// tile, the hi and lo f16 activation tiles and the f32 output staging tile
// (MINFER_GEMM_SMEM_BYTES).
func gemmSmemBytes() int {
	ldk := gemmBK + gemmPad
	ldc := gemmBN + gemmCPad
	return gemmBN*ldk*2 + 2*gemmBM*ldk*2 + gemmBM*ldc*4
}

// PrepareMatmul does every dynamic-shared-memory opt-in the matmul kernels
// need (the GEMM's tile exceeds the 48 KiB default; the async MMQ's
// staging does with its static tile). Call it once at init,
// inside dev.Do and before any capture window can open: MatMul never sets
// an attribute and refuses to launch an un-opted configuration.
func (k *Kernels) PrepareMatmul() error {
	smem := gemmSmemBytes()
	for _, t := range MatMulTypes() {
		name := matmulTable[t].gemm
		if err := k.prepareOptIn("matmul", name, smem); err != nil {
			return err
		}
	}
	return k.prepareMMQAsync()
}

func (k *Kernels) launchGemm(s *driver.Stream, name string, out, x, w, bias driver.DevicePtr, nt, kDim, n int) error {
	gy := (nt + gemmBM - 1) / gemmBM
	if gy > maxGridY {
		return fmt.Errorf("matmul %s: nt=%d needs %d token tiles, above the grid limit %d", name, nt, gy, maxGridY)
	}
	smem := gemmSmemBytes()
	if smem > defaultDynSmem && k.optedIn(name) < smem {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d: needs %d bytes of dynamic shared memory and was not opted in "+
			"(call Kernels.PrepareMatmul at init, before any capture window)", name, nt, kDim, n, smem)
	}
	grid := [3]uint32{uint32((n + gemmBN - 1) / gemmBN), uint32(gy), 1}
	block := [3]uint32{gemmThreads, 1, 1}
	if err := k.launch(s, name, grid, block, uint32(smem), out, x, w, bias, int32(kDim), int32(n), int32(nt)); err != nil {
		return fmt.Errorf("matmul %s nt=%d k=%d n=%d: %w", name, nt, kDim, n, err)
	}
	return nil
}
