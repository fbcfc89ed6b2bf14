// Package cpu is the CPU backend of the compute graph: the numerical
// reference every other backend is compared with.
//
// Activations are f32. A matmul quantizes each activation row once to the
// weight type's VecDot format (Q8_0 / Q8_1 / Q8_K; raw f32 for F32, F16 and
// BF16 weights) and takes quant's Dot against every weight row, accumulating
// in f32. Work is spread over a fixed pool of goroutines by output rows (or
// attention heads); every output element is computed by exactly one goroutine
// in a fixed order, so results are bitwise identical for any thread count.
//
// Arithmetic that feeds an addition is wrapped in float32(...) so the Go
// compiler cannot fuse it into an FMA: fused and unfused graphs share the
// same kernels and agree bitwise.
package cpu

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/quant"
)

// Options configure a Backend.
type Options struct {
	// Threads is the number of goroutines kernels use; 0 means
	// runtime.GOMAXPROCS(0).
	Threads int
	// Census counts every executed node under its path name (census.go;
	// MINFER_LAUNCH_CENSUS=1).
	Census bool
	// Exact dequantizes every quantized matmul weight to f32 once when it
	// is registered, so its matmuls read unquantized f32 activations
	// (MINFER_CPU_EXACT=1): the exact evaluation of the same weights that
	// gate 1 measures the activation quantization of both backends against.
	// Four bytes a weight.
	Exact bool
}

type weight struct {
	name     string
	typ      quant.Type
	tr       *quant.Traits
	dims     []int
	rowLen   int // Dims[0]
	rows     int // product of the other dims
	rowBytes int
	data     []byte     // raw rows (a view of the mmap)
	f32      []float32  // 1-D weights (norms, biases) expanded once; nil for matrices
	srcType  quant.Type // the registered type and data length (typ and data differ with Exact)
	srcLen   int
}

// Backend is the CPU graph.Backend.
type Backend struct {
	threads int
	exact   bool
	closed  bool
	pool    *pool
	bufs    [][]float32
	free    []graph.Buffer
	weights map[string]*weight

	kvSpec graph.KVSpec
	cache  *kv.Cache
	kf, vf []float32   // KV rows expanded to f32 for attention (NCtx*RowLen)
	score  [][]float32 // per-chunk attention scores (NCtx)

	xs   [][]float32 // input slices of the node being executed
	act  []byte      // quantized activation rows
	tmp  []float32   // fused FFN: the up projection
	rope []float32   // cos/sin table of one position

	offj offsetJob
	mm   matmulJob
	qj   quantJob
	pj   packJob

	packed []int64      // activation lanes of the multi-token matmul
	scr    []*mmScratch // per-chunk scratch of the multi-token matmul
	kvt    []float32    // fused qkv store: biased/roped k and v rows
	att    attnJob
	load   loadJob

	census map[censusKey]int64 // nil when the census is off (census.go)
}

var _ graph.Backend = (*Backend)(nil)

// New returns a CPU backend.
func New(opts Options) *Backend {
	t := opts.Threads
	if t <= 0 {
		t = runtime.GOMAXPROCS(0)
	}
	b := &Backend{threads: t, exact: opts.Exact, pool: newPool(t), weights: map[string]*weight{}}
	if opts.Census {
		b.census = map[censusKey]int64{}
	}
	return b
}

// Threads returns the number of goroutines the kernels use.
func (b *Backend) Threads() int { return b.threads }

// Name implements graph.Backend.
func (b *Backend) Name() string { return "cpu" }

// SupportsFused implements graph.Backend. The CPU executes every fused op
// (it is where fused == unfused is proven, for every kind), and its own
// graphs take the QKV and FFN fusions; it keeps the unfused q/k norm + rope
// + KV store of qwen3 and the unfused residual add in its graphs, as the
// reference the device's fused kernels are checked against (a test fuses
// them on the CPU through a backend that offers them).
func (b *Backend) SupportsFused(k graph.FuseKind, _ ...*graph.Node) bool {
	return k != graph.FuseQkNormRopeStore && k != graph.FuseMatMulAdd && k != graph.FuseNormQ8 && k != graph.FuseAttnQ8 &&
		k != graph.FuseQKVRopeStore
}

