package cuda

// mmvq_repack.go: MINFER_MMVQ_REPACK. Q8_0 and Q6_K matrices get, at
// registration, a device copy whose quants are 16-byte aligned (built by
// minfer_repack_<t> from the uploaded GGUF bytes), and decode reads it
// through minfer_mmvqr_<t> / _qkv_ / _ffn_ (cuda/kernels/mmvq_repack.cu):
// bitwise the minfer_mmvq_* results, with 16-byte loads. The GGUF copy
// stays for prefill and get_rows, so the lever doubles the device memory of
// those matrices (7B Q8_0: +~7.5 GB).

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/quant"
)

// Geometry of cuda/kernels/mmvq_repack.cu (TestMMVQRepackGeometry_MatchesKernelSource
// pins these to its #defines).
const (
	mmvqrRows      = 4   // MINFER_MMVQR_ROWS: output rows (warps) per block
	mmvqrThreads   = 128 // MINFER_MMVQR_THREADS
	mmvqrUnits     = 4   // MINFER_MMVQR_UNITS: 16-value units whose loads a lane issues together
	mmvqrQ6KQBytes = 192 // MINFER_MMVQR_Q6_K_QBYTES: ql + qh of one Q6_K super-block
	repackThreads  = 256 // MINFER_REPACK_THREADS
	// repackMaxGrid bounds the repack grid (it strides over the blocks).
	repackMaxGrid = 1 << 16
	// mmvqrAlign is the alignment the repacked copy must have (uint4 loads).
	mmvqrAlign = 16
)

// mmvqrTypes names the weight types with a repacked layout: the kernel-name
// suffix of minfer_mmvqr_* and minfer_repack_*.
var mmvqrTypes = map[quant.Type]string{
	quant.Q8_0: "q8_0",
	quant.Q6_K: "q6_k",
}

// MMVQRepackable reports whether weights of type t get a repacked copy
// under MINFER_MMVQ_REPACK.
func MMVQRepackable(t quant.Type) bool { _, ok := mmvqrTypes[t]; return ok }

// mmvqrKernel names the repacked decode kernel of form "" (plain), "res",
// "qkv" or "ffn" for wtype ("" when the type has none).
func mmvqrKernel(wtype quant.Type, form string) string {
	sfx, ok := mmvqrTypes[wtype]
	switch {
	case !ok:
		return ""
	case form == "":
		return "minfer_mmvqr_" + sfx
	}
	return "minfer_mmvqr_" + form + "_" + sfx
}

// MMVQRepackBytes is the size of the repacked copy of n rows of k values of
// wtype: the GGUF size (the layout moves bytes, it adds none); 0 for a type
// without one or a k that is not whole blocks.
func MMVQRepackBytes(wtype quant.Type, kDim, n int) uint64 {
	if !MMVQRepackable(wtype) || kDim <= 0 || n <= 0 || kDim%wtype.BlockSize() != 0 {
		return 0
	}
	return uint64(kDim/wtype.BlockSize()) * uint64(n) * uint64(wtype.BlockBytes())
}

// RepackHost is the repacked layout, computed on the host from the GGUF
// bytes of a matrix of nblocks blocks (the reference the device tests
// compare minfer_repack_<t> with). With N = nblocks:
//
//	Q8_0: the 32 quants of block i at 32 i, then its f16 d at 32 N + 2 i
//	Q6_K: ql + qh (192 bytes) of block i at 192 i, its 16 scales at
//	      192 N + 16 i, its f16 d at 208 N + 2 i
func RepackHost(wtype quant.Type, src []byte, nblocks int) ([]byte, error) {
	bb := wtype.BlockBytes()
	if !MMVQRepackable(wtype) || nblocks <= 0 || len(src) < nblocks*bb {
		return nil, fmt.Errorf("repack: %s, %d blocks from %d bytes", wtype, nblocks, len(src))
	}
	n := nblocks
	dst := make([]byte, n*bb)
	// MINFER_ONE_COPY repacks every Q8_0 / Q6_K matrix at load (7.5 GB for
	// 7B Q8_0: ~23 s on one core), so the blocks are split over the cores;
	// each range writes its own bytes of each region.
	repackRange := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			b := src[i*bb : (i+1)*bb]
			switch wtype {
			case quant.Q8_0:
				copy(dst[32*i:32*i+32], b[2:34])
				dst[32*n+2*i], dst[32*n+2*i+1] = b[0], b[1]
			case quant.Q6_K:
				copy(dst[192*i:192*i+192], b[0:192])
				copy(dst[192*n+16*i:192*n+16*i+16], b[192:208])
				dst[208*n+2*i], dst[208*n+2*i+1] = b[208], b[209]
			}
		}
	}
	workers := min(runtime.GOMAXPROCS(0), max(1, n/repackHostChunk))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { repackRange(n*w/workers, n*(w+1)/workers) })
	}
	wg.Wait()
	return dst, nil
}

