// Package memplan is the engine's memory plan (issue 19): what a model at a
// context length and KV format will hold on the backend that runs it, by
// class, computed from the file's tensor table before anything is
// allocated, and the one-line refusal of a plan that does not fit the
// memory the backend has free. Everything here is a pure function of its
// inputs: engine/model builds the Model (tensors, graph buffers), each
// backend says how it spends memory (Rules) and how much it has free
// (Planner).
package memplan

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/quant"
)

// PrefillTokens is the largest forward the plan's scratch covers: a
// prompt is planned as forwards of at most this many tokens (llama.cpp's
// default physical batch, n_ubatch = 512, and minfer bench's depth-fill
// chunk). A longer forward, or one that asks for every token's logits,
// allocates more when it runs; if that fails it is the mid-run
// out-of-memory error (OOMError), never a crash.
const PrefillTokens = 512

// Tensor is one weight the backend registers, as the plan sees it.
type Tensor struct {
	Name  string
	Type  quant.Type
	Dims  []int // Dims[0] is the row length
	Layer int   // the block, -1 for a global tensor (embedding, output, final norm)
	// Gathered: the graph only gathers rows of it (graph.Weight.Gathered).
	Gathered bool
}

// Bytes is the tensor's size in its file type (0 for a shape the type
// cannot hold: the loader refuses such a file first).
func (t Tensor) Bytes() uint64 {
	if len(t.Dims) == 0 {
		return 0
	}
	rb, err := t.Type.RowBytes(t.Dims[0])
	if err != nil {
		return 0
	}
	return uint64(rb) * uint64(t.Rows())
}

// Rows is the product of the dimensions after the first.
func (t Tensor) Rows() int {
	n := 1
	for _, d := range t.Dims[1:] {
		n *= d
	}
	return n
}

// Matrix reports whether the tensor is a matrix (2-D and more): what a
// matmul or the embedding gather reads.
func (t Tensor) Matrix() bool { return len(t.Dims) > 1 }

// Rules are how a backend spends memory beyond the file's bytes. Each
// backend states its own (cpu.MemoryRules, cuda.MemoryRules), so the rule
// lives next to the allocations it describes.
type Rules struct {
	Backend string // "cpu", "cuda"
	// Weight returns the bytes the backend keeps for t (own) and the bytes
	// of the copies it derives from it (the CUDA backend's repacked copy of
	// a Q8_0 / Q6_K matrix under MINFER_MMVQ_REPACK; the CPU's f32 copy of
	// a norm or bias).
	Weight func(t Tensor) (own, derived uint64)
	// DerivedLever is the setting that drops the derived copies ("" when
	// none does), named by a refusal.
	DerivedLever string
	// KVCellExtra is what one more context cell costs beyond the
	// 2 x n_layer rows of the cache (the CUDA cell-move scratch row; the
	// CPU attention's f32 rows and per-thread scores).
	KVCellExtra func(rowLen int, f kv.Format) uint64
	// Scratch is the backend's own scratch beyond the graph's buffers for
	// the model p (NCtx and KVFormat set), its tensors in registration
	// order and a prefill of nt tokens.
	Scratch func(p graph.Params, tensors []Tensor, nt int) uint64
	// Overhead is what the backend holds before the engine allocates
	// anything (the CUDA context with its loaded kernels): part of the
	// total, already spent when FreeMemory answers.
	Overhead uint64
	// OverheadWhat names the overhead ("CUDA context").
	OverheadWhat string
	// HostMapped reports whether the backend keeps t in host memory mapped
	// into the device's address space (the CUDA backend's token embedding
	// under MINFER_EMBED_HOST): its bytes are in Plan.HostMapped, not in the
	// weights, the total or what must be free on the device. Nil: none.
	HostMapped func(t Tensor) bool
	// MappedWeights: the weights stay a read-only mapping of the file (the
	// CPU). They are in the total but not held against the free memory:
	// the kernel pages a file mapping in and out, so a model larger than
	// the memory runs, slowly; the KV cache and the scratch cannot.
	MappedWeights bool
}

