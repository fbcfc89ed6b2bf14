package cuda

// attn_decode.go: the split-K decode attention (cuda/kernels/attn_decode.cu)
// and its scratch. opAttn takes this path for nt <= AttnDecodeMaxNT unless
// MINFER_NO_SPLITK_ATTN=1 (levers.Config.NoSplitKAttn).
//
// The grid depends on the shapes and n_ctx only, never on the KV length, so
// a captured decode graph replays with fresh cells: the kernel reads the
// window {start, kv_len} from device memory and picks the active splits at
// run time (attnDecodeSplitPlan); the idle ones exit at once.

import (
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/kv"
)

const (
	// AttnDecodeMaxNT is the most query tokens the split-K kernel takes
	// (decode and the speculative / multi-token paths).
	AttnDecodeMaxNT = 8

	attnDecodeThreads     = 128 // adec::THREADS
	attnDecodeMaxSplits   = 32  // adec::MAXS
	attnDecodeSplitCells  = 128 // adec::SPLIT: fewest cells per active split once the range is split
	attnDecodeSingleCells = 256 // adec::SINGLE: ranges up to this many cells take one split, no combine
	attnDecodeMaxHeads    = 8   // adec::GMAX: query heads per block
	attnDecodeAlign       = 256 // scratch section alignment (bytes)
)

// attnDecodeSplitPlan is the kernel's run-time split rule (adec::decode):
// for n attended cells over nsplit splits, the chunk of cells per split and
// the number of active splits (the first nact of the grid's nsplit).
func attnDecodeSplitPlan(n, nsplit int) (chunk, nact int) {
	chunk = n
	if n > attnDecodeSingleCells {
		chunk = max((n+nsplit-1)/nsplit, attnDecodeSplitCells)
	}
	return chunk, (n + chunk - 1) / chunk
}

// attnDecodeNames[hd class][heads class][format]: hd 64, 128, any even
// head_dim; GB 1, 2, 4, 8 (>= the heads per block); kv.F32, F16, Q8_0.
var attnDecodeNames = func() (n [3][4][3]string) {
	for i, hd := range []string{"hd64", "hd128", "any"} {
		for j, gb := range []int{1, 2, 4, 8} {
			for k, f := range []string{"f32", "f16", "q8_0"} {
				n[i][j][k] = fmt.Sprintf("minfer_attn_decode_%s_g%d_%s", hd, gb, f)
			}
		}
	}
	return n
}()

// attnDecodeGeom is the launch geometry of one call.
type attnDecodeGeom struct {
	nsub   int // query-head sub-groups per KV head
	hps    int // query heads per block (the last sub-group may have fewer)
	nsplit int // splits of the cells (grid.y)
	gridX  int // nt * n_head_kv * nsub
	name   string

	// scratch sections (byte offsets and the total)
	mlOff, accOff, bytes uint64
}

// attnDecodeGeometry derives the geometry from the shape (p.check passed).
func attnDecodeGeometry(p AttnParams, format kv.Format) attnDecodeGeom {
	g := p.NHead / p.NHeadKV
	nsub := (g + attnDecodeMaxHeads - 1) / attnDecodeMaxHeads
	hps := (g + nsub - 1) / nsub
	nsub = (g + hps - 1) / hps // every sub-group non-empty
	geo := attnDecodeGeom{nsub: nsub, hps: hps, gridX: p.NT * p.NHeadKV * nsub,
		nsplit: min(attnDecodeMaxSplits, (p.NCtx+attnDecodeSplitCells-1)/attnDecodeSplitCells)}
	hdClass := 2
	switch p.HeadDim {
	case 64:
		hdClass = 0
	case 128:
		hdClass = 1
	}
	gbClass := 3
	switch {
	case hps <= 1:
		gbClass = 0
	case hps <= 2:
		gbClass = 1
	case hps <= 4:
		gbClass = 2
	}
	fc := 0
	switch format {
	case kv.F16:
		fc = 1
	case kv.Q8_0:
		fc = 2
	}
	geo.name = attnDecodeNames[hdClass][gbClass][fc]
	align := func(n uint64) uint64 { return (n + attnDecodeAlign - 1) / attnDecodeAlign * attnDecodeAlign }
	// The counter section is sized for AttnDecodeMaxNT tokens whatever
	// p.NT is: a launch with fewer tokens never writes partials over the
	// counters of a later launch with more.
	maxX := uint64(AttnDecodeMaxNT * p.NHeadKV * nsub)
	parts := maxX * uint64(geo.nsplit) * uint64(hps)
	geo.mlOff = align(4 * maxX)
	geo.accOff = geo.mlOff + align(8*parts)
	geo.bytes = geo.accOff + 4*parts*uint64(p.HeadDim)
	return geo
}

