package cuda

import (
	"errors"
	"fmt"
	"strings"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/memplan"
)

// Device memory (issue 19): every allocation of the backend goes through
// the pool (pool.raw, pool.alloc), which counts its bytes under one class;
// the driver's free and total memory is read when the backend opens,
// before its first allocation. The engine's memory plan (engine/memplan)
// asks the backend its rules and its free memory through memplan.Planner.

// MemClass is what an allocation holds.
type MemClass int

const (
	// MemWeights: the file's tensors as uploaded (1-D tensors expanded to
	// f32).
	MemWeights MemClass = iota
	// MemDerived: copies derived from the weights (the 16-byte-aligned
	// repack of MINFER_MMVQ_REPACK).
	MemDerived
	// MemKV: the KV regions of every layer and the cell-move scratch.
	MemKV
	// MemActivations: the graph's buffers (the pool) and the activation
	// scratch (Q8_1 rows, the fused FFN's up buffer).
	MemActivations
	// MemWorkspace: the kernels' workspaces (split-K attention, MMQ's
	// quantized activations and partials).
	MemWorkspace
	numMemClasses
)

var memClassNames = [numMemClasses]string{"weights", "derived", "kv", "activations", "workspace"}

func (c MemClass) String() string {
	if c < 0 || c >= numMemClasses {
		return fmt.Sprintf("MemClass(%d)", int(c))
	}
	return memClassNames[c]
}

// memCount is the bytes the pool holds from the driver, by class.
type memCount [numMemClasses]uint64

func (m *memCount) add(c MemClass, n uint64) {
	if c >= 0 && c < numMemClasses {
		m[c] += n
	}
}

// DeviceMemory is the backend's memory by class and the driver's view.
type DeviceMemory struct {
	Weights, Derived, KV, Activations, Workspace uint64
	// HostMapped is the weights in page-locked host memory mapped into the
	// device (MINFER_EMBED_HOST): host memory, not in Counted.
	HostMapped uint64
	// ArenaSlack is the weights' arena chunks not handed out (pool.piece):
	// device memory held, in no class, in Counted.
	ArenaSlack uint64
	// FreeAtOpen is the driver's free memory when the backend opened
	// (its context created, its kernels loaded, nothing allocated).
	FreeAtOpen uint64
	// Free and Total are the driver's free and total memory now.
	Free, Total uint64
}

// Counted is the sum of the classes and the arena's slack.
func (m DeviceMemory) Counted() uint64 {
	return m.Weights + m.Derived + m.KV + m.Activations + m.Workspace + m.ArenaSlack
}

// DriverUsed is what the driver says the device lost since the backend
// opened (free at open less free now): Counted, plus the driver's own
// rounding and what the backend allocates outside the pool (captured
// graphs), plus whatever another process took meanwhile. 0 when the
// device has more free now than then.
func (m DeviceMemory) DriverUsed() uint64 {
	if m.Free >= m.FreeAtOpen {
		return 0
	}
	return m.FreeAtOpen - m.Free
}

// openMemory reads the driver's free memory before the first allocation.
// Inside dev.Do.
func (b *Backend) openMemory() error {
	free, total, err := b.dev.MemInfo()
	if err != nil {
		return fmt.Errorf("cuda: device memory at open: %w", err)
	}
	b.memOpen, b.memTotal = free, total
	return nil
}

// DeviceMemory returns the pool's classes and the driver's view now.
func (b *Backend) DeviceMemory() (DeviceMemory, error) {
	took := b.lock()
	c := b.pool.count
	slack := b.pool.arenaHeld - b.pool.arenaUsed
	b.unlock(took)
	m := DeviceMemory{Weights: c[MemWeights], Derived: c[MemDerived], KV: c[MemKV], Activations: c[MemActivations],
		Workspace: c[MemWorkspace], HostMapped: b.pool.hostBytes, ArenaSlack: slack, FreeAtOpen: b.memOpen, Total: b.memTotal}
	if b.closed {
		return m, errors.New("cuda: device memory: backend is closed")
	}
	err := b.dev.Do(func() error {
		var err error
		m.Free, m.Total, err = b.dev.MemInfo()
		return err
	})
	if err != nil {
		return m, fmt.Errorf("cuda: device memory: %w", err)
	}
	return m, nil
}

var _ memplan.Planner = (*Backend)(nil)

