package model

import (
	"errors"
	"fmt"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/memplan"
	"github.com/minfer-go/minfer/engine/model/arch"
	"github.com/minfer-go/minfer/engine/quant"
)

// The memory plan (issue 19): before its first allocation the engine plans
// what the model will hold on the backend that runs it (engine/memplan),
// asks the backend how much it has free, and refuses in one line what does
// not fit. An allocation that fails later is an *memplan.OOMError with the
// plan; both match graph.ErrOutOfMemory.

// DefaultNCtx is the context an engine gets for Options.NCtx 0.
func DefaultNCtx(h HParams) int { return min(h.NCtxTrain, 4096) }

// KVFormatFor is the KV format of an engine: MINFER_CACHE_TYPE, or for
// "auto" f32 on the CPU and f16 on a device for 7B-class dimensions
// (n_layer x n_kv_embd >= deviceF16KVDims).
func KVFormatFor(h HParams, onDevice bool, cacheType string) (kv.Format, error) {
	switch cacheType {
	case "", "auto":
		if onDevice && h.NLayer*h.NKV() >= deviceF16KVDims {
			return kv.F16, nil
		}
		return kv.F32, nil
	}
	f, err := kv.ParseFormat(cacheType)
	if err != nil {
		return 0, fmt.Errorf("MINFER_CACHE_TYPE: %w", err)
	}
	return f, nil
}

// MemoryTensors lists what a backend registers of f (every tensor of
// h.Tensors(), GraphWeights' rule) with its file type, without reading
// their data.
func MemoryTensors(f *gguf.File, h HParams) ([]memplan.Tensor, error) {
	return PlanTensors(h, func(name string) (quant.Type, bool) {
		ti, ok := f.Tensor(name)
		if !ok {
			return 0, false
		}
		return quant.Type(ti.Type), true
	})
}

// PlanTensors lists the tensors of h with the types typeOf gives (a
// synthetic model's plan: no file needed).
func PlanTensors(h HParams, typeOf func(name string) (quant.Type, bool)) ([]memplan.Tensor, error) {
	specs := h.Tensors()
	out := make([]memplan.Tensor, 0, len(specs))
	for _, s := range specs {
		t, ok := typeOf(s.Name)
		if !ok {
			return nil, fmt.Errorf("model: tensor %s is missing", s.Name)
		}
		dims := make([]int, len(s.Dims))
		for i, d := range s.Dims {
			dims[i] = int(d)
		}
		out = append(out, memplan.Tensor{Name: s.Name, Type: t, Dims: dims, Layer: s.Layer, Gathered: gathered(s, h)})
	}
	return out, nil
}

// ModelLabel names a model in the plan's messages: general.name (else the
// architecture) and the type that holds most of its matrix bytes
// ("qwen2-7b Q8_0").
func ModelLabel(h HParams, ts []memplan.Tensor) string {
	name := h.Name
	if name == "" {
		name = string(h.Arch)
	}
	bytes := map[quant.Type]uint64{}
	var top quant.Type
	for _, t := range ts {
		if !t.Matrix() {
			continue
		}
		bytes[t.Type] += t.Bytes()
		if bytes[t.Type] > bytes[top] || bytes[top] == 0 {
			top = t.Type
		}
	}
	if len(bytes) == 0 {
		return name
	}
	return name + " " + top.String()
}