func (p AttnParams) checkDecode(format kv.Format) (rowBytes int, err error) {
	rb, err := p.check(format)
	if err != nil {
		return 0, err
	}
	if p.NT > AttnDecodeMaxNT {
		return 0, opsBad("attn_decode", "%d tokens: the split-K kernel takes at most %d", p.NT, AttnDecodeMaxNT)
	}
	return rb, nil
}

// AttnDecodeScratchBytes is the scratch AttentionDecode needs for the shape
// of p (heads, head_dim, n_ctx; any NT up to AttnDecodeMaxNT): the
// per-block completion counters (zero between launches) and the per-split
// partials. A scratch belongs to one shape: its counter section is where
// another shape may write partials.
func AttnDecodeScratchBytes(p AttnParams, format kv.Format) (int, error) {
	p.NT = 1
	if _, err := p.checkDecode(format); err != nil {
		return 0, err
	}
	return int(attnDecodeGeometry(p, format).bytes), nil
}

// AttentionDecode is Attention (same operands, same semantics, NaN rows for
// a start the region cannot hold) for at most AttnDecodeMaxNT query tokens,
// by the split-K kernel. scratch is scratchBytes (AttnDecodeScratchBytes) of
// device memory, zeroed when allocated and used for this shape only; every
// launch leaves its counters zero again, so one scratch serves every layer,
// every nt and every graph replay. Launches on one scratch must be
// stream-ordered.
func (k *Kernels) AttentionDecode(s *driver.Stream, out, q, kRegion, vRegion driver.DevicePtr, format kv.Format, win,
	scratch driver.DevicePtr, scratchBytes int, p AttnParams) error {
	rb, err := p.checkDecode(format)
	if err != nil {
		return err
	}
	geo := attnDecodeGeometry(p, format)
	if scratch == 0 || uint64(scratchBytes) < geo.bytes {
		return opsBad("attn_decode", "scratch of %d bytes at %#x, the shape needs %d", scratchBytes, uint64(scratch), geo.bytes)
	}
	return opsErr("attn_decode", k.launch(s, geo.name, [3]uint32{uint32(geo.gridX), uint32(geo.nsplit), 1},
		[3]uint32{attnDecodeThreads, 1, 1}, 0,
		out, q, kRegion, vRegion, win, scratch.Add(geo.mlOff), scratch.Add(geo.accOff), scratch,
		int32(p.NHead), int32(p.NHeadKV), int32(p.HeadDim), int64(rb), int32(p.NCtx), int32(p.Window), attnScale(p),
		int32(geo.nsplit), int32(geo.nsub), int32(geo.hps)))
}

// attnDecodeScratch returns the backend's split-K scratch for the shape of
// p, allocating and zeroing it the first time the shape asks (one per
// model in practice: every layer and every nt <= AttnDecodeMaxNT share it).
// That is the first decode-shaped attention node, a direct execution (a
// split is captured at its third run at the earliest); the allocation moves
// the pool generation, so no graph captured before it replays, and the
// memory stays until Close.
func (b *Backend) attnDecodeScratch(p AttnParams) (driver.DevicePtr, int, error) {
	key := attnScratchKey{p.NHead, p.NHeadKV, p.HeadDim, p.NCtx}
	if sb, ok := b.attnScratch[key]; ok {
		return sb.ptr, sb.bytes, nil
	}
	need, err := AttnDecodeScratchBytes(p, b.kvSpec.Format)
	if err != nil {
		return 0, 0, err
	}
	err = b.dev.Do(func() error {
		ptr, err := b.pool.raw(MemWorkspace, uint64(need), fmt.Sprintf("split-K attention scratch (%d heads over %d KV heads of %d, %d cells)",
			p.NHead, p.NHeadKV, p.HeadDim, p.NCtx))
		if err != nil {
			return err
		}
		if err := b.s.MemsetD8(ptr, 0, uint64(need)); err != nil {
			return fmt.Errorf("cuda: zero the split-K attention scratch: %w", err)
		}
		if b.attnScratch == nil {
			b.attnScratch = map[attnScratchKey]attnScratchBuf{}
		}
		b.attnScratch[key] = attnScratchBuf{ptr, need}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return b.attnScratch[key].ptr, need, nil
}
