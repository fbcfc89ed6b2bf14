package cuda

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
)

// Options configure a Backend.
type Options struct {
	// Levers are the parsed MINFER_* settings (engine/levers): the backend
	// reads those of backend cuda or any, each listed with the path it
	// switches by `minfer levers` (one registry; no list kept here).
	Levers levers.Config
	// Ordinal is the device index.
	Ordinal int
	// Logf receives setup and capture messages; nil discards them.
	Logf func(format string, args ...any)
}

// Backend is the CUDA graph.Backend. One instance owns one device handle
// (a locked worker thread with the primary context current), the loaded
// kernels and one non-blocking stream: everything it issues (copies,
// kernels, capture, replay, syncs) goes on that stream, so two instances in
// one process never order against each other. It is not safe for
// concurrent use (like the engine that owns it), with one exception:
// RegisterWeight may be called from another goroutine while the engine's
// goroutine runs (b.mu; capture.go states the rule).
type Backend struct {
	// mu is the host-state lock: RegisterWeight holds it for the whole
	// registration, and the entry points the engine's goroutine calls take
	// it around whatever reads or writes what a registration writes (the
	// weight table, the pool's generation and counts, the matmul scratch,
	// the capture state), so a registration runs between two calls, never
	// inside one (a capture window included). It is never taken inside
	// dev.Do (a Do under mu would wait on a holder forever).
	mu sync.Mutex
	// regWaits counts registrations that found mu held (one ran while
	// another call was in progress): the concurrent-registration test's
	// evidence that its registration overlapped the capture window.
	regWaits atomic.Int64
	// pinned is true while a Pin's fn runs (Pin holds mu for it);
	// pinnedSteps counts the Pins (the census's pinned_steps).
	pinned      atomic.Bool
	pinnedSteps atomic.Int64

	dev  *driver.Device
	k    *Kernels
	s    *driver.Stream
	lv   levers.Config
	logf func(string, ...any)
	mm   MatMulOptions

	pool        *pool
	stage       staging
	weights     map[string]*devWeight
	weightBytes uint64
	// reregistered counts registrations that replaced a name's devWeight
	// (setWeight): while it is what a captured graph saw, none of the
	// graph's weights can have changed, and staleReason skips their walk
	// on the decode step's path.
	reregistered uint64
	repackBytes  uint64 // the repacked copies (MINFER_MMVQ_REPACK), not in weightBytes
	memOpen      uint64 // the driver's free memory at open (memory.go)
	memTotal     uint64 // and its total

	kvSpec    graph.KVSpec
	kvK, kvV  []driver.DevicePtr // per layer
	kvRowB    int
	kvScratch driver.DevicePtr // KVMove's bounce buffer (one region)
	kvStamp   uint64           // moves whenever the KV layout changes
	// kvLen is the kv_len of the next run's KV window (SetKVLength, before
	// the run): the decode attention's route by depth reads it.
	kvLen int

	attnScratch map[attnScratchKey]attnScratchBuf // split-K decode attention scratch per shape (attn_decode.go)

	cap    capture
	ops    map[graph.Op]opFunc
	closed bool

	timer deviceTimer // device time of every split (timing.go)

	// ffnUp is the fused FFN's up-projection scratch for the paths that
	// run gate and up as two matmuls (ffnUpLen f32 values; grown by
	// opFusedFFN at plan time, outside any capture window, never shrunk).
	ffnUp    driver.DevicePtr
	ffnUpLen int
}

var _ graph.Backend = (*Backend)(nil)

