package cuda

// attn_prefill2.go: the launchers of the tiled prefill attention kernels
// (cuda/kernels/attn_prefill2.cu), opAttn's path for nt >= 9 unless
// MINFER_NO_FA_PREFILL=1: the tensor-core family (below) by default, the
// v2 FMA family with MINFER_FA_PREFILL_TC=0 (the v1 tiled kernel was
// retired with MINFER_FA_PREFILL_V2). The v2 FMA family has five
// instantiations: head_dim padded to 64 (BM 16, 32, 64 query rows per
// block) or 128 (BM 32, 64); 8*BM threads per block. The BM variants are bitwise equal for a row (tiles are aligned to
// absolute cells, the per-row reductions do not depend on BM), so the BM
// choice is speed only.

import (
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
)

const attnPrefill2BN = 64 // fap2::BN: KV cells per tile

// attnPrefill2Variants lists the instantiated (HD, BM) pairs.
var attnPrefill2Variants = [][2]int{{64, 16}, {64, 32}, {64, 64}, {128, 32}, {128, 64}}

// attnPrefill2Name is the kernel of one variant.
func attnPrefill2Name(hd, bm int) string {
	return fmt.Sprintf("minfer_attn_prefill2_hd%d_bm%d", hd, bm)
}

// attnPrefill2Smem is fap2::smem_floats(HD, BM) * 4: Q [BM][HD+4], K and V
// tiles [BN][HD+4] each, P [BN][BM+4].
func attnPrefill2Smem(hd, bm int) int {
	return 4 * ((bm+2*attnPrefill2BN)*(hd+4) + attnPrefill2BN*(bm+4))
}

// attnPrefill2Threads is the block size of a BM variant (BM/2 row groups x 16).
func attnPrefill2Threads(bm int) int { return bm * 8 }

// attnPrefill2BM picks the rows per block: the largest BM (most reuse of
// each K / V tile) whose grid still gives every SM about three blocks, so
// the causal tail (the first rows' blocks are short) and each block's
// load latency are covered by other blocks; the smallest variant otherwise.
func attnPrefill2BM(p AttnParams, smCount int) int {
	hd := attnPrefillHD(p.HeadDim)
	rows := p.NT * (p.NHead / p.NHeadKV)
	small := 16
	if hd > 64 {
		small = 32
	}
	for _, bm := range []int{64, 32} {
		if bm < small {
			break
		}
		if (rows+bm-1)/bm*p.NHeadKV >= 3*smCount {
			return bm
		}
	}
	return small
}

// PrepareAttnPrefill2 opts the v2 kernels into their dynamic shared memory
// (above the 48 KiB default for four of the five). Call it once at init,
// inside dev.Do and before any capture window can open; AttentionPrefill2
// never sets an attribute and refuses an un-opted kernel.
func (k *Kernels) PrepareAttnPrefill2() error {
	for _, v := range attnPrefill2Variants {
		name, smem := attnPrefill2Name(v[0], v[1]), attnPrefill2Smem(v[0], v[1])
		if err := k.prepareOptIn("attn_prefill2", name, smem); err != nil {
			return err
		}
	}
	return nil
}

// AttnPrefill2Kernel names the kernel AttentionPrefill2 runs for p on a
// device of smCount SMs (for tests and reports).
func AttnPrefill2Kernel(p AttnParams, smCount int) string {
	return attnPrefill2Name(attnPrefillHD(p.HeadDim), attnPrefill2BM(p, smCount))
}

// AttentionPrefill2 is Kernels.Attention (same contract and semantics: causal GQA attention of q [HeadDim, NHead, NT] over one
// layer's K and V regions, the window read from win on the device, NaN rows
// for cells the region cannot hold) through the v2 kernels.
func (k *Kernels) AttentionPrefill2(s *driver.Stream, out, q, kRegion, vRegion driver.DevicePtr, format kv.Format, win driver.DevicePtr, p AttnParams) error {
	if _, err := p.check(format); err != nil {
		return err
	}
	return k.attentionPrefill2BM(s, out, q, kRegion, vRegion, format, win, p, attnPrefill2BM(p, k.dev.Attr.SMCount))
}