// repackHostChunk is the fewest blocks a RepackHost worker takes (a
// goroutine per few blocks would cost more than it saves).
const repackHostChunk = 1 << 14

// RepackMMVQ writes the repacked copy of the n x kDim wtype matrix at src
// (its GGUF bytes, 2-byte aligned) to dst (MMVQRepackBytes bytes, 16-byte
// aligned), on s.
func (k *Kernels) RepackMMVQ(s *driver.Stream, dst, src driver.DevicePtr, wtype quant.Type, kDim, n int) error {
	sfx, ok := mmvqrTypes[wtype]
	if !ok {
		return fmt.Errorf("repack: weight type %s has no repacked layout", wtype)
	}
	if MMVQRepackBytes(wtype, kDim, n) == 0 {
		return fmt.Errorf("repack %s: k=%d n=%d is not whole blocks of %d", wtype, kDim, n, wtype.BlockSize())
	}
	if dst == 0 || src == 0 || uint64(dst)%mmvqrAlign != 0 || uint64(src)%2 != 0 {
		return fmt.Errorf("repack %s: null or misaligned pointer (dst=%v needs 16-byte alignment, src=%v 2)", wtype, dst, src)
	}
	nblocks := uint64(kDim/wtype.BlockSize()) * uint64(n)
	grid := [3]uint32{uint32(min((nblocks+repackThreads-1)/repackThreads, repackMaxGrid)), 1, 1}
	block := [3]uint32{repackThreads, 1, 1}
	name := "minfer_repack_" + sfx
	if err := k.launch(s, name, grid, block, 0, dst, src, int64(nblocks)); err != nil {
		return fmt.Errorf("repack %s k=%d n=%d: %w", name, kDim, n, err)
	}
	return nil
}

// checkMMVQR validates one repacked weight.
func checkMMVQR(op string, w driver.DevicePtr, wtype quant.Type, kDim, n int) error {
	if !MMVQRepackable(wtype) {
		return fmt.Errorf("%s: weight type %s has no repacked kernel", op, wtype)
	}
	if err := validateMatMul(wtype, 1, kDim, n); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if w == 0 || uint64(w)%mmvqrAlign != 0 {
		return fmt.Errorf("%s %s k=%d n=%d: repacked weight %v is null or not %d-byte aligned", op, wtype, kDim, n, w, mmvqrAlign)
	}
	return nil
}

// checkQ8Act validates the Q8_1 activation row of the mmvqr kernels.
func checkQ8Act(op string, xq driver.DevicePtr, xqBytes uint64, kDim int) error {
	need := ActQ8Bytes(kDim, 1)
	if need == 0 || xq == 0 || xqBytes < need || uint64(xq)%4 != 0 {
		return fmt.Errorf("%s k=%d: Q8_1 activation %v of %d bytes (needs %d bytes, 4-byte aligned)", op, kDim, xq, xqBytes, need)
	}
	return nil
}

// mmvqrFam is the repacked kernels' family: its weight check leaves the
// Q8_1 row to checkQ8Act, which the shared bodies run after the weights.
var mmvqrFam = mmvqFamily{rows: mmvqrRows, threads: mmvqrThreads, kernel: mmvqrKernel,
	check: func(op string, _ driver.DevicePtr, _ uint64, w driver.DevicePtr, wtype quant.Type, kDim, n int) error {
		return checkMMVQR(op, w, wtype, kDim, n)
	}}

// MatMulQ8_1R is MatMulQ8_1 over the repacked copy w (RepackMMVQ) of an
// n x kDim wtype matrix: out bitwise what MatMulQ8_1 gives for the GGUF
// bytes.
func (k *Kernels) MatMulQ8_1R(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w driver.DevicePtr, wtype quant.Type,
	bias driver.DevicePtr, kDim, n int) error {
	return k.mmvqMatVec(mmvqrFam, "matmul_q8_1r", s, out, xq, xqBytes, w, wtype, bias, kDim, n)
}