// FreeMemory implements memplan.Planner: cuMemGetInfo's free and total.
func (b *Backend) FreeMemory() (free, total uint64, err error) {
	if b.closed {
		return 0, 0, errors.New("cuda: free memory: backend is closed")
	}
	err = b.dev.Do(func() error {
		var err error
		free, total, err = b.dev.MemInfo()
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("cuda: free memory: %w", err)
	}
	return free, total, nil
}

// MemoryRules implements memplan.Planner: the rules of this backend's
// levers and device.
func (b *Backend) MemoryRules() memplan.Rules { return MemoryRules(b.lv, b.dev.Attr.SMCount) }

// ContextOverhead is the plan's figure for the CUDA context with the
// kernels loaded (held before the engine allocates anything): an
// estimate, the device test compares the plan with the measured peak.
const ContextOverhead = 512 << 20

// planSMs is the SM count the plan assumes for the MMQ split-K partials
// when no device is open (the H200's).
const planSMs = 132

// MemoryRules are the CUDA backend's memplan.Rules under the levers lv on
// a device of sms SMs (0: planSMs). Each rule mirrors an allocation site:
//   - weights (weights.go): matrices keep their file bytes, 1-D tensors
//     become f32; a Q8_0 / Q6_K matrix also gets its repacked copy
//     (derived) when repackWanted would say so;
//   - KV (AllocKV): the rows of every layer, and per cell one more row
//     for the cell-move scratch;
//   - scratch beyond the graph's buffers: the Q8_1 activation rows
//     (ensureActQ8), the fused FFN's up buffer at decode and at the
//     prefill (ensureFFNUp), the decode attention's split-K scratch at the
//     context (attnDecode2Scratch), the tensor-core attention's partials
//     (attnTCScratch) and the MMQ scratch of the widest prefill matmul
//     (ensureMMQScratch, which may double).
func MemoryRules(lv levers.Config, sms int) memplan.Rules {
	if sms <= 0 {
		sms = planSMs
	}
	mm := MatMulOptions{NoQ80MMVQ: lv.NoQ80MMVQ, NoKQMMVQ: lv.NoKQMMVQ, MMQ: lv.MMQ, NoPrefillGEMM: lv.NoPrefillGEMM, MMVQNT: lv.MMVQNT,
		MMQF16KQ: lv.MMQF16KQ}
	probe := &Backend{lv: lv, mm: mm}
	r := memplan.Rules{
		Backend: "cuda",
		Weight: func(t memplan.Tensor) (own, derived uint64) {
			if len(t.Dims) == 1 {
				return 4 * uint64(t.Dims[0]), 0
			}
			if probe.repackWanted(t.Type) && !t.Gathered && !lv.OneCopy { // registerWeight's rule
				derived = MMVQRepackBytes(t.Type, t.Dims[0], t.Rows())
			}
			return t.Bytes(), derived
		},
		KVCellExtra: func(rowLen int, f kv.Format) uint64 { return uint64(max(kv.RowBytes(f, rowLen), 0)) },
		Scratch: func(p graph.Params, ts []memplan.Tensor, nt int) uint64 {
			return scratchBytes(probe, p, ts, nt, sms)
		},
		Overhead:     ContextOverhead,
		OverheadWhat: "CUDA context",
	}
	if lv.EmbedHost { // registerHostMapped's rule
		r.HostMapped = func(t memplan.Tensor) bool { return t.Gathered && t.Matrix() }
	}
	if lv.MMVQRepack && !lv.OneCopy { // one copy is no second
		r.DerivedLever = "MINFER_MMVQ_REPACK=0"
	}
	return r
}

// scratchBytes is MemoryRules' Scratch.
func scratchBytes(b *Backend, p graph.Params, ts []memplan.Tensor, nt, sms int) uint64 {
	maxK := 0
	var mmq uint64
	for _, t := range ts {
		if len(t.Dims) < 2 {
			continue
		}
		maxK = max(maxK, t.Dims[0])
		if nt > 1 && mmqOn(t.Type, nt, b.mm) {
			mmq = max(mmq, MMQScratchBytes(t.Dims[0], nt, t.Rows(), sms))
			// The f16 GEMM's rows share the scratch; a matrix has the
			// repacked copy by registerWeight's rule, as its only one under
			// MINFER_ONE_COPY.
			rp := b.repackWanted(t.Type) && !t.Gathered
			if gemm16On(t.Type, nt, rp, rp && b.lv.OneCopy, b.mm) {
				mmq = max(mmq, Gemm16ActBytes(t.Dims[0], nt))
			}
		}
	}
	n := ActQ8Bytes(maxK, actQ8Rows(b.mm))
	n += 4 * uint64(p.NFF) * uint64(1+max(nt, 1)) // the fused FFN's up buffer, decode then prefill
	n += 2 * mmq                                  // grown by doubling
	ap := AttnParams{NT: 1, NHead: p.NHead, NHeadKV: p.NHeadKV, HeadDim: p.HeadDim, NCtx: p.NCtx}
	var attn int
	var err error
	// The tensor-core kernels' partials (attnTCScratch), allocated the
	// first time a launch splits: a prefill's last chunk may be short
	// enough to split, so any prefill through them counts it.
	// The decode and prefill tensor-core kernels share one (attnTCScratch).
	// A route by depth (MINFER_ATTN_DECODE_TC_FROM inside the context)
	// holds both decode families' scratch from its first decode step
	// (attnRoute): the lean kernel's and the partials.
	tc := nt >= AttnPrefillMinNT && attnFamily(nt, nt, b.lv, p.KVFormat) == attnPrefillTC
	lean, decTC := attnDecodeFamilies(1, p.NCtx, b.lv, p.KVFormat)
	if lean {
		attn, err = AttnDecode2ScratchBytes(ap, p.KVFormat)
	}
	tc = tc || decTC
	if tc {
		attn += AttnPrefillTCScratchBytes(p.HeadDim, sms)
	}
	if err == nil {
		n += uint64(attn)
	}
	return n
}

// outOfMemory marks an allocation's error as graph.ErrOutOfMemory when the
// driver had not the memory (CUDA_ERROR_OUT_OF_MEMORY) or the test seam
// failed the allocation (MINFER_TEST_CALL_FAIL=cuMemAlloc_v2 stands for an
// out-of-memory); any other error is returned as it is.
func outOfMemory(err error) error {
	var de *driver.Error
	if err == nil || !errors.As(err, &de) {
		return err
	}
	if de.Code == driver.CodeOutOfMemory || (de.Injected && strings.HasPrefix(de.Call, "cuMemAlloc")) {
		return &oomError{err}
	}
	return err
}

// oomError is an allocation the device could not hold.
type oomError struct{ err error }

func (e *oomError) Error() string        { return e.err.Error() }
func (e *oomError) Unwrap() error        { return e.err }
func (e *oomError) Is(target error) bool { return target == graph.ErrOutOfMemory }