// attentionPrefill2BM launches the bm variant (tests force each one).
func (k *Kernels) attentionPrefill2BM(s *driver.Stream, out, q, kRegion, vRegion driver.DevicePtr, format kv.Format, win driver.DevicePtr, p AttnParams, bm int) error {
	const op = "attn_prefill2"
	rb, err := p.check(format)
	if err != nil {
		return err
	}
	hd := attnPrefillHD(p.HeadDim)
	known := false
	for _, v := range attnPrefill2Variants {
		known = known || (v[0] == hd && v[1] == bm)
	}
	if !known {
		return opsBad(op, "%d rows per block at head_dim %d: no such variant", bm, p.HeadDim)
	}
	name, smem := attnPrefill2Name(hd, bm), attnPrefill2Smem(hd, bm)
	return k.launchPrefillAttn(s, prefillLaunch{op: op, name: name, prep: "PrepareAttnPrefill2", smem: smem,
		rowsPerBlock: bm, threads: attnPrefill2Threads(bm), nsplit: 1}, out, q, kRegion, vRegion, format, win, p, rb)
}

// prefillLaunch is one tiled prefill attention launch: the kernel, the
// Prepare call that opts it into smem bytes of dynamic shared memory, one
// block of threads per rowsPerBlock query rows of one KV head, nsplit
// blocks along grid y sharing each tile's KV range, and the arguments the
// family takes after the common ones.
type prefillLaunch struct {
	op, name, prep              string
	smem, rowsPerBlock, threads int
	nsplit                      int
	extra                       []any
}

// launchPrefillAttn launches a tiled prefill attention kernel (the v2 FMA
// and the tensor-core families take the same leading arguments).
func (k *Kernels) launchPrefillAttn(s *driver.Stream, l prefillLaunch,
	out, q, kRegion, vRegion driver.DevicePtr, format kv.Format, win driver.DevicePtr, p AttnParams, rb int) error {
	// The kernels keep cells in int: start + nt and n_ctx must fit.
	if int64(p.NCtx)+int64(p.NT) > maxInt32 {
		return opsBad(l.op, "n_ctx %d + nt %d: above the kernel's int cell range", p.NCtx, p.NT)
	}
	if l.smem > defaultDynSmem && k.optedIn(l.name) < l.smem {
		return opsBad(l.op, "%s needs %d bytes of dynamic shared memory and was not opted in "+
			"(call Kernels.%s at init, before any capture window)", l.name, l.smem, l.prep)
	}
	rows := p.NT * (p.NHead / p.NHeadKV)
	blocks := (rows + l.rowsPerBlock - 1) / l.rowsPerBlock * p.NHeadKV
	if blocks > maxInt32 {
		return opsBad(l.op, "%d tokens x %d heads: %d blocks, above the grid limit", p.NT, p.NHead, blocks)
	}
	args := append([]any{out, q, kRegion, vRegion, int32(format), win, int32(p.NT), int32(p.NHead), int32(p.NHeadKV), int32(p.HeadDim),
		int64(rb), int32(p.NCtx), int32(p.Window), attnScale(p)}, l.extra...)
	if err := k.launch(s, l.name, [3]uint32{uint32(blocks), uint32(l.nsplit), 1}, [3]uint32{uint32(l.threads), 1, 1}, uint32(l.smem),
		args...); err != nil {
		return fmt.Errorf("cuda: %s %s nt=%d heads=%d/%d hd=%d splits=%d: %w", l.op, l.name, p.NT, p.NHead, p.NHeadKV, p.HeadDim, l.nsplit, err)
	}
	return nil
}

const (
	attnPrefillBN = 64 // fap::BN: KV cells per tile
	// AttnPrefillMinNT is the smallest nt opAttn sends to AttentionPrefill2
	// (below it a query tile is mostly padding and decode's kernels win).
	AttnPrefillMinNT = 9
)

// attnPrefillHD is the padded head_dim variant for hd.
func attnPrefillHD(hd int) int {
	if hd <= 64 {
		return 64
	}
	return 128
}

// The tensor-core variant (MINFER_FA_PREFILL_TC, the default): fatc:: in
// attn_prefill2.cu. One block of 128 threads per (64 rows, KV head), each
// warp's rows, scores and output in mma.sync fragments (registers); shared
// memory holds two f16 tiles of K and of V, [cell][d] (fatc::Geo): an f16
// cache's next tile is copied with cp.async while this one is read.
const (
	attnPrefillTCRows    = 64  // fatc::BM
	attnPrefillTCThreads = 128 // fatc::NT
)