// MatMulQ8_1QKVR is MatMulQ8_1QKV over repacked copies (one launch,
// minfer_mmvqr_qkv_<type>): bitwise MatMulQ8_1QKV of the GGUF bytes.
func (k *Kernels) MatMulQ8_1QKVR(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w [3]driver.DevicePtr,
	wtype quant.Type, bias [3]driver.DevicePtr, kDim int, n [3]int) error {
	return k.mmvqQKV(mmvqrFam, "matmul_q8_1r_qkv", s, out, xq, xqBytes, w, wtype, bias, kDim, n)
}

// FFNQ8_1R is FFNQ8_1 over repacked gate and up copies (one launch,
// minfer_mmvqr_ffn_<type>): bitwise FFNQ8_1 of the GGUF bytes.
func (k *Kernels) FFNQ8_1R(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, wg, wu driver.DevicePtr,
	wtype quant.Type, kDim, n int) error {
	return k.mmvqFFN(mmvqrFam, "ffn_q8_1r", s, out, xq, xqBytes, wg, wu, wtype, kDim, n)
}

// repackWanted reports whether a registered matrix of type t gets a
// repacked copy: the lever is on, the type has a layout, and its decode
// takes mmvq (a type whose MINFER_NO_*_MMVQ lever is set would never read it).
func (b *Backend) repackWanted(t quant.Type) bool {
	if !b.lv.MMVQRepack || !MMVQRepackable(t) {
		return false
	}
	switch t {
	case quant.Q8_0:
		return !b.mm.NoQ80MMVQ
	case quant.Q6_K:
		return !b.mm.NoKQMMVQ
	}
	return false
}

// repackWeight builds dw's repacked copy (dw uploaded, a matrix of a
// repackable type). It refuses, with the numbers, when the device has not
// the free memory for it: never a silent fallback to the GGUF kernel.
// Inside dev.Do, at registration (outside any split and capture window).
func (b *Backend) repackWeight(dw *devWeight) error {
	need := MMVQRepackBytes(dw.typ, dw.rowLen, dw.rows)
	if need == 0 {
		return fmt.Errorf("cuda: weight %s (%s, dims %v): no repacked layout (MINFER_MMVQ_REPACK=1)", dw.name, dw.typ, dw.dims)
	}
	free, total, err := b.dev.MemInfo()
	if err != nil {
		return fmt.Errorf("cuda: weight %s: MINFER_MMVQ_REPACK=1: query device memory: %w", dw.name, err)
	}
	if free < need {
		return fmt.Errorf("cuda: weight %s: MINFER_MMVQ_REPACK=1 needs %d more bytes for its 16-byte-aligned copy and the device "+
			"has %d of %d free (the lever doubles the memory of every Q8_0 / Q6_K matrix: %d bytes repacked so far); "+
			"set MINFER_MMVQ_REPACK=0: %w", dw.name, need, free, total, b.repackBytes, graph.ErrOutOfMemory)
	}
	ptr, err := b.pool.raw(MemDerived, need, "repacked weight "+dw.name+" (MINFER_MMVQ_REPACK=1)")
	if err != nil {
		return err
	}
	if err := b.k.RepackMMVQ(b.s, ptr, dw.ptr, dw.typ, dw.rowLen, dw.rows); err != nil {
		return fmt.Errorf("cuda: weight %s: %w", dw.name, err)
	}
	if err := b.s.Synchronize(); err != nil {
		return fmt.Errorf("cuda: weight %s: repack: %w", dw.name, err)
	}
	dw.rp = ptr
	b.repackBytes += need
	return nil
}

// mmvqrResKernel names the residual form of a type's repacked kernel.
func mmvqrResKernel(wtype quant.Type) string { return mmvqrKernel(wtype, "res") }

// MatMulQ8_1RRes is MatMulQ8_1R with the residual add folded in
// (minfer_mmvqr_res_<type>): bitwise MatMulQ8_1R followed by Add.
func (k *Kernels) MatMulQ8_1RRes(s *driver.Stream, out, xq driver.DevicePtr, xqBytes uint64, w driver.DevicePtr,
	wtype quant.Type, bias, res driver.DevicePtr, kDim, n int) error {
	return k.mmvqMatVecRes(mmvqrFam, "matmul_q8_1r_res", s, out, xq, xqBytes, w, wtype, bias, res, kDim, n)
}