// Planner is the optional interface of a backend that plans its memory:
// the engine asks it before its first allocation.
type Planner interface {
	// MemoryRules are the backend's Rules.
	MemoryRules() Rules
	// FreeMemory is the memory the backend can still allocate and its
	// total (device memory from cuMemGetInfo; the host's MemAvailable).
	FreeMemory() (free, total uint64, err error)
}

// Model is what the plan needs of a model.
type Model struct {
	Label     string       // "qwen2-7b Q8_0"
	Params    graph.Params // the model's params, with NCtx and KVFormat set
	NCtxTrain int
	// Tensors the backend registers, in registration order.
	Tensors []Tensor
	// GraphBytes is the bytes of the graph's buffers: a decode forward's
	// and a prefill of Prefill tokens' (the engine keeps both compiled).
	GraphBytes uint64
	Prefill    int // the prefill the scratch covers: min(n_ctx, PrefillTokens)
}

// Plan is a model's memory on one backend, by class.
type Plan struct {
	Model     string
	Backend   string
	NCtx      int
	NCtxTrain int
	KVFormat  kv.Format
	Prefill   int
	// Weights: the file's tensors as the backend keeps them.
	Weights uint64
	// Derived: copies the backend makes of them.
	Derived uint64
	// KV: the cache (all layers, K and V) and what each cell costs the
	// backend besides (KVPerCell x NCtx).
	KV        uint64
	KVPerCell uint64
	// Scratch: the graph's buffers and the backend's own scratch.
	Scratch uint64
	// HostMapped: weights the backend keeps in page-locked host memory
	// mapped into the device (Rules.HostMapped): host memory, so outside
	// Total and Need, which count the backend's own memory.
	HostMapped uint64
	// Overhead: what the backend holds before the first allocation.
	Overhead      uint64
	OverheadWhat  string
	MappedWeights bool
	DerivedLever  string
}

// New computes the plan of m under the backend's rules r.
func New(m Model, r Rules) (Plan, error) {
	p := m.Params
	if p.NLayer <= 0 || p.NCtx <= 0 || p.NKV() <= 0 {
		return Plan{}, fmt.Errorf("memplan: %d layers, n_ctx %d, KV row %d: every one must be positive", p.NLayer, p.NCtx, p.NKV())
	}
	rb := kv.RowBytes(p.KVFormat, p.NKV())
	if rb < 0 {
		return Plan{}, fmt.Errorf("memplan: a KV row of %d values has no %s layout", p.NKV(), p.KVFormat)
	}
	pl := Plan{Model: m.Label, Backend: r.Backend, NCtx: p.NCtx, NCtxTrain: m.NCtxTrain, KVFormat: p.KVFormat, Prefill: m.Prefill,
		Overhead: r.Overhead, OverheadWhat: r.OverheadWhat, MappedWeights: r.MappedWeights, DerivedLever: r.DerivedLever}
	for _, t := range m.Tensors {
		own, derived := t.Bytes(), uint64(0)
		if r.Weight != nil {
			own, derived = r.Weight(t)
		}
		if r.HostMapped != nil && r.HostMapped(t) {
			pl.HostMapped += own
			continue
		}
		pl.Weights += own
		pl.Derived += derived
	}
	pl.KVPerCell = 2 * uint64(p.NLayer) * uint64(rb)
	if r.KVCellExtra != nil {
		pl.KVPerCell += r.KVCellExtra(p.NKV(), p.KVFormat)
	}
	pl.KV = pl.KVPerCell * uint64(p.NCtx)
	pl.Scratch = m.GraphBytes
	if r.Scratch != nil {
		pl.Scratch += r.Scratch(p, m.Tensors, m.Prefill)
	}
	return pl, nil
}