// attnPrefillTCName is the kernel of a head_dim variant (64 or 128).
func attnPrefillTCName(hd int) string { return fmt.Sprintf("minfer_attn_prefill_tc_hd%d", hd) }

// attnPrefillTCSmem is fatc::Geo<HD>::BYTES: two buffers of K and V (one
// tile read while the next arrives), each BN rows of HD+8 halves.
func attnPrefillTCSmem(hd int) int {
	const bn = attnPrefill2BN
	return 2 * 2 * bn * (hd + 8) * 2
}

// PrepareAttnPrefillTC opts the tensor-core kernels into their dynamic
// shared memory (above the 48 KiB default). Call it once at init, inside
// dev.Do, as PrepareAttnPrefill2.
func (k *Kernels) PrepareAttnPrefillTC() error {
	for _, hd := range []int{64, 128} {
		for _, name := range []string{attnPrefillTCName(hd), attnDecodeTCName(hd)} {
			if err := k.prepareOptIn("attn_prefill_tc", name, attnPrefillTCSmem(hd)); err != nil {
				return err
			}
		}
		if err := k.prepareOptIn("attn_prefill_tc", attnDecodeTCNarrow.name(hd), attnDecodeTCNarrow.smem(hd)); err != nil {
			return err
		}
	}
	return nil
}

// attnPrefillTCMaxSplits caps the KV splits of one tensor-core launch.
const attnPrefillTCMaxSplits = 8

// attnPrefillTCSplits is how many blocks share each (row tile, KV head)'s
// KV range: enough that the grid fills about two waves of the 2 blocks an
// SM holds (the kernel's registers), capped at attnPrefillTCMaxSplits; 1
// when the tiles alone fill them. 7B pp512 (224 tiles) on 132 SMs: 3;
// qwen2-0.5b pp512 (112): 5. Each split takes an equal share of its
// block's tiles at run time, so a short range costs a few empty blocks and
// the merge.
func attnPrefillTCSplits(p AttnParams, smCount int) int {
	rows := p.NT * (p.NHead / p.NHeadKV)
	base := (rows + attnPrefillTCRows - 1) / attnPrefillTCRows * p.NHeadKV
	slots := 2 * smCount
	if base <= 0 || base >= slots {
		return 1
	}
	return min(attnPrefillTCMaxSplits, (2*slots+base-1)/base)
}

// AttnPrefillTCScratchBytes bounds the partials of any split launch on a
// device of smCount SMs: nsplit x n_head_kv x nt G rows of HD+2 floats,
// where nsplit x blocks < 3 x slots (attnPrefillTCSplits) and a block holds
// 64 rows. One scratch of this size serves every shape of a backend.
func AttnPrefillTCScratchBytes(headDim, smCount int) int {
	return 3 * 2 * smCount * attnPrefillTCRows * (attnPrefillHD(headDim) + 2) * 4
}

// AttentionPrefillTC is AttentionPrefill2's contract through the
// tensor-core kernels (numerics: the f16-attention-tile class). part is
// scratch of partBytes (AttnPrefillTCScratchBytes) for the split launches,
// 0 when attnPrefillTCSplits(p) is 1.
func (k *Kernels) AttentionPrefillTC(s *driver.Stream, out, q, kRegion, vRegion driver.DevicePtr, format kv.Format, win driver.DevicePtr,
	part driver.DevicePtr, partBytes int, p AttnParams) error {
	const op = "attn_prefill_tc"
	rb, err := p.check(format)
	if err != nil {
		return err
	}
	hd := attnPrefillHD(p.HeadDim)
	nsplit := attnPrefillTCSplits(p, k.dev.Attr.SMCount)
	rows := p.NT * (p.NHead / p.NHeadKV)
	need := nsplit * p.NHeadKV * rows * (hd + 2) * 4
	if nsplit > 1 && (part == 0 || partBytes < need) {
		return opsBad(op, "%d splits need %d bytes of scratch, given %d at %#x", nsplit, need, partBytes, uint64(part))
	}
	if err := k.launchPrefillAttn(s, prefillLaunch{op: op, name: attnPrefillTCName(hd), prep: "PrepareAttnPrefillTC",
		smem: attnPrefillTCSmem(hd), rowsPerBlock: attnPrefillTCRows, threads: attnPrefillTCThreads, nsplit: nsplit,
		extra: []any{part, int32(nsplit)}}, out, q, kRegion, vRegion, format, win, p, rb); err != nil {
		return err
	}
	if nsplit == 1 {
		return nil
	}
	return k.combineTC(s, op, out, part, win, p, nsplit, hd)
}

