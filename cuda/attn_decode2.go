package cuda

// attn_decode2.go: the lean split-K decode attention
// (cuda/kernels/attn_decode2.cu) and its scratch. opAttn takes this path for
// nt <= AttnDecodeMaxNT unless MINFER_NO_SPLITK_ATTN=1 (the v1 split-K
// kernel it replaced was retired with MINFER_ATTN_DECODE_V2; its first and
// grouped forms and the cap of 128 splits lost to the lean form and were
// retired in session 28: reports/MINFER_ATTN_DECODE_LEAN).
//
// The grid depends on the shapes and n_ctx only:
// the kernel reads the window from device memory and picks its active
// splits at run time (attnDecode2SplitPlan), so a captured graph replays.

import (
	"fmt"
	"strings"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
)

const (
	attnDecode2Threads = 32 // adec2::THREADS: one warp per block
	// attnDecode2MaxSplits caps the splits of the cells (64 x 32 cells
	// covers 2K cells; past that a split's chunk grows). The kernel's
	// combine takes up to adec2::MAXS; 128 splits were no faster at depth
	// 32128 (reports/MINFER_ATTN_SPLITS).
	attnDecode2MaxSplits   = 64
	attnDecode2SplitCells  = 32 // adec2::SPLIT: fewest cells per active split once the range is split
	attnDecode2SingleCells = 64 // adec2::SINGLE: ranges up to this many cells take one split, no combine
)

// attnDecode2SplitPlan is the kernel's run-time split rule (adec2::decode):
// for n attended cells over nsplit splits, the chunk of cells per split and
// the number of active splits (the first nact of the grid's nsplit).
func attnDecode2SplitPlan(n, nsplit int) (chunk, nact int) {
	chunk = n
	if n > attnDecode2SingleCells {
		chunk = max((n+nsplit-1)/nsplit, attnDecode2SplitCells)
	}
	return chunk, (n + chunk - 1) / chunk
}

// attnDecode2Names[form][hd class][format]: the lean kernels, the ones
// with the Q8_1 output (MINFER_FUSE_ATTN_Q8: hd 64 and 128 only, "" for
// any); hd 64, 128, any even head_dim; kv.F32, F16, Q8_0.
var attnDecode2Names = func() (n [2][3][3]string) {
	for g, fam := range []string{"minfer_attn_decode2l", "minfer_attn_decode2q"} {
		for i, hd := range []string{"hd64", "hd128", "any"} {
			for k, f := range []string{"f32", "f16", "q8_0"} {
				if g == 0 || i < 2 {
					n[g][i][k] = fmt.Sprintf("%s_%s_%s", fam, hd, f)
				}
			}
		}
	}
	return n
}()

// optInRequires are the forms (the f16 prefill matmul, the decode
// attention's Q8_1 output, the mixed q/k/v matvec, the q/k/v matvec's
// rope/store, the normed decode matvecs, the tensor-core decode attention
// and its narrow tiles) whose Requires the backend enforces: set to 1 where
// another setting sends that work to another kernel, the setting would
// switch nothing that was asked for. (Those on by default yield instead
// while unset.)
var optInRequires = []string{"MINFER_MMQ_F16_KQ", "MINFER_FUSE_ATTN_Q8", "MINFER_MMVQ_QKV_MIXED", "MINFER_FUSE_QKV_ROPE",
	"MINFER_FUSE_NORM_MMVQ",
	"MINFER_ATTN_DECODE_TC",
	// After MINFER_ATTN_DECODE_TC, which it requires (dsLevers drops them in this order).
	"MINFER_ATTN_DECODE_TC_NARROW"}

// optInConflict refuses lever=1 (one of optInRequires), set, where its
// Requires do not hold.
func optInConflict(lv levers.Config, lever string) error {
	if bad := lv.Unmet(lever); lv.Set()[lever] == "1" && len(bad) > 0 {
		l, _ := levers.Lookup(lever)
		return fmt.Errorf("cuda: %s=1 switches the %s, and %s: unset those or %s", lever, l.Path, strings.Join(bad, ", "), lever)
	}
	return nil
}

// attnDecode2Geom is the launch geometry of one call.
type attnDecode2Geom struct {
	nsplit int // splits of the cells (grid.y)
	gridX  int // nt * n_head
	name   string

	// scratch sections (byte offsets and the total)
	mlOff, accOff, bytes uint64
}

