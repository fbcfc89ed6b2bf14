package model

import "github.com/minfer-go/minfer/engine/graph"

// What a conversation (engine/chat) needs of an engine beyond Forward: to
// know whether its backend captures graphs, the compiled decode graph it
// holds (the conversation-reuse gate's evidence on the CPU, which captures
// nothing) and, for the gate's planted defect only, a way to throw the
// compiled graphs away.

// CapturesGraphs reports whether a backend of the engine captures and
// replays device graphs (CUDA): a conversation then warms its prefill
// shapes before the first turn.
func (e *Engine) CapturesGraphs() bool {
	for _, b := range e.backends {
		if b.Name() == "cuda" {
			return true
		}
	}
	return false
}

// DecodePlan is the compiled decode graph (one token, last logits) the
// engine holds, nil before the first decode step or after Close. A
// conversation that keeps its graphs across turns holds the same one from
// its first answer on.
func (e *Engine) DecodePlan() *graph.Plan {
	if e.plans == nil {
		return nil
	}
	return e.plans[GraphParams(e.h, 1, e.nCtx, false, e.kvFormat, e.opts.Levers)]
}

// DropGraphs closes every compiled graph; the next forward compiles its
// graph again (and a device captures it again). The KV cache stays. It is
// the conversation gate's planted defect (chat.DefectRecompile), not
// something a run does.
func (e *Engine) DropGraphs() error {
	var first error
	for p, pl := range e.plans {
		if err := pl.Close(); err != nil && first == nil {
			first = err
		}
		delete(e.plans, p)
	}
	e.order = nil
	return first
}