// combineTC merges the nsplit partial rows of a tensor-core launch into
// out (minfer_attn_prefill_tc_combine, a warp a row).
func (k *Kernels) combineTC(s *driver.Stream, op string, out, part, win driver.DevicePtr, p AttnParams, nsplit, hd int) error {
	const combine = "minfer_attn_prefill_tc_combine"
	rows := p.NT * (p.NHead / p.NHeadKV)
	warps := attnPrefillTCThreads / 32
	if err := k.launch(s, combine, [3]uint32{uint32((rows*p.NHeadKV + warps - 1) / warps), 1, 1}, [3]uint32{attnPrefillTCThreads, 1, 1}, 0,
		out, part, win, int32(p.NT), int32(p.NHead), int32(p.NHeadKV), int32(p.HeadDim), int32(p.NCtx), int32(p.Window),
		int32(nsplit), int32(hd+2)); err != nil {
		return fmt.Errorf("cuda: %s %s nt=%d heads=%d/%d splits=%d: %w", op, combine, p.NT, p.NHead, p.NHeadKV, nsplit, err)
	}
	return nil
}

// The tensor-core decode attention (MINFER_ATTN_DECODE_TC): the tensor-core
// kernels' body with a block of one warp and 16 rows (the G query heads of
// a KV head for nt tokens, padded), so one K / V tile in shared memory
// serves a KV head's whole group through the tensor cores; the partials and
// scratch of the prefill kernels, and a combine of its own
// (minfer_attn_decode_tc_combine: a block of 4 warps a row, the splits'
// loads in flight together) that also writes the Q8_1 row under
// MINFER_FUSE_ATTN_Q8.
const (
	attnDecodeTCRows    = 16
	attnDecodeTCThreads = 32
	// attnDecodeTCMaxSplits caps the KV splits of a decode launch
	// (fatc::DC_MAXS, what the combine's lanes hold).
	attnDecodeTCMaxSplits = 128
	// attnDecodeTCNarrowMaxSplits is the narrow form's cap
	// (fatc::DC_MAXS_NARROW: twice the blocks an SM, twice the splits).
	attnDecodeTCNarrowMaxSplits = 256
	attnDecodeTCCombineTh       = 128 // fatc::DC_WARPS * 32
	// attnDecodeTCMinCells is fatc::DEC_MIN_CELLS: the fewest cells an
	// active split takes, 2 tiles of 64 or 4 of 32 (fatc::DEC_MIN_TILES).
	attnDecodeTCMinCells = 128
)

// attnDecodeTCForm is one tile width of the tensor-core decode kernels:
// minfer_attn_decode_tc_* over 64-cell tiles (fatc::BN), or the narrow
// form minfer_attn_decode_tc32_* over 32 (fatc::BN_NARROW,
// MINFER_ATTN_DECODE_TC_NARROW): half the shared memory a block, so twice
// the one-warp blocks an SM and twice the splits, each with half the
// serial work a tile. Each has its combine, which plans the splits as its
// kernel does.
type attnDecodeTCForm struct {
	bn        int    // KV cells a tile
	maxSplits int    // the combine's cap (fatc::DC_MAXS, DC_MAXS_NARROW)
	prefix    string // the kernels: prefix_hd64, prefix_hd128 and prefix_combine
}

var (
	attnDecodeTCWide   = attnDecodeTCForm{bn: attnPrefill2BN, maxSplits: attnDecodeTCMaxSplits, prefix: "minfer_attn_decode_tc"}
	attnDecodeTCNarrow = attnDecodeTCForm{bn: 32, maxSplits: attnDecodeTCNarrowMaxSplits, prefix: "minfer_attn_decode_tc32"}
)

// attnDecodeTCFormOf is the form MINFER_ATTN_DECODE_TC_NARROW picks.
func attnDecodeTCFormOf(narrow bool) attnDecodeTCForm {
	if narrow {
		return attnDecodeTCNarrow
	}
	return attnDecodeTCWide
}

// name is the decode kernel of a head_dim variant (64 or 128).
func (f attnDecodeTCForm) name(hd int) string { return fmt.Sprintf("%s_hd%d", f.prefix, hd) }