// attnDecode2Geometry derives the geometry from the shape (p.check passed).
func attnDecode2Geometry(p AttnParams, format kv.Format) attnDecode2Geom {
	geo := attnDecode2Geom{gridX: p.NT * p.NHead,
		nsplit: min(attnDecode2MaxSplits, (p.NCtx+attnDecode2SplitCells-1)/attnDecode2SplitCells)}
	form := 0
	if p.Q8 {
		form = 1
	}
	hdClass := 2
	switch p.HeadDim {
	case 64:
		hdClass = 0
	case 128:
		hdClass = 1
	}
	fc := 0
	switch format {
	case kv.F16:
		fc = 1
	case kv.Q8_0:
		fc = 2
	}
	geo.name = attnDecode2Names[form][hdClass][fc]
	align := func(n uint64) uint64 { return (n + attnDecodeAlign - 1) / attnDecodeAlign * attnDecodeAlign }
	// Sized for AttnDecodeMaxNT tokens whatever p.NT is, so one scratch
	// serves every nt (a short launch never writes over a longer one's
	// counters).
	maxX := uint64(AttnDecodeMaxNT * p.NHead)
	parts := maxX * uint64(geo.nsplit)
	geo.mlOff = align(4 * maxX)
	geo.accOff = geo.mlOff + align(8*parts)
	geo.bytes = geo.accOff + 4*parts*uint64(p.HeadDim)
	return geo
}

// AttnDecode2ScratchBytes is the scratch AttentionDecode2 needs for the
// shape of p (heads, head_dim, n_ctx; any NT up to AttnDecodeMaxNT): the
// per-(token, head) completion counters (zero between launches) and the
// per-split partials. A scratch belongs to one shape.
func AttnDecode2ScratchBytes(p AttnParams, format kv.Format) (int, error) {
	p.NT = 1
	if _, err := p.checkDecode(format); err != nil {
		return 0, err
	}
	return int(attnDecode2Geometry(p, format).bytes), nil
}

// AttentionDecode2 is Attention (same operands, same semantics, NaN rows
// for a start the region cannot hold) for up to AttnDecodeMaxNT tokens by
// the lean split-K kernel.
// scratch is scratchBytes (AttnDecode2ScratchBytes) of device memory, zeroed
// when allocated and used for this shape only; every launch leaves its
// counters zero again. Launches on one scratch must be stream-ordered.
func (k *Kernels) AttentionDecode2(s *driver.Stream, out, q, kRegion, vRegion driver.DevicePtr, format kv.Format, win,
	scratch driver.DevicePtr, scratchBytes int, p AttnParams) error {
	p.Q8 = false
	return k.attentionDecode2(s, out, 0, q, kRegion, vRegion, format, win, scratch, scratchBytes, p)
}

func (k *Kernels) attentionDecode2(s *driver.Stream, out, q8, q, kRegion, vRegion driver.DevicePtr, format kv.Format, win,
	scratch driver.DevicePtr, scratchBytes int, p AttnParams) error {
	rb, err := p.checkDecode(format)
	if err != nil {
		return fmt.Errorf("attn_decode2: %w", err)
	}
	geo := attnDecode2Geometry(p, format)
	if scratch == 0 || uint64(scratchBytes) < geo.bytes {
		return opsBad("attn_decode2", "scratch of %d bytes at %#x, the shape needs %d", scratchBytes, uint64(scratch), geo.bytes)
	}
	args := []any{out, q, kRegion, vRegion, win, scratch.Add(geo.mlOff), scratch.Add(geo.accOff), scratch,
		int32(p.NHead), int32(p.NHeadKV), int32(p.HeadDim), int64(rb), int32(p.NCtx), int32(p.Window), attnScale(p),
		int32(geo.nsplit)}
	if p.Q8 {
		args = append(args, q8)
	}
	return opsErr("attn_decode2", k.launch(s, geo.name, [3]uint32{uint32(geo.gridX), uint32(geo.nsplit), 1},
		[3]uint32{attnDecode2Threads, 1, 1}, 0, args...))
}

// q8Form reports whether p's decode kernel has a Q8_1-output form
// (minfer_attn_decode2q_*): head_dim 64 or 128.
func (p AttnParams) q8Form() bool {
	return p.HeadDim == 64 || p.HeadDim == 128
}