// Total is everything the plan counts: the process's peak on the
// backend's memory (on a device, what NVML reports for the process).
func (p Plan) Total() uint64 { return p.Weights + p.Derived + p.KV + p.Scratch + p.Overhead }

// Need is what must fit in the free memory the backend reports: the total
// less the overhead (already spent when the backend answers) and less the
// weights when they are a file mapping.
func (p Plan) Need() uint64 { return p.fixed() + p.KV }

// fixed is the part of Need that does not grow with the context.
func (p Plan) fixed() uint64 {
	n := p.Derived + p.Scratch
	if !p.MappedWeights {
		n += p.Weights
	}
	return n
}

// Fits reports whether the plan fits in free bytes.
func (p Plan) Fits(free uint64) bool { return p.Need() <= free }

// MaxCtx is the largest context whose plan fits in free bytes (the scratch
// taken as it is at this context): 0 when not even one cell does.
func (p Plan) MaxCtx(free uint64) int {
	f := p.fixed()
	if free <= f || p.KVPerCell == 0 {
		return 0
	}
	return int(min((free-f)/p.KVPerCell, math.MaxInt32))
}

// Check returns nil when the plan fits in free bytes, else a *Refusal.
func (p Plan) Check(free uint64) error {
	if p.Fits(free) {
		return nil
	}
	return &Refusal{Plan: p, Free: free}
}

// GiB formats bytes as GiB with one decimal.
func GiB(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<30)) }