// PlanMemory is the memory plan of the model h (its tensors ts) at nCtx
// cells of format kvf, with the levers lv (the fusions its graph takes),
// on a backend with rules r. The graph's buffers are counted from the
// graph itself: the decode graph and a prefill of min(nCtx,
// memplan.PrefillTokens) tokens, built and laid out by the alloc pass on
// one backend, unfused (fusion only removes buffers).
func PlanMemory(h HParams, ts []memplan.Tensor, nCtx int, kvf kv.Format, lv levers.Config, r memplan.Rules) (memplan.Plan, error) {
	a, err := arch.Lookup(string(h.Arch))
	if err != nil {
		return memplan.Plan{}, err
	}
	prefill := min(nCtx, memplan.PrefillTokens)
	gb, err := graphBytes(a.Build, GraphParams(h, 1, nCtx, false, kvf, lv), lv)
	if err != nil {
		return memplan.Plan{}, err
	}
	if prefill > 1 {
		pb, err := graphBytes(a.Build, GraphParams(h, prefill, nCtx, false, kvf, lv), lv)
		if err != nil {
			return memplan.Plan{}, err
		}
		gb += pb
	}
	return memplan.New(memplan.Model{Label: ModelLabel(h, ts), Params: GraphParams(h, 1, nCtx, false, kvf, lv), NCtxTrain: h.NCtxTrain,
		Tensors: ts, GraphBytes: gb, Prefill: prefill}, r)
}

// graphBytes is the bytes of the buffers the alloc pass gives the graph of
// p with every node on one backend.
func graphBytes(build func(graph.Params) (*graph.Graph, error), p graph.Params, lv levers.Config) (uint64, error) {
	g, err := buildGraph(build, p, lv)
	if err != nil {
		return 0, fmt.Errorf("model: memory plan: graph of %d tokens: %w", p.NT, err)
	}
	for _, n := range g.Nodes {
		n.Backend = 0
	}
	l, err := graph.Alloc(g)
	if err != nil {
		return 0, fmt.Errorf("model: memory plan: graph of %d tokens: %w", p.NT, err)
	}
	var sum uint64
	for _, n := range l.SlotLen {
		sum += 4 * uint64(max(n, 1)) // the 4-byte elements a backend's Alloc gives
	}
	return sum, nil
}

// checkMemory plans the model on the engine's first backend and refuses
// it (a *memplan.Refusal) when the plan does not fit the memory the
// backend has free. A backend that plans nothing (no memplan.Planner) is
// not checked; one that cannot say what it has free is planned, not
// checked, and the log says so.
func (e *Engine) checkMemory(logf func(string, ...any)) error {
	pl, ok := e.backends[0].(memplan.Planner)
	if !ok {
		e.mem, e.memFree = nil, 0
		return nil
	}
	ts, err := MemoryTensors(e.f, e.h)
	if err != nil {
		return err
	}
	plan, err := PlanMemory(e.h, ts, e.nCtx, e.kvFormat, e.opts.Levers, pl.MemoryRules())
	if err != nil {
		return err
	}
	e.mem, e.memFree = &plan, 0
	free, _, err := pl.FreeMemory()
	if err != nil {
		logf("model: memory plan %s: free memory unknown (%v), not checked", plan.Summary(), err)
		return nil
	}
	e.memFree = free
	return plan.Check(free)
}

// outOfMemory gives an allocation that failed for want of memory the
// plan (an *memplan.OOMError); any other error is returned as it is.
func (e *Engine) outOfMemory(err error) error {
	var oom *memplan.OOMError
	var refusal *memplan.Refusal
	if e.mem == nil || !errors.Is(err, graph.ErrOutOfMemory) || errors.As(err, &oom) || errors.As(err, &refusal) {
		return err
	}
	return &memplan.OOMError{Plan: *e.mem, Free: e.memFree, Err: err}
}

// MemoryPlan is the plan the engine checked at load (false when its
// backend plans nothing).
func (e *Engine) MemoryPlan() (memplan.Plan, bool) {
	if e.mem == nil {
		return memplan.Plan{}, false
	}
	return *e.mem, true
}

// modelName names the model in a warning before its tensors are listed.
func modelName(h HParams) string {
	if h.Name != "" {
		return h.Name
	}
	return string(h.Arch)
}

// MemoryFree is the free memory the plan was checked against at load (0
// when none was read).
func (e *Engine) MemoryFree() uint64 { return e.memFree }