// combine is the form's combine kernel.
func (f attnDecodeTCForm) combine() string { return f.prefix + "_combine" }

// smem is fatc::Geo<HD, BNT>::BYTES: two buffers of K and V tiles of bn
// rows of HD+8 halves (the 64-cell form's is attnPrefillTCSmem).
func (f attnDecodeTCForm) smem(hd int) int { return 2 * 2 * f.bn * (hd + 8) * 2 }

// minTiles is fatc::DEC_MIN_TILES of the form's width.
func (f attnDecodeTCForm) minTiles() int { return attnDecodeTCMinCells / f.bn }

// splitPlan is the decode kernels' run-time split rule
// (fatc::dec_split_plan, which the kernel and its combine both call): of a
// block's ntiles bn-cell tiles over the grid's nsplit splits, per tiles a
// split and the used splits that have any (the first used; the others exit
// at once and write no partial, and the combine reads the first used).
func (f attnDecodeTCForm) splitPlan(ntiles, nsplit int) (per, used int) {
	per = max((ntiles+nsplit-1)/nsplit, f.minTiles())
	return per, (ntiles + per - 1) / per
}

// attnDecodeTCSplitPlan is the 64-cell form's splitPlan.
func attnDecodeTCSplitPlan(ntiles, nsplit int) (per, used int) {
	return attnDecodeTCWide.splitPlan(ntiles, nsplit)
}

// attnDecodeTCYielded is the line the backend logs when
// MINFER_ATTN_DECODE_TC=1 meets a KV cache it does not route (attnFamily):
// set, and not taken, it must say so ("" otherwise).
func attnDecodeTCYielded(lv levers.Config, f kv.Format) string {
	if !lv.AttnDecodeTC || lv.NoSplitKAttn || f == kv.F16 {
		return ""
	}
	return fmt.Sprintf("cuda: MINFER_ATTN_DECODE_TC=1 over a %s KV cache: decode attention stays on the lean kernels "+
		"(the tensor-core decode reads f16 caches; MINFER_CACHE_TYPE=f16 routes it)", f)
}

// attnDecodeTCName is the 64-cell decode kernel of a head_dim variant (64 or 128).
func attnDecodeTCName(hd int) string { return attnDecodeTCWide.name(hd) }

// splits is how many blocks share each (row tile, KV head)'s cells: as
// many as fill one wave of the blocks an SM holds (perSM), at least 2 (the
// combine always writes the row, so the Q8_1 form has one path), at most
// one a tile of the context, the combine's cap, and what the prefill
// kernels' scratch holds. It depends on the shapes, the context and the
// device only (a captured graph replays with more cells filled); the
// filled range activates splits at run time (splitPlan: at least 128
// cells each, so a short range runs few blocks and the combine reads few
// partials). 7B (4 KV heads, G 7) on 132 SMs: 64-cell tiles 99 splits,
// 396 blocks, of which 4 run at depth 0 and 336 at depth 32128; 32-cell
// tiles 198 splits, 792 blocks, 4 and 672 of them.
func (f attnDecodeTCForm) splits(p AttnParams, smCount int) int {
	hd := attnPrefillHD(p.HeadDim)
	rows := p.NT * (p.NHead / p.NHeadKV)
	base := (rows + attnDecodeTCRows - 1) / attnDecodeTCRows * p.NHeadKV
	if base <= 0 {
		return 2
	}
	ns := min(max(f.perSM(hd)*smCount/base, 1), f.maxSplits, max((p.NCtx+f.bn-1)/f.bn, 1))
	rec := p.NHeadKV * rows * (hd + 2) * 4 // one split's partials
	return max(min(ns, AttnPrefillTCScratchBytes(p.HeadDim, smCount)/rec), 2)
}

// perSM is how many of the form's one-warp blocks an SM holds by their
// shared memory: the H100's / H200's 228 KiB an SM, 1 KiB reserved a
// block. 64-cell tiles: 3 at head_dim 128, 6 at 64; 32-cell: 6 and 12.
func (f attnDecodeTCForm) perSM(hd int) int { return (228 << 10) / (f.smem(hd) + 1<<10) }

// attnDecodeTCSplits is the 64-cell form's splits.
func attnDecodeTCSplits(p AttnParams, smCount int) int { return attnDecodeTCWide.splits(p, smCount) }