// AttentionDecode2Q8 is AttentionDecode2 (head_dim 64 or 128) that also
// writes the output's Q8_1 quantization at q8 (ActQ8Bytes(NHead * HeadDim, NT) bytes, 4-byte
// aligned: the bytes minfer_quantize_q8_1 makes of out). out may be 0:
// then only q8 is written (MINFER_FUSE_ATTN_Q8: the o-projection reads
// nothing else).
func (k *Kernels) AttentionDecode2Q8(s *driver.Stream, out, q8 driver.DevicePtr, q8Bytes uint64, q, kRegion, vRegion driver.DevicePtr,
	format kv.Format, win, scratch driver.DevicePtr, scratchBytes int, p AttnParams) error {
	if !p.q8Form() {
		return opsBad("attn_decode2", "the Q8_1 output takes head_dim 64 or 128, not %d", p.HeadDim)
	}
	if need := ActQ8Bytes(p.NHead*p.HeadDim, p.NT); q8 == 0 || uint64(q8)%4 != 0 || q8Bytes < need {
		return opsBad("attn_decode2", "Q8_1 output of %d bytes at %#x, %d tokens of %d values need %d, 4-byte aligned",
			q8Bytes, uint64(q8), p.NT, p.NHead*p.HeadDim, need)
	}
	p.Q8 = true
	return k.attentionDecode2(s, out, q8, q, kRegion, vRegion, format, win, scratch, scratchBytes, p)
}

// attnDecode2Scratch returns the backend's scratch of the lean kernel for
// the shape of p, allocating and zeroing it the first time the shape asks
// (one per model in practice: every layer and every nt <= AttnDecodeMaxNT
// share it). That is the first decode-shaped attention node, a direct
// execution (a split is captured at its third run at the earliest); the
// allocation moves the pool generation, so no graph captured before it
// replays, and the memory stays until Close.
func (b *Backend) attnDecode2Scratch(p AttnParams) (driver.DevicePtr, int, error) {
	key := attnScratchKey{nHead: p.NHead, nHeadKV: p.NHeadKV, headDim: p.HeadDim, nCtx: p.NCtx}
	if sb, ok := b.attnScratch[key]; ok {
		return sb.ptr, sb.bytes, nil
	}
	need, err := AttnDecode2ScratchBytes(p, b.kvSpec.Format)
	if err != nil {
		return 0, 0, err
	}
	// Zeroed: the scratch starts with the arrival counters, which every
	// launch leaves at 0 for the next.
	return b.attnScratchAlloc(key, need, true, fmt.Sprintf("lean decode attention scratch (%d heads over %d KV heads of %d, %d cells)",
		p.NHead, p.NHeadKV, p.HeadDim, p.NCtx))
}

// attnTCScratch returns the scratch of the tensor-core attention's split
// launches, prefill and decode (AttnPrefillTCScratchBytes, one per head_dim
// variant, allocated the first time a shape splits; 0 while none does).
// As attnDecode2Scratch: allocated at a direct execution, before any
// capture of the node, kept until Close.
func (b *Backend) attnTCScratch(p AttnParams, nsplit int) (driver.DevicePtr, int, error) {
	if nsplit == 1 {
		return 0, 0, nil
	}
	key := attnScratchKey{headDim: attnPrefillHD(p.HeadDim), prefillTC: true}
	if sb, ok := b.attnScratch[key]; ok {
		return sb.ptr, sb.bytes, nil
	}
	need := AttnPrefillTCScratchBytes(p.HeadDim, b.dev.Attr.SMCount)
	return b.attnScratchAlloc(key, need, false, fmt.Sprintf("tensor-core attention partials (head_dim %d)", key.headDim))
}

// attnScratchAlloc allocates need bytes of workspace for key (zeroed when
// zero is set) and keeps it in b.attnScratch until Close.
func (b *Backend) attnScratchAlloc(key attnScratchKey, need int, zero bool, what string) (driver.DevicePtr, int, error) {
	var ptr driver.DevicePtr
	err := b.dev.Do(func() error {
		var err error
		if ptr, err = b.pool.raw(MemWorkspace, uint64(need), what); err != nil {
			return err
		}
		if zero {
			if err := b.s.MemsetD8(ptr, 0, uint64(need)); err != nil {
				return fmt.Errorf("cuda: zero the %s: %w", what, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if b.attnScratch == nil {
		b.attnScratch = map[attnScratchKey]attnScratchBuf{}
	}
	b.attnScratch[key] = attnScratchBuf{ptr, need}
	return ptr, need, nil
}

const (
	// AttnDecodeMaxNT is the most query tokens the split-K kernel takes
	// (decode and the speculative / multi-token paths).
	AttnDecodeMaxNT = 8
	// attnDecodeAlign is the scratch section alignment (bytes).
	attnDecodeAlign = 256
)

// checkDecode is check plus the split-K kernel's token limit.
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