// SupportsOp implements graph.Backend: every op, provided its weights are
// registered and its KV layer exists.
func (b *Backend) SupportsOp(n *graph.Node) error {
	for _, w := range n.WeightNames() {
		if b.weights[w] == nil {
			return fmt.Errorf("weight %s is not registered", w)
		}
	}
	if n.Op.UsesKV() && (b.cache == nil || n.P.Layer < 0 || n.P.Layer >= b.kvSpec.NLayer) {
		return fmt.Errorf("no KV region for layer %d", n.P.Layer)
	}
	if n.Op < 0 || n.Op > graph.OpFusedFFN {
		return fmt.Errorf("unknown op %d", int(n.Op))
	}
	return nil
}

// RegisterWeight implements graph.Backend. The data is kept as a view (no
// copy); 1-D tensors (norms, biases) are expanded to f32 once.
func (b *Backend) RegisterWeight(w graph.Weight) error {
	if old := b.weights[w.Name]; old != nil && old.srcLen == len(w.Data) && old.srcType == w.Type {
		return nil
	}
	if len(w.Dims) == 0 || w.Dims[0] <= 0 {
		return fmt.Errorf("cpu: weight %s: bad dims %v: %w", w.Name, w.Dims, graph.ErrUnsupportedWeight)
	}
	tr, err := quant.TraitsOf(w.Type)
	if err != nil {
		return fmt.Errorf("cpu: weight %s: %v: %w", w.Name, err, graph.ErrUnsupportedWeight)
	}
	rows := 1
	for _, d := range w.Dims[1:] {
		if d <= 0 {
			return fmt.Errorf("cpu: weight %s: bad dims %v", w.Name, w.Dims)
		}
		rows *= d
	}
	rb, err := w.Type.RowBytes(w.Dims[0])
	if err != nil {
		return fmt.Errorf("cpu: weight %s: %w", w.Name, err)
	}
	if len(w.Data) < rb*rows {
		return fmt.Errorf("cpu: weight %s: %d bytes, %d rows of %d need %d", w.Name, len(w.Data), rows, rb, rb*rows)
	}
	cw := &weight{name: w.Name, typ: w.Type, tr: tr, dims: append([]int(nil), w.Dims...), rowLen: w.Dims[0], rows: rows, rowBytes: rb, data: w.Data[:rb*rows], srcType: w.Type, srcLen: len(w.Data)}
	if len(w.Dims) == 1 {
		if tr.Dequantize == nil {
			return fmt.Errorf("cpu: weight %s: type %s has no dequantizer: %w", w.Name, w.Type, graph.ErrUnsupportedWeight)
		}
		cw.f32 = make([]float32, w.Dims[0])
		tr.Dequantize(cw.data, cw.f32)
	} else if tr.Dot == nil {
		return fmt.Errorf("cpu: weight %s: type %s has no dot product: %w", w.Name, w.Type, graph.ErrUnsupportedWeight)
	} else if b.exact && tr.VecDot != quant.F32 {
		if err := cw.dequantizeAll(); err != nil {
			return fmt.Errorf("cpu: weight %s: %w", w.Name, err)
		}
	}
	b.weights[w.Name] = cw
	return nil
}

// dequantizeAll turns a quantized matrix into the F32 weight with the same
// values (the Exact option): its matmuls then take f32 activations, as an
// F32 model's do, and its rows look up as F32 rows.
func (w *weight) dequantizeAll() error {
	if w.tr.Dequantize == nil {
		return fmt.Errorf("type %s has no dequantizer: %w", w.typ, graph.ErrUnsupportedWeight)
	}
	tr, err := quant.TraitsOf(quant.F32)
	if err != nil {
		return err
	}
	vals := make([]float32, w.rows*w.rowLen)
	for r := 0; r < w.rows; r++ {
		w.tr.Dequantize(w.data[r*w.rowBytes:(r+1)*w.rowBytes], vals[r*w.rowLen:(r+1)*w.rowLen])
	}
	w.typ, w.tr, w.rowBytes, w.data = quant.F32, tr, 4*w.rowLen, f32bytes(vals)
	return nil
}

// Alloc implements graph.Backend.
func (b *Backend) Alloc(n int) (graph.Buffer, error) {
	if n < 0 {
		return 0, fmt.Errorf("cpu: alloc of %d elements", n)
	}
	buf := make([]float32, n)
	if k := len(b.free); k > 0 {
		id := b.free[k-1]
		b.free = b.free[:k-1]
		b.bufs[id] = buf
		return id, nil
	}
	b.bufs = append(b.bufs, buf)
	return graph.Buffer(len(b.bufs) - 1), nil
}

