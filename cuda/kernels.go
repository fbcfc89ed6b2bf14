// Package cuda is the device backend: the only code that knows CUDA. It
// implements graph.Backend on top of cuda/driver and the kernels of
// cuda/kernels (one kernels file of one or more fatbin containers).
package cuda

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/levers"
)

// Kernels is the loaded fatbin with a per-name function cache, the launch
// census (MINFER_LAUNCH_CENSUS) and per-kernel event timing (MINFER_OP_TIMING).
// Every launcher in launch_*.go goes through launch, so the census counts
// exactly what ran and every launch reads its own error.
type Kernels struct {
	dev   *driver.Device
	mod   *driver.Module
	stamp KernelsStamp // what the file says of its build, checked at load
	nvrtc bool         // the embedded sources' NVRTC build, not a kernels file

	mu     sync.Mutex
	fns    map[string]*driver.Function
	optIn  map[string]int   // kernel name -> dynamic shared memory opted in to (PrepareMatmul)
	census map[string]int64 // nil when the census is off

	timing *opTiming // nil when op timing is off
	qx4    bool      // activation quantize through minfer_quantize_q8_1_x4 (MINFER_QUANTIZE_X4=1)
	// dtcNarrow: AttentionDecodeTC launches the 32-cell tile form
	// (MINFER_ATTN_DECODE_TC_NARROW=1).
	dtcNarrow bool
}

// KernelsOptions selects the instrumentation.
type KernelsOptions struct {
	Path     string // explicit fatbin path (MINFER_KERNELS); "" = next to the executable, else NVRTC; levers.KernelsNVRTC = NVRTC
	Census   bool
	OpTiming bool
	// QuantizeX4 runs QuantizeQ8_1 as minfer_quantize_q8_1_x4 (four Q8_1
	// blocks per warp, the same bytes).
	QuantizeX4 bool
	// DecodeTCNarrow runs AttentionDecodeTC as minfer_attn_decode_tc32_*
	// (32-cell tiles, MINFER_ATTN_DECODE_TC_NARROW).
	DecodeTCNarrow bool
	// Sources is the source hash the kernels file must carry ("": this
	// binary's embedded sources; a test plants another).
	Sources string
	// NVRTCCache is where the NVRTC build of the embedded sources is
	// cached when no kernels file is given ("": the user cache directory,
	// nvrtc.DefaultCacheDir).
	NVRTCCache string
	// Logf receives which kernels were loaded and the NVRTC progress; nil
	// discards them.
	Logf func(format string, args ...any)
}

// LoadKernels loads the kernels on dev: the kernels file (opts.Path, else
// beside the executable) or, when none is given or found there or
// opts.Path is levers.KernelsNVRTC, the embedded sources compiled with
// NVRTC (kernels_nvrtc.go). Call it inside dev.Do.
func LoadKernels(dev *driver.Device, opts KernelsOptions) (*Kernels, error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	mod, how, fromNVRTC, err := openKernels(dev, opts)
	if err != nil {
		return nil, err
	}
	// Before any launch: a file built from other sources is refused
	// (issue 25), never run under a report that names this commit.
	raw, err := readStamp(dev, mod)
	var st KernelsStamp
	if err == nil {
		st, err = checkStamp(mod.Path, raw, wantSources(opts))
	}
	if err != nil {
		mod.Unload()
		return nil, err
	}
	opts.Logf("%s", how)
	k := &Kernels{dev: dev, mod: mod, stamp: st, nvrtc: fromNVRTC, fns: map[string]*driver.Function{}, qx4: opts.QuantizeX4,
		dtcNarrow: opts.DecodeTCNarrow}
	if opts.Census {
		k.census = map[string]int64{}
	}
	if opts.OpTiming {
		k.timing = &opTiming{total: map[string]time.Duration{}, count: map[string]int64{}}
	}
	return k, nil
}

// File is the kernels file's path and the stamp it carries (its source
// hash equals this binary's: LoadKernels refused any other).
func (k *Kernels) File() (string, KernelsStamp) { return k.mod.Path, k.stamp }

// Origin is the census name of where the kernels came from:
// levers.CensusKernelsNVRTC for the embedded sources' NVRTC build,
// levers.CensusKernelsFile for a kernels file (cmd/minfer adds it to the
// launch census, MINFER_KERNELS's liveness evidence).
func (k *Kernels) Origin() string {
	if k.nvrtc {
		return levers.CensusKernelsNVRTC
	}
	return levers.CensusKernelsFile
}

// Function returns the named kernel (cached).
func (k *Kernels) Function(name string) (*driver.Function, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if f, ok := k.fns[name]; ok {
		return f, nil
	}
	f, err := k.mod.Function(name)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", name, err)
	}
	k.fns[name] = f
	return f, nil
}

// launch runs one kernel on s and counts it. Errors name the kernel.
func (k *Kernels) launch(s *driver.Stream, name string, grid, block [3]uint32, smem uint32, args ...any) error {
	f, err := k.Function(name)
	if err != nil {
		return err
	}
	if k.timing != nil && k.timing.direct {
		return k.timing.timed(k.dev, s, name, func() error { return k.count(name, f.Launch(s, grid, block, smem, args...)) })
	}
	return k.count(name, f.Launch(s, grid, block, smem, args...))
}

func (k *Kernels) count(name string, err error) error {
	if err == nil && k.census != nil {
		k.mu.Lock()
		k.census[name]++
		k.mu.Unlock()
	}
	return err
}

// Census returns the launch counts per kernel (nil when the census is off).
// Launches recorded into a captured graph count once at capture; replays
// are counted by the backend per replayed node.
func (k *Kernels) Census() map[string]int64 {
	if k.census == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]int64, len(k.census))
	for n, c := range k.census {
		out[n] = c
	}
	return out
}

// AddCensus adds n launches of name (graph replays).
func (k *Kernels) AddCensus(name string, n int64) {
	if k.census == nil {
		return
	}
	k.mu.Lock()
	k.census[name] += n
	k.mu.Unlock()
}

// Close unloads the module.
func (k *Kernels) Close() error { return k.mod.Unload() }

// opTiming brackets each direct launch with events and synchronizes: it is
// instrumentation (MINFER_OP_TIMING=1), never a timed run, and only works on
// direct launches (a capture window cannot synchronize).
type opTiming struct {
	direct bool // false while a capture window is open
	total  map[string]time.Duration
	count  map[string]int64
}

func (t *opTiming) timed(dev *driver.Device, s *driver.Stream, name string, launch func() error) (err error) {
	start, err := dev.NewEvent(true)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, start.Destroy()) }()
	end, err := dev.NewEvent(true)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, end.Destroy()) }()
	if err := start.Record(s); err != nil {
		return err
	}
	if err := launch(); err != nil {
		return err
	}
	if err := end.Record(s); err != nil {
		return err
	}
	if err := end.Synchronize(); err != nil {
		return err
	}
	d, err := driver.Elapsed(start, end)
	if err != nil {
		return err
	}
	t.total[name] += d
	t.count[name]++
	return nil
}

// SetDirect tells op timing whether launches are direct (true) or being
// captured (false: timing is skipped, and the report says so).
func (k *Kernels) SetDirect(direct bool) {
	if k.timing != nil {
		k.timing.direct = direct
	}
}

// OpTime is one kernel's accumulated device time.
type OpTime struct {
	Kernel string        `json:"kernel"`
	Count  int64         `json:"count"`
	Total  time.Duration `json:"total_ns"`
}

// OpTimes returns the per-kernel device times, slowest first (nil when off).
func (k *Kernels) OpTimes() []OpTime {
	if k.timing == nil {
		return nil
	}
	var out []OpTime
	for n, d := range k.timing.total {
		out = append(out, OpTime{Kernel: n, Count: k.timing.count[n], Total: d})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Total > out[j].Total })
	return out
}

const (
	// defaultDynSmem is the dynamic shared memory a kernel may use without
	// an opt-in.
	defaultDynSmem = 48 << 10
	// maxGridY bounds the gemm's and MMQ's token-tile grid dimension.
	maxGridY = 65535
)

// prepareOptIn resolves kernel name and, when smem is over the default,
// opts it in to smem bytes of dynamic shared memory, recording the opt-in;
// op names the caller in the error ("matmul: prepare ...").
func (k *Kernels) prepareOptIn(op, name string, smem int) error {
	f, err := k.Function(name)
	if err != nil {
		return fmt.Errorf("%s: prepare: %w", op, err)
	}
	if smem > defaultDynSmem {
		if err := f.SetMaxDynamicSmem(smem); err != nil {
			return fmt.Errorf("%s: prepare %s: opt-in to %d bytes of dynamic shared memory: %w", op, name, smem, err)
		}
	}
	k.setOptIn(name, smem)
	return nil
}

// setOptIn records that kernel name was opted in to smem bytes of dynamic
// shared memory. The record lives on the Kernels (one module), not in a
// process-wide map, so a second device or a reloaded module starts clean.
func (k *Kernels) setOptIn(name string, smem int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.optIn == nil {
		k.optIn = map[string]int{}
	}
	k.optIn[name] = smem
}

// optedIn is the dynamic shared memory kernel name was opted in to (0: none).
func (k *Kernels) optedIn(name string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.optIn[name]
}

// The checks and geometry every non-matmul launcher shares.
const (
	opsThreads   = 256     // block size of the element-wise, row and KV kernels
	opsMaxBlocks = 1 << 16 // grid cap of the grid-stride element-wise kernels
	maxInt32     = math.MaxInt32
)

// opsErr wraps a launch error with the op name.
func opsErr(op string, err error) error {
	if err != nil {
		return fmt.Errorf("cuda: %s: %w", op, err)
	}
	return nil
}

// opsBad is an argument error naming the op.
func opsBad(op, format string, args ...any) error {
	return fmt.Errorf("cuda: %s: %s", op, fmt.Sprintf(format, args...))
}

// opsGrid1 is the grid of a grid-stride kernel over n elements.
func opsGrid1(n int) [3]uint32 {
	b := (n + opsThreads - 1) / opsThreads
	b = max(1, min(b, opsMaxBlocks))
	return [3]uint32{uint32(b), 1, 1}
}

// opsRowBlock is the block of a one-block-per-row kernel over rows of n:
// a multiple of 32, at most opsThreads.
func opsRowBlock(n int) [3]uint32 {
	b := min(opsThreads, (n+31)/32*32)
	return [3]uint32{uint32(max(32, b)), 1, 1}
}

var opsBlock = [3]uint32{opsThreads, 1, 1}

func opsCheckN(op string, n int) error {
	if n <= 0 {
		return opsBad(op, "%d elements: must be positive", n)
	}
	return nil
}

// opsCheckRows checks rows x n with n (the row length) and rows below 2^31
// and a positive product.
func opsCheckRows(op string, rows, n int) error {
	if rows <= 0 || n <= 0 {
		return opsBad(op, "%d rows of %d: both must be positive", rows, n)
	}
	if rows > maxInt32 || n > maxInt32 || rows > math.MaxInt64/n {
		return opsBad(op, "%d rows of %d: too large", rows, n)
	}
	return nil
}

// boolI32 is a kernel int flag (C has no bool kernel parameter here).
func boolI32(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

func opsChunks(n int) uint32 { return uint32((n + opsThreads - 1) / opsThreads) }