// classSize is a class's size in the plan's lists: GiB with one decimal,
// the unit left to the line ("needs 9.3 GiB (weights 7.5, ...)"); under
// 0.05 GiB, which that would print as 0.0, MiB (under 1 MiB KiB) with its
// unit.
func classSize(b uint64) string {
	if b < 1<<20 {
		return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
	}
	if b < 1<<30/20 {
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return GiB(b)
}

// Classes lists the plan's classes as "weights 7.5, repacked copies 7.5,
// KV f16 1.8, scratch 0.2" (GiB, or MiB said so for a small class; a class
// of 0 bytes left out, the weights and KV always there; the overhead only
// with overhead, and so the host-mapped weights, which are not the
// backend's memory).
func (p Plan) Classes(overhead bool) string {
	parts := []string{"weights " + classSize(p.Weights)}
	if p.MappedWeights {
		parts[0] += " mapped from the file"
	}
	if p.Derived > 0 {
		parts = append(parts, p.derivedName()+" "+classSize(p.Derived))
	}
	parts = append(parts, fmt.Sprintf("KV %s %s", p.KVFormat, classSize(p.KV)), "scratch "+classSize(p.Scratch))
	if overhead && p.HostMapped > 0 { // host memory: outside what the refusal counts
		parts = append(parts, "host-mapped (host memory) "+classSize(p.HostMapped))
	}
	if overhead && p.Overhead > 0 {
		parts = append(parts, p.OverheadWhat+" "+classSize(p.Overhead))
	}
	return strings.Join(parts, ", ")
}

func (p Plan) derivedName() string {
	if p.DerivedLever != "" {
		return "copies (" + strings.TrimSuffix(p.DerivedLever, "=0") + ")"
	}
	return "derived copies"
}

// Summary is the plan in a few words: "17.6 GiB on cuda (weights 7.5, ...,
// CUDA context 0.5)".
func (p Plan) Summary() string {
	return fmt.Sprintf("%s GiB on %s (%s)", GiB(p.Total()), p.Backend, p.Classes(true))
}

// Lowering names what lowers the plan: -c N while a smaller context would
// fit (withCtx), the q8_0 KV format unless it is already the format, and
// the setting that drops the derived copies when there are some.
func (p Plan) Lowering(withCtx bool) []string {
	var out []string
	if withCtx {
		out = append(out, "-c N")
	}
	if p.KVFormat != kv.Q8_0 {
		out = append(out, "MINFER_CACHE_TYPE=q8_0")
	}
	if p.Derived > 0 && p.DerivedLever != "" {
		out = append(out, p.DerivedLever)
	}
	return out
}

// orList joins items as "a, b or c".
func orList(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// FormatCtx writes a context length the way the refusal does: "2.4M",
// "45K" (decimal, rounded down: what fits), or the number itself below
// 10,000.
func FormatCtx(n int) string {
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("%.1fM", math.Floor(float64(n)/100_000)/10)
	case n >= 10_000:
		return fmt.Sprintf("%dK", n/1000)
	}
	return fmt.Sprint(n)
}

// Refusal is the engine's answer to a plan that does not fit: one line
// with the plan's classes, the free memory, the largest context that fits
// and the settings that lower the plan. It matches graph.ErrOutOfMemory.
type Refusal struct {
	Plan Plan
	Free uint64
}

func (r *Refusal) Error() string {
	p := r.Plan
	need := fmt.Sprintf("%s at -c %d needs %s GiB (%s)", p.Model, p.NCtx, GiB(p.Need()), p.Classes(false))
	if p.MappedWeights {
		need = fmt.Sprintf("%s at -c %d needs %s GiB of memory besides its mapped weights (%s)", p.Model, p.NCtx, GiB(p.Need()), p.Classes(false))
	}
	s := fmt.Sprintf("%s; %s GiB free on %s: ", need, GiB(r.Free), p.Backend)
	n := p.MaxCtx(r.Free)
	if n >= 1 {
		s += fmt.Sprintf("the largest context that fits is about %s", FormatCtx(n))
	} else {
		s += fmt.Sprintf("no context fits (without the KV cache it needs %s GiB)", GiB(p.fixed()))
	}
	if l := p.Lowering(n >= 1); len(l) > 0 {
		s += "; " + orList(l) + " lowers it"
	}
	return s
}

// Is makes errors.Is(r, graph.ErrOutOfMemory) hold.
func (r *Refusal) Is(target error) bool { return target == graph.ErrOutOfMemory }

// OOMError is an allocation that failed although the plan fit (a longer
// prompt than the plan covers, memory another process took, a plan that
// undercounts): the allocation's own error (it names what was being
// allocated) with the plan and the free memory at load. It matches
// graph.ErrOutOfMemory.
type OOMError struct {
	Plan Plan
	Free uint64 // free memory when the plan was checked (0: not known)
	Err  error
}

func (e *OOMError) Error() string {
	free := ""
	if e.Free > 0 {
		free = fmt.Sprintf(", %s GiB was free at load", GiB(e.Free))
	}
	return fmt.Sprintf("%s at -c %d ran out of memory: %v; the plan: %s%s", e.Plan.Model, e.Plan.NCtx, e.Err, e.Plan.Summary(), free)
}

func (e *OOMError) Unwrap() error { return e.Err }

// Is makes errors.Is(e, graph.ErrOutOfMemory) hold.
func (e *OOMError) Is(target error) bool { return target == graph.ErrOutOfMemory }

// BeyondTraining is the warning for a context past the model's trained
// length ("" when it is not): the run is allowed, said once.
func (p Plan) BeyondTraining() string { return BeyondTraining(p.Model, p.NCtx, p.NCtxTrain) }

// BeyondTraining is Plan.BeyondTraining of a model label and its lengths.
func BeyondTraining(model string, nCtx, nCtxTrain int) string {
	if nCtxTrain <= 0 || nCtx <= nCtxTrain {
		return ""
	}
	return fmt.Sprintf("warning: -c %d is beyond the trained context of %s (%d tokens): allowed, but positions past %d are untrained",
		nCtx, model, nCtxTrain, nCtxTrain)
}

// IsOutOfMemory reports whether err is a refusal or an out-of-memory.
func IsOutOfMemory(err error) bool { return errors.Is(err, graph.ErrOutOfMemory) }