// decodeTCForm is the decode form these kernels launch
// (KernelsOptions.DecodeTCNarrow).
func (k *Kernels) decodeTCForm() attnDecodeTCForm { return attnDecodeTCFormOf(k.dtcNarrow) }

// AttentionDecodeTC is the decode attention's contract (nt <=
// AttnDecodeMaxNT) through the tensor cores (numerics: the
// f16-attention-tile class). part is the prefill kernels' scratch
// (AttnPrefillTCScratchBytes). The grid has attnDecodeTCSplits splits; the
// filled range activates the first of them at run time
// (attnDecodeTCSplitPlan), and the combine reads only those. The combine
// writes out (f32, unless out is 0) and, when q8 is not 0, the rows' Q8_1
// blocks at q8 (head_dim 64 / 128, q8Bytes at least ActQ8Bytes of the
// rows): the o-projection's input under MINFER_FUSE_ATTN_Q8. The kernels
// are the 64-cell form's, or with KernelsOptions.DecodeTCNarrow
// (MINFER_ATTN_DECODE_TC_NARROW) the 32-cell form's (attnDecodeTCForm).
func (k *Kernels) AttentionDecodeTC(s *driver.Stream, out, q8 driver.DevicePtr, q8Bytes uint64, q, kRegion, vRegion driver.DevicePtr,
	format kv.Format, win driver.DevicePtr, part driver.DevicePtr, partBytes int, p AttnParams) error {
	return k.attentionDecodeTC(k.decodeTCForm(), s, out, q8, q8Bytes, q, kRegion, vRegion, format, win, part, partBytes, p)
}

// attentionDecodeTC is AttentionDecodeTC through form f (tests run either).
func (k *Kernels) attentionDecodeTC(f attnDecodeTCForm, s *driver.Stream, out, q8 driver.DevicePtr, q8Bytes uint64, q, kRegion, vRegion driver.DevicePtr,
	format kv.Format, win driver.DevicePtr, part driver.DevicePtr, partBytes int, p AttnParams) error {
	const op = "attn_decode_tc"
	rb, err := p.check(format)
	if err != nil {
		return err
	}
	if p.NT > AttnDecodeMaxNT {
		return opsBad(op, "nt %d: the decode kernels take at most %d tokens", p.NT, AttnDecodeMaxNT)
	}
	if out == 0 && q8 == 0 {
		return opsBad(op, "no output: out and q8 are both null")
	}
	if q8 != 0 {
		if !p.q8Form() {
			return opsBad(op, "a Q8_1 output at head_dim %d: the kernels write it at head_dim 64 or 128", p.HeadDim)
		}
		if need := ActQ8Bytes(p.HeadDim*p.NHead, p.NT); q8Bytes < need {
			return opsBad(op, "the Q8_1 output of %d bytes is short of %d", q8Bytes, need)
		}
	}
	hd := attnPrefillHD(p.HeadDim)
	rows := p.NT * (p.NHead / p.NHeadKV)
	nsplit := f.splits(p, k.dev.Attr.SMCount)
	if need := nsplit * p.NHeadKV * rows * (hd + 2) * 4; part == 0 || partBytes < need {
		return opsBad(op, "%s: %d splits need %d bytes of scratch, given %d at %#x", f.name(hd), nsplit, need, partBytes, uint64(part))
	}
	if err := k.launchPrefillAttn(s, prefillLaunch{op: op, name: f.name(hd), prep: "PrepareAttnPrefillTC",
		smem: f.smem(hd), rowsPerBlock: attnDecodeTCRows, threads: attnDecodeTCThreads, nsplit: nsplit,
		extra: []any{part, int32(nsplit)}}, out, q, kRegion, vRegion, format, win, p, rb); err != nil {
		return err
	}
	if err := k.launch(s, f.combine(), [3]uint32{uint32(rows * p.NHeadKV), 1, 1}, [3]uint32{attnDecodeTCCombineTh, 1, 1}, 0,
		out, q8, part, win, int32(p.NT), int32(p.NHead), int32(p.NHeadKV), int32(p.HeadDim), int32(p.NCtx), int32(p.Window),
		int32(nsplit), int32(hd+2)); err != nil {
		return fmt.Errorf("cuda: %s %s nt=%d heads=%d/%d splits=%d: %w", op, f.combine(), p.NT, p.NHead, p.NHeadKV, nsplit, err)
	}
	return nil
}
