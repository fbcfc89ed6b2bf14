package gates

import "github.com/minfer-go/minfer/harness"

// AnyDepthGate reports whether gate g applies a lever's any_depth pins
// (harness.PinAnyDepth: MINFER_ATTN_DECODE_TC_FROM=0 for the tensor-core
// decode routed by depth). GATES.md "Liveness in every gate": a
// correctness gate that never executed the lever's kernels proves nothing,
// and parity, greedy and the device suite run the trained tiny models (or
// the suite's synthetic ones) at short contexts, where the route at its
// default threshold never takes the path. The A/B must time the route as
// users get it at the declared workload's depth; the profile gate runs the
// A/B's model at the A/B's depth, where the route takes the path, and its
// census is that route's evidence: neither is pinned.
func AnyDepthGate(g string) bool {
	return g == GateParity || g == GateGreedy || g == GateSuite
}

// forGate is cfg as gate g runs it: where g applies the lever's any_depth
// pins, both arms carry them (over any --with of the same lever: the
// path must run there); elsewhere cfg as it is. A run between two builds
// has no lever and no pins.
func forGate(cfg Config, g string) Config {
	if !AnyDepthGate(g) || cfg.Between {
		return cfg
	}
	var pins []harness.Pin
	for _, p := range cfg.Lever.Pins(cfg.Backend) {
		if p.By == harness.PinAnyDepth {
			pins = append(pins, p)
		}
	}
	if len(pins) == 0 {
		return cfg
	}
	a, b := withEnv(cfg.A.Env, nil), withEnv(cfg.B.Env, nil) // copies: cfg's arms are shared
	for _, p := range pins {
		a[p.Name], b[p.Name] = p.Value, p.Value
	}
	cfg.A.Env, cfg.B.Env = a, b
	return cfg
}