// New opens the device, loads the kernels fatbin, does the matmul
// shared-memory opt-ins (before any capture window can exist) and creates
// the backend's stream. When no device can be used (MINFER_DISABLE_CUDA, no
// driver, no GPU) the error matches driver.ErrNoDevice.
func New(opts Options) (*Backend, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if err := oneCopyConflict(opts.Levers); err != nil {
		return nil, err
	}
	for _, lever := range optInRequires {
		if err := optInConflict(opts.Levers, lever); err != nil {
			return nil, err
		}
	}
	if line := oneCopyYielded(opts.Levers); line != "" {
		logf("%s", line)
	}
	dev, err := driver.Open(driver.Options{Disable: opts.Levers.DisableCUDA, Ordinal: opts.Ordinal, CallFail: opts.Levers.TestCallFail})
	if err != nil {
		return nil, err
	}
	b := &Backend{
		dev: dev, lv: opts.Levers, logf: logf,
		mm: MatMulOptions{NoPrefillGEMM: opts.Levers.NoPrefillGEMM,
			NoQ80MMVQ: opts.Levers.NoQ80MMVQ, NoQ40MMVQ: opts.Levers.NoQ40MMVQ, NoKQMMVQ: opts.Levers.NoKQMMVQ, MMQ: opts.Levers.MMQ,
			MMQAsync: opts.Levers.MMQAsync, MMQF16KQ: opts.Levers.MMQF16KQ,
			// Multi-token mmvq for 2..8 tokens (MINFER_MMVQ_NT=1).
			MMVQNT: opts.Levers.MMVQNT,
			// Several warps per row for few-row decode mmvq (MINFER_MMVQ_SPLIT=1).
			MMVQSplit: opts.Levers.MMVQSplit,
			// One launch for a decode q/k/v of mixed types (MINFER_MMVQ_QKV_MIXED=1).
			MMVQQKVMixed: opts.Levers.MMVQQKVMixed},
		pool:    newPool(dev),
		weights: map[string]*devWeight{},
		ops:     opTable(),
	}
	b.cap = capture{
		enabled:        !opts.Levers.NoCUDAGraph,
		prefillCapture: !opts.Levers.NoPrefillCapture,
		warmup:         captureWarmup,
		keys:           map[graph.SplitKey]*captured{},
	}
	b.cap.stats.Disabled = opts.Levers.NoCUDAGraph
	err = dev.Do(func() error {
		k, err := LoadKernels(dev, KernelsOptions{Path: opts.Levers.Kernels, Census: opts.Levers.LaunchCensus, OpTiming: opts.Levers.OpTiming,
			QuantizeX4: opts.Levers.QuantizeX4, DecodeTCNarrow: opts.Levers.DecodeTCNarrow, Logf: logf})
		if err != nil {
			return err
		}
		b.k = k
		k.SetDirect(true)
		if err := k.PrepareMatmul(); err != nil {
			return err
		}
		if err := k.PrepareAttnPrefill2(); err != nil {
			return err
		}
		if opts.Levers.FAPrefillTC || opts.Levers.AttnDecodeTC {
			if err := k.PrepareAttnPrefillTC(); err != nil {
				return err
			}
		}
		s, err := dev.NewStream()
		if err != nil {
			return err
		}
		b.s = s
		return b.openMemory() // before the first allocation
	})
	if err != nil {
		if b.k != nil {
			dev.Do(b.k.Close)
		}
		return nil, errors.Join(err, dev.Close())
	}
	b.stage = staging{dev: dev, s: b.s, noPinnedReadback: opts.Levers.NoPinnedReadback}
	return b, nil
}

// MatMulOptions returns the options the backend's matmuls run with (its
// levers and its activation scratch), for MatMulPath / MatMulTolerance.
func (b *Backend) MatMulOptions() MatMulOptions {
	defer b.unlock(b.lock())
	return b.mm
}

// Name implements graph.Backend.
func (b *Backend) Name() string { return "cuda" }

// Device returns the device's attributes.
func (b *Backend) Device() driver.Attributes { return b.dev.Attr }

// Kernels returns the loaded kernels (census, op timing).
func (b *Backend) Kernels() *Kernels { return b.k }