// Free implements graph.Backend.
func (b *Backend) Free(id graph.Buffer) error {
	if int(id) < 0 || int(id) >= len(b.bufs) || b.bufs[id] == nil {
		return fmt.Errorf("cpu: free of unknown buffer %d", id)
	}
	b.bufs[id] = nil
	b.free = append(b.free, id)
	return nil
}

func (b *Backend) slice(t graph.Tensor) ([]float32, error) {
	if int(t.Buf) < 0 || int(t.Buf) >= len(b.bufs) || b.bufs[t.Buf] == nil {
		return nil, fmt.Errorf("cpu: unknown buffer %d", t.Buf)
	}
	buf := b.bufs[t.Buf]
	if t.Off < 0 || t.Len < 0 || t.Off+t.Len > len(buf) {
		return nil, fmt.Errorf("cpu: tensor [%d, +%d) outside buffer %d of %d", t.Off, t.Len, t.Buf, len(buf))
	}
	return buf[t.Off : t.Off+t.Len], nil
}

// Write implements graph.Backend.
func (b *Backend) Write(id graph.Buffer, off int, src []float32) error {
	dst, err := b.slice(graph.Tensor{Buf: id, Off: off, Len: len(src)})
	if err != nil {
		return err
	}
	copy(dst, src)
	return nil
}

// WriteI32 implements graph.Backend.
func (b *Backend) WriteI32(id graph.Buffer, off int, src []int32) error {
	dst, err := b.slice(graph.Tensor{Buf: id, Off: off, Len: len(src)})
	if err != nil {
		return err
	}
	copy(i32(dst), src)
	return nil
}

// Read implements graph.Backend.
func (b *Backend) Read(id graph.Buffer, off int, dst []float32) error {
	src, err := b.slice(graph.Tensor{Buf: id, Off: off, Len: len(dst)})
	if err != nil {
		return err
	}
	copy(dst, src)
	return nil
}

// Synchronize implements graph.Backend: CPU execution is synchronous.
func (b *Backend) Synchronize() error { return nil }

// BeginSplit implements graph.Backend: nothing to capture on the CPU.
func (b *Backend) BeginSplit(graph.SplitKey) (bool, error) { return false, nil }

// EndSplit implements graph.Backend.
func (b *Backend) EndSplit(graph.SplitKey) error { return nil }

// AllocKV implements graph.Backend.
func (b *Backend) AllocKV(spec graph.KVSpec) error {
	if b.cache != nil {
		if spec == b.kvSpec {
			return nil
		}
		return fmt.Errorf("cpu: KV regions already allocated as %+v, asked for %+v", b.kvSpec, spec)
	}
	c, err := kv.New(spec.Format, spec.NLayer, spec.NCtx, spec.RowLen)
	if err != nil {
		return fmt.Errorf("cpu: alloc KV: %w", err)
	}
	b.cache, b.kvSpec = c, spec
	b.kf = make([]float32, spec.NCtx*spec.RowLen)
	b.vf = make([]float32, spec.NCtx*spec.RowLen)
	b.score = make([][]float32, b.threads)
	for i := range b.score {
		b.score[i] = make([]float32, spec.NCtx)
	}
	return nil
}

// KV returns the KV cache (nil before AllocKV), for tests and snapshots.
func (b *Backend) KV() *kv.Cache { return b.cache }

// CopyKVCells implements graph.Backend.
func (b *Backend) CopyKVCells(src, dst, n int) error {
	if b.cache == nil {
		return errors.New("cpu: copy KV cells: no KV regions")
	}
	return b.cache.MoveCells(src, dst, n)
}

// Close implements graph.Backend.
func (b *Backend) Close() error {
	b.pool.close()
	b.closed = true
	b.bufs, b.free, b.weights, b.cache = nil, nil, map[string]*weight{}, nil
	return nil
}

// i32 views f32 storage as int32 (the id and position inputs).
func i32(f []float32) []int32 {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(f))), len(f))
}

// f32bytes views f32 values as their little-endian bytes (the VecDot input of
// F32/F16/BF16 weights). minfer targets little-endian machines.
func f32bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

func silu(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }
