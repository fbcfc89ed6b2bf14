package graph

import (
	"errors"

	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/quant"
)

// Buffer is a backend-local handle to a device buffer of 4-byte elements
// (f32 activations, or i32 for the id/position inputs).
type Buffer int

// Tensor is what a node reads or writes: Len elements of a buffer starting at
// element Off (Off > 0 for views).
type Tensor struct {
	Buf Buffer
	Off int
	Len int
}

// Weight is a model tensor handed to RegisterWeight. Data is the raw GGUF
// bytes (rows of Dims[0] values of Type); it is a view of the mmap and must
// not be written.
type Weight struct {
	Name string
	Type quant.Type
	Dims []int
	Data []byte
	// Gathered: the graph only gathers rows of it (OpGetRows), no matmul
	// reads it (the token embedding of a model with an output matrix of
	// its own). A backend may keep such a weight where whole-matrix reads
	// would be slow (the CUDA backend's MINFER_EMBED_HOST).
	Gathered bool
}

// KVSpec describes the persistent KV regions of an engine: one K and one V
// region per layer, NCtx rows (cells) of RowLen values stored in Format.
type KVSpec struct {
	Format kv.Format
	NLayer int
	NCtx   int
	RowLen int
}

// SplitKey names one split of one topology: a device caches what it captured
// for a split under this key (graph uid, node range [First, Last]).
type SplitKey struct {
	UID         uint64
	First, Last int
}

// ErrUnsupportedWeight wraps a RegisterWeight refusal for a weight the
// backend cannot consume (type, shape): the model-level rule keeps the whole
// model on the CPU when the preferred backend returns it.
var ErrUnsupportedWeight = errors.New("weight not supported by backend")

// ErrNoDevice is matched (errors.Is) by a device backend's error when no
// device can be used here (no driver, no GPU, disabled): the only error on
// which an engine asked for the automatic device runs on the CPU instead.
// Any other failure to open the device (a stale kernels file, a driver
// error) is an error, never a silent CPU run.
var ErrNoDevice = errors.New("no usable device")

// ErrOutOfMemory is matched (errors.Is) by every error of a backend whose
// memory could not hold a request (RegisterWeight, Alloc, AllocKV, or the
// scratch an Execute grows), and by the engine's refusal of a model whose
// memory plan does not fit: the model does not fit this machine, which is
// no defect of the path that ran (minfer exits with schema.ExitOutOfMemory).
var ErrOutOfMemory = errors.New("out of memory")

// WeightReserver is a backend that sets its weight memory aside in one
// piece before the weights are registered: PlaceWeights hands it every
// weight first, then registers them one by one. Optional; it may only
// change where the weights are placed, never whether they are.
type WeightReserver interface {
	ReserveWeights(ws []Weight) error
}

// Backend executes graph nodes. The CPU backend is the numerical reference; a
// device backend (CUDA) implements the same contract. Every method returns an
// error instead of panicking; no method falls back to another backend.
type Backend interface {
	// Name is the short name printed in placement logs and reports ("cpu").
	Name() string

	// SupportsOp says whether Execute can run n; the error says why not.
	// It is asked once per node at build time (assign), never at run time,
	// so placement is fixed before anything executes. It covers op kind,
	// parameters and whether n's weights are registered here.
	SupportsOp(n *Node) error

	// SupportsFused says whether the backend executes the fused node kind
	// k for the chain of nodes the rewrite would replace (the fuse pass
	// passes them; a caller asking about the kind alone passes none); the
	// fuse pass rewrites only when every backend involved says yes. A
	// backend may refuse a chain its fused kernel does not take (the CUDA
	// residual fusion exists only for decode MMVQ matmuls), so a rewrite
	// never needs a fallback inside the fused node.
	SupportsFused(k FuseKind, chain ...*Node) bool

	// RegisterWeight makes a weight available to Execute under its name.
	// Called once per weight at load: a device uploads (and may repack) it
	// here and never copies weights during execution; the CPU keeps a view
	// of the mmap. The same name and size again is a no-op (a reload must
	// not duplicate the model); a different size replaces it. A weight the
	// backend cannot consume returns an error wrapping ErrUnsupportedWeight.
	RegisterWeight(w Weight) error

	// Alloc returns a buffer of n 4-byte elements (contents undefined).
	// The alloc pass calls it once per slot when a plan is built, never
	// during a run, so execution does not allocate.
	Alloc(n int) (Buffer, error)

	// Free releases a buffer. A device pool may keep the memory for reuse
	// (exact sizes) and return it to the driver only on Close.
	Free(b Buffer) error

	// Write copies f32 values into b at element off (inputs, staging).
	Write(b Buffer, off int, src []float32) error
	// WriteI32 copies i32 values into b at element off (ids, positions).
	WriteI32(b Buffer, off int, src []int32) error
	// Read copies len(dst) f32 values of b at element off into dst. It may
	// synchronize; it is never called inside a split.
	Read(b Buffer, off int, dst []float32) error

	// Execute runs one node: in are its inputs' tensors (in Node.Inputs
	// order), out its output (Len 0 for nodes without one). It may be
	// asynchronous on a device; results are visible after Synchronize.
	// An invariant the backend cannot meet is an error naming the node.
	Execute(n *Node, in []Tensor, out Tensor) error

	// Synchronize waits until every queued Execute/Write has finished; the
	// scheduler calls it at split boundaries and before reading outputs.
	// A device closes an open capture window here.
	Synchronize() error

	// AllocKV creates the persistent KV regions. They belong to the
	// backend, not to a graph: rebuilding a graph (a new nt) keeps them.
	// Calling it again with the same spec is a no-op.
	AllocKV(spec KVSpec) error

	// CopyKVCells moves n cells (K and V rows of every layer) from cell
	// src to cell dst; the ranges may overlap in either direction.
	CopyKVCells(src, dst, n int) error

	// BeginSplit / EndSplit bracket the execution of one split. A device
	// uses them to capture the split's launches into a graph (keyed by key)
	// and to replay it later: BeginSplit returns replayed = true when it
	// has launched the captured split itself, and the scheduler then skips
	// the split's Execute calls. Inputs are written before BeginSplit, so
	// captured kernels read fresh data from the same addresses. The CPU
	// does nothing and returns false.
	BeginSplit(key SplitKey) (replayed bool, err error)
	EndSplit(key SplitKey) error

	// Close frees every buffer, weight and KV region.
	Close() error
}