// SupportsFused implements graph.Backend: what the device can run; whether
// a fusion is wanted is graph.Params' (the levers). Fused QKV is the three
// matmuls of one input into one output; fused FFN is gate and up of one
// input and their SwiGLU (matmul.go opFusedQKV / opFusedFFN: at decode one
// mmvq launch each, bitwise the unfused mmvq kernels; otherwise the unfused
// kernels); bias (+ q/k norm) + rope + KV store is one launch
// (qkv_rope_store.go), bitwise the unfused chain. Matmul + residual add is
// one minfer_mmvq[r]_res_<t> launch, which exists for decode MMVQ matmuls
// only: a chain whose matmul takes another route stays unfused.
func (b *Backend) SupportsFused(k graph.FuseKind, chain ...*graph.Node) bool {
	defer b.unlock(b.lock())
	switch k {
	case graph.FuseQKV, graph.FuseFFN, graph.FuseQkvBiasRopeStore, graph.FuseQkNormRopeStore:
		return true
	case graph.FuseMatMulAdd:
		for _, n := range chain {
			if n.Op == graph.OpMatMul {
				return b.residRoute(n)
			}
		}
	case graph.FuseNormQ8:
		return len(chain) == 2 && b.normQ8Route(chain[0], chain[1])
	case graph.FuseAttnQ8:
		return len(chain) == 2 && b.attnQ8Route(chain[0], chain[1])
	case graph.FuseQKVRopeStore:
		return len(chain) >= 2 && b.qkvRopeRoute(chain[0], chain[1])
	}
	return false
}

// SupportsOp implements graph.Backend: the op has a launcher, its weights
// are registered here and its KV layer exists. Shape invariants are checked
// by Execute, which names the node and the values.
func (b *Backend) SupportsOp(n *graph.Node) error {
	defer b.unlock(b.lock())
	if _, ok := b.ops[n.Op]; !ok {
		return fmt.Errorf("op %s has no device kernel", n.Op)
	}
	for _, w := range n.WeightNames() {
		if b.weights[w] == nil {
			return fmt.Errorf("weight %s is not registered", w)
		}
	}
	if n.Op.UsesKV() && (b.kvK == nil || n.P.Layer < 0 || n.P.Layer >= b.kvSpec.NLayer) {
		return fmt.Errorf("no KV region for layer %d", n.P.Layer)
	}
	return nil
}

// RegisterWeight implements graph.Backend. It may run on another goroutine
// than the engine's: it holds b.mu, so it waits for the backend call in
// progress (a capture window included) and changes no captured graph
// that does not read w (capture.go).
func (b *Backend) RegisterWeight(w graph.Weight) error {
	if !b.pinnedHere() { // inside a pinned step Pin holds mu
		if !b.mu.TryLock() {
			b.regWaits.Add(1)
			b.mu.Lock()
		}
		defer b.mu.Unlock()
	}
	if b.closed {
		return errors.New("cuda: backend is closed")
	}
	return b.dev.Do(func() error { return b.registerWeight(w) })
}

// Pin runs fn on the device thread in one handoff (model.StepPinner,
// MINFER_PIN_STEP=1): the backend calls fn makes there are direct, not one
// handoff each. It holds mu for all of fn, taken before its Do, so mu is
// still never taken inside a Do (a registration on another goroutine waits
// for the step, as it waits for any call); the calls inside skip it
// (lock). Each Pin counts in the census as pinned_steps.
func (b *Backend) Pin(fn func() error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("cuda: backend is closed")
	}
	b.pinnedSteps.Add(1)
	b.pinned.Store(true)
	defer b.pinned.Store(false)
	return b.dev.Do(fn)
}

// PinnedSteps is how many forwards ran through Pin.
func (b *Backend) PinnedSteps() int64 { return b.pinnedSteps.Load() }

// pinnedHere: the caller is fn of a Pin in progress (on the device thread
// while Pin holds mu).
func (b *Backend) pinnedHere() bool { return b.pinned.Load() && b.dev.OnThread() }

// lock takes mu, except inside a Pin's fn, whose Pin holds it for the
// step; it says whether it took it, for unlock (`defer b.unlock(b.lock())`:
// no closure, nothing allocated on Execute's path).
func (b *Backend) lock() bool {
	if b.pinnedHere() {
		return false
	}
	b.mu.Lock()
	return true
}

// unlock releases mu if lock took it.
func (b *Backend) unlock(took bool) {
	if took {
		b.mu.Unlock()
	}
}

