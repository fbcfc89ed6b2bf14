package cuda

// attn_prefill.go: the launcher of the tiled prefill attention
// kernels (cuda/kernels/attn_prefill.cu), the MINFER_NO_FA_PREFILL=0 path of
// opAttn for nt > 8. Four instantiations: head_dim padded to 64 or 128 (HD)
// and 32 or 64 query rows per block (BM); the variants are bitwise equal for
// a row (tiles are aligned to absolute cells), so the BM choice is speed only.

import (
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/kv"
)

const (
	attnPrefillBN = 64 // fap::BN: KV cells per tile
	// AttnPrefillMinNT is the smallest nt opAttn sends to AttentionPrefill
	// (below it a query tile is mostly padding and decode's kernels win).
	AttnPrefillMinNT = 9
)

// attnPrefillHDs and attnPrefillBMs are the instantiated variants.
var (
	attnPrefillHDs = []int{64, 128}
	attnPrefillBMs = []int{32, 64}
)

// attnPrefillName is the kernel of one variant.
func attnPrefillName(hd, bm int) string { return fmt.Sprintf("minfer_attn_prefill_hd%d_bm%d", hd, bm) }

// attnPrefillSmem is fap::smem_floats(HD, BM) * 4: Q [BM][HD+4], one K/V
// tile [BN][HD+4], P [BN][BM+4].
func attnPrefillSmem(hd, bm int) int {
	return 4 * ((bm+attnPrefillBN)*(hd+4) + attnPrefillBN*(bm+4))
}

// attnPrefillThreads is the block size of a BM variant (BM/4 row groups x 8).
func attnPrefillThreads(bm int) int { return bm / 4 * 8 }

// attnPrefillHD is the padded head_dim variant for hd.
func attnPrefillHD(hd int) int {
	if hd <= 64 {
		return 64
	}
	return 128
}

// attnPrefillBM picks the rows per block: 64 (more reuse of each K/V tile)
// unless that leaves SMs idle, then 32 (twice the blocks).
func attnPrefillBM(p AttnParams, smCount int) int {
	rows := p.NT * (p.NHead / p.NHeadKV)
	blocks64 := (rows + 63) / 64 * p.NHeadKV
	if blocks64 < smCount {
		return 32
	}
	return 64
}

// PrepareAttnPrefill opts the prefill attention kernels into their dynamic
// shared memory (above the 48 KiB default for three of the four). Call it
// once at init, inside dev.Do and before any capture window can open;
// AttentionPrefill never sets an attribute and refuses an un-opted kernel.
func (k *Kernels) PrepareAttnPrefill() error {
	for _, hd := range attnPrefillHDs {
		for _, bm := range attnPrefillBMs {
			name, smem := attnPrefillName(hd, bm), attnPrefillSmem(hd, bm)
			f, err := k.Function(name)
			if err != nil {
				return fmt.Errorf("attn_prefill: prepare: %w", err)
			}
			if smem > defaultDynSmem {
				if err := f.SetMaxDynamicSmem(smem); err != nil {
					return fmt.Errorf("attn_prefill: prepare %s: opt-in to %d bytes of dynamic shared memory: %w", name, smem, err)
				}
			}
			k.setOptIn(name, smem)
		}
	}
	return nil
}

// AttnPrefillKernel names the kernel AttentionPrefill runs for p on a
// device of smCount SMs (for tests and reports).
func AttnPrefillKernel(p AttnParams, smCount int) string {
	return attnPrefillName(attnPrefillHD(p.HeadDim), attnPrefillBM(p, smCount))
}

// AttentionPrefill is Kernels.Attention (same contract, same semantics:
// causal GQA attention of q [HeadDim, NHead, NT] over one layer's K and V
// regions, the window {start, kv_len} read from win on the device, NaN rows
// for cells the region cannot hold) through the tiled kernel: one block
// per (tile of query rows, KV head), K / V tiles shared in shared memory
// by the tile's tokens and the KV head's query heads.
func (k *Kernels) AttentionPrefill(s *driver.Stream, out, q, kRegion, vRegion driver.DevicePtr, format kv.Format, win driver.DevicePtr, p AttnParams) error {
	if _, err := p.check(format); err != nil {
		return err
	}
	return k.attentionPrefillBM(s, out, q, kRegion, vRegion, format, win, p, attnPrefillBM(p, k.dev.Attr.SMCount))
}

// attentionPrefillBM launches the bm variant (tests force each one).
func (k *Kernels) attentionPrefillBM(s *driver.Stream, out, q, kRegion, vRegion driver.DevicePtr, format kv.Format, win driver.DevicePtr, p AttnParams, bm int) error {
	const op = "attn_prefill"
	rb, err := p.check(format)
	if err != nil {
		return err
	}
	if bm != 32 && bm != 64 {
		return opsBad(op, "%d rows per block: the kernels take 32 or 64", bm)
	}
	hd := attnPrefillHD(p.HeadDim)
	name, smem := attnPrefillName(hd, bm), attnPrefillSmem(hd, bm)
	if smem > defaultDynSmem && k.optedIn(name) < smem {
		return opsBad(op, "%s needs %d bytes of dynamic shared memory and was not opted in "+
			"(call Kernels.PrepareAttnPrefill at init, before any capture window)", name, smem)
	}
	rows := p.NT * (p.NHead / p.NHeadKV)
	blocks := (rows + bm - 1) / bm * p.NHeadKV
	if blocks > maxInt32 {
		return opsBad(op, "%d tokens x %d heads: %d blocks, above the grid limit", p.NT, p.NHead, blocks)
	}
	if err := k.launch(s, name, [3]uint32{uint32(blocks), 1, 1}, [3]uint32{uint32(attnPrefillThreads(bm)), 1, 1}, uint32(smem),
		out, q, kRegion, vRegion, int32(format), win, int32(p.NT), int32(p.NHead), int32(p.NHeadKV), int32(p.HeadDim),
		int64(rb), int32(p.NCtx), int32(p.Window), attnScale(p)); err != nil {
		return fmt.Errorf("cuda: %s %s nt=%d heads=%d/%d hd=%d: %w", op, name, p.NT, p.NHead, p.NHeadKV, p.HeadDim, err)
	}
	return nil
}