// registrationsWaited is how many registrations found another call in
// progress (tests).
func (b *Backend) registrationsWaited() int64 { return b.regWaits.Load() }

// Alloc implements graph.Backend.
func (b *Backend) Alloc(n int) (graph.Buffer, error) {
	defer b.unlock(b.lock())
	var id graph.Buffer
	err := b.dev.Do(func() error {
		var err error
		id, err = b.pool.alloc(n)
		return err
	})
	return id, err
}

// Free implements graph.Backend: the memory stays in the pool.
func (b *Backend) Free(id graph.Buffer) error {
	defer b.unlock(b.lock())
	return b.pool.release(id)
}

// PoolGeneration is the pool generation (tests).
func (b *Backend) PoolGeneration() uint64 {
	defer b.unlock(b.lock())
	return b.pool.gen
}

// Write implements graph.Backend.
func (b *Backend) Write(id graph.Buffer, off int, src []float32) error {
	return b.write(id, off, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(src))), 4*len(src)), len(src))
}

// WriteI32 implements graph.Backend.
func (b *Backend) WriteI32(id graph.Buffer, off int, src []int32) error {
	return b.write(id, off, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(src))), 4*len(src)), len(src))
}

func (b *Backend) write(id graph.Buffer, off int, src []byte, n int) error {
	if b.cap.recording {
		return errors.New("cuda: write inside a split that is being captured")
	}
	ptr, err := b.pool.tensor(graph.Tensor{Buf: id, Off: off, Len: n})
	if err != nil {
		return fmt.Errorf("cuda: write: %w", err)
	}
	return b.dev.Do(func() error { return b.stage.write(ptr, src) })
}

// Read implements graph.Backend (it synchronizes the stream).
func (b *Backend) Read(id graph.Buffer, off int, dst []float32) error {
	ptr, err := b.pool.tensor(graph.Tensor{Buf: id, Off: off, Len: len(dst)})
	if err != nil {
		return fmt.Errorf("cuda: read: %w", err)
	}
	return b.dev.Do(func() error {
		return b.stage.read(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(dst))), 4*len(dst)), ptr)
	})
}

// Synchronize implements graph.Backend: at a split boundary it closes a
// pending capture (see capture.go), otherwise it waits for the stream.
func (b *Backend) Synchronize() error {
	defer b.unlock(b.lock())
	if b.cap.recording {
		return b.finishCapture()
	}
	return b.dev.Do(b.syncTimed)
}

// syncTimed closes the open device-time interval at the stream's end,
// waits for the stream and adds the interval (inside dev.Do).
func (b *Backend) syncTimed() error {
	if err := b.timer.mark(b.s); err != nil {
		return err
	}
	if err := b.s.Synchronize(); err != nil {
		b.timer.open = false
		return err
	}
	b.stage.synced()
	return b.timer.done()
}

// BeginSplit implements graph.Backend (capture.go). It records the split's
// start event (timing.go): a replay records it in its own launch's Do; the
// direct and capturing executions here, before any launch and before a
// capture window can open.
func (b *Backend) BeginSplit(key graph.SplitKey) (bool, error) {
	defer b.unlock(b.lock())
	replayed, err := b.beginSplit(key)
	if err != nil || replayed {
		return replayed, err
	}
	if err := b.dev.Do(func() error { return b.timer.begin(b.dev, b.s) }); err != nil {
		return false, fmt.Errorf("cuda: split %v: %w", key, err)
	}
	return false, nil
}

// EndSplit implements graph.Backend. The capture window, when there is
// one, is opened and closed at the Synchronize that follows.
func (b *Backend) EndSplit(graph.SplitKey) error { return nil }

// AllocKV implements graph.Backend: one K and one V region per layer of
// NCtx rows in the spec's format, zeroed.
func (b *Backend) AllocKV(spec graph.KVSpec) error {
	if b.kvK != nil {
		if spec == b.kvSpec {
			return nil
		}
		return fmt.Errorf("cuda: KV regions already allocated as %+v, asked for %+v", b.kvSpec, spec)
	}
	if spec.NLayer <= 0 || spec.NCtx <= 0 || spec.RowLen <= 0 {
		return fmt.Errorf("cuda: alloc KV: bad spec %+v", spec)
	}
	rb, err := kvRowBytes("alloc_kv", spec.Format, spec.RowLen, spec.NCtx)
	if err != nil {
		return err
	}
	bytes := uint64(rb) * uint64(spec.NCtx)
	bytes = (bytes + 3) &^ 3
	defer b.unlock(b.lock())
	return b.dev.Do(func() error {
		var ks, vs []driver.DevicePtr
		for l := range spec.NLayer {
			for _, side := range []*[]driver.DevicePtr{&ks, &vs} {
				p, err := b.pool.raw(MemKV, bytes, fmt.Sprintf("KV layer %d (%s, %d cells of %d bytes)", l, spec.Format, spec.NCtx, rb))
				if err != nil {
					return err
				}
				if err := b.s.MemsetD8(p, 0, bytes); err != nil {
					return err
				}
				*side = append(*side, p)
			}
		}
		scratch, err := b.pool.raw(MemKV, bytes, "KV cell-move scratch")
		if err != nil {
			return err
		}
		if err := b.s.Synchronize(); err != nil {
			return err
		}
		b.stage.synced()
		b.kvK, b.kvV, b.kvRowB, b.kvScratch, b.kvSpec = ks, vs, rb, scratch, spec
		b.kvStamp++
		if line := attnDecodeTCYielded(b.lv, spec.Format); line != "" {
			b.logf("%s", line)
		}
		return nil
	})
}

// KVFormat is the format of the KV regions.
func (b *Backend) KVFormat() kv.Format { return b.kvSpec.Format }

// CopyKVCells implements graph.Backend: n cells of every layer's K and V
// from src to dst, overlap-safe in both directions (KVMove bounces through
// scratch), on the backend's stream.
func (b *Backend) CopyKVCells(src, dst, n int) error {
	if b.kvK == nil {
		return errors.New("cuda: copy KV cells: no KV regions")
	}
	nCtx := b.kvSpec.NCtx
	if n < 0 || src < 0 || dst < 0 || src > nCtx-n || dst > nCtx-n {
		return fmt.Errorf("cuda: copy KV cells: %d cells from %d to %d outside a context of %d", n, src, dst, nCtx)
	}
	return b.dev.Do(func() error {
		for l := range b.kvK {
			for _, r := range []driver.DevicePtr{b.kvK[l], b.kvV[l]} {
				if err := b.k.KVMove(b.s, r, b.kvScratch, b.kvSpec.Format, b.kvSpec.RowLen, nCtx, src, dst, n); err != nil {
					return fmt.Errorf("cuda: copy KV cells of layer %d: %w", l, err)
				}
			}
		}
		return nil
	})
}

// ReadKV copies one layer's K (side K) or V region bytes to the host
// (tests: KV layouts and cell moves against the CPU's bytes).
func (b *Backend) ReadKV(layer int, side graph.KVSide) ([]byte, error) {
	if b.kvK == nil || layer < 0 || layer >= b.kvSpec.NLayer {
		return nil, fmt.Errorf("cuda: no KV region for layer %d", layer)
	}
	r := b.kvK[layer]
	if side == graph.SideV {
		r = b.kvV[layer]
	}
	out := make([]byte, b.kvRowB*b.kvSpec.NCtx)
	err := b.dev.Do(func() error { return b.stage.read(out, r) })
	return out, err
}

// Close implements graph.Backend: destroys the captured graphs, frees the
// pool (buffers, weights, KV regions) and the pinned memory, destroys the
// stream, unloads the kernels and releases the device.
func (b *Backend) Close() error {
	defer b.unlock(b.lock())
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.dev.Do(func() error {
		errs := []error{b.s.Synchronize(), b.cap.close(), b.timer.close(), b.pool.close(), b.stage.close(), b.s.Destroy(), b.k.Close()}
		return errors.Join(errs...)
	})
	return errors.Join(err, b.dev.Close())
}
